"""Score biases that encode position: ALiBi (Press et al. 2021, −m_h·|i − j|) and T5's bucketed
relative bias (Raffel et al. 2020). Inputs: ``alibi_bias`` / ``t5_bias [head, q_pos, k_pos]``,
``alibi_slopes [head]``, ``t5_buckets [q_pos, k_pos]`` from ``tfviz.positional_tables``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .theme import ATTENTION_SCALE, apply_theme, cell_size, diverging_colour, tick_step
from .tiles import tiled_heatmap


def head_tiles(bias, tile_names: Sequence[str], *, title: str, colour_title: str = "bias",
               per_head: bool = False):
    """``bias [head, q_pos, k_pos]`` as one row of tiles (one per head), diverging around 0.
    Inside a tile y = q_pos, x = k_pos; hover "H2 (m=0.25) · key pos 3" and the exact value.
    ``per_head``: each tile coloured on its own scale (the bias ÷ that head's largest |bias|), for
    heads whose ranges differ by orders of magnitude; the hover still shows the true value."""
    b = np.asarray(bias, dtype=float)
    if b.ndim == 2:
        b = b[None]
    if b.ndim != 3:
        raise ValueError(f"expected [head, q_pos, k_pos], got shape {b.shape}")
    n_heads, nq, nk = b.shape
    z, hover = b, None
    if per_head:
        peak = np.abs(np.where(np.isfinite(b), b, 0)).max(axis=(1, 2), keepdims=True)
        z, hover = b / np.where(peak > 0, peak, 1.0), b[None]
        colour = diverging_colour(z, f"{colour_title} ÷ the head's largest |{colour_title}|", limit=1.0)
    else:
        colour = diverging_colour(b, colour_title)
    value = "%{customdata:.4f}" if per_head else "%{z:.4f}"
    trace, xaxis, yaxis = tiled_heatmap(
        z[None], [""], list(tile_names), [f"query pos {i}" for i in range(nq)],
        [f"key pos {j}" for j in range(nk)], colour=colour,
        hovertemplate="%{y}<br>%{x}<br>" + colour_title + " " + value + "<extra></extra>",
        name=colour_title, hover_values=hover)
    trace.y = [y.lstrip(" ·") for y in trace.y]  # a single tile row: no row name needed
    step = tick_step(nq, 16)
    yaxis.update(tickvals=list(trace.y[::step]), ticktext=[str(i) for i in range(nq)][::step],
                 title=dict(text="q_pos"))
    fig = go.Figure(trace)
    fig.update_layout(xaxis=dict(xaxis, side="top", title=dict(text="head (k_pos within a tile)")),
                      yaxis=yaxis, margin=dict(t=110))
    c = max(2, min(16, 1100 // max(1, n_heads * (nk + 1))))
    return apply_theme(fig, title=title, height=nq * c + 190, width=n_heads * (nk + 1) * c + 220)


def alibi_bias(bias, slopes=None, *, title: str = "ALiBi bias per head"):
    """ALiBi's additive bias ``[head, q_pos, k_pos]`` = −m_h·|i − j|, one tile per head labelled
    with its slope m_h. Steep heads (large m) look only nearby; gentle heads see far. The slopes
    halve (or more) from head to head, so one shared colour scale left the gentle heads blank:
    each tile has its own scale (the colour is the bias ÷ that head's largest |bias|)."""
    b = np.asarray(bias, dtype=float)
    names = [f"H{h}" if slopes is None else f"H{h} (m={float(slopes[h]):.4g})"
             for h in range(b.shape[0] if b.ndim == 3 else 1)]
    return head_tiles(b, names, title=title, per_head=True)


def t5_bias(bias, *, title: str = "T5 relative bias per head"):
    """T5's learned bias ``[head, q_pos, k_pos]`` (one learned scalar per bucket and head, looked up
    by the bucket of k − q), one tile per head."""
    b = np.asarray(bias, dtype=float)
    return head_tiles(b, [f"H{h}" for h in range(b.shape[0] if b.ndim == 3 else 1)], title=title)


def t5_buckets(buckets, *, title: str = "T5 relative-position buckets"):
    """Heatmap ``buckets [q_pos, k_pos]``: the bucket id of the relative position k − q; y = q_pos,
    x = k_pos. Near distances get a bucket each, far ones share log-spaced buckets."""
    b = np.asarray(buckets)
    nq, nk = b.shape
    rel = np.arange(nk)[None, :] - np.arange(nq)[:, None]  # k − q
    fig = go.Figure(go.Heatmap(
        z=b.astype(float), x=list(range(nk)), y=list(range(nq)), customdata=rel, name="bucket",
        colorscale=ATTENTION_SCALE, zmin=0, zmax=max(1.0, float(b.max())),
        colorbar=dict(title=dict(text="bucket"), thickness=12, outlinewidth=0),
        hovertemplate="query pos %{y} → key pos %{x} (k − q = %{customdata}): bucket %{z}"
                      "<extra></extra>"))
    fig.update_xaxes(title=dict(text="k_pos"), showgrid=False)
    fig.update_yaxes(title=dict(text="q_pos"), autorange="reversed", showgrid=False)
    c = cell_size(max(nq, nk), lo=3, hi=20)
    return apply_theme(fig, title=title, height=nq * c + 170, width=nk * c + 230)
