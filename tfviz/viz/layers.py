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


def across_layers_grid(views: Mapping[str, np.ndarray], tokens: Sequence[str], *,
                       title: str = "Where each position's information comes from, layer by layer",
                       gap: int = 1):
    """``views``: name -> ``[layer, q_pos, k_pos]`` (``tfviz.analysis.rollout.across_layers``'s
    dict; ``None`` values are skipped) as one tiled heatmap: one tile row per view, one tile
    column per layer; inside a tile y = the position (query) after that layer, x = the input token
    (key). Colour 0..1 (the attention scale); hover names view, layer, both tokens and the exact
    share."""
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
    trace, xaxis, yaxis = tiled_heatmap(
        blocks, rows, cols, position_labels(tokens, "position"),
        position_labels(tokens, "input"), colour=attention_colour("share"), gap=gap, name="share",
        hovertemplate="%{y}<br>%{x}<br>share %{z:.4f}<extra></extra>")
    fig = go.Figure(trace)
    fig.update_layout(
        xaxis=dict(xaxis, side="top", title=dict(text="layer (input token within a tile)")),
        yaxis=dict(yaxis, title=dict(text="method (position within a tile)")), margin=dict(t=110))
    c = max(6, min(22, 900 // max(n_layers * (n + gap), 1)))
    return apply_theme(fig, title=title, width=n_layers * (n + gap) * c + 330,
                       height=n_views * (n + gap) * c + 170)


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
