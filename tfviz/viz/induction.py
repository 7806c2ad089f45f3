"""Induction, position by position: loss or accuracy on the repeated tokens at each query
position, one line per model, with the longest training sequence and chance marked."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme


def repeat_by_position(df: pd.DataFrame, *, train_length: int | None = None,
                       chance: float | None = None, value: str = "loss_repeat",
                       model: str = "model", title: str | None = None):
    """One line per model: x = query position p (it predicts token p+1), y = ``value`` — the mean
    loss (``loss_repeat``) or accuracy (``accuracy_repeat``) on the repeated tokens at that
    position, over the fresh sequences in which p is a repeat (``df`` columns: model, position,
    n_repeat, value; NaN where none is). A dashed vertical line marks the longest training
    sequence (to its right: positions no training sequence reached); for loss, a dotted
    horizontal line marks chance (guessing among the symbols)."""
    missing = {model, "position", "n_repeat", value} - set(df.columns)
    if missing:
        raise ValueError(f"repeat_by_position needs columns {sorted(missing)}")
    is_loss = value.startswith("loss")
    label = "loss on repeated tokens (nats)" if is_loss else "accuracy on repeated tokens"
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(model, sort=False)):
        g = g.sort_values("position")
        fig.add_trace(go.Scatter(
            x=g["position"].to_numpy(), y=g[value].to_numpy(dtype=float), mode="lines",
            name=str(name), line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], width=2.5),
            customdata=g["n_repeat"].to_numpy(), connectgaps=False,
            hovertemplate=(f"{name}: position %{{x}} → {'loss' if is_loss else 'accuracy'} "
                           "%{y:.4f} (%{customdata} repeated tokens)<extra></extra>")))
    if train_length is not None:
        fig.add_vline(x=train_length - 0.5, line=dict(dash="dash", color="#9ca3af"),
                      annotation_text=f"longest training sequence ({train_length} tokens)",
                      annotation_position="top right")
    if chance is not None and is_loss:
        fig.add_hline(y=chance, line=dict(dash="dot", color="#6b7280"),
                      annotation_text=f"chance {chance:.2f}", annotation_position="bottom left")
    fig.update_xaxes(title=dict(text="position in the sequence (query)"))
    fig.update_yaxes(title=dict(text=label), rangemode="tozero",
                     **({} if is_loss else {"range": [0, 1.02]}))
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title or label, height=420, width=800)


def repeat_floor_curves(df: pd.DataFrame, *, model: str = "model", title: str | None = None):
    """Repeats inside the repeated part: x = |r| of fresh [BOS] r r (r drawn with replacement),
    y = each model's mean loss on the repeat (``df``: model, half, loss, floor; one row per
    model and |r|) beside the floor (dashed: a perfect copier splitting its bet among the tokens
    that followed each token in the first half, ``tfviz.analysis.induction.repeat_floor``)."""
    missing = {model, "half", "loss", "floor"} - set(df.columns)
    if missing:
        raise ValueError(f"repeat_floor_curves needs columns {sorted(missing)}")
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(model, sort=False)):
        g = g.sort_values("half")
        fig.add_trace(go.Scatter(x=g["half"].to_numpy(), y=g["loss"].to_numpy(dtype=float),
                                 mode="lines+markers", name=str(name),
                                 line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], width=2.5),
                                 hovertemplate=f"{name}: |r| %{{x}} → loss %{{y:.4f}}<extra></extra>"))
    floor = df.drop_duplicates("half").sort_values("half")
    fig.add_trace(go.Scatter(x=floor["half"].to_numpy(), y=floor["floor"].to_numpy(dtype=float),
                             mode="lines+markers", name="floor: a perfect copier of the first half's bigrams",
                             line=dict(color="#111827", dash="dash"),
                             hovertemplate="|r| %{x} → floor %{y:.4f}<extra></extra>"))
    fig.update_xaxes(title=dict(text="|r| (tokens in the repeated part, drawn with replacement)"))
    fig.update_yaxes(title=dict(text="loss on the repeat (nats)"), rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title or "Repeats inside r: loss on the repeat vs the floor",
                       height=420, width=800)
