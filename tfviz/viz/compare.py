"""Models side by side: loss or accuracy per position (one line per model), and the head-role
table's differences as a grid (one tile per model, a cell per head, its label as text)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme


def position_curves(df: pd.DataFrame, *, value: str = "loss", train_length: int | None = None,
                    model: str = "model", title: str | None = None):
    """One line per model: x = position of the target token, y = ``value`` (mean "loss" in
    nats, or "accuracy") over the examples with a target there (``df``: model, position, value,
    tokens — ``tfviz.analysis.compare.position_frame``). A dashed line marks ``train_length``."""
    missing = {model, "position", value, "tokens"} - set(df.columns)
    if missing:
        raise ValueError(f"position_curves needs columns {sorted(missing)}")
    is_loss = value == "loss"
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(model, sort=False)):
        g = g.sort_values("position")
        fig.add_trace(go.Scatter(
            x=g["position"].to_numpy(), y=g[value].to_numpy(dtype=float),
            mode="lines+markers" if len(g) < 40 else "lines", name=str(name),
            line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], width=2.2),
            customdata=g["tokens"].to_numpy(),
            hovertemplate=f"{name}: position %{{x}} → {value} %{{y:.4f}} "
                          "(%{customdata} target tokens)<extra></extra>"))
    if train_length is not None:
        fig.add_vline(x=train_length - 0.5, line=dict(dash="dash", color="#9ca3af"),
                      annotation_text=f"training length {train_length}",
                      annotation_position="top right")
    fig.update_xaxes(title=dict(text="position of the predicted token"))
    fig.update_yaxes(title=dict(text="loss (nats)" if is_loss else "accuracy"), rangemode="tozero",
                     **({} if is_loss else {"range": [0, 1.02]}))
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title or f"{'Loss' if is_loss else 'Accuracy'} per position",
                       height=420, width=800)


def head_role_grid(wide: pd.DataFrame, models: Sequence[str], *,
                   title: str = "Head roles: where the models differ"):
    """One tile per model (side by side), a cell per head (rows = layer, columns = head) with
    its role label written in it; cells whose labels differ between the models are coloured,
    the others grey (``wide``: layer, head, one label column per model, differs —
    ``tfviz.analysis.compare.head_roles``)."""
    missing = {"layer", "head", "differs", *models} - set(wide.columns)
    if missing:
        raise ValueError(f"head_role_grid needs columns {sorted(missing)}")
    n_layers = int(wide["layer"].max()) + 1
    n_heads = int(wide["head"].max()) + 1
    step = n_heads + 1  # one empty column between the models' tiles
    z = np.full((n_layers, len(models) * step - 1), np.nan)
    text = np.full(z.shape, "", dtype=object)
    hover = np.full(z.shape, "", dtype=object)
    for row in wide.to_dict("records"):
        l, h = int(row["layer"]), int(row["head"])
        for m, name in enumerate(models):
            label, c = row[name], m * step + h
            z[l, c] = 1.0 if row["differs"] else 0.0
            text[l, c] = label or "—"
            hover[l, c] = (f"{name}: L{l}H{h} {label or '(no such head)'}"
                           f"{' — differs' if row['differs'] else ' — same in every model'}")
    fig = go.Figure(go.Heatmap(
        z=z, text=text, texttemplate="%{text}", customdata=hover,
        hovertemplate="%{customdata}<extra></extra>", showscale=False,
        colorscale=[[0, "#e5e7eb"], [1, HEAD_COLOURS[1]]], zmin=0, zmax=1, xgap=2, ygap=2))
    fig.update_xaxes(tickvals=[m * step + (n_heads - 1) / 2 for m in range(len(models))],
                     ticktext=[str(m) for m in models], title=dict(text="model (one column per head)"),
                     showgrid=False, zeroline=False)
    fig.update_yaxes(tickvals=list(range(n_layers)), ticktext=[f"layer {l}" for l in range(n_layers)],
                     autorange="reversed", showgrid=False, zeroline=False)
    return apply_theme(fig, title=title, height=160 + 60 * n_layers, width=800)
