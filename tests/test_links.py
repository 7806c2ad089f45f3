"""Links that reproduce a view (issue 32, ``ui.links``): every page opened from a link shows the
link's settings (widget state), writes them back to the URL and offers them in "Link to this
view" — never the session id; a value the page cannot use falls back with a note."""
from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
import torch
from apptest_helpers import APP, ok
from streamlit.testing.v1 import AppTest

from ui.link_schemas import SCHEMAS
from ui.links import Setting, settings
from ui.navigation import PAGES

# page -> (the link's settings, what session state must hold then: key -> value)
LINKS = {
    "home": ({}, {}),
    "lesson": ({"step": "masks", "kind": "global + local", "window": "5"},
               {"lesson_step": "masks", "lesson_masks_kind": "global + local", "lesson_masks_window": 5}),
    "why": ({"a": "the cat sees the dog", "b": "the dog sees the cat", "bn_len": "9"},
            {"why_order_a": "the cat sees the dog", "why_order_b": "the dog sees the cat", "why_bn_len": 9}),
    "findings": ({"finding": "Positional extrapolation"}, {"finding": "Positional extrapolation"}),
    "tokens": ({"text": "a cat and a dog", "bpe": "500", "k": "3"},
               {"tok_text": "a cat and a dog", "tok_bpe_vocab": 500, "tok_nn_k": 3}),
    "train": ({"task": "induction"}, {"train_task": "induction"}),
    "attention": ({"model": "shipped/coref", "input": "text", "text": "the law is old but its wording is vague",
                   "layer": "1", "head": "2", "tab": "Step-through"},
                  {"att_source": "Type text", "att_text": "the law is old but its wording is vague",
                   "att_layer": 1, "att_head": 2, "att_tab": "Step-through"}),
    "positional": ({"model": "shipped/pos-rope", "section": "Sinusoidal", "d": "128", "n": "32"},
                   {"pos_section": "Sinusoidal", "pos_sin_d": 128, "pos_sin_n": 32}),
    "compare": ({"models": "shipped/lm,shipped/lm-gqa", "layer": "1"},
                {"cmp_layer": 1}),
    "masks": ({"model": "shipped/lm", "text": "the dog sees a cat", "kind": "sliding window", "window": "2",
               "head": "1"},
              {"mask_text": "the dog sees a cat", "mask_kind": "sliding window", "mask_window": 2, "mask_head": 1}),
    "cost": ({"max_n": "1024", "window": "64", "repeats": "1"},
             {"cost_max_n": 1024, "cost_window": 64, "cost_repeats": 1}),
    "generate": ({"model": "shipped/lm", "n": "8", "temperature": "0.5", "seed": "3"},
                 {"gen_n": 8, "gen_temp": 0.5, "gen_seed": 3}),
}


@pytest.fixture(autouse=True)
def shipped(monkeypatch):
    """The shipped checkpoints (the links name them), one torch thread."""
    for var in ("TFVIZ_CHECKPOINT_DIR", "TFVIZ_ZOO_DIR"):
        monkeypatch.delenv(var, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def opened(page: str, params: dict) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in params.items():
        at.query_params[k] = v
    if page != "home":
        at.switch_page(f"app_pages/{page}.py")
    at.run()
    return ok(at)


def shared_link(at: AppTest) -> dict:
    """The "Link to this view" box's link, parsed (one value per name)."""
    codes = [c.value for c in at.code if "?" in c.value or c.value.startswith("/")]
    assert codes, [c.value for c in at.code]
    u = urlparse(codes[0])
    return {k: v[0] for k, v in parse_qs(u.query).items()}


def test_every_page_has_a_schema_and_the_tests_cover_it() -> None:
    from pathlib import Path

    stems = {Path(p.file).stem for p in PAGES}
    assert stems == set(SCHEMAS) == set(LINKS)
    for page in stems:
        names = [s.name for s in settings(page)]
        assert len(names) == len(set(names)), page  # one meaning per name
        assert "sid" not in names


@pytest.mark.parametrize("page", list(LINKS))
def test_a_link_round_trips(page) -> None:
    params, state = LINKS[page]
    at = opened(page, params)
    for key, value in state.items():
        assert at.session_state[key] == value, (key, at.session_state[key])
    assert not [i.value for i in at.info if "link's" in i.value]  # nothing refused
    link = shared_link(at)
    assert "sid" not in link
    for k, v in params.items():
        got = link.get(k)
        assert got == v or (k in ("temperature",) and float(got) == float(v)), (k, got, v)
    written = dict(at.query_params)
    assert written.get("sid")  # the address bar keeps the session (not presenting) …
    for k, v in params.items():
        assert written.get(k) == link[k]  # … and the view's settings, as the shared link has them
    # the link opened again, in a fresh session, shows the same
    again = opened(page, link)
    for key, value in state.items():
        assert again.session_state[key] == value


def test_bad_values_fall_back_with_a_note() -> None:
    at = opened("attention", {"model": "shipped/coref", "layer": "7", "head": "x", "tab": "Nope"})
    notes = " ".join(i.value for i in at.info)
    assert "layer=7" in notes and "head=x" in notes
    assert at.session_state["att_layer"] == 0 and at.session_state["att_head"] == 0
    at = opened("masks", {"model": "shipped/nope", "kind": "diagonal"})
    notes = " ".join(i.value for i in at.info)
    assert "shipped/nope" in notes and "kind=diagonal" in notes


def test_hide_leaves_controls_out_of_a_handout() -> None:
    at = opened("masks", {"model": "shipped/lm", "kind": "sliding window", "hide": "kind,window,sidebar"})
    css = " ".join(h.proto.body for h in at.get("html"))
    assert ".st-key-mask_kind" in css and ".st-key-mask_window" in css and "stSidebar" in css
    assert at.session_state["mask_kind"] == "sliding window"  # hidden, still applied
    assert shared_link(at).get("hide") is None or "kind" in shared_link(at)["hide"]
    assert at.query_params.get("hide") == "kind,window,sidebar"


@pytest.mark.parametrize("s, raw, want", [
    (Setting("n", "k", int, lo=1, hi=5), "3", 3), (Setting("n", "k", int, lo=1, hi=5), "9", ValueError),
    (Setting("n", "k", float, lo=0, hi=2), "nan", ValueError), (Setting("b", "k", bool), "1", True),
    (Setting("c", "k", choices=("a", "b")), "c", ValueError), (Setting("t", "k"), "x" * 3000, ValueError),
    (Setting("i", "k", values={"example": "Task example"}), "example", "Task example"),
])
def test_a_setting_parses_only_what_it_allows(s, raw, want) -> None:
    if want is ValueError:
        with pytest.raises(ValueError):
            s.parse(raw)
    else:
        assert s.parse(raw) == want and s.parse(s.dump(want)) == want
