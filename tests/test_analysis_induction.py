"""tfviz.analysis.induction: held-out recurrence probes, per-position loss on the repeated tokens,
pooling and the per-condition table — each checked against an independent recomputation."""
import math

import numpy as np
import pytest
import torch

import tfviz
from tfviz.analysis import pattern_scores
from tfviz.analysis.induction import (condition_probes, generalisation, induction_score,
                                      pool_positions, position_curve, position_losses,
                                      probe_summary, recurrence_probe)

from stand_ins import InductionOracle


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return tfviz.Transformer(tfviz.ModelConfig(arch="decoder", vocab_size=80, d_model=16,
                                               n_heads=2, n_layers=2, max_len=64, pos="rope",
                                               attn_only=True)).eval()


def test_recurrence_probe_layout():
    t = recurrence_probe(80, length=40, segment=5, repeats=3, batch=6, seed=2)
    assert t.shape == (6, 41) and (t[:, 0] == 2).all() and (t[:, 1:] >= 7).all()
    assert torch.equal(t, recurrence_probe(80, 40, 5, 3, batch=6, seed=2))
    assert not torch.equal(t, recurrence_probe(80, 40, 5, 3, batch=6, seed=3))
    for row in t[:, 1:].tolist():
        counts = {x: row.count(x) for x in row}
        assert sorted(counts.values()).count(3) == 5 and set(counts.values()) <= {1, 3}
        seg = [x for x in row if counts[x] == 3][:5]  # the segment's tokens, in order
        starts = [i for i in range(len(row) - 4) if row[i:i + 5] == seg]
        assert len(starts) == 3  # three whole copies, at offsets that vary between rows
    rr = recurrence_probe(80, length=20, segment=10, repeats=2, batch=3, seed=0)
    assert torch.equal(rr[:, 1:11], rr[:, 11:])  # no filler left: [BOS] r r
    with pytest.raises(ValueError, match="do not fit"):
        recurrence_probe(80, length=10, segment=6, repeats=2)


def test_position_losses_match_cross_entropy(model):
    t = recurrence_probe(80, 30, 6, 2, batch=5, seed=1)
    pos = position_losses(model, t, batch_size=2)
    with torch.no_grad():
        logits = model(t)
    for b in range(5):
        for p in range(30):
            want = -torch.log_softmax(logits[b, p], -1)[t[b, p + 1]].item()
            assert pos["loss"][b, p] == pytest.approx(want, abs=1e-5)
            assert pos["correct"][b, p] == (logits[b, p].argmax().item() == t[b, p + 1].item())
    # repeat positions: the token recurs and the token after its earlier occurrence comes next
    for b, row in enumerate(t.tolist()):
        want = [p for p in range(30) if row[p] in row[:p] and row[row.index(row[p]) + 1] == row[p + 1]]
        assert np.flatnonzero(pos["repeat"][b]).tolist() == want and len(want) == 5


def test_oracle_is_perfect_on_repeats_and_curve_pools():
    t1 = recurrence_probe(80, 30, 6, 3, batch=4, seed=1)
    t2 = recurrence_probe(80, 34, 8, 2, batch=3, seed=2)
    oracle = InductionOracle(80)
    p1, p2 = position_losses(oracle, t1), position_losses(oracle, t2)
    pooled = pool_positions([p1, p2])
    assert pooled["loss"].shape == (7, 30)  # cut to the shorter probe
    assert pooled["correct"][pooled["repeat"]].all()
    curve = position_curve(pooled)
    assert list(curve["position"]) == list(range(30))
    r = pooled["repeat"]
    for p in range(30):
        assert curve["n_repeat"][p] == r[:, p].sum()
        if r[:, p].any():
            assert curve["loss_repeat"][p] == pytest.approx(pooled["loss"][r[:, p], p].mean())
            assert curve["accuracy_repeat"][p] == 1.0
        else:
            assert math.isnan(curve["loss_repeat"][p])
    assert curve["loss_repeat"].max() < 0.01 and curve["loss_new"].min() > 3.0


def test_generalisation_table_is_the_probes_summaries(model):
    conditions = [{"name": "a", "length": 40, "segment": 20, "repeats": 2},
                  {"name": "b", "length": 41, "segment": 4, "repeats": 5, "segments": 2}]
    df, positions = generalisation(model, 80, conditions, batch=4, seed=3)
    probes = condition_probes(80, conditions, batch=4, seed=3)
    assert list(df["name"]) == ["a", "b"] and list(df["segments"]) == [1, 2]
    for c in conditions:
        t = probes[c["name"]]
        pos = position_losses(model, t)
        np.testing.assert_allclose(positions[c["name"]]["loss"], pos["loss"])
        rec = tfviz.record(model, t, names=[f"blocks.{l}.attn.hook_pattern" for l in range(2)])
        scores = pattern_scores(rec.stack_layers("blocks.{l}.attn.hook_pattern"), t)["induction"]
        np.testing.assert_allclose(induction_score(model, t), scores)
        row = df[df["name"] == c["name"]].iloc[0]
        want = probe_summary(pos, scores)
        assert row["loss_repeat"] == pytest.approx(pos["loss"][pos["repeat"]].mean())
        assert row["max_induction"] == pytest.approx(np.nanmax(scores))
        assert row["best_head"] == want["best_head"]


class BigramCopier(torch.nn.Module):
    """A perfect copier written out: at a second-half position of [BOS] r r it puts probability
    count(t -> x) / count(t -> .) on each x that followed t in the first half (log-probabilities
    as logits; elsewhere uniform)."""

    def __init__(self, vocab, half):
        super().__init__()
        self.vocab, self.half = vocab, half
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, tokens):
        logits = torch.full((*tokens.shape, self.vocab), -1e4)
        for b, row in enumerate(tokens.tolist()):
            first = row[1:1 + self.half]
            for p in range(len(row)):
                after = [first[i + 1] for i in range(self.half - 1) if first[i] == row[p]]
                if p <= self.half or not after:
                    logits[b, p] = 0.0
                    continue
                for x in set(after):
                    logits[b, p, x] = math.log(after.count(x) / len(after))
        return logits


def test_repeat_floor_is_a_bigram_copiers_loss():
    from tfviz.analysis.induction import floor_table, repeat_floor, repeat_vs_floor, replacement_sequences

    half, vocab = 12, 14  # 7 token ids: many repeats inside r
    t = replacement_sequences(vocab, half, batch=40, seed=3)
    assert t.shape == (40, 1 + 2 * half) and (t[:, 1:half + 1] == t[:, half + 1:]).all()
    assert int(t[:, 1:].min()) >= 7 and int(t[:, 1:].max()) < vocab
    assert torch.equal(t, replacement_sequences(vocab, half, batch=40, seed=3))
    floor = repeat_floor(t, half)
    # brute force: at second-half position p, -log(share of the first half's continuations of
    # tokens[p] that are tokens[p+1])
    for b, row in enumerate(t.tolist()):
        for k, p in enumerate(range(half + 1, 2 * half)):
            nxt = [row[1 + i + 1] for i in range(half - 1) if row[1 + i] == row[p]]
            assert floor[b, k] == pytest.approx(-math.log(nxt.count(row[p + 1]) / len(nxt)), abs=1e-12)
    assert (floor > 0).any() and (floor == 0).any()
    r = repeat_vs_floor(BigramCopier(vocab, half), t, half)
    np.testing.assert_allclose(r["loss"], floor, atol=1e-5)  # the copier sits on the floor
    assert r["ambiguous_floor"] > 0 and r["n_ambiguous"] == int((floor > 0).sum())
    # distinct tokens: nothing to split, the floor is 0 (the shipped [BOS] r r probe)
    assert repeat_floor(induction_probe_rows(half), half).max() == 0
    df = floor_table(BigramCopier(vocab, half), vocab, [half], batch=8, seed=2)
    assert df["loss"].iloc[0] == pytest.approx(df["floor"].iloc[0], abs=1e-5)
    with pytest.raises(ValueError, match="not \\[BOS\\] r r"):
        repeat_floor(t[:, :-1], half)


def induction_probe_rows(half):
    r = torch.randperm(40)[:half] + 7
    return torch.cat([torch.tensor([1]), r, r])[None]
