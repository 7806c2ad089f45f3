"""Attention rollout and flow (Abnar & Zuidema 2020) against independent recomputations: rollout as
a numpy product written from the paper's formula, max-flow as the minimum cut found by trying
every cut of tiny graphs (max-flow = min-cut) and networkx's own Edmonds-Karp, causal masks."""
import itertools

import numpy as np
import pytest
import torch

from tfviz import ModelConfig, load_checkpoint
from tfviz.analysis.rollout import (across_layers, attention_flow, attention_rollout,
                                    layered_graph, max_flow, residual_attention)
from tfviz.train import new_model


def random_patterns(layers=3, heads=2, n=5, causal=False, seed=0) -> np.ndarray:
    """Row-stochastic [layer, head, q, k]; lower-triangular when causal."""
    rng = np.random.default_rng(seed)
    p = rng.random((layers, heads, n, n)) ** 3
    if causal:
        p = p * np.tril(np.ones((n, n)))
    return p / p.sum(-1, keepdims=True)


def brute_force_min_cut(cap: np.ndarray, s: int, t: int) -> float:
    """Min over every s-t cut (S contains s, not t) of the capacity leaving S."""
    others = [v for v in range(len(cap)) if v not in (s, t)]
    best = np.inf
    for bits in itertools.product([0, 1], repeat=len(others)):
        side = np.zeros(len(cap), bool)
        side[s] = True
        side[[v for v, b in zip(others, bits) if b]] = True
        best = min(best, cap[side][:, ~side].sum())
    return best


def test_rollout_is_the_product_of_residual_head_averages():
    p = random_patterns(layers=3, heads=4, n=6)
    mats = []
    for layer in p:  # the paper's recipe, written independently: (mean_h A + I), rows / sums
        m = np.einsum("hqk->qk", layer) / layer.shape[0] + np.eye(6)
        mats.append(m / m.sum(1)[:, None])
    want = [mats[0], mats[1] @ mats[0], np.linalg.multi_dot([mats[2], mats[1], mats[0]])]
    got = attention_rollout(p)
    np.testing.assert_allclose(got, np.stack(want), rtol=0, atol=1e-13)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-12)
    # torch input (float32) gives the same numbers to float32 precision
    np.testing.assert_allclose(attention_rollout(torch.tensor(p, dtype=torch.float32)), got,
                               atol=1e-6)


def test_residual_zero_is_the_plain_head_average():
    p = random_patterns(layers=2, heads=3, n=4)
    np.testing.assert_allclose(residual_attention(p, residual=0.0), p.mean(1), atol=1e-15)
    with pytest.raises(ValueError, match="residual"):
        residual_attention(p, residual=1.5)
    with pytest.raises(ValueError, match=r"\[layer, head, q_pos, k_pos\]"):
        attention_rollout(p[0])


def test_max_flow_matches_brute_force_min_cut_on_tiny_layered_graphs():
    for seed, causal in [(0, False), (1, True), (2, False)]:
        a = residual_attention(random_patterns(layers=2, heads=2, n=3, causal=causal, seed=seed))
        cap = layered_graph(a)  # 9 nodes: every one of 2^7 cuts tried
        for q, k in itertools.product(range(3), range(3)):
            got = max_flow(cap, 2 * 3 + q, k)
            assert got == pytest.approx(brute_force_min_cut(cap, 2 * 3 + q, k), abs=1e-12)


def test_max_flow_matches_brute_force_min_cut_on_general_graphs():
    # edges both ways and cycles: the reverse (residual) edges of Edmonds-Karp get used
    rng = np.random.default_rng(7)
    for _ in range(6):
        cap = rng.random((6, 6)) * (rng.random((6, 6)) < 0.5)
        np.fill_diagonal(cap, 0)
        assert max_flow(cap, 0, 5) == pytest.approx(brute_force_min_cut(cap, 0, 5), abs=1e-12)


def test_max_flow_known_values_and_networkx():
    # a textbook network (CLRS fig. 26.1): max flow 23
    cap = np.zeros((6, 6))
    for u, v, c in [(0, 1, 16), (0, 2, 13), (1, 3, 12), (2, 1, 4), (2, 4, 14), (3, 2, 9),
                    (3, 5, 20), (4, 3, 7), (4, 5, 4)]:
        cap[u, v] = c
    assert max_flow(cap, 0, 5) == pytest.approx(23.0)
    nx = pytest.importorskip("networkx")
    a = residual_attention(random_patterns(layers=3, heads=2, n=5, seed=3))
    cap = layered_graph(a)
    g = nx.DiGraph()
    for u, v in zip(*np.nonzero(cap)):
        g.add_edge(int(u), int(v), capacity=float(cap[u, v]))
    for q, k in [(0, 0), (2, 4), (4, 1)]:
        want = nx.maximum_flow_value(g, 15 + q, k, flow_func=nx.algorithms.flow.edmonds_karp)
        assert max_flow(cap, 15 + q, k) == pytest.approx(want, abs=1e-12)


def test_one_layer_flow_equals_rollout():
    p = random_patterns(layers=1, heads=3, n=5)
    np.testing.assert_allclose(attention_flow(p), attention_rollout(p), atol=1e-12)


def test_flow_rows_sum_to_one_and_unnormalised_flow_is_bounded():
    p = random_patterns(layers=3, heads=2, n=4, seed=5)
    flow = attention_flow(p)
    np.testing.assert_allclose(flow.sum(-1), 1.0, atol=1e-12)
    raw = attention_flow(p, normalise=False)
    # each flow is its own problem, at most the source's out-capacity (1); one layer: Ã itself
    assert (raw <= 1 + 1e-12).all() and (raw >= 0).all()
    np.testing.assert_allclose(raw[0], residual_attention(p)[0], atol=1e-12)


def test_causal_masks_are_respected():
    p = random_patterns(layers=3, heads=2, n=6, causal=True, seed=4)
    upper = ~np.tril(np.ones((6, 6), bool))
    assert np.abs(attention_rollout(p)[:, upper]).max() == 0.0
    assert np.abs(attention_flow(p)[:, upper]).max() < 1e-12


def test_flow_refuses_large_inputs():
    with pytest.raises(ValueError, match="attention rollout"):
        attention_flow(random_patterns(layers=1, heads=1, n=41))


def test_across_layers_on_a_real_causal_checkpoint_and_a_random_encoder():
    ck = load_checkpoint("checkpoints/pos-none.safetensors")
    ids = torch.tensor(ck.tokenizer.encode("the dog chases the cat .").ids)
    out = across_layers(ck.model, ids)
    assert out["rollout"].shape == (ck.config.n_layers, len(ids), len(ids))
    upper = ~np.tril(np.ones((len(ids),) * 2, bool))
    for key in ("raw", "rollout", "flow"):
        assert np.abs(out[key][:, upper]).max() < 1e-7, key
    np.testing.assert_allclose(out["rollout"], attention_rollout(
        np.stack([np.asarray(p) for p in _patterns(ck.model, ids)])), atol=1e-12)
    enc = new_model(ModelConfig(arch="encoder", vocab_size=20, d_model=16, n_heads=2,
                                n_layers=2, max_len=16, pos="learned"), seed=0)
    out = across_layers(enc, torch.arange(3, 10), flow=False)
    assert out["flow"] is None and (out["rollout"][-1] > 0).all()  # bidirectional: everything


def _patterns(model, ids):
    from tfviz import record
    rec = record(model, ids[None], names=lambda n: n.endswith(".attn.hook_pattern"))
    return [rec[f"blocks.{l}.attn.hook_pattern"][0].double().numpy()
            for l in range(model.config.n_layers)]
