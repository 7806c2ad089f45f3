"""Attention across layers: each layer's raw pattern beside attention rollout and attention flow
(``tfviz.analysis.rollout``), as ONE tiled heatmap — tile rows = method, tile columns = layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .theme import apply_theme, attention_colour, default_tokens, position_labels, show_token
from .tiles import tiled_heatmap

# Plain-language names for the rows, in the order they are drawn (others keep their key).
METHOD_NAMES = {
    "raw": "this layer only (heads averaged)",
    "residual": "this layer + residual (0.5·A + 0.5·I)",
    "rollout": "rollout: all layers so far, multiplied",
    "flow": "flow: max-flow through all layers so far",
}


# Short names beside the tile rows (rotated, a tile's height long); the hover names them in full.
SHORT_NAMES = {"raw": "this layer", "residual": "layer + residual", "rollout": "rollout", "flow": "flow"}
TOKEN_FONT_PX = 11
GRID_PLOT_PX = 330  # the tiles' width on a 1024 px screen: where token labels must not crowd


def across_layers_grid(views: Mapping[str, np.ndarray], tokens: Sequence[str], *,
                       title: str = "Where each position's information comes from, layer by layer",
                       gap: int = 2):
    """``views``: name -> ``[layer, q_pos, k_pos]`` (``tfviz.analysis.rollout.across_layers``'s
    dict; ``None`` values are skipped) as one tiled heatmap: one tile row per view, one tile
    column per layer; inside a tile y = the position (query) after that layer, x = the input token
    (key). Every tile row has its positions' tokens on the left, every tile column its input
    tokens below (every k-th where they would crowd at 1024 px), the layer above it and the view
    beside it. Colour 0..1 (the attention scale); hover names view, layer, both tokens and the
    exact share."""
    names = [k for k, v in views.items() if v is not None]
    if not names:
        raise ValueError("nothing to draw: every view is None")
    blocks = np.stack([np.asarray(views[k], dtype=np.float32) for k in names])
    if blocks.ndim != 4 or blocks.shape[-1] != blocks.shape[-2]:
        raise ValueError(f"each view must be [layer, q_pos, k_pos], got {blocks.shape[1:]}")
    n_views, n_layers, n, _ = blocks.shape
    tokens = default_tokens(n, tokens)
    rows = [METHOD_NAMES.get(k, k) for k in names]
    cols = [f"after layer {l}" for l in range(n_layers)]
    inner_y, inner_x = position_labels(tokens, "position"), position_labels(tokens, "input")
    trace, xaxis, yaxis = tiled_heatmap(
        blocks, rows, cols, inner_y, inner_x, colour=attention_colour("share"), gap=gap, name="share",
        hovertemplate="%{y}<br>%{x}<br>share %{z:.4f}<extra></extra>")
    short = [f"{i} {show_token(_cut(t, 8))}" for i, t in enumerate(tokens)]
    label_px = int(0.62 * TOKEN_FONT_PX * max(len(s) for s in short)) + 10
    cell_y = 18  # px per position: a token label each
    step_x = max(1, -(-(TOKEN_FONT_PX + 3) * n_layers * (n + gap) // GRID_PLOT_PX))

    def ticks(tile_names, inner, step=1):
        vals = [f"{t} · {lab}" for t in tile_names for lab in inner[::step]]
        return dict(tickmode="array", tickvals=vals, ticktext=short[::step] * len(tile_names),
                    tickfont=dict(size=TOKEN_FONT_PX))

    fig = go.Figure(trace)
    fig.update_layout(
        xaxis=dict(xaxis, side="bottom", tickangle=-90, title=dict(text="input token"),
                   **ticks(cols, inner_x, step_x)),
        yaxis=dict(yaxis, **ticks(rows, inner_y)),
        margin=dict(t=100, l=label_px + 40, b=label_px + 50))
    for t, col in enumerate(cols):  # the layer above each tile column
        fig.add_annotation(x=f"{col} · {inner_x[n // 2]}", y=1, xref="x", yref="paper", yanchor="bottom",
                           yshift=4, text=f"<b>{col}</b>", showarrow=False)
    for r, (key, row) in enumerate(zip(names, rows)):  # the view beside each tile row
        fig.add_annotation(x=0, xref="paper", y=f"{row} · {inner_y[n // 2]}", yref="y", xanchor="right",
                           xshift=-label_px, textangle=-90, showarrow=False,
                           text=f"<b>{SHORT_NAMES.get(key, key)}</b>")
    c = max(6, min(22, 900 // max(n_layers * (n + gap), 1)))
    return apply_theme(fig, title=title, width=n_layers * (n + gap) * c + 330,
                       height=n_views * (n + gap) * cell_y + 2 * label_px + 150)


def _cut(word: str, n: int) -> str:
    return word if len(word) <= n else word[:n - 1] + "…"


def inputs_bar(shares: Mapping[str, np.ndarray], tokens: Sequence[str], *, position: int,
               title: str | None = None):
    """Grouped bars: for one ``position`` (after the last layer), the share of each input token
    under each method (``shares``: name -> ``[k_pos]``). Hover: method, token, exact share."""
    tokens = default_tokens(len(next(iter(shares.values()))), tokens)
    labels = position_labels(tokens, "input")
    fig = go.Figure()
    for k, v in shares.items():
        v = np.asarray(v, dtype=float)
        fig.add_bar(x=labels, y=v, name=METHOD_NAMES.get(k, k),
                    hovertemplate=f"{METHOD_NAMES.get(k, k)}<br>%{{x}}<br>share %{{y:.4f}}"
                                  "<extra></extra>")
    fig.update_xaxes(title=dict(text="input token"), type="category")
    fig.update_yaxes(title=dict(text="share of the position's information"), rangemode="tozero")
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.35))
    return apply_theme(fig, title=title or f"Inputs of position {position} "
                       f"('{show_token(tokens[position])}') after the last layer", height=460)


__all__ = ["METHOD_NAMES", "across_layers_grid", "inputs_bar"]
