"""The agreement model's claims (tfviz.zoo.causal.agreement_*) re-measured on sentences other than
the card's (another seed, fewer of them: seconds), each number checked against a recomputation
here with plain forward hooks on the shipped checkpoint; and both pronoun stories side by side."""
from __future__ import annotations

import pytest
import torch

from tfviz.paths import zoo_dir
from tfviz.train.checkpoint import load_checkpoint
from tfviz.zoo import causal as zc

pytestmark = pytest.mark.usefixtures("one_thread")
SEED, N_TEST, N_FRESH = 7, 200, 120  # the card: seed 1, 300 held-out, 192 fresh


def ckpt(name):
    p = zoo_dir() / f"{name}.safetensors"
    if not p.is_file():
        pytest.skip(f"no {p}")
    return load_checkpoint(p)


@pytest.fixture(scope="module")
def agreement():
    ck = ckpt("agreement")
    model, task = ck.model.eval(), ck.shared_task()
    return model, task, zc.agreement_effects(model, task, n_test=N_TEST, n_fresh=N_FRESH, seed=SEED)


def batch(examples):
    n = max(len(e.tokens) for e in examples)
    x = torch.tensor([list(e.tokens) + [0] * (n - len(e.tokens)) for e in examples])
    q = torch.tensor([e.meta["query_index"] for e in examples])
    good = torch.tensor([e.meta["answer_ids"][e.meta["referent"]] for e in examples])
    bad = torch.tensor([e.meta["answer_ids"][1 - e.meta["referent"]] for e in examples])
    return x, q, good, bad


def z_hook(model, layer, fn):
    mod = dict(model.named_modules())[f"stack.blocks.{layer}.attn.hook_z"]
    return mod.register_forward_hook(lambda m, i, z: fn(z))


def logits_at(model, x, q, heads=(), patch_from=None):
    """Logits at the queries with ``heads`` [(layer, head)] zeroed, or replaced by their output
    on ``patch_from`` (a plain forward hook; the source's hook_z recorded by another)."""
    saved = {}
    handles = []
    try:
        if patch_from is not None:
            for layer in {l for l, _ in heads}:
                handles.append(z_hook(model, layer, lambda z, layer=layer: saved.__setitem__(layer, z.clone())))
            with torch.no_grad():
                model(patch_from)
            for h in handles:
                h.remove()
            handles = []

        def edit(z, layer):
            z = z.clone()
            for l, h in heads:
                if l == layer:
                    z[:, :, h] = 0 if patch_from is None else saved[layer][:, :, h]
            return z
        for layer in {l for l, _ in heads}:
            handles.append(z_hook(model, layer, lambda z, layer=layer: edit(z, layer)))
        with torch.no_grad():
            return model(x)[torch.arange(len(x)), q]
    finally:
        for h in handles:
            h.remove()


def test_the_pattern_head_is_the_choice_on_other_sentences(agreement):
    model, task, d = agreement
    checks = zc.agreement_checks(d)
    assert all(checks.values()) and set(checks) == {"accurate", "pattern_is_choice", "patch_flips",
                                                    "others_keep"}, checks
    assert len(d["pattern_heads"]) == 1
    head = d["pattern_heads"][0]
    layer, h = int(head[1]), int(head[3])
    for data, exs in (("held-out", task.examples("test")[:N_TEST]), ("fresh", task.fresh_examples(N_FRESH, SEED))):
        x, q, good, bad = batch(exs)
        rows = torch.arange(len(exs))
        for heads, name in (((), "none"), (((layer, h),), head),
                            (tuple((layer, o) for o in range(4) if o != h), "every other head")):
            lg = logits_at(model, x, q, heads)
            pair = (lg[rows, good] > lg[rows, bad]).float().mean().item()
            vocab = (lg.argmax(-1) == good).float().mean().item()
            got = zc._row(d, name, data)
            assert got[zc.PAIR] == pytest.approx(pair, abs=1e-9) and got[zc.VOCAB] == pytest.approx(vocab, abs=1e-9)
        assert zc._row(d, "none", data)[zc.VOCAB] >= zc.ACCURATE
        assert zc._row(d, head, data)[zc.PAIR] <= zc.STILL_GUESSING
        # patching the head from the same sentence with the other pronouns flips the answer
        xf, _, _, _ = batch([task.flipped(e) for e in exs])
        lg = logits_at(model, x, q, ((layer, h),), patch_from=xf)
        flips = (lg[rows, bad] > lg[rows, good]).float().mean().item()
        assert zc._prow(d, head, data)[zc.FLIP] == pytest.approx(flips, abs=1e-9) and flips >= zc.FLIPS
    story = zc.agreement_story(d)
    assert "the pattern is the choice" in story and "guesses between the two nouns" in story
    assert f"{len(task.examples('test')[:N_TEST])} held-out and {N_FRESH} new sentences" in story


def test_mission_sentence_pattern_and_effect(agreement):
    model, task, d = agreement
    head = d["pattern_heads"][0]
    layer, h = int(head[1]), int(head[3])
    sentences = zc.mission_effects(model, task, [head])
    assert [s["candidates"] for s in sentences] == [["law", "rule"], ["law", "rule"]]
    tok = task.tokenizer
    for s, ex, answer in zip(sentences, task.mission_sentences(), ("law", "rule")):
        x = torch.tensor([ex.tokens])
        q = torch.tensor([ex.meta["query_index"]])
        for heads, row in (((), 0), (((layer, h),), 1)):
            p = logits_at(model, x, q, heads)[0].softmax(-1)
            got = s["answers"].iloc[row]
            assert got["answer"] == tok.tokens_of([int(p.argmax())])[0]
            assert got["P(answer)"] == pytest.approx(p.max().item(), abs=1e-6)
            assert got["P(law)"] == pytest.approx(p[tok.token_to_id("law")].item(), abs=1e-6)
        assert s["answers"].iloc[0]["answer"] == answer  # every head on: the right noun
        assert s["answers"].iloc[1]["answer"] not in ("law", "rule") or \
            s["answers"].iloc[1][f"P({answer})"] < 0.5  # the head off: the choice is gone
        assert s["weights"][answer][layer, h] > 0.5  # ... and the pattern pointed at it


def test_both_stories_side_by_side(agreement):
    """The coref model's pattern head off keeps the choice; the agreement model's does not."""
    model, task, d = agreement
    ck = ckpt("coref")
    cm, ct = ck.model.eval(), ck.shared_task()
    cd = zc.coref_effects(cm, ct, n_test=N_TEST, n_fresh=N_FRESH, seed=SEED)
    c = zc.pronoun_contrast(cm, ct, model, task, cd, d)
    assert c["coref"]["pairwise_after"] >= zc.KEEPS and c["coref"]["after"][0] == "law"
    assert c["agreement"]["pairwise_after"] <= zc.STILL_GUESSING
    assert c["agreement"]["before"][0] == "law" and c["agreement"]["after"][0] != "law"
    assert "the pattern is not the choice" in c["summary"] and "the pattern is the choice" in c["summary"]
    for side in (c["coref"], c["agreement"]):
        assert side["weight"] > 0.5 and side["head"] in side["line"]
