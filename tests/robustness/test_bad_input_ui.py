"""Bad text on every page that takes text (AppTest, real tiny checkpoints): empty, blank, binary,
text that was not valid UTF-8 (what the browser delivers: U+FFFD replacement characters),
unknown words, enormous text, text longer than the model allows, and inputs of one or two
tokens (one word, a lone [PAD] or [BOS]). Each gets a clear message
(or a chart of what could be shown), never an exception, within seconds; the selected model
stays selected.

One AppTest per page is shared by its cases (a re-run is much cheaper than a new AppTest).
Lone surrogates cannot reach a page: the browser -> server protobuf carries only valid UTF-8
(AppTest refuses them too); the library side is tested in test_bad_input_library.py.
"""
from __future__ import annotations

import re
import time

import pytest
from apptest_helpers import messages, open_page, problems
from streamlit.testing.v1 import AppTest

from tfviz.generation import MAX_POSITIONS

CHART = None  # expectation: no message needed, the page shows its charts

TEXTS = {
    "empty": "",
    "blank": " \n\t  ",
    "binary": bytes(range(256)).decode("latin-1"),  # every byte value, control characters included
    "replacement": "caf\ufffd \ufffd\ufffd ok",  # invalid UTF-8 as the browser hands it over
    "unknown": "zorblax qwop flib",
    "huge": "the law said that it " * 10_000,  # 210,000 characters
    "too-long": " ".join(["a b c d e f g h i j"] * 30),  # 300 tokens: > max_len 128 of tiny-induction
    "too-long-gen": "the law said that it " * 220,  # 1,101 words: over MAX_POSITIONS
    "one-word": "the",
    "pad": "[PAD]",  # the padding token's literal is that token
    "bos": "[BOS]",  # a prompt of exactly one token
    "two-words": "the law",
}

# (page view, text case) -> regex one message must match, or CHART
CASES = {
    ("tokens", "empty"): r"Type some text",
    ("tokens", "blank"): CHART,
    ("tokens", "binary"): CHART,
    ("tokens", "replacement"): CHART,
    ("tokens", "unknown"): CHART,
    ("tokens", "huge"): CHART,  # the text area stops at 20,000 (issue 29); the counts cover those
    ("attention", "empty"): r"the text is empty",
    ("attention", "blank"): r"the text is empty",
    ("attention", "binary"): r"not in this model's vocabulary",
    ("attention", "replacement"): r"not in this model's vocabulary",
    ("attention", "unknown"): r"'zorblax', 'qwop', 'flib'",
    ("attention", "huge"): r"showing the first 128",
    ("attention", "too-long"): r"has 301 tokens; showing the first 128",
    ("generate", "empty"): r"Cannot generate: the prompt is empty",
    ("generate", "blank"): r"Cannot generate: the prompt is empty",
    ("generate", "binary"): r"became \[UNK\]",
    ("generate", "unknown"): r"3 prompt token\(s\) are not in this model's vocabulary",
    ("generate", "huge"): rf"at most {MAX_POSITIONS} here: shorten the prompt",
    ("generate", "too-long-gen"): rf"at most {MAX_POSITIONS} here",
    ("generate-learned", "too-long"): r"learned positions for only 128",
    ("masks", "empty"): r"the text is empty",
    ("masks", "blank"): r"the text is empty",
    ("masks", "binary"): CHART,
    ("masks", "unknown"): CHART,
    ("masks", "huge"): r"showing the first 40: the grids show at most 40 tokens",
    ("positional", "empty"): r"the text is empty",
    ("positional", "huge"): CHART,
    # 0, 1 and 2 tokens (a decoder's [BOS] comes first): every page shows what there is
    **{(view, case): CHART for view in ("tokens", "attention", "generate", "masks", "positional")
       for case in ("one-word", "pad", "bos", "two-words")},
}

# view -> (page file, model, how to put text in)
VIEWS = {
    "tokens": ("tokens", "tiny-coref", "Text to tokenize"),
    "attention": ("attention", "tiny-induction", "att_text"),  # learned positions, max_len 128
    "generate": ("generate", "tiny-coref", "Prompt"),  # RoPE: would run on any length
    "generate-learned": ("generate", "tiny-induction", "Prompt"),
    "masks": ("masks", "tiny-coref", "Text"),
    "positional": ("positional", "tiny-coref", "Text the model reads"),
}


def text_widget(at: AppTest, label: str):
    return next(w for w in [*at.text_input, *at.text_area] if w.label.startswith(label))


@pytest.fixture(scope="module")
def views(tiny_zoo):
    """view name -> a started AppTest on that page (built on first use)."""
    cache: dict[str, AppTest] = {}
    state = {"positional": dict(pos_section="RoPE"), "attention": dict(att_source="Type text")}

    def get(view: str) -> AppTest:
        if view not in cache:
            page, model, _ = VIEWS[view]
            cache[view] = open_page(page, tiny_zoo[model], **state.get(view, {}))
        return cache[view]

    return get


@pytest.mark.parametrize("view, case", list(CASES), ids=[f"{v}-{c}" for v, c in CASES])
def test_bad_text(views, tiny_zoo, view, case):
    at = views(view)
    _, model, where = VIEWS[view]
    text = TEXTS[case]
    t0 = time.perf_counter()
    if where == "att_text":
        at.session_state["att_text"] = text
    else:
        widget = text_widget(at, where)
        if case == "huge":  # every text box stops at TFVIZ_TEXT_MAX_CHARS (issue 29): the browser
            assert 0 < widget.max_chars <= 20_000  # takes no more; a client that ignores it is cut
            widget.set_value(text)
        else:
            widget.input(text)
    at.run()
    took = time.perf_counter() - t0
    assert not problems(at), problems(at)
    assert at.session_state["model_path"] == str(tiny_zoo[model])  # nothing the user picked is lost
    expected = CASES[(view, case)]
    if expected is CHART:
        assert at.get("plotly_chart"), messages(at)
    else:
        assert re.search(expected, messages(at)), messages(at)
    assert took < 30, f"{view}/{case} took {took:.1f} s"
