"""Links that reproduce a view, in a real browser (issue 32): on every page, a link opened in one
browser gives a "Link to this view" that names the same settings; opened in a fresh browser (no
session), that link shows the same settings again, never carrying the session id; ``hide=``
leaves a handout's controls out."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from browser_helpers import DEADLINE_MS, READY, SCREENSHOTS
from playwright.sync_api import expect

from ui.navigation import PAGES

# page -> a link's settings (the tiny zoo's models: tests/tiny_zoo.py)
LINKS = {
    "home": {"hide": "sidebar"},
    "lesson": {"step": "masks", "kind": "global + local", "window": "5"},
    "why": {"a": "the cat sees the dog", "b": "the dog sees the cat"},
    "findings": {"finding": "Positional extrapolation"},
    "tokens": {"text": "a cat and a dog", "bpe": "500"},
    "train": {"task": "induction"},
    "attention": {"model": "shipped/tiny-coref", "layer": "1", "head": "2", "tab": "Heatmap"},
    "positional": {"model": "shipped/tiny-coref", "section": "Sinusoidal", "d": "128"},
    "compare": {"tab": "Train a pair", "task": "induction"},
    "masks": {"model": "shipped/tiny-coref", "kind": "sliding window", "window": "2"},
    "cost": {"max_n": "1024", "window": "64"},
    "generate": {"model": "shipped/tiny-coref", "n": "8", "seed": "3"},
}


def shared(page) -> dict:
    """The page's "Link to this view", parsed."""
    code = page.locator("[data-testid='stSidebar'] [data-testid='stCode']").first
    code.wait_for(state="attached", timeout=DEADLINE_MS)
    u = urlparse(code.text_content().strip())
    return {"path": u.path, **{k: v[0] for k, v in parse_qs(u.query).items()}}


def test_every_page_is_covered() -> None:
    assert {Path(p.file).stem for p in PAGES} == set(LINKS)


@pytest.mark.parametrize("name", list(LINKS))
def test_a_link_round_trips_on_every_page(browser, streamlit_server, name) -> None:
    params = LINKS[name]
    path = "/" if name == "home" else f"/{name}"
    links = []
    for i in range(2):  # the link, then the link the page gave, each in a fresh browser
        ctx = browser.new_context(base_url=streamlit_server.url, viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        page.set_default_timeout(DEADLINE_MS)
        try:
            page.goto(f"{path}?{urlencode(params)}" if i == 0 else links[0]["url"])
            page.wait_for_selector(READY, timeout=DEADLINE_MS)
            expect(page.locator("[data-testid='stException']")).to_have_count(0)
            expect(page.locator("[data-testid='stAlertContentInfo']").filter(has_text="The link's")).to_have_count(0)
            if "sidebar" in params.get("hide", ""):
                expect(page.locator("[data-testid='stSidebar']")).to_be_hidden()
            got = shared(page)
            got["url"] = f"{got['path']}?{urlencode({k: v for k, v in got.items() if k not in ('path', 'url')})}"
            links.append(got)
            assert "sid" not in got
            for k, v in params.items():
                assert got.get(k) == v, (name, k, got.get(k), v)
            assert "sid=" in page.url and all(f"{k}=" in page.url for k in params)  # the address bar too
            page.screenshot(path=str(SCREENSHOTS / f"links_{name}_{i}.png"))
        finally:
            ctx.close()
    assert {k: v for k, v in links[1].items() if k != "url"} == {k: v for k, v in links[0].items() if k != "url"}
