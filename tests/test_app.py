"""Smoke tests of the app in Streamlit's AppTest (no browser)."""
from pathlib import Path

import pytest
from apptest_helpers import APP, open_page
from streamlit.testing.v1 import AppTest


@pytest.fixture(scope="module")
def home() -> AppTest:
    return open_page()


def test_home_runs_without_exception(home: AppTest) -> None:
    assert not home.exception, [e.value for e in home.exception]


def test_home_shows_title_and_device_banner(home: AppTest) -> None:
    assert [t.value for t in home.title] == ["tfviz"]
    banners = [i.value for i in home.info if "Device:" in i.value]
    assert len(banners) == 1
    assert "GPU" in banners[0] or "CPU (" in banners[0]


def test_describe_device_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from tfviz.device import cpu_count, describe_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert describe_device() == f"CPU ({cpu_count()} cores)"


# ------------------------------------------------------------------------------ pages, tour
def test_every_page_is_registered_once() -> None:
    from ui.navigation import PAGES

    root = Path(APP).parent
    files = [p.file for p in PAGES]
    assert sorted(files) == sorted(f"app_pages/{f.name}" for f in (root / "app_pages").glob("*.py"))
    assert len({p.title for p in PAGES}) == len(PAGES) and PAGES[0].title == "Home"
    assert all(p.blurb and p.icon and not p.icon.startswith(":") for p in PAGES)
    # no folder named pages/ beside app.py: it puts Streamlit in its legacy multipage mode
    assert not (root / "pages").exists()


def test_guided_tour_is_the_sidebar(home: AppTest) -> None:
    """Home's tour: one step per registered page after Home, in the sidebar's order, each a
    link to that page (was: a 'Compare' page that does not exist, Findings/Tokens/Generate
    missing, 'pages appear there as they are added')."""
    from ui.navigation import PAGES

    links = home.get("page_link")
    assert [(link.proto.page, link.proto.icon) for link in links] == \
        [(Path(p.file).stem, p.icon) for p in PAGES[1:]]  # the page's URL path and its icon
    labels = [link.proto.label for link in links]
    assert labels == [f"{i}. **{p.title}**" for i, p in enumerate(PAGES[1:], 1)]
    # issue 25, item 8: the blurb was part of the link's one-line label, cut at the column's
    # edge (every line at 1024 px); it is now text beneath, which wraps
    captions = [c.value for c in home.caption]
    assert all(p.blurb in captions for p in PAGES[1:])
    text = " ".join(m.value for m in home.markdown) + " ".join(c.value for c in home.caption)
    assert "as they are added" not in text  # every step is a registered page (asserted above)


def test_session_ids_are_the_librarys() -> None:
    """ui.session keeps its own copy of the pattern (Home must not wait for torch); it is the
    library's."""
    from tfviz.paths import SESSION_ID
    from ui.session import SID

    assert SID.pattern == SESSION_ID.pattern
