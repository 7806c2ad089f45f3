"""Long-range dependency and bottleneck measurements (tfviz.analysis.longrange / bottleneck), each
against an independent recomputation: the recall task's layout, input gradients against finite
differences, path lengths against the formula, accuracy by distance / length against a direct
count, alignment against its definition, and the figures."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from tfviz import ModelConfig, Transformer, viz
from tfviz.analysis.bottleneck import (accuracy_by_length, alignment_share, cross_attention,
                                       fresh_at_length, reverse_alignment)
from tfviz.analysis.longrange import (accuracy_by_distance, decay_per_step, gradient_by_distance,
                                      input_gradient_norms, max_path_length, path_lengths)
from tfviz.model.recurrent import RecurrentConfig, RecurrentModel
from tfviz.tasks import make_task
from tfviz.tasks.base import IGNORE, collate


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def recall():
    return make_task("recall", n_keys=4, n_fillers=5, min_distance=2, max_distance=6,
                     n_train=200, n_val=20, n_test=20)


def rnn(task, cell="rnn", **kw):
    torch.manual_seed(0)
    return RecurrentModel(RecurrentConfig(**{"vocab_size": task.tokenizer.vocab_size, "cell": cell,
                                             "d_model": 6, "d_hidden": 7, **kw})).eval()


def transformer(task, **kw):
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=8, n_heads=2,
                                   n_layers=2, max_len=64, pos="rope", **kw)).eval()


# ------------------------------------------------------------------------------ the task
def test_recall_layout_and_fresh_distances(recall):
    tok = recall.tokenizer
    for split in ("train", "validation", "test"):
        for ex in recall.examples(split):
            m = ex.meta
            assert ex.tokens[0] == tok.bos_id and ex.tokens[-1] == tok.sep_id
            assert 2 <= m["distance"] <= 6 and m["query_index"] - m["key_index"] == m["distance"] + 1
            assert [t for t in ex.targets if t != IGNORE] == [ex.tokens[m["key_index"]]]
            assert ex.targets[m["query_index"]] == ex.tokens[m["key_index"]]
            assert tok.id_to_token(ex.tokens[m["key_index"]]) == m["key"] in "ABCD"
            fillers = ex.tokens[1:m["key_index"]] + ex.tokens[m["key_index"] + 1:-1]
            assert all(tok.id_to_token(t) in "abcde" for t in fillers)
    seqs = [tuple(ex.tokens) for s in ("train", "validation", "test") for ex in recall.examples(s)]
    assert len(set(seqs)) == len(seqs)
    far = recall.at_distance(40, seed=7, n=30)
    assert far.tokenizer.to_json() == tok.to_json()
    assert {ex.meta["distance"] for ex in far.examples("test")} == {40}
    assert len(far.examples("test")) == 30 and len(far.examples("train")) == 1
    shifted = make_task("recall", n_keys=4, n_fillers=5, max_distance=3, min_prefix=2, max_prefix=4,
                        n_train=50, n_val=5, n_test=5)
    assert all(3 <= ex.meta["key_index"] <= 5 for ex in shifted.examples("train"))


def test_accuracy_by_distance_counts_right_answers(recall):
    m = rnn(recall)
    df = accuracy_by_distance(m, recall, [2, 9], n=40, seed=5)
    assert list(df["distance"]) == [2, 9] and list(df["trained"]) == [True, False]
    for d, acc in zip(df["distance"], df["accuracy"]):
        fresh = recall.at_distance(d, 5 + d, 40).examples("test")
        b = collate(fresh)
        with torch.no_grad():
            guess = m(b.tokens)[:, -1].argmax(-1)
        assert acc == pytest.approx(float((guess == b.targets[:, -1]).float().mean()))
    assert (df["chance"] == 0.25).all()


# ------------------------------------------------------------------------------ gradients
def _finite_differences(model, tokens, targets, eps=1e-5) -> np.ndarray:
    """Central differences of the summed loss in every coordinate of every position's embedding
    (float64): the same gradient without autograd."""
    base = model.embed(tokens).detach()
    delta = torch.zeros_like(base)
    handle = model.embed.register_forward_hook(lambda mod, inp, out: out + delta)

    def loss():
        with torch.no_grad():
            logits = model(tokens)
        return float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                                       ignore_index=IGNORE, reduction="sum"))
    grad = np.zeros(base.shape)
    try:
        for idx in np.ndindex(*base.shape):
            delta.zero_()
            delta[idx] = eps
            up = loss()
            delta[idx] = -eps
            grad[idx] = (up - loss()) / (2 * eps)
    finally:
        handle.remove()
    return np.linalg.norm(grad, axis=-1)


@pytest.mark.parametrize("build", ["rnn", "lstm", "transformer"])
def test_input_gradients_match_finite_differences(recall, build):
    m = (transformer(recall) if build == "transformer" else rnn(recall, cell=build)).double()
    b = collate(recall.examples("test")[:2])
    got = input_gradient_norms(m, b.tokens, b.targets)
    want = np.stack([_finite_differences(m, b.tokens[i:i + 1], b.targets[i:i + 1])[0] for i in range(2)])
    pad = (b.tokens == 0).numpy()
    assert got.shape == b.tokens.shape and np.all(got[~pad] > 0)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-9)


def test_an_rnns_gradient_shrinks_with_distance_and_attention_reaches_back(recall):
    """At initialisation, on 40 fresh sequences with 30 fillers: the tanh RNN's gradient falls
    geometrically with every step back; a transformer's does not fall with distance."""
    g_rnn = gradient_by_distance(rnn(recall, d_hidden=16), recall, 30, n=40)
    g_tf = gradient_by_distance(transformer(recall), recall, 30, n=40)
    assert list(g_rnn["steps_back"]) == list(range(32, -1, -1))
    assert g_rnn.loc[g_rnn["token_kind"] == "key", "steps_back"].item() == 31
    slope_rnn, slope_tf = decay_per_step(g_rnn), decay_per_step(g_tf)
    assert slope_rnn < -0.05  # at least ~11% less per step back
    assert abs(slope_tf) < 0.01
    far = g_rnn[g_rnn["steps_back"] >= 25]["grad_norm"].mean()
    near = g_rnn[g_rnn["steps_back"].between(1, 5)]["grad_norm"].mean()
    assert far < 1e-2 * near


# ------------------------------------------------------------------------------ path length
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_path_lengths_by_search_agree_with_the_formula(layers):
    for n in (1, 2, 5, 9):
        rec = RecurrentConfig(n_layers=layers)
        att = ModelConfig(n_layers=layers, d_model=8, n_heads=2)
        pr, pa = path_lengths(rec, n), path_lengths(att, n)
        assert pr.max() == max_path_length(rec, n) == layers + n - 1
        assert pa.max() == max_path_length(att, n) == layers
        i, j = np.triu_indices(n)
        assert (pr[i, j] == layers + j - i).all() and (pa[i, j] == layers).all()
        assert (pr[np.tril_indices(n, -1)] == -1).all()


# ------------------------------------------------------------------------------ bottleneck
@pytest.fixture(scope="module")
def reverse():
    return make_task("reverse", n_symbols=4, min_len=2, max_len=4, n_train=150, n_val=10, n_test=10)


def test_fresh_sources_are_new_and_of_the_asked_length(reverse):
    trained = {tuple(ex.src) for ex in reverse.examples("train")}
    for L in (3, 6):
        fresh = fresh_at_length(reverse, L, 30, seed=L).examples("test")
        assert fresh and all(len(ex.src) == L and tuple(ex.src) not in trained for ex in fresh)
        assert all(ex.targets[:-1] == ex.src[::-1] for ex in fresh)
    assert len(fresh_at_length(reverse, 2, 30, 1).examples("test")) == 16 - len(
        {s for s in trained if len(s) == 2})


@pytest.mark.parametrize("attention", ["none", "additive"])
def test_accuracy_by_length_counts_whole_outputs(reverse, attention):
    torch.manual_seed(0)
    m = RecurrentModel(RecurrentConfig(arch="encoder-decoder", vocab_size=reverse.tokenizer.vocab_size,
                                       cell="gru", d_model=6, attention=attention)).eval()
    df = accuracy_by_length(m, reverse, [3, 5], n=20, seed=9)
    assert list(df["trained"]) == [True, False]
    for L, acc, tok_acc in zip(df["length"], df["accuracy"], df["token_accuracy"]):
        ex = fresh_at_length(reverse, L, 20, 9 + L).examples("test")
        b = collate(ex)
        with torch.no_grad():
            right = m(b.src, b.tokens).argmax(-1) == b.targets
        assert acc == pytest.approx(float(right.all(1).float().mean()))
        assert tok_acc == pytest.approx(float(right.float().mean()))


def test_cross_attention_of_both_families_and_alignment_share(reverse):
    ex = reverse.examples("test")[0]
    torch.manual_seed(0)
    rec = RecurrentModel(RecurrentConfig(arch="encoder-decoder", vocab_size=reverse.tokenizer.vocab_size,
                                         d_model=6, attention="additive")).eval()
    tf = Transformer(ModelConfig(arch="encoder-decoder", vocab_size=reverse.tokenizer.vocab_size,
                                 d_model=8, n_heads=2, n_layers=2, max_len=16)).eval()
    a = cross_attention(rec, ex.src, ex.tokens)
    assert list(a) == ["decoder.cross_attn.hook_pattern"]
    assert a["decoder.cross_attn.hook_pattern"].shape == (1, len(ex.tokens), len(ex.src))
    b = cross_attention(tf, ex.src, ex.tokens)
    assert list(b) == [f"decoder.blocks.{l}.cross_attn.hook_pattern" for l in range(2)]
    with pytest.raises(ValueError, match="no attention over the source"):
        cross_attention(RecurrentModel(RecurrentConfig(arch="encoder-decoder", vocab_size=20)), [3], [2])
    assert reverse_alignment(3) == [(0, 2), (1, 1), (2, 0)]
    assert reverse_alignment(3, "input") == [(1, 2), (2, 1), (3, 0)]  # decoder token i = target i - 1
    for L in (2, 5):  # against the task's own layout: the token each position reads / produces
        ex = fresh_at_length(reverse, L, 1, 3).examples("test")
        for i, j in reverse_alignment(L, "input") if ex else []:
            assert ex[0].tokens[i] == ex[0].src[j]
        for i, j in reverse_alignment(L) if ex else []:
            assert ex[0].targets[i] == ex[0].src[j]
    p = np.eye(4)[::-1][:, :]  # query i looks at key 3 - i
    assert alignment_share(p, reverse_alignment(4)) == 1.0
    assert alignment_share(np.eye(4), reverse_alignment(4)) == 0.0  # query i looks at key i
    assert alignment_share(np.eye(3), reverse_alignment(3)) == pytest.approx(1 / 3)  # only (1, 1)
