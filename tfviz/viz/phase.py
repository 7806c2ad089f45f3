"""The induction phase change over training (Olsson et al. 2022): loss at every token index of
fresh repeated sequences at every recorded step, the in-context-learning score, and each head's
induction and previous-token scores, all on one time axis (frames from
``tfviz.analysis.phase.phase_frames``; one frame per model to compare 2 layers with 1)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .theme import HEAD_COLOURS, MAGNITUDE_SCALE, apply_theme


def phase_heatmaps(losses: Mapping[str, pd.DataFrame], *, early: int | None = None,
                   late: int | None = None, title: str | None = None) -> go.Figure:
    """One heatmap per model, side by side on one colour scale: x = training step, y = token
    index of the probe (it predicts the next token), colour = mean next-token loss. Dotted
    lines mark the ICL score's early and late indices."""
    if not losses:
        raise ValueError("phase_heatmaps needs at least one model's loss frame")
    names = list(losses)
    zmax = max(float(np.nanmax(f.to_numpy())) for f in losses.values())
    fig = make_subplots(1, len(names), subplot_titles=names, shared_yaxes=True,
                        horizontal_spacing=0.06)
    for c, name in enumerate(names):
        f = losses[name]
        fig.add_trace(go.Heatmap(
            z=f.to_numpy().T, x=f.index.to_numpy(), y=f.columns.to_numpy(), zmin=0.0, zmax=zmax,
            colorscale=MAGNITUDE_SCALE, reversescale=True, showscale=c == len(names) - 1,
            colorbar=dict(title=dict(text="loss (nats)"), thickness=12, outlinewidth=0),
            hovertemplate=(f"{name}: step %{{x}}, token index %{{y}} → loss %{{z:.4f}} nats"
                           "<extra></extra>")), 1, c + 1)
        for y, what in ((early, "early"), (late, "late")):
            if y is not None:
                fig.add_hline(y=y, line=dict(dash="dot", color="#ef4444", width=1), row=1, col=c + 1,
                              annotation_text=f"{what} ({y})" if c == 0 else None,
                              annotation_position="right")
        fig.update_xaxes(title=dict(text="training step"), row=1, col=c + 1)
    fig.update_yaxes(title=dict(text="token index (predicting the next)"), row=1, col=1)
    return apply_theme(fig, title=title or "Loss at every token index, over training",
                       height=440, width=900)


def phase_timeline(curves: Mapping[str, pd.DataFrame], heads: Mapping[str, pd.DataFrame], *,
                   formed: float | None = None, windows: Mapping[str, tuple[int, int] | None] | None = None,
                   train_loss: Mapping[str, pd.DataFrame] | None = None,
                   title: str | None = None) -> go.Figure:
    """Rows on one step axis: the in-context-learning score of each model (with its training
    loss, ``train_loss``: model -> frame of step, train_loss, on a second axis: the "bump");
    every head's induction score; every head's previous-token score. Models are told apart by
    line style (first solid, second dashed), heads by colour. ``windows``: model -> (start, end)
    of its ICL score's change, shaded; ``formed``: the induction cut-off, dotted."""
    if not curves:
        raise ValueError("phase_timeline needs at least one model")
    fig = make_subplots(3, 1, shared_xaxes=True, vertical_spacing=0.07,
                        specs=[[{"secondary_y": True}], [{}], [{}]],
                        subplot_titles=["ICL score" + (" and training loss" if train_loss else ""),
                                        "induction score per head", "previous-token score per head"])
    dashes = ["solid", "dash", "dot", "dashdot"]
    for m, (name, c) in enumerate(curves.items()):
        dash = dashes[m % len(dashes)]
        fig.add_trace(go.Scatter(
            x=c["step"], y=c["icl"], mode="lines", name=f"{name}: ICL score", legendgroup=name,
            line=dict(color="#111827" if m == 0 else "#6b7280", dash=dash, width=2.5),
            hovertemplate=f"{name}: step %{{x}} → ICL score %{{y:.4f}} nats<extra></extra>"), 1, 1)
        h = (train_loss or {}).get(name)
        if h is not None and len(h):
            fig.add_trace(go.Scatter(
                x=h["step"], y=h["train_loss"], mode="lines", name=f"{name}: training loss",
                legendgroup=name, line=dict(color="#b45309", dash=dash, width=1.5),
                hovertemplate=f"{name}: step %{{x}} → training loss %{{y:.4f}} nats<extra></extra>"),
                1, 1, secondary_y=True)
        h = heads[name]
        for i, (head, g) in enumerate(h.groupby("name", sort=False)):
            colour = HEAD_COLOURS[i % len(HEAD_COLOURS)]
            for row, score in ((2, "induction"), (3, "prev_token")):
                fig.add_trace(go.Scatter(
                    x=g["step"], y=g[score], mode="lines", name=f"{name} {head}", legendgroup=f"{name} {head}",
                    showlegend=row == 2, line=dict(color=colour, dash=dash, width=1.6),
                    hovertemplate=(f"{name} {head}: step %{{x}} → {score.replace('_', '-')} score "
                                   "%{y:.4f}<extra></extra>")), row, 1)
        w = (windows or {}).get(name)
        if w:  # shaded in every row; named once, inside the top row
            for row in (1, 2, 3):
                fig.add_vrect(x0=w[0], x1=w[1], fillcolor="#f59e0b", opacity=0.14 if m == 0 else 0.07,
                              line_width=0, row=row, col=1)
            if m == 0:
                fig.add_annotation(x=w[1], y=0.98, xref="x", yref="y domain", xanchor="left",
                                   yanchor="top", showarrow=False, font=dict(size=11),
                                   text=f" {name}: ICL 10%→90%, steps {w[0]}-{w[1]}")
    if formed is not None:
        fig.add_hline(y=formed, line=dict(dash="dot", color="#9ca3af"), row=2, col=1,
                      annotation_text=f"induction head: > {formed}", annotation_position="bottom right",
                      annotation_font_size=11)
    fig.update_yaxes(title=dict(text="ICL score (nats)"), row=1, col=1, secondary_y=False)
    if train_loss:
        fig.update_yaxes(title=dict(text="training loss"), row=1, col=1, secondary_y=True,
                         showgrid=False)
    fig.update_yaxes(range=[0, 1.02], row=2, col=1)
    fig.update_yaxes(range=[0, 1.02], row=3, col=1)
    fig.update_xaxes(title=dict(text="training step"), row=3, col=1)
    fig.update_layout(legend=dict(orientation="h", x=0, y=-0.1, yanchor="top", font=dict(size=11)),
                      margin=dict(b=150))
    return apply_theme(fig, title=title or "The phase change, on one time axis", height=820, width=900)


__all__ = ["phase_heatmaps", "phase_timeline"]
