"""Scores as bars: per-head scores of several models side by side (``head_score_bars``), and a
two-series bar chart of measured numbers, e.g. KV bytes and loss per attention variant
(``paired_bars``)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme


def head_score_bars(df: pd.DataFrame, score: str, *, model: str = "model",
                    threshold: float | None = None, title: str | None = None):
    """Grouped bars: x = head ("L{layer}H{head}"), y = ``score`` in 0..1, one colour per model
    (``df`` columns: model, layer, head, score). ``threshold`` draws a dashed line (e.g. the
    0.4 above which a head is labelled)."""
    missing = {model, "layer", "head", score} - set(df.columns)
    if missing:
        raise ValueError(f"head_score_bars needs columns {sorted(missing)}")
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(model, sort=False)):
        x = [f"L{int(l)}H{int(h)}" for l, h in zip(g["layer"], g["head"])]
        fig.add_trace(go.Bar(x=x, y=g[score].to_numpy(dtype=float), name=str(name),
                             marker_color=HEAD_COLOURS[i % len(HEAD_COLOURS)],
                             hovertemplate=f"{name} %{{x}}: {score} %{{y:.3f}}<extra></extra>"))
    if threshold is not None:
        fig.add_hline(y=threshold, line=dict(dash="dash", color="#6b7280"),
                      annotation_text=f"{threshold:g}", annotation_position="top left")
    fig.update_xaxes(title=dict(text="layer · head"), type="category")
    fig.update_yaxes(title=dict(text=score.replace("_", " ")), range=[0, 1.05])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title or f"{score.replace('_', ' ')} per head", height=420,
                       width=800)


def paired_bars(labels: Sequence[str], left: Sequence[float], right: Sequence[float], *,
                left_name: str, right_name: str, title: str):
    """Two measured quantities per item on two y-axes (left bars, right markers), both from 0
    so small differences are not blown up."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=list(labels), y=np.asarray(left, dtype=float), name=left_name,
                         marker_color=HEAD_COLOURS[0],
                         hovertemplate=f"%{{x}}: {left_name} %{{y:.4g}}<extra></extra>"))
    fig.add_trace(go.Scatter(x=list(labels), y=np.asarray(right, dtype=float), name=right_name,
                             yaxis="y2", mode="markers+lines", marker=dict(size=12),
                             line=dict(color=HEAD_COLOURS[1]),
                             hovertemplate=f"%{{x}}: {right_name} %{{y:.4g}}<extra></extra>"))
    fig.update_layout(yaxis=dict(title=dict(text=left_name), rangemode="tozero"),
                      yaxis2=dict(title=dict(text=right_name), overlaying="y", side="right",
                                  showgrid=False, rangemode="tozero"),
                      legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title, height=380, width=700)
