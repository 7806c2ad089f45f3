"""Why attention page in AppTest: every section renders from real checkpoints (the shipped lm,
pos-none and pos-learned; a tiny why build in a temp zoo folder), its charts equal independent
recordings of the same files and the measured frames, word2vec trains on the built-in corpus and
on a user's text, and bad input gives a clear message. The sentences (``why_story``) are checked
against the numbers they quote."""
from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd
import pytest
import torch
from apptest_helpers import arr, chart, heatmap_z, messages, ok, open_page, rerun, text

import tfviz
from tfviz.analysis.bottleneck import fresh_at_length
from tfviz.model import hook_name
from tfviz.paths import SHIPPED
from tfviz.train.checkpoint import load_checkpoint
from tfviz.viz.order import FLOOR
from tfviz.zoo import why
from tfviz.zoo import why_story as story

HEADERS = ["1. Words as vectors", "2. Word order", "3. Reading in order", "4. The encoder–decoder",
           "5. Attention: a direct path"]


@pytest.fixture(scope="module")
def why_zoo(tmp_path_factory):
    """A zoo folder: the shipped lm, pos-none and pos-learned (links) and a tiny why build (2 steps,
    measured on 8 fresh inputs per point: real files, not good models)."""
    folder = tmp_path_factory.mktemp("zoo")
    for name in ("lm", "pos-none", "pos-learned"):
        (folder / f"{name}.safetensors").symlink_to(SHIPPED / f"{name}.safetensors")
    mp = pytest.MonkeyPatch()
    for name, measure in why.MEASURES.items():
        mp.setitem(why.MEASURES, name, functools.partial(measure, n=8))
    why.build(None, folder / "why", steps=2, log=lambda s: None)
    mp.setenv("TFVIZ_ZOO_DIR", str(folder))
    yield folder
    mp.undo()


def test_every_section_renders_from_the_real_files(why_zoo) -> None:
    at = open_page("why")
    headers = [h.value for h in at.header]
    assert [h for want in HEADERS for h in headers if h.startswith(want)] and len(headers) == 5
    assert all(any(h.startswith(w) for h in headers) for w in HEADERS)
    # bag of words: both sentences have the same counts
    bow = chart(at, "why_bow")["data"]
    np.testing.assert_array_equal(arr(bow[0]["y"]), arr(bow[1]["y"]))
    # order: the per-position heatmap equals an independent recording of pos-none
    ck = load_checkpoint(why_zoo / "pos-none.safetensors")
    a, b = (torch.tensor(ck.tokenizer.encode(s).ids) for s in ("the dog chases the cat", "the cat chases the dog"))
    perm = torch.tensor([0, 4, 2, 3, 1])  # b[j] == a[perm[j]]
    assert torch.equal(b, a[perm])
    rec = tfviz.record(ck.model, torch.stack([a, b]), names=[hook_name(1, "hook_resid_post")])
    h = rec[hook_name(1, "hook_resid_post")].double()
    want = (h[1] - h[0][perm]).abs().amax(-1).numpy()
    z = heatmap_z(chart(at, "why_order_pos"))  # log10 of the difference
    np.testing.assert_allclose(z[-1], np.log10(np.maximum(want, FLOOR)), atol=1e-4)
    # recall and bottleneck: the curves are the measured frames of the saved files
    res = story.read_results(why_zoo / "why")
    acc = res["recall"]["accuracy"]
    lines = {t["name"]: arr(t["y"]) for t in chart(at, "why_recall_acc")["data"] if t.get("name") in set(acc.model)}
    for m, y in lines.items():
        np.testing.assert_allclose(y, acc[acc.model == m].sort_values("distance")["accuracy"])
    page = text(at)
    assert story.recall_text(res["recall"]) in page and story.bottleneck_text(res["bottleneck"]) in page
    # alignment: the heatmap is the additive attention recorded on the same fresh source
    m = load_checkpoint(why_zoo / "why" / "bottleneck-gru-attention.safetensors")
    ex = fresh_at_length(m.shared_task(), 8, 1, 7000).examples("test")[0]
    rec = tfviz.record(m.model, torch.tensor([ex.src]), torch.tensor([ex.tokens]),
                       names=["decoder.cross_attn.hook_pattern"])
    np.testing.assert_allclose(heatmap_z(chart(at, "why_bn_align")),
                               rec["decoder.cross_attn.hook_pattern"][0].mean(0).numpy(), atol=1e-6)
    # across layers: the raw row is the lm's recorded pattern, heads averaged
    lm = load_checkpoint(why_zoo / "lm.safetensors")
    ids = torch.tensor(lm.tokenizer.encode(at.text_input(key="why_layers_text").value).ids)
    rec = tfviz.record(lm.model, ids[None], names=[hook_name(0, "attn.hook_pattern")])
    raw0 = rec[hook_name(0, "attn.hook_pattern")][0].mean(0).numpy()
    z = heatmap_z(chart(at, "why_layers"))
    assert np.allclose(z[:len(ids), :len(ids)], raw0, atol=1e-6)


def test_word2vec_on_the_corpus_and_on_a_users_text(why_zoo) -> None:
    at = open_page("why")
    train = [b for b in at.button if b.key == "why_w2v_train"]
    if train:  # else an earlier test of this process trained it: one word2vec per corpus per server
        train[0].click().run()
    ok(at)
    assert "king − man + woman ≈ 'queen'" in text(at)
    bars = chart(at, "why_w2v_analogy")["data"]
    assert "queen" in [str(y) for t in bars for y in t["y"]]
    rerun(at, why_corpus="your text", why_text="one")
    at.button(key="why_w2v_train").click().run()
    ok(at)
    assert "word2vec cannot learn from this text" in messages(at)
    words = "the cat sat on the mat . the dog sat on the rug . a cat and a dog play . " * 20
    rerun(at, why_text=words)
    at.button(key="why_w2v_train").click().run()
    ok(at)
    assert re.search(r"word2vec: \d+ words", text(at)) and chart(at, "why_w2v_map")
    rerun(at, why_abc_a_text="unicorn")
    assert "'unicorn' is not in the vocabulary" in messages(at)


def test_bad_sentences_give_a_clear_message(why_zoo) -> None:
    at = open_page("why", why_order_b="the cat chases the bird")
    assert "rearrangement" in messages(at) or "exactly the tokens" in messages(at)
    rerun(at, why_order_b="the cat zorbles the dog", why_layers_text="the zorble sees a cat")
    assert "does not know the word(s) 'zorbles'" in messages(at)
    assert "'zorble'" in messages(at)


def test_the_sentences_quote_the_numbers() -> None:
    acc = pd.DataFrame({"model": ["gru", "gru", "att", "att"], "length": [3, 10, 3, 10],
                        "accuracy": [1.0, 0.1, 1.0, 0.95], "n": 8, "trained": True})
    align = pd.DataFrame({"model": ["att"], "length": [4], "alignment": [0.5], "n": 8})
    s = story.bottleneck_text({"accuracy": acc, "alignment": align})
    assert "length 3 → 10" in s and "gru 1.00 → 0.10" in s and "gru falls most (0.90)" in s
    assert "att 0.50 (weak)" in s
    weak = story.bottleneck_text({"accuracy": acc.assign(accuracy=[1, 0.95, 1, 0.99])})
    assert "the effect is weak" in weak


def test_the_recall_sentence_says_who_falls_and_who_holds() -> None:
    acc = pd.DataFrame({"model": ["rnn", "rnn", "lstm", "lstm"], "distance": [1, 64, 1, 64],
                        "accuracy": [0.91, 0.68, 1.0, 0.99], "n": 8, "trained": [True, False] * 2,
                        "chance": 0.125})
    summary = pd.DataFrame({"model": ["rnn", "lstm"], "decay_per_step": [-0.077, -0.03],
                            "key_over_near": [0.029, 0.13]})
    paths = pd.DataFrame({"model": ["rnn", "lstm"], "n": [64, 64], "path_length": [64, 64]})
    s = story.recall_text({"accuracy": acc, "summary": summary, "paths": paths})
    assert "rnn 0.91 → 0.68" in s and "a clear fall (rnn loses 0.23)" in s
    assert "lstm hold" in s and "trained on distances 1–1" in s and "rnn ×0.838 per step back" in s
    flat = story.recall_text({"accuracy": acc.assign(accuracy=0.9), "summary": summary, "paths": paths})
    assert "a weak effect" in flat
    # issue 25, item 7: the transformer's key ratio read "1.2e+02 × the gradient", unexplained
    big = pd.concat([summary, pd.DataFrame({"model": ["transformer"], "decay_per_step": [0.02],
                                            "key_over_near": [118.78]})], ignore_index=True)
    s = story.recall_text({"accuracy": acc, "summary": big, "paths": paths})
    assert "e+" not in s and "transformer ×1.047 per step back, at the key 119×" in s, s
    assert "rnn ×0.838 per step back, at the key 0.029× (1/34)" in s, s
    assert "the gradient at the key divided by the gradient one step before the question" in s
