"""Figures for what a TransformerLens user reaches for next: effects with their intervals,
attribution patching against real patching, path patching and composition scores over the
heads, a head's singular values, and what one head writes at each position.

Arrays in, figures out (no torch, no model): the numbers come from ``tfviz.analysis.spread``,
``attribution``, ``paths``, ``weights`` and ``decompose``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme, cell_size, diverging_colour, show_token

_GREY = "#9ca3af"


def effect_intervals(names: Sequence[str], change, lo, hi, *, metric: str, n: int,
                     clear=None, how: str = "95% interval", title: str | None = None):
    """One point per variant (e.g. per head switched off): the mean change of ``metric`` with its
    interval [``lo``, ``hi``] as an error bar; ``clear`` (the interval leaves out 0) in colour, the
    others grey. Sorted as given."""
    c, l, h = (np.asarray(v, dtype=float) for v in (change, lo, hi))
    clear = (l > 0) | (h < 0) if clear is None else np.asarray(clear, dtype=bool)
    fig = go.Figure()
    for flag, name, colour in ((True, "interval leaves out no change", HEAD_COLOURS[0]),
                               (False, "interval includes no change", _GREY)):
        idx = [i for i in range(len(c)) if bool(clear[i]) == flag]
        if not idx:
            continue
        fig.add_trace(go.Scatter(
            x=[names[i] for i in idx], y=c[idx], mode="markers", name=name,
            marker=dict(size=9, color=colour),
            error_y=dict(type="data", symmetric=False, array=h[idx] - c[idx], arrayminus=c[idx] - l[idx],
                         color=colour, thickness=1.5),
            customdata=np.stack([l[idx], h[idx]], axis=-1),
            hovertemplate=(f"%{{x}}: Δ {metric} %{{y:+.4g}} ({how} %{{customdata[0]:+.4g}} to "
                           f"%{{customdata[1]:+.4g}}, n = {n})<extra></extra>")))
    fig.add_hline(y=0, line=dict(color="#6b7280", width=1))
    fig.update_xaxes(type="category", title=dict(text="switched off"), tickangle=-45,
                     categoryorder="array", categoryarray=list(names))
    fig.update_yaxes(title=dict(text=f"Δ {metric}"))
    fig.update_layout(legend=dict(orientation="h", y=-0.3))
    return apply_theme(fig, title=title or f"Each change with its {how} over {n} examples",
                       height=420, width=max(560, 26 * len(c) + 180))


def estimate_vs_real(labels: Sequence[str], estimate, real, *, metric: str,
                     correlation: float | None = None, title: str | None = None):
    """Attribution patching (x, from gradients) against real patching (y), one point per site,
    with the line y = x: on it the gradient estimate is exact."""
    e, r = np.asarray(estimate, dtype=float).ravel(), np.asarray(real, dtype=float).ravel()
    labels = [str(s) for s in labels]
    lim = float(max(np.abs(e).max(initial=0), np.abs(r).max(initial=0))) or 1.0
    fig = go.Figure([
        go.Scatter(x=[-lim, lim], y=[-lim, lim], mode="lines", name="estimate = real",
                   line=dict(dash="dash", color=_GREY), hoverinfo="skip"),
        go.Scatter(x=e, y=r, mode="markers", name="site", text=labels,
                   marker=dict(size=8, color=HEAD_COLOURS[0]),
                   hovertemplate=f"%{{text}}: estimated Δ {metric} %{{x:+.4g}}, real %{{y:+.4g}}<extra></extra>")])
    # short axis titles (the metric is in the hover and the page's text): readable in half a page
    fig.update_xaxes(title=dict(text="estimated Δ (gradient)"))
    fig.update_yaxes(title=dict(text="real Δ (patched)"))
    fig.update_layout(legend=dict(orientation="h", y=-0.22))
    r_text = "" if correlation is None or not np.isfinite(correlation) else f" (r = {correlation:.2f})"
    return apply_theme(fig, title=title or f"Attribution patching vs real patching{r_text}",
                       height=440, width=560)


def singular_values(qk, ov, *, head: str, title: str | None = None):
    """A head's QK and OV singular values, largest first (how many directions each really uses)."""
    qk, ov = np.asarray(qk, dtype=float), np.asarray(ov, dtype=float)
    fig = go.Figure([go.Bar(x=list(range(1, len(v) + 1)), y=v, name=name, marker_color=HEAD_COLOURS[i],
                            hovertemplate=f"{name} singular value %{{x}}: %{{y:.4g}}<extra></extra>")
                     for i, (name, v) in enumerate((("QK", qk), ("OV", ov)))])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.22))
    fig.update_xaxes(title=dict(text="singular value (largest first)"), dtick=1)
    fig.update_yaxes(title=dict(text="size"))
    return apply_theme(fig, title=title or f"{head}: singular values of QK and OV", height=380, width=560)


def head_value_heatmap(values, *, what: str, hover: str = "{name}: {value:+.4g}",
                       selected: tuple[int, int] | None = None, title: str | None = None,
                       limit: float | None = None, zero_centred: bool = True):
    """Any number per head, layer x head (NaN = not applicable, left blank); ``hover`` formats
    each cell from ``name`` ("L1H2") and ``value``; ``selected`` (layer, head) outlined."""
    z = np.asarray(values, dtype=float)
    L, H = z.shape
    text = [[("not applicable" if not np.isfinite(z[l, h]) else hover.format(name=f"L{l}H{h}", value=z[l, h]))
             for h in range(H)] for l in range(L)]
    colours = diverging_colour(z, what, limit) if zero_centred else dict(
        colorscale="Blues", zmin=0.0, zmax=float(np.nanmax(z)) if np.isfinite(z).any() else 1.0,
        colorbar=dict(title=dict(text=what), thickness=12, outlinewidth=0))
    fig = go.Figure(go.Heatmap(z=z, x=[f"head {h}" for h in range(H)], y=[f"layer {l}" for l in range(L)],
                               text=text, hovertemplate="%{text}<extra></extra>", name=what, xgap=1, ygap=1,
                               **colours))
    if selected is not None:
        l, h = selected
        fig.add_shape(type="rect", x0=h - 0.5, x1=h + 0.5, y0=l - 0.5, y1=l + 0.5, line=dict(color="#111827", width=3))
    fig.update_yaxes(autorange="reversed", title=dict(text="layer"))
    fig.update_xaxes(title=dict(text="head"), side="bottom")
    size = cell_size(max(L, H), lo=22, hi=44, target=520)
    return apply_theme(fig, title=title or what, height=max(260, 150 + size * L), width=max(420, 180 + size * H))


def head_writes(tokens: Sequence[str], dla, norms, answers: Sequence[str], *, head: str,
                title: str | None = None):
    """What one head writes at each position: bars = its direct logit attribution to the model's
    own answer there over its runner-up (``answers[i]`` says which), hover = also its output's norm."""
    d, nrm = np.asarray(dla, dtype=float), np.asarray(norms, dtype=float)
    labels = [f"{i} {show_token(t)}" for i, t in enumerate(tokens)]
    colours = [HEAD_COLOURS[0] if v >= 0 else HEAD_COLOURS[1] for v in d]
    fig = go.Figure(go.Bar(x=labels, y=d, marker_color=colours, name=f"{head}'s direct effect",
                           customdata=np.stack([nrm, np.array(answers, dtype=object)], axis=-1),
                           hovertemplate=("%{x}: %{y:+.4f} toward %{customdata[1]} (its output's norm "
                                          "%{customdata[0]:.3f})<extra></extra>")))
    fig.update_xaxes(type="category", tickangle=-45, title=dict(text="position"))
    fig.update_yaxes(title=dict(text="logit of the answer − runner-up"))
    return apply_theme(fig, title=title or f"What {head} writes at each position, read by the unembedding",
                       height=400, width=max(560, 40 * len(d) + 160))


__all__ = ["effect_intervals", "estimate_vs_real", "head_value_heatmap", "head_writes", "singular_values"]
