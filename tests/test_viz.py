"""Figure builders (tfviz.viz): pure functions from arrays + labels to Plotly figures.

Every figure is checked against its input numbers, its labels (token text in hover, duplicate
tokens kept apart), its size (one tiled trace for a 12x12 grid, < 1 MB JSON) and serialisation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from tfviz import viz
from tfviz.viz import theme
from tfviz.viz.lines import LEVELS
from tfviz.viz.rope import rotate_pair
from tfviz.viz.tiles import tile

RNG = np.random.default_rng(0)
TOKENS = ["the", "law", "said", "it", "the", "<br>", "a b", "&"]  # duplicates, markup, space
N = len(TOKENS)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def patterns(*shape):
    return softmax(RNG.normal(size=shape))


def sinusoidal(n, d):
    pos, i = np.arange(n)[:, None], np.arange(0, d, 2)[None]
    t = np.zeros((n, d))
    t[:, 0::2], t[:, 1::2] = np.sin(pos / 10000 ** (i / d)), np.cos(pos / 10000 ** (i / d))
    return t


CAUSAL = np.tril(np.ones((N, N), bool))


def all_figures() -> dict[str, go.Figure]:
    P = patterns(2, 3, N, N)
    q, K, V = RNG.normal(size=4), RNG.normal(size=(N, 4)), RNG.normal(size=(N, 4))
    table = sinusoidal(24, 16)
    df = pd.DataFrame({"scheme": ["rope"] * 3 + ["alibi"] * 3, "length": [32, 64, 128] * 2,
                       "loss": [1, 2, 5, 1, 1.1, 1.2]})
    hist = [dict(step=i, train_loss=3 / (i + 1), val_loss=None if i % 2 else 3.1 / (i + 1),
                 accuracy=i / 10) for i in range(10)]
    return {
        "head": viz.head_heatmap(P[0, 0], TOKENS),
        "grid": viz.heads_grid(P, TOKENS, selected=(1, 2)),
        "lines": viz.line_view(P[0], TOKENS),
        "lines_h": viz.line_view(P[0, 0], TOKENS, selected=3, orientation="horizontal"),
        "step": viz.step_through_figure(q, K, V, TOKENS, 5, mask_row=CAUSAL[5]),
        "cross": viz.cross_attention_alignment(P[0, 0, :5], TOKENS, TOKENS[:5], [0, 1, -1, 3, 4]),
        "pronoun": viz.pronoun_probe(P[:, :, 3], TOKENS, {"law": [1], "it": [4]}, pronoun_index=3),
        "pe": viz.pe_matrix(table), "waves": viz.pe_waves(table),
        "psim": viz.position_similarity(table), "sdist": viz.similarity_vs_distance(table),
        "rope": viz.rope_rotation_animation([1.0, 0.5], 0.3, range(10), k=[0.2, 1.0]),
        "ropef": viz.rope_frequencies(10000 ** (-np.arange(0, 16, 2) / 16), context_length=128),
        "roper": viz.rope_relative_scores(viz.rope_pair_scores([1, .5], [.2, 1], .3, 12)),
        "alibi": viz.alibi_bias(-np.array([.5, .25])[:, None, None]
                                * np.abs(np.subtract.outer(range(6), range(6))), [.5, .25]),
        "t5b": viz.t5_buckets(np.abs(np.subtract.outer(range(6), range(6)))),
        "t5": viz.t5_bias(RNG.normal(size=(2, 6, 6))),
        "extra": viz.extrapolation_curves(df, 64),
        "mask": viz.mask_grid(CAUSAL, TOKENS),
        "masks": viz.masks_side_by_side({"causal": CAUSAL, "full": np.ones((N, N), bool)}),
        "sim": viz.similarity_heatmap(RNG.normal(size=(N, 5)), TOKENS),
        "gen": viz.generation_attention([patterns(3, k) for k in range(4, N + 1)], TOKENS),
        "loss": viz.loss_curves(hist),
        "snap": viz.snapshot_player([P] * 3, [0, 10, 20], TOKENS, layer=1, head=2),
    }


FIGS = all_figures()


@pytest.mark.parametrize("name", sorted(FIGS))
def test_every_figure_serialises_is_themed_and_has_data(name):
    fig = FIGS[name]
    json.loads(fig.to_json())  # no numpy type breaks serialisation
    assert fig.layout.template.layout.font.family == theme.FONT_FAMILY
    assert fig.layout.height and fig.layout.height <= 2400
    for letter in ("x", "y"):  # every visible axis says what it is
        axis = fig.layout[f"{letter}axis"]
        if axis.visible is not False and axis.showticklabels is not False:
            assert axis.title.text or name in ("lines", "lines_h"), (name, letter)
    df = viz.figure_data(fig)
    assert isinstance(df, pd.DataFrame) and len(df) > 0
    df.to_csv()


def test_viz_never_imports_torch_or_streamlit():
    for path in Path(viz.__file__).parent.glob("*.py"):
        src = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(torch|streamlit)", src, re.M), path.name


def test_theme_registered_once_and_scales():
    assert theme.TEMPLATE in pio.templates and theme.TEMPLATE_DARK in pio.templates
    theme.register()
    assert theme.attention_colour()["zmin"] == 0 and theme.attention_colour()["zmax"] == 1
    d = theme.diverging_colour([-1.0, 3.0, -np.inf])
    assert d["zmid"] == 0 and d["zmin"] == -3 and d["zmax"] == 3
    fig = theme.apply_theme(go.Figure(), dark=True, title="t", height=300)
    assert fig.layout.template.layout.font.color == theme.INK_DARK and fig.layout.height == 300
    assert theme.show_token("<br>") == "&lt;br&gt;" and theme.show_token("a b") == "a␣b"


def test_head_heatmap_data_labels_and_duplicates():
    p = patterns(N, N)
    fig = viz.head_heatmap(p, TOKENS)
    h = fig.data[0]
    np.testing.assert_allclose(h.z, p)
    assert len(h.x) == len(set(h.x)) == N and len(h.y) == len(set(h.y)) == N  # "the" twice
    assert h.y[3] == "query 'it' (pos 3)" and h.x[1] == "key 'law' (pos 1)"
    assert "%{y} → %{x}: %{z:.3f}" in h.hovertemplate
    assert list(fig.layout.xaxis.ticktext) == [theme.show_token(t) for t in TOKENS]
    assert (h.zmin, h.zmax) == (0, 1)


def test_heads_grid_tiles_gutters_selection_and_size():
    p = patterns(2, 3, 4, 5).astype(np.float32)
    fig = viz.heads_grid(p, list("abcd"), list("vwxyz"), gap=1)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (2 * 4 + 1, 3 * 5 + 2)
    for l in range(2):
        for hd in range(3):
            y0, x0 = l * 5, hd * 6
            np.testing.assert_array_equal(z[y0:y0 + 4, x0:x0 + 5], p[l, hd])
    assert np.isnan(z[4]).all() and np.isnan(z[:, 5]).all() and np.isnan(z[:, 11]).all()
    assert fig.data[0].x[6 + 2] == "H1 · key 'x' (pos 2)"
    assert fig.data[0].y[5 + 3] == "L1 · query 'd' (pos 3)"
    pick = fig.data[1]
    assert pick.meta == "select" and len(pick.customdata) == 6 and pick.marker.opacity == 0
    assert list(pick.customdata[5]) == [1, 2]
    big = viz.heads_grid(patterns(12, 12, 32, 32), [f"tok{i}" for i in range(32)], selected=(3, 4))
    assert len(big.data) == 2 and len(big.layout.shapes) == 1
    assert len(big.to_json()) < 1_000_000


def test_pattern_frame_is_tidy():
    p = patterns(2, 3, N, N)
    df = viz.pattern_frame(p, TOKENS)
    assert list(df.columns) == ["layer", "head", "q_pos", "q_token", "k_pos", "k_token", "weight"]
    assert len(df) == p.size
    row = df[(df.layer == 1) & (df["head"] == 2) & (df.q_pos == 3) & (df.k_pos == 1)].iloc[0]
    assert row.q_token == "it" and row.k_token == "law" and row.weight == p[1, 2, 3, 1]
    assert list(viz.pattern_frame(p[0, 0], TOKENS).columns)[:2] == ["q_pos", "q_token"]


def test_line_view_selected_heads_and_orientation():
    p = patterns(3, N, N)
    fig = viz.line_view(p, TOKENS, selected=2, heads=[0, 2], min_weight=0.0)
    lines = [t for t in fig.data if t.mode == "lines" and t.x[0] is not None]
    assert lines and all(t.x[0::3] == (0.0,) * len(t.x[0::3]) for t in lines)
    assert {y for t in lines for y in t.y[0::3]} == {-2.0}  # only query 2's lines
    drawn = sum(len(t.x) // 3 for t in lines)
    assert drawn == 2 * N  # every key, two heads
    colours = {t.line.color for t in lines}
    assert len(colours) == 2 and {t.legendgroup for t in lines} == {"head 0", "head 2"}
    assert len(fig.data) <= 2 * (len(LEVELS) + 1) + 2
    h = viz.line_view(p[0], TOKENS, orientation="horizontal")
    assert {round(y) for t in h.data if t.mode == "lines" for y in t.y if y is not None} == {0, 1}
    with pytest.raises(ValueError):
        viz.line_view(p, TOKENS, orientation="diagonal")


def test_step_through_numbers_follow_the_formula():
    q, K, V = RNG.normal(size=8), RNG.normal(size=(N, 8)), RNG.normal(size=(N, 6))
    bias = -0.25 * np.abs(np.arange(N) - 5)
    t = viz.step_through_table(q, K, TOKENS, 5, bias_row=bias, mask_row=CAUSAL[5])
    assert list(t.columns) == ["k_pos", "token", "q·k", "q·k/√d", "+bias", "masked", "softmax"]
    np.testing.assert_allclose(t["q·k"], K @ q)
    np.testing.assert_allclose(t["q·k/√d"], K @ q / np.sqrt(8))
    np.testing.assert_allclose(t["+bias"], K @ q / np.sqrt(8) + bias)
    assert np.isneginf(t["masked"][6:]).all() and (t["softmax"][6:] == 0).all()
    assert t["softmax"].sum() == pytest.approx(1.0)
    ref = softmax(np.where(CAUSAL[5], K @ q / np.sqrt(8) + bias, -np.inf))
    np.testing.assert_allclose(t["softmax"], ref)
    z = viz.step_through_output(t, V)
    np.testing.assert_allclose(z, t["softmax"].to_numpy() @ V)
    fig = viz.step_through_figure(q, K, V, TOKENS, 5, bias_row=bias, mask_row=CAUSAL[5])
    contrib = np.asarray(fig.data[2].z)
    np.testing.assert_allclose(contrib[-1], z)
    np.testing.assert_allclose(contrib[:-1].sum(0), z)
    assert "−∞" in np.asarray(fig.data[1].text)[6:, 3].tolist()
    with pytest.raises(ValueError):
        viz.step_through_table(q, K, TOKENS, 0, mask_row=np.zeros(N, bool))


def test_cross_attention_alignment_markers():
    p = patterns(4, 6)
    fig = viz.cross_attention_alignment(p, list("abcdef"), list("wxyz"), [(0, 0), (1, 2), (3, 5)])
    marks = fig.data[1]
    assert list(marks.x) == ["source 'a' (pos 0)", "source 'c' (pos 2)", "source 'f' (pos 5)"]
    assert list(marks.y) == ["target 'w' (pos 0)", "target 'x' (pos 1)", "target 'z' (pos 3)"]
    np.testing.assert_allclose(marks.customdata, [p[0, 0], p[1, 2], p[3, 5]])
    hits = sum(int(np.argmax(p[t])) == s for t, s in [(0, 0), (1, 2), (3, 5)])
    assert f"{hits}/3 target tokens" in fig.layout.title.text


def test_pronoun_probe_heatmap_and_candidate_mass():
    w = patterns(2, 3, N)
    cands = {"law": [1], "the": [0, 4]}
    fig = viz.pronoun_probe(w, TOKENS, cands, pronoun_index=3)
    np.testing.assert_allclose(fig.data[0].z, w.reshape(6, N))
    np.testing.assert_allclose(fig.data[2].x, w[:, :, [0, 4]].sum(-1).reshape(-1))
    assert "query 'it' (pos 3)" in fig.data[0].hovertemplate
    df = viz.pronoun_probe_frame(w, TOKENS, cands)
    assert set(df[df.candidate == "the"].k_pos) == {0, 4} and len(df) == w.size


def test_positional_figures():
    table = sinusoidal(32, 16)
    fig = viz.pe_matrix(table)
    np.testing.assert_allclose(fig.data[0].z, table)
    assert fig.data[0].zmid == 0
    assert len(viz.pe_waves(table, dims=[0, 3, 8]).data) == 3
    s = np.asarray(viz.position_similarity(table).data[0].z)
    np.testing.assert_allclose(np.diag(s), 1.0)
    m = viz.similarity_by_distance(table)
    assert m[0] == pytest.approx(1.0) and m[1] > m[8]
    cmp = viz.similarity_vs_distance({"sin": table, "rand": RNG.normal(size=(32, 16))})
    assert [t.name for t in cmp.data] == ["sin", "rand"]
    df = pd.DataFrame({"scheme": ["a", "a", "b"], "length": [64, 32, 32], "loss": [2, 1, 1.5]})
    ex = viz.extrapolation_curves(df, 48)
    assert list(ex.data[0].x) == [32, 64] and ex.layout.shapes[0].x0 == 48


def test_rope_animation_frames_and_relative_scores():
    q, k, th = np.array([1.0, 0.5]), np.array([0.3, -0.8]), 0.4
    fig = viz.rope_rotation_animation(q, th, range(7), k=k, k_position=2)
    assert len(fig.frames) == 7 and len(fig.layout.sliders[0].steps) == 7
    f5 = fig.frames[5].data[0]
    np.testing.assert_allclose([f5.x[1], f5.y[1]], rotate_pair(q, 5 * th))
    assert "m − n = 3" in fig.frames[5].layout.title.text
    assert fig.layout.updatemenus[0].buttons[0].method == "animate"
    s = viz.rope_pair_scores(q, k, th, 10)
    for d in range(-9, 10):
        assert np.ptp(np.diagonal(s, d)) < 1e-12  # depends on m - n only
    r = viz.rope_relative_scores(s)
    np.testing.assert_allclose(r.data[0].z, s)
    assert np.asarray(r.data[0].customdata)[7, 2] == 5
    f = viz.rope_frequencies([1.0, 0.1, 0.01])
    np.testing.assert_allclose(f.data[1].y, 2 * np.pi / np.array([1.0, 0.1, 0.01]))


def test_alibi_and_t5():
    slopes = np.array([0.5, 0.25, 0.125])
    bias = -slopes[:, None, None] * np.abs(np.subtract.outer(range(5), range(5)))
    fig = viz.alibi_bias(bias, slopes)
    z, exact = np.asarray(fig.data[0].z), np.asarray(fig.data[0].customdata, dtype=float)
    for h in range(3):  # each head on its own scale (its largest |bias| is 1), the hover exact
        np.testing.assert_allclose(z[:, h * 6:h * 6 + 5], bias[h] / np.abs(bias[h]).max())
        np.testing.assert_allclose(exact[:, h * 6:h * 6 + 5], bias[h])
    assert "%{customdata" in fig.data[0].hovertemplate
    assert list(fig.layout.xaxis.ticktext) == ["H0 (m=0.5)", "H1 (m=0.25)", "H2 (m=0.125)"]
    b = np.minimum(np.abs(np.subtract.outer(range(5), range(5))), 3)
    t = viz.t5_buckets(b)
    np.testing.assert_array_equal(t.data[0].z, b)
    assert np.asarray(t.data[0].customdata)[1, 4] == 3  # k - q
    assert len(viz.t5_bias(RNG.normal(size=(4, 5, 5))).layout.xaxis.tickvals) == 4


def test_masks():
    m = CAUSAL & ~np.tril(np.ones((N, N), bool), -3)
    fig = viz.mask_grid(m, TOKENS)
    np.testing.assert_array_equal(fig.data[0].z, m.astype(float))
    assert np.asarray(fig.data[0].text)[2, 5] == "blocked" and fig.data[0].text[5][3] == "allowed"
    assert f"{m.sum()} of {m.size}" in fig.layout.title.text
    assert list(fig.data[0].colorbar.ticktext) == ["blocked", "allowed"]
    side = viz.masks_side_by_side({"causal": CAUSAL, "window": m}, TOKENS)
    z = np.asarray(side.data[0].z)
    np.testing.assert_array_equal(z[:, :N], CAUSAL)
    np.testing.assert_array_equal(z[:, N + 2:], m)
    assert np.isnan(z[:, N:N + 2]).all() and len(side.data) == 1
    df = viz.mask_frame({"causal": CAUSAL, "window": m}, TOKENS)
    assert len(df) == 2 * N * N and df.allowed.sum() == CAUSAL.sum() + m.sum()
    assert viz.mask_grid(np.ones((3, 3), bool)).data[0].x[0] == "key pos 0"


def test_four_masks_of_33_tokens_give_every_token_label_its_own_line():
    """Issue 11: with 33 tokens the overview's rows were 7 px high and the token labels overlapped."""
    from tfviz.viz.theme import FONT_SIZE, MARGIN

    n = 33
    masks = {k: np.tril(np.ones((n, n), bool)) for k in ("causal", "padding", "window", "global")}
    fig = viz.masks_side_by_side(masks, [f"tok{i}" for i in range(n)])
    plot_height = fig.layout.height - fig.layout.margin.t - (fig.layout.margin.b or MARGIN["b"])
    assert len(fig.layout.yaxis.tickvals) == n  # every token named
    assert plot_height / n >= FONT_SIZE  # and each on a line of its own


def test_token_spans_html_escapes_and_titles():
    text = "hi <script>alert(1)</script> é"
    toks = ["hi", "<script>", "alert", "é", "é"]
    offs = [(0, 2), (3, 11), (11, 16), (29, 30), (29, 30)]  # last two overlap (byte-level BPE)
    out = viz.token_spans_html("" + text, [(0, 0)] + offs, ["[BOS]"] + toks, ids=[0, 1, 2, 3, 4, 5])
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "&lt;/script&gt;" in out  # untokenised text is escaped too
    assert out.count("<span") == 6 and 'title="#2 · id 2 · &#x27;&lt;script&gt;&#x27;' in out
    assert "[BOS]" in out and out.count(">é</span>") == 1
    with pytest.raises(ValueError):
        viz.token_spans_html("ab", [(0, 1)], ["a", "b"])


def test_similarity_heatmap_and_neighbours():
    fig = viz.similarity_heatmap(np.eye(5), ["a", "b", "a", "c", "d"])
    np.testing.assert_allclose(fig.data[0].z, np.eye(5))  # one-hot: identity
    assert len(set(fig.data[0].x)) == 5
    v = np.array([[1, 0], [0.9, 0.1], [0, 1], [0, 0]])
    df = viz.nearest_neighbours_frame(v, list("abcd"), k=1)
    assert df.set_index("token").loc["a", "neighbour"] == "b"


def test_generation_attention_is_lower_triangular():
    rows = [patterns(3, k) for k in range(4, N + 1)]
    fig = viz.generation_attention(rows, TOKENS)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (len(rows), N)
    for t, r in enumerate(rows):
        np.testing.assert_allclose(z[t, :len(r[0])], r.mean(0))
        assert np.isnan(z[t, len(r[0]):]).all()
    assert fig.data[0].y[0] == "step 0 · query 'it' (pos 3) → 'the'"
    picked = viz.generation_attention(rows, TOKENS, head=1)
    np.testing.assert_allclose(np.asarray(picked.data[0].z)[0, :4], rows[0][1])
    mat = np.tril(np.ones((3, 5)), 2) / 5
    assert np.isnan(np.asarray(viz.generation_attention(mat, TOKENS[:5],
                                                        q_positions=[1, 2, 3]).data[0].z)[0, 2])
    df = viz.generation_frame(rows, TOKENS)
    assert len(df) == sum(len(r[0]) for r in rows) and set(df.step) == set(range(len(rows)))


def test_next_token_bars_show_both_settings():
    fig = viz.next_token_bars(["the", "a", "dog"], [0.5, 0.3, 0.2], [0.8, 0.2, 0.0], chosen_name="temperature 0.5")
    assert [t.name for t in fig.data] == ["softmax (temperature 1)", "temperature 0.5"]
    np.testing.assert_allclose(fig.data[1].y, [0.8, 0.2, 0.0])
    assert list(fig.data[0].x) == ["the", "a", "dog"] and fig.layout.barmode == "group"


def test_training_curves_and_snapshot_player():
    hist = [dict(step=s, train_loss=1 / (s + 1), val_loss=None if s % 2 else 2.0) for s in range(6)]
    fig = viz.loss_curves(hist)
    assert [t.name for t in fig.data] == ["train loss", "validation loss"]
    assert list(fig.data[1].x) == [0, 2, 4]
    snaps = [patterns(2, 3, N, N) for _ in range(4)]
    player = viz.snapshot_player(snaps, [0, 5, 10, 15], TOKENS, layer=1, head=2)
    assert len(player.frames) == 4 and len(player.layout.sliders[0].steps) == 4
    np.testing.assert_allclose(player.frames[3].data[0].z, snaps[3][1, 2])
    np.testing.assert_allclose(player.data[0].z, snaps[0][1, 2])
    df = viz.figure_data(player)
    assert set(df.frame) == {"0", "5", "10", "15"} and len(df) == 4 * N * N


@pytest.mark.parametrize("tokens", [TOKENS, ["[BOS]", "application", "complexities", "it"] * 4])
def test_play_controls_sit_below_the_axis_labels(tokens):
    """The ▶/❚❚ buttons and the slider start below the space the x axis's tick labels (turned
    upright at worst) and title take, and the figure grows by what they need (was: the buttons
    sat 62 px under the plot, over long rotated token labels and the axis title)."""
    from tfviz.viz.theme import BUTTONS_PX, CONTROLS_PX, MARGIN, below_axis_px

    n = len(tokens)
    player = viz.snapshot_player([patterns(1, 1, n, n)] * 3, [0, 1, 2], tokens)
    plain = viz.head_heatmap(patterns(1, 1, n, n)[0, 0], tokens)
    labels = below_axis_px(player.layout.xaxis.ticktext)
    assert labels >= 0.6 * 13 * max(map(len, player.layout.xaxis.ticktext)) + 30
    (buttons,), (slider,) = player.layout.updatemenus, player.layout.sliders
    assert buttons.y == slider.y == 0 and buttons.yanchor == slider.yanchor == "top"  # from the plot's bottom
    assert buttons.pad.t >= labels and slider.pad.t >= buttons.pad.t + BUTTONS_PX
    assert player.layout.margin.b >= slider.pad.t + CONTROLS_PX - BUTTONS_PX
    # the plot itself keeps its size: the figure grew by exactly the extra margin
    assert player.layout.height - plain.layout.height == player.layout.margin.b - MARGIN["b"]


def test_tile_turns_infinities_into_gaps():
    z = tile(np.array([[[[0.0, -np.inf]], [[1.0, 2.0]]]]), gap=1)
    assert z.shape == (1, 5) and np.isnan(z[0, 1]) and np.isnan(z[0, 2]) and z[0, 4] == 2.0
