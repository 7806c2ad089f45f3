"""Attention sinks and streaming (Xiao et al. 2023): each head's share of attention on the first
tokens, and the loss per position under dense attention, a sliding window, the window plus the
first tokens, and recomputation (frames from ``tfviz.analysis.sinks``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .theme import HEAD_COLOURS, apply_theme, attention_colour

SMOOTH = 16  # positions averaged per point of the loss curves
LABEL_BG = "rgba(255, 255, 255, 0.85)"  # behind a line label: another line it crosses stays legible


def sink_share_heatmap(shares: pd.DataFrame, first: tuple[int, ...] = (1, 4), *,
                       title: str | None = None) -> go.Figure:
    """One heatmap per k in ``first``: layer (rows) x head (columns), the mean attention weight
    on the first k positions (``shares`` from ``sink_shares``: layer, head, share_k, even_k).
    Hover: the exact share and what spreading evenly over the visible keys would give."""
    need = {"layer", "head", *(f"share_{k}" for k in first), *(f"even_{k}" for k in first)}
    if need - set(shares.columns):
        raise ValueError(f"sink_share_heatmap needs columns {sorted(need - set(shares.columns))}")
    L, H = int(shares["layer"].max()) + 1, int(shares["head"].max()) + 1
    names = ["position 0" if k == 1 else f"positions 0-{k - 1}" for k in first]
    fig = make_subplots(1, len(first), subplot_titles=[f"share on {n}" for n in names],
                        horizontal_spacing=0.12)
    for c, k in enumerate(first):
        z = np.full((L, H), np.nan)
        even = np.full((L, H), np.nan)
        for r in shares.itertuples():
            z[r.layer, r.head] = getattr(r, f"share_{k}")
            even[r.layer, r.head] = getattr(r, f"even_{k}")
        fig.add_trace(go.Heatmap(
            z=z, x=[f"H{h}" for h in range(H)], y=[f"L{l}" for l in range(L)], customdata=even,
            text=np.round(z, 2), texttemplate="%{text}", **attention_colour("share"),
            showscale=c == len(first) - 1,
            hovertemplate=(f"%{{y}}%{{x}}: %{{z:.4f}} of its attention on {names[c]} "
                           "(spread evenly: %{customdata:.4f})<extra></extra>")), 1, c + 1)
        fig.update_yaxes(autorange="reversed", title=dict(text="layer") if c == 0 else None, row=1, col=c + 1)
        fig.update_xaxes(title=dict(text="head"), row=1, col=c + 1)
    return apply_theme(fig, title=title or "Where attention parks: share on the first tokens",
                       height=160 + 60 * L, width=800)


def streaming_curves(curves: pd.DataFrame, *, train_length: int, window: int,
                     smooth: int = SMOOTH, title: str | None = None) -> go.Figure:
    """Loss per position, one line per condition (``curves`` from ``streaming_losses``:
    condition, label, position, loss). Each point is the mean over ``smooth`` consecutive
    positions (hover: that mean and the position's own loss); dotted vertical lines mark the
    first eviction (position w + 1) and the training length."""
    if {"condition", "label", "position", "loss"} - set(curves.columns):
        raise ValueError("streaming_curves needs columns condition, label, position, loss")
    fig = go.Figure()
    dashes = {"dense": "dot", "recompute": "dash"}
    for i, (c, g) in enumerate(curves.groupby("condition", sort=False)):
        g = g.sort_values("position")
        raw = g["loss"].to_numpy(dtype=float)
        sm = pd.Series(raw).rolling(smooth, min_periods=1).mean().to_numpy()
        fig.add_trace(go.Scatter(
            x=g["position"].to_numpy(), y=sm, mode="lines", name=str(g["label"].iloc[0]),
            line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], width=2,
                      dash=dashes.get(c.split()[0], "solid")),
            customdata=raw, hovertemplate=(f"{g['label'].iloc[0]}: position %{{x}}, mean of the "
                                           f"last {smooth} positions %{{y:.3f}} nats "
                                           "(this position %{customdata:.3f})<extra></extra>")))
    fig.add_vline(x=window + 0.5, line=dict(dash="dot", color="#9ca3af"),
                  annotation=dict(text=f"first eviction (window {window})", font=dict(size=11), bgcolor=LABEL_BG),
                  annotation_position="top right")
    # the two labels at opposite ends of their lines: w and L are often close on a long axis, and
    # a shift of a few pixels stopped keeping them apart once the type grew (the Lesson presents)
    fig.add_vline(x=train_length - 0.5, line=dict(dash="dash", color="#6b7280"),
                  annotation=dict(text=f"training length {train_length}", font=dict(size=11), bgcolor=LABEL_BG),
                  annotation_position="bottom right")
    fig.update_xaxes(title=dict(text="position in the text (it predicts the next token)"),
                     range=[0, float(curves["position"].max())])
    fig.update_yaxes(title=dict(text=f"loss (nats), mean of {smooth}"))
    # the legend at the figure's bottom edge (the margin grows to hold it): placed under the plot
    # by a fraction of its height, three rows of long labels ran into the position axis once a
    # presented figure's height was capped; beside it, they took half of a 1024 px plot's width
    fig.update_layout(legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"))
    return apply_theme(fig, title=title or "Loss per position far past the training length",
                       height=520, width=900)


__all__ = ["SMOOTH", "sink_share_heatmap", "streaming_curves"]
