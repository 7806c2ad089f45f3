"""Figures of the "before attention" story (tfviz.viz.embeddings, order, layers): each shows
exactly its input numbers, names tokens in hover, serialises, and gives CSV data."""
import json

import numpy as np
import pandas as pd
import plotly.io as pio
import pytest

from tfviz import viz
from tfviz.viz.data import figure_data

TOKENS = ["the", "dog", "<br>", "the", "a b"]  # duplicates, markup, a space


def check(fig):
    assert fig.layout.template.layout.font.family is not None  # themed
    json.loads(pio.to_json(fig))  # serialises (no NaN/inf problems)
    assert len(figure_data(fig)) > 0
    return fig


def test_embedding_map_groups_and_hover():
    coords = np.array([[0.0, 1.0], [2.0, -1.0], [0.5, 0.25]])
    fig = check(viz.embedding_map(coords, ["king", "dog", "<b>"], ["person", "animal", "person"],
                                  explained=[0.5, 0.25]))
    assert [t.name for t in fig.data] == ["person", "animal"]
    np.testing.assert_array_equal(fig.data[0].x, [0.0, 0.5])
    assert list(fig.data[0].text) == ["king", "&lt;b&gt;"]
    assert "50.0% of the variance" in fig.layout.xaxis.title.text
    with pytest.raises(ValueError, match=r"\[n, 2\]"):
        viz.embedding_map(np.zeros((3, 3)), ["a", "b", "c"])


def test_one_hot_vs_learned_shows_identity_and_the_learned_cosines():
    v = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    fig = check(viz.one_hot_vs_learned(v, ["a", "b", "a"]))
    onehot, learned = (np.asarray(t.z, dtype=float) for t in fig.data)
    np.testing.assert_array_equal(onehot, np.eye(3))
    assert learned[0, 1] == pytest.approx(1 / np.sqrt(2)) and learned[0, 2] == 0.0
    assert len(set(fig.data[0].x)) == 3  # the two "a" rows stay apart
    assert "cos" in fig.data[1].hovertemplate


def test_analogy_bars_highlight_the_expected_word():
    fig = check(viz.analogy_bars([("queen", 0.9), ("prince", 0.7)], "king", "man", "woman",
                                 expected="queen"))
    bar = fig.data[0]
    assert list(bar.y) == ["prince", "queen"] and list(bar.x) == [0.7, 0.9]
    assert bar.marker.color[1] != bar.marker.color[0]
    assert "king − man + woman" in fig.layout.title.text


def test_bag_of_words_bars():
    fig = check(viz.bag_of_words_bars(["the", "dog"], [[2, 1], [2, 1]], ["s1", "s2"]))
    np.testing.assert_array_equal(fig.data[0].y, fig.data[1].y)


def test_order_figures_keep_exact_values():
    table = pd.DataFrame({"stage": ["embeddings", "after layer 0"], "matched": [0.0, 2.5]})
    fig = check(viz.order_bars({"no positions": table, "learned": table.assign(matched=[0.2, 3.0])}))
    assert list(fig.data[0].customdata) == [0.0, 2.5] and fig.data[0].y[0] > 0  # log axis floor
    per_pos = np.array([[0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1e-7, 2.0, 0.3, 0.0]])
    forced = per_pos == 0
    fig = check(viz.order_positions(per_pos, TOKENS, ["embeddings", "after layer 0"],
                                    forced_equal=forced))
    hm = fig.data[0]
    assert hm.customdata[1][2][0] == 2.0 and hm.customdata[0][0][1].startswith("forced equal")
    assert "'&lt;br&gt;' (pos 2)" in hm.x[2] and hm.text[0][0] == "="


def test_across_layers_grid_tiles_every_view():
    rng = np.random.default_rng(0)
    views = {k: rng.random((2, 5, 5)) for k in ("raw", "rollout", "flow")}
    fig = check(viz.across_layers_grid({**views, "missing": None}, TOKENS))
    assert len(fig.data) == 1  # one tiled heatmap
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (3 * 5 + 2 * 2, 2 * 5 + 2)  # two gutter cells between tiles
    np.testing.assert_allclose(z[7:12, 7:12], views["rollout"][1], rtol=1e-6)
    assert "share" in fig.data[0].hovertemplate and "rollout" in fig.data[0].y[7]
    # issue 30: the tiles had no token labels. Each tile row's positions are labelled on the left,
    # each tile column's input tokens below; the view and the layer name their tiles
    assert list(fig.layout.yaxis.ticktext) == [f"{i} {t}" for i, t in enumerate(
        ["the", "dog", "&lt;br&gt;", "the", "a␣b"])] * 3
    assert "rollout" in fig.layout.yaxis.tickvals[5] and len(fig.layout.xaxis.tickvals) == 2 * 5
    notes = [a.text for a in fig.layout.annotations]
    assert notes == ["<b>after layer 0</b>", "<b>after layer 1</b>", "<b>this layer</b>",
                     "<b>rollout</b>", "<b>flow</b>"]
    bars = check(viz.inputs_bar({k: v[-1, -1] for k, v in views.items()}, TOKENS, position=4))
    np.testing.assert_allclose(bars.data[2].y, views["flow"][-1, -1])
    assert "'a␣b'" in bars.layout.title.text
