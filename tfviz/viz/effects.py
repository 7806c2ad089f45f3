"""Does a head matter? Figures of interventions: the effect of switching each head off (a layer x
head heatmap), pattern vs effect (where a head looks against what removing it does), patching
per layer x position, the logit lens and direct logit attribution.

Arrays in, figures out (no torch, no model): the numbers come from ``tfviz.analysis
.interventions`` / ``effects`` / ``attribution``.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme, attention_colour, cell_size, diverging_colour, show_token, titled


def _head_labels(L: int, H: int) -> tuple[list[str], list[str]]:
    return [f"head {h}" for h in range(H)], [f"layer {l}" for l in range(L)]


def effect_heatmap(change, *, metric: str, baseline: float, higher: bool = True,
                   selected: tuple[int, int] | None = None, title: str | None = None):
    """Layer x head: how ``metric`` changes when that head is switched off (``change`` [layer,
    head] = metric with the head off - ``baseline``). Diverging colours centred on no change;
    the hover gives the exact numbers. ``higher``: whether more of the metric is better (the
    colour bar says which way is worse). ``selected`` (layer, head) is outlined."""
    z = np.asarray(change, dtype=float)
    L, H = z.shape
    x, y = _head_labels(L, H)
    worse = "lower" if higher else "higher"
    text = [[f"L{l}H{h} off: {metric} {baseline + z[l, h]:.4g} (unchanged {baseline:.4g}), "
             f"change {z[l, h]:+.4g}" for h in range(H)] for l in range(L)]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, text=text, hovertemplate="%{text}<extra></extra>",
                               name=f"change of {metric}", xgap=1, ygap=1,
                               **diverging_colour(z, f"Δ {metric}")))
    if selected is not None:
        l, h = selected
        fig.add_shape(type="rect", x0=h - 0.5, x1=h + 0.5, y0=l - 0.5, y1=l + 0.5,
                      line=dict(color="#111827", width=3))
    fig.update_yaxes(autorange="reversed", title=dict(text="layer"))
    fig.update_xaxes(title=dict(text=f"head (switched off; {worse} = worse)"), side="bottom")
    size = cell_size(max(L, H), lo=22, hi=44, target=520)
    titled(fig, title or f"What switching each head off does to {metric}")
    return apply_theme(fig, height=max(260, 150 + size * L + fig.layout.margin.t - 60),
                       width=max(420, 180 + size * H))


def pattern_vs_effect(names: Sequence[str], pattern, change, *, pattern_name: str, metric: str,
                      title: str | None = None, cut: float | None = None):
    """One point per head: x = its pattern score (where it looks), y = the change of ``metric``
    when it is switched off (what it does). Heads far right but on the zero line look at the
    right place and change nothing; heads low on x far from zero do the work unseen. Each point's
    label goes where it overlaps no other label or point (``label_places``); points that lie on
    one another share one label ("L0H3, L1H0"). ``text`` stays each point's own name (hover)."""
    x, y = np.asarray(pattern, dtype=float), np.asarray(change, dtype=float)
    layers = [int(m[1]) if (m := re.search(r"L(\d+)", n)) else 0 for n in names]
    places, labels = label_places(x, y, list(names))
    fig = go.Figure()
    for layer in sorted(set(layers)):
        idx = [i for i, l in enumerate(layers) if l == layer]
        fig.add_trace(go.Scatter(
            x=x[idx], y=y[idx], mode="markers+text", text=[names[i] for i in idx],
            textposition=[places[i] for i in idx], texttemplate=[labels[i] or " " for i in idx],
            textfont=dict(size=12), name=f"layer {layer}", cliponaxis=False,
            marker=dict(size=12, color=HEAD_COLOURS[layer % len(HEAD_COLOURS)]),
            hovertemplate=f"%{{text}}: {pattern_name} %{{x:.3f}}, Δ {metric} %{{y:+.4f}}<extra></extra>"))
    fig.add_hline(y=0, line=dict(color="#6b7280", width=1))
    if cut is not None:
        fig.add_vline(x=cut, line=dict(dash="dash", color="#6b7280"),
                      annotation_text=f"{cut:g}", annotation_position="bottom right")
    fig.update_xaxes(title=dict(text=f"pattern: {pattern_name}"), range=_padded(x))
    fig.update_yaxes(title=dict(text=f"effect: Δ {metric}<br>with the head off"), range=_padded(y))
    fig.update_layout(legend=dict(orientation="h", y=-0.22))
    titled(fig, title or "Pattern vs effect")
    return apply_theme(fig, height=460 + fig.layout.margin.t - 60, width=720)


# The smallest plot area the scatter is drawn in (a 1024 px screen, one chart per row): labels
# placed apart there stay apart on any wider screen.
PLOT_PX = (380, 300)
_PLACES = ("top center", "bottom center", "middle right", "middle left", "top right", "top left",
           "bottom right", "bottom left")


def _padded(v: np.ndarray, pad: float = 0.12) -> list[float]:
    """An axis range around ``v`` with room for the labels at its ends."""
    lo, hi = float(np.nanmin(v)), float(np.nanmax(v))
    span = hi - lo or max(abs(hi), 1.0)
    return [lo - pad * span, hi + pad * span]


def label_places(x, y, names: Sequence[str], *, plot_px: tuple[int, int] = PLOT_PX,
                 font_px: float = 12, marker_px: float = 12) -> tuple[list[str], list[str]]:
    """Where each point's label goes (a Plotly ``textposition``) and what it says, so that no two
    labels and no label and point overlap in a plot of ``plot_px`` (the axes as ``_padded``
    draws them). Points within a marker's width of each other share one label (their names
    joined by ", ", on the first; the others say nothing: ""). Greedy, in order of height, each
    label at the first of ``_PLACES`` that collides with nothing placed so far (else the least
    crowded one)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    (x0, x1), (y0, y1), (w, h) = _padded(x), _padded(y), plot_px
    px = np.stack([(x - x0) / (x1 - x0) * w, (y1 - y) / (y1 - y0) * h], 1)  # screen: y down
    n = len(names)
    groups: list[list[int]] = []
    for i in range(n):
        near = next((g for g in groups if np.abs(px[g[0]] - px[i]).max() < marker_px * 0.75), None)
        if near is None:
            groups.append([i])
        else:
            near.append(i)
    half, char = marker_px / 2 + 1, 0.6 * font_px
    markers = [(cx - half, cy - half, cx + half, cy + half) for cx, cy in px]
    placed: list[tuple[float, float, float, float]] = []
    places, labels = ["top center"] * n, [""] * n
    for g in sorted(groups, key=lambda g: (px[g[0]][1], px[g[0]][0])):
        i, text = g[0], ", ".join(names[j] for j in g)
        bw, bh = char * len(text) + 4, font_px + 4
        cx, cy = px[i]

        def box(place: str) -> tuple[float, float, float, float]:
            vert, horiz = place.split()
            left = {"center": cx - bw / 2, "right": cx + half, "left": cx - half - bw}[horiz]
            top = {"top": cy - half - bh, "bottom": cy + half, "middle": cy - bh / 2}[vert]
            return left, top, left + bw, top + bh

        def clash(b) -> float:
            others = placed + [m for j, m in enumerate(markers) if j not in g]
            return sum(_overlap(b, o) for o in others)

        best = min(_PLACES, key=lambda p: (clash(box(p)) > 0, clash(box(p)), _PLACES.index(p)))
        placed.append(box(best))
        places[i], labels[i] = best, text
        for j in g[1:]:
            places[j] = best
    return places, labels


def _overlap(a, b) -> float:
    """The area two boxes (left, top, right, bottom) share."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def position_effect_heatmap(values, tokens: Sequence[str], *, metric: str, baseline: float,
                            reference: float | None = None, title: str | None = None):
    """Layer x position (activation patching): the metric when that layer's residual stream at
    that position is taken from the other input. With ``reference`` (the metric on the other
    input) the colour is the share of the way from ``baseline`` to it (0 = nothing moved, 1 = all
    of it); without, the change itself."""
    v = np.asarray(values, dtype=float)
    L, T = v.shape
    if reference is not None and abs(reference - baseline) > 1e-12:
        z, bar = (v - baseline) / (reference - baseline), "share restored"
    else:
        z, bar = v - baseline, f"Δ {metric}"
    labels = [f"{i} {show_token(t)}" for i, t in enumerate(tokens)]
    text = [[f"layer {l}, pos {t} '{show_token(tokens[t])}': {metric} {v[l, t]:.4g} "
             f"(unpatched {baseline:.4g}{'' if reference is None else f', other input {reference:.4g}'})"
             for t in range(T)] for l in range(L)]
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=[f"layer {l}" for l in range(L)], text=text,
                               hovertemplate="%{text}<extra></extra>", name=bar, xgap=1, ygap=1,
                               **diverging_colour(z, bar, limit=1.0 if bar == "share restored" else None)))
    fig.update_yaxes(autorange="reversed", title=dict(text="layer"))  # longer, it ran into the title
    fig.update_xaxes(title=dict(text="position"), type="category", tickangle=-45)
    return apply_theme(fig, title=title or "Patching the residual stream, layer x position",
                       height=max(280, 170 + 34 * L), width=max(520, 140 + 30 * T))


def logit_lens_heatmap(probs, top_tokens, tokens: Sequence[str], *, track=None,
                       track_name: str | None = None, title: str | None = None):
    """The logit lens: columns = the residual stream after the embeddings and after each layer,
    rows = positions; each cell shows the token that stream would predict next (``top_tokens``
    [layer + 1, pos] strings) coloured by its probability (``probs`` [layer + 1, pos]). With
    ``track`` [layer + 1, pos], the colour is the probability of ``track_name`` (e.g. the model's
    final answer). Positions run down (a long input makes the chart taller, never its words
    smaller): each word is printed at 12 px, cut with "…" to its cell (the whole in the hover)."""
    p = np.asarray(probs if track is None else track, dtype=float)
    R, T = p.shape
    cols = ["embeddings"] + [f"after layer {l}" for l in range(R - 1)]
    rows = [f"{i} {show_token(t)}" for i, t in enumerate(tokens)]
    what = "top token" if track is None else f"P({track_name})"
    fits = max(3, int((LENS_PLOT_PX / R - 6) / (0.6 * LENS_FONT_PX)))  # characters a cell holds
    text = [[_cut(show_token(top_tokens[r][t]), fits) for r in range(R)] for t in range(T)]
    hover = [[f"{cols[r]}, pos {t} '{show_token(tokens[t])}': top '{show_token(top_tokens[r][t])}' "
              f"p={float(np.asarray(probs)[r, t]):.4f}" + ("" if track is None else f", {what} {p[r, t]:.4f}")
              for r in range(R)] for t in range(T)]
    fig = go.Figure(go.Heatmap(z=p.T, x=cols, y=rows, text=text, texttemplate="%{text}",
                               textfont=dict(size=LENS_FONT_PX), customdata=hover,
                               hovertemplate="%{customdata}<extra></extra>", name=what, xgap=1, ygap=1,
                               **attention_colour(what if track is not None else "p(top)")))
    fig.update_yaxes(autorange="reversed", type="category",
                     title=dict(text="position (predicting the next token)"))
    fig.update_xaxes(type="category", side="top")  # the residual stream read: its names say it
    fig.update_layout(margin=dict(t=90))
    return apply_theme(fig, title=title or "Logit lens: what each layer would predict",
                       height=max(300, 190 + 26 * T), width=max(560, 220 + 110 * R))


LENS_FONT_PX = 12
LENS_PLOT_PX = 330  # the columns' width on a 1024 px screen (the page's width less labels, colour bar)


def _cut(word: str, n: int) -> str:
    return word if len(word) <= n else word[:n - 1] + "…"


def attribution_bars(parts: Sequence[str], values, *, total: float, good: str, bad: str,
                     title: str | None = None):
    """Direct logit attribution: one bar per writer (embeddings, each head, each MLP, biases),
    its share of logit['good'] - logit['bad']; the bars add up to ``total`` (in the title)."""
    v = np.asarray(values, dtype=float)
    colours = [HEAD_COLOURS[0] if x >= 0 else HEAD_COLOURS[1] for x in v]
    fig = go.Figure(go.Bar(x=list(parts), y=v, marker_color=colours, name="contribution",
                           hovertemplate="%{x}: %{y:+.4f}<extra></extra>"))
    fig.update_xaxes(type="category", title=dict(text="writer into the residual stream"))
    fig.update_yaxes(title=dict(text=f"logit '{show_token(good)}' − logit '{show_token(bad)}'"))
    return apply_theme(fig, title=title or f"Direct logit attribution (sum {total:+.3f})",
                       height=400, width=max(560, 30 * len(v) + 160))


def circuit_heatmap(matrix, rows: Sequence[str], cols: Sequence[str], *, kind: str,
                    title: str | None = None):
    """A head's QK (query token x key token: the score before softmax) or OV (attended token x
    output token: the logit it adds) circuit over a small vocabulary."""
    z = np.asarray(matrix, dtype=float)
    ys, xs = [show_token(r) for r in rows], [show_token(c) for c in cols]
    what = "score" if kind == "QK" else "logit added"
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, name=f"{kind} circuit",
                               hovertemplate=f"%{{y}} → %{{x}}: {what} %{{z:.4f}}<extra></extra>",
                               **diverging_colour(z, what)))
    fig.update_yaxes(autorange="reversed", type="category",
                     title=dict(text="query token" if kind == "QK" else "attended token"))
    fig.update_xaxes(type="category", tickangle=-45,
                     title=dict(text="key token" if kind == "QK" else "output token"))
    n = max(len(rows), len(cols))
    size = cell_size(n, lo=14, hi=36, target=520)
    return apply_theme(fig, title=title or f"{kind} circuit", height=160 + size * len(rows),
                       width=200 + size * len(cols))


__all__ = ["attribution_bars", "circuit_heatmap", "effect_heatmap", "label_places", "logit_lens_heatmap",
           "pattern_vs_effect", "position_effect_heatmap"]


def pattern_and_effect(weights, tokens: Sequence[str], candidates: Sequence[str],
                       positions: Sequence[Sequence[int]], heads_off: Sequence[str], probs, *,
                       head: str, query: int, title: str | None = None):
    """Pattern and effect side by side for one sentence. Left: ``head``'s attention from the
    query (``weights`` [k_pos]) over the tokens, the candidates' positions coloured. Right: the
    probability of each candidate's answer (``probs`` [variant, candidate]) with every head on
    and with each of ``heads_off`` (the variants' names: "none" first) switched off."""
    from plotly.subplots import make_subplots

    w, p = np.asarray(weights, dtype=float), np.asarray(probs, dtype=float)
    colours = {int(j): HEAD_COLOURS[(i + 1) % len(HEAD_COLOURS)]
               for i, idx in enumerate(positions) for j in idx}
    labels = [f"{i} {show_token(t)}" for i, t in enumerate(tokens)]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                        subplot_titles=(f"pattern: where {head} looks from '{show_token(tokens[query])}'",
                                        "effect: P(answer) with heads switched off"))
    fig.add_trace(go.Bar(x=labels, y=w, name=f"{head}'s attention", showlegend=False,  # the left
                         marker_color=[colours.get(i, "#9ca3af") for i in range(len(w))],
                         hovertemplate="%{x}: weight %{y:.4f}<extra></extra>"), row=1, col=1)
    names = ["every head on" if n == "none" else f"{n} off" for n in heads_off]
    for c, word in enumerate(candidates):
        colour = HEAD_COLOURS[(c + 1) % len(HEAD_COLOURS)]
        fig.add_trace(go.Bar(x=names, y=p[:, c], name=f"P({word})", marker_color=colour,
                             hovertemplate="%{x}: P(" + show_token(word).replace("%{", "% {")
                             + ") %{y:.4f}<extra></extra>"), row=1, col=2)
    fig.update_xaxes(type="category", tickangle=-45, title=dict(text="key position"), row=1, col=1)
    fig.update_yaxes(range=[0, 1], title=dict(text="attention weight"), row=1, col=1)
    fig.update_yaxes(range=[0, 1], title=dict(text="probability"), row=1, col=2)
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.35,  # the right panel's bars only
                                                   title=dict(text="effect (right): ")))
    return apply_theme(fig, title=title or "Pattern and effect on one sentence", height=460,
                       width=max(760, 300 + 26 * len(tokens)))
