"""Why attention, measured (``tfviz.analysis.longrange`` / ``bottleneck``): accuracy against the
distance a model must carry a symbol, the gradient reaching each earlier position, the longest path
between two positions, accuracy against source length — one line per model, the trained range
shaded, chance marked.

Inputs are tidy DataFrames with a ``model`` column (one row per model and x value), as the
analysis functions return them with ``model`` added.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme

TRAINED_FILL = "rgba(156,163,175,0.18)"


def _need(df: pd.DataFrame, columns: set[str], who: str) -> None:
    missing = columns - set(df.columns)
    if missing:
        raise ValueError(f"{who} needs columns {sorted(missing)}")


def _trained_band(fig: go.Figure, x: pd.Series, trained: pd.Series, what: str) -> None:
    """Shade the x range the models were trained on (rows with ``trained`` True)."""
    inside = x[trained.astype(bool)]
    if len(inside):
        fig.add_vrect(x0=float(inside.min()) - 0.5, x1=float(inside.max()) + 0.5, fillcolor=TRAINED_FILL,
                      line_width=0, layer="below", annotation_text=f"trained {what}",
                      annotation_position="top left")


def _lines(df: pd.DataFrame, x: str, y: str, model: str, hover: str, dash_of=None) -> list[go.Scatter]:
    traces = []
    for i, (name, g) in enumerate(df.groupby(model, sort=False)):
        g = g.sort_values(x)
        traces.append(go.Scatter(
            x=g[x].to_numpy(), y=g[y].to_numpy(dtype=float), mode="lines+markers", name=str(name),
            line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], width=2.5,
                      dash=dash_of(name) if dash_of else None),
            customdata=g[["n"]].to_numpy() if "n" in g else None,
            hovertemplate=f"{name}: {hover}<extra></extra>"))
    return traces


def accuracy_vs_distance(df: pd.DataFrame, *, model: str = "model",
                         title: str = "Remembering across a gap: accuracy vs distance"):
    """x = distance (filler tokens between the symbol to remember and the question), y = share of
    fresh sequences answered right; one line per model (``df``: model, distance, accuracy, n,
    trained, chance). The distances the models trained on are shaded; chance is dotted."""
    _need(df, {model, "distance", "accuracy", "n", "trained", "chance"}, "accuracy_vs_distance")
    fig = go.Figure(_lines(df, "distance", "accuracy", model,
                           "distance %{x} → accuracy %{y:.3f} (%{customdata[0]} fresh sequences)"))
    _trained_band(fig, df["distance"], df["trained"], "distances")
    chance = float(df["chance"].iloc[0])
    fig.add_hline(y=chance, line=dict(dash="dot", color="#6b7280"),
                  annotation_text=f"chance {chance:.3f}", annotation_position="bottom right")
    fig.update_xaxes(title=dict(text="distance (filler tokens between the key and the question)"),
                     type="log")
    fig.update_yaxes(title=dict(text="accuracy (fresh sequences)"), range=[0, 1.03])
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title, height=440, width=820)


def gradient_vs_distance(df: pd.DataFrame, *, model: str = "model",
                         title: str = "How much of the answer's gradient reaches each earlier token"):
    """x = steps back from the question (0 = the question itself), y = ||∂loss/∂embedding|| at
    that position (geometric mean over fresh sequences, log scale); one line per model (``df``:
    model, steps_back, grad_norm, token_kind). The key's position is marked on each line."""
    _need(df, {model, "steps_back", "grad_norm", "token_kind"}, "gradient_vs_distance")
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(model, sort=False)):
        g = g.sort_values("steps_back")
        colour = HEAD_COLOURS[i % len(HEAD_COLOURS)]
        fig.add_trace(go.Scatter(
            x=g["steps_back"].to_numpy(), y=g["grad_norm"].to_numpy(dtype=float), mode="lines",
            name=str(name), line=dict(color=colour, width=2.5), customdata=g[["token_kind"]].to_numpy(),
            hovertemplate=(f"{name}: %{{x}} steps back (%{{customdata[0]}}) → gradient norm "
                           "%{y:.3g}<extra></extra>")))
        key = g[g["token_kind"] == "key"]
        if len(key):
            fig.add_trace(go.Scatter(
                x=key["steps_back"].to_numpy(), y=key["grad_norm"].to_numpy(dtype=float),
                mode="markers", marker=dict(symbol="star", size=13, color=colour),
                name=f"{name}: the key", showlegend=False,
                hovertemplate=f"{name}: the key, %{{x}} steps back → %{{y:.3g}}<extra></extra>"))
    fig.update_xaxes(title=dict(text="steps back from the question (position distance)"))
    fig.update_yaxes(title=dict(text="‖∂loss/∂embedding‖ (log)"), type="log",  # short: it ran into the title
                     exponentformat="power")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title, height=440, width=820)


def path_length_curves(df: pd.DataFrame, *, model: str = "model",
                       title: str = "Longest path between two positions"):
    """x = sequence length n, y = the longest shortest path from an input to an output (cell
    steps or attention hops); one line per model (``df``: model, n, path_length)."""
    _need(df, {model, "n", "path_length"}, "path_length_curves")
    fig = go.Figure(_lines(df.assign(n_=df["n"]), "n", "path_length", model,
                           "n = %{x} tokens → longest path %{y} steps"))
    fig.update_xaxes(title=dict(text="sequence length n (tokens)"))
    fig.update_yaxes(title=dict(text="maximum path length (steps)"), rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title, height=400, width=820)


def accuracy_vs_length(df: pd.DataFrame, *, model: str = "model", value: str = "accuracy",
                       title: str = "The bottleneck: accuracy vs source length"):
    """x = source length (tokens), y = ``value`` ("accuracy": whole output right; or
    "token_accuracy") on fresh sources; one line per model (``df``: model, length, value, n,
    trained). The trained lengths are shaded."""
    _need(df, {model, "length", value, "n", "trained"}, "accuracy_vs_length")
    what = "whole output right" if value == "accuracy" else "tokens right"
    fig = go.Figure(_lines(df, "length", value, model,
                           f"length %{{x}} → {what} %{{y:.3f}} (%{{customdata[0]}} fresh sources)"))
    _trained_band(fig, df["length"], df["trained"], "lengths")
    fig.update_xaxes(title=dict(text="source length (tokens)"), dtick=2)
    fig.update_yaxes(title=dict(text=f"accuracy ({what})"), range=[0, 1.03])  # fresh: in the hover
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title, height=440, width=820)


def hidden_states(states, tokens, *, title: str = "Hidden state at each position", max_units: int = 64):
    """A recurrent layer's states ``[pos, d_hidden]`` (``blocks.{l}.hook_hidden`` of one example)
    as a heatmap: y = position (its token), x = hidden unit, diverging colours around 0; at most
    ``max_units`` units (the first ones)."""
    from .theme import diverging_colour, position_labels

    z = np.asarray(states, dtype=float)
    if z.ndim != 2:
        raise ValueError(f"hidden_states expects [pos, d_hidden], got shape {z.shape}")
    z = z[:, :max_units]
    y = position_labels(tokens, "token")
    fig = go.Figure(go.Heatmap(z=z, x=[f"unit {i}" for i in range(z.shape[1])], y=y,
                               hovertemplate="%{y}, %{x}: %{z:.3f}<extra></extra>",
                               **diverging_colour(z, "h")))
    fig.update_yaxes(autorange="reversed", title=dict(text="position (token read)"))
    fig.update_xaxes(title=dict(text="hidden unit"), showticklabels=False)
    return apply_theme(fig, title=title, height=max(300, 18 * z.shape[0] + 160), width=820)
