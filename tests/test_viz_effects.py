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
    # issue 30: positions down, the residual stream across (its words were tiny at 1024 px)
    assert list(fig.data[0].x) == ["embeddings", "after layer 0"] and fig.data[0].text[0][1] == "law"
    assert np.allclose(np.asarray(fig.data[0].z, dtype=float), probs.T)
    assert fig.data[0].textfont.size >= 12 and "top 'law' p=0.9000" in fig.data[0].customdata[0][1]
    fig = attribution_bars(["embed", "L0H0", "biases"], [1.0, -0.5, 0.25], total=0.75, good="law", bad="dog")
    assert "+0.750" in fig.layout.title.text and len(figure_data(fig)) == 3
    fig = circuit_heatmap(np.eye(3), ["a", "b", "c"], ["a", "b", "c"], kind="OV")
    assert fig.data[0].zmid == 0


def test_logit_lens_words_are_cut_to_their_cell_not_shrunk():
    """Issue 30: at 1024 px the lens printed its words so small they could not be read. The words
    have a fixed size; one too long for its cell ends in "…" (the hover has it whole)."""
    from tfviz.viz.effects import LENS_FONT_PX, LENS_PLOT_PX

    R, word = 13, "application"  # 12 layers: narrow cells
    fig = logit_lens_heatmap(np.full((R, 2), 0.5), [[word, "a"]] * R, ["x", "y"])
    shown = fig.data[0].text[0][0]
    assert shown.endswith("…") and word.startswith(shown[:-1])
    assert 0.6 * LENS_FONT_PX * len(shown) <= LENS_PLOT_PX / R  # it fits its cell
    assert f"top '{word}'" in fig.data[0].customdata[0][0]
    assert logit_lens_heatmap(np.full((3, 1), 0.5), [[word]] * 3, ["x"]).data[0].text[0][0] == word


def test_pattern_vs_effect_labels_apart():
    """Issue 30: the heads' labels overlapped into blobs (at 1440 px too). Labels are placed where
    they overlap no other label or point in the smallest plot the page draws; points on one
    another share one label; each point keeps its own name for the hover."""
    from tfviz.viz.effects import PLOT_PX, _overlap, _padded, label_places

    names = ["L0H0", "L0H1", "L0H2", "L0H3", "L1H0", "L1H1", "L1H2", "L1H3"]
    x = np.array([0.58, 0.36, 0.0009, 0.085, 0.09, 0.997, 0.42, 0.996])  # the shipped coref's
    y = np.array([0.0, 0.0, -1.0, 0.0, 0.0, -0.09, 0.0, 0.0])
    places, labels = label_places(x, y, names)
    assert "L0H3, L1H0" in labels and labels.count("") == 1  # on one another: one label
    (x0, x1), (y0, y1), (w, h) = _padded(x), _padded(y), PLOT_PX
    boxes = []
    for i, (place, text) in enumerate(zip(places, labels)):
        if not text:
            continue
        cx, cy = (x[i] - x0) / (x1 - x0) * w, (y1 - y[i]) / (y1 - y0) * h
        bw, bh, half = 7.2 * len(text) + 4, 16, 7
        vert, horiz = place.split()
        left = {"center": cx - bw / 2, "right": cx + half, "left": cx - half - bw}[horiz]
        top = {"top": cy - half - bh, "bottom": cy + half, "middle": cy - bh / 2}[vert]
        boxes.append((left, top, left + bw, top + bh))
    assert all(_overlap(a, b) == 0 for i, a in enumerate(boxes) for b in boxes[i + 1:]), (places, labels)
    fig = pattern_vs_effect(names, x, y, pattern_name="weight on the referent", metric="P(referent)")
    assert [n for t in fig.data for n in t.text] == names  # the hover's names
    shown = [str(s) for t in fig.data for s in t.texttemplate]
    assert "L0H3, L1H0" in shown and shown.count(" ") == 1


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
    # issue 42: the legend names the right panel's probabilities only, not the attention bars
    assert bars[0].showlegend is False and "effect" in fig.layout.legend.title.text
    assert list(bars[1].x) == ["every head on", "L0H1 off"] and np.allclose(bars[1].y, [0.98, 0.2])
    assert "L0H1" in fig.layout.annotations[0].text and len(figure_data(fig)) == len(tokens) + 4
