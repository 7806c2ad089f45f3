"""The intervention figures (tfviz.viz.effects): shapes, exact values in the hover, CSV data."""
from __future__ import annotations

import numpy as np

from tfviz.viz import (attribution_bars, circuit_heatmap, effect_heatmap, figure_data,
                       logit_lens_heatmap, pattern_and_effect, pattern_vs_effect, position_effect_heatmap)


def test_effect_heatmap_and_pattern_vs_effect():
    change = np.array([[-0.1, 0.0], [0.02, -0.5]])
    fig = effect_heatmap(change, metric="P(referent)", baseline=0.9, selected=(1, 1))
    hm = fig.data[0]
    assert np.allclose(np.asarray(hm.z, dtype=float), change)
    assert "L1H1 off: P(referent) 0.4 (unchanged 0.9), change -0.5" in hm.text[1][1]
    assert hm.zmid == 0 and len(fig.layout.shapes) == 1
    assert len(figure_data(fig)) == 4
    fig = pattern_vs_effect(["L0H0", "L0H1", "L1H0", "L1H1"], [0.5, 0.5, 0.97, 0.9], change.ravel(),
                            pattern_name="picks the referent", metric="pairwise", cut=0.9)
    assert [t.name for t in fig.data] == ["layer 0", "layer 1"]
    assert list(fig.data[1].text) == ["L1H0", "L1H1"] and np.allclose(fig.data[1].x, [0.97, 0.9])


def test_position_patching_lens_attribution_circuit():
    v = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 3.0]])
    fig = position_effect_heatmap(v, ["a", "b", "c"], metric="logit diff", baseline=1.0, reference=3.0)
    assert np.allclose(np.asarray(fig.data[0].z, dtype=float), [[0, 0.5, 1], [0, 0, 1]])
    probs = np.array([[0.2, 0.3], [0.9, 0.6]])
    fig = logit_lens_heatmap(probs, [["x", "y"], ["law", "z"]], ["it", "its"])
    assert list(fig.data[0].y) == ["embeddings", "after layer 0"] and fig.data[0].text[1][0] == "law"
    fig = attribution_bars(["embed", "L0H0", "biases"], [1.0, -0.5, 0.25], total=0.75, good="law", bad="dog")
    assert "+0.750" in fig.layout.title.text and len(figure_data(fig)) == 3
    fig = circuit_heatmap(np.eye(3), ["a", "b", "c"], ["a", "b", "c"], kind="OV")
    assert fig.data[0].zmid == 0


def test_pattern_and_effect_side_by_side():
    tokens = ["[BOS]", "the", "law", "and", "the", "rules", ",", "its", "[SEP]", "its"]
    w = np.array([0.05, 0.0, 0.8, 0.0, 0.0, 0.1, 0.0, 0.05, 0.0, 0.0])
    probs = np.array([[0.98, 0.01], [0.2, 0.15]])
    fig = pattern_and_effect(w, tokens, ["law", "rule"], [[2], [5]], ["none", "L0H1"], probs,
                             head="L0H1", query=9)
    bars = [t for t in fig.data if t.type == "bar"]
    assert np.allclose(bars[0].y, w) and len(bars[0].x) == len(tokens)
    assert bars[0].marker.color[2] != bars[0].marker.color[0]  # the candidates coloured
    assert [t.name for t in bars[1:]] == ["P(law)", "P(rule)"]
    assert list(bars[1].x) == ["every head on", "L0H1 off"] and np.allclose(bars[1].y, [0.98, 0.2])
    assert "L0H1" in fig.layout.annotations[0].text and len(figure_data(fig)) == len(tokens) + 4
