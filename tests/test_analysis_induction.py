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
