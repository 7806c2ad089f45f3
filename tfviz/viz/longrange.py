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
# One look per model, in drawing order: each later line narrower and broken, so where two models
# measure the same (an LSTM and a transformer both at accuracy 1; an RNN's and an LSTM's path
# length, n - 1 both) the first shows around the second's gaps instead of hiding under it.
LINE_STYLES = [dict(width=7, dash="solid", symbol="circle"), dict(width=4, dash="dash", symbol="square"),
               dict(width=2.5, dash="dot", symbol="diamond"), dict(width=2, dash="dashdot", symbol="x")]
Y_ROOM = 1.14  # accuracy axes reach above 1: room for the "trained" label over lines at 1.0


def line_style(i: int) -> dict:
    return LINE_STYLES[i % len(LINE_STYLES)]


def _need(df: pd.DataFrame, columns: set[str], who: str) -> None:
    missing = columns - set(df.columns)
    if missing:
        raise ValueError(f"{who} needs columns {sorted(missing)}")


def _trained_band(fig: go.Figure, x: pd.Series, trained: pd.Series, what: str, log: bool = False) -> None:
    """Shade the x range the models were trained on (rows with ``trained`` True), half a step
    past its ends (on a log axis a geometric half step: 0.5 below 1 was a tick "5")."""
    inside = x[trained.astype(bool)]
    if len(inside):
        lo, hi = float(inside.min()), float(inside.max())
        if log:
            xs = np.unique(x.to_numpy(dtype=float))
            half = float(np.sqrt(xs[1] / xs[0])) if len(xs) > 1 and xs[0] > 0 else 1.5
            x0, x1 = lo / half, hi * half
        else:
            x0, x1 = lo - 0.5, hi + 0.5
        fig.add_vrect(x0=x0, x1=x1, fillcolor=TRAINED_FILL, line_width=0, layer="below",
                      annotation_text=f"trained {what}", annotation_position="top left")


def _data_ticks(x: pd.Series) -> dict:
    """A log axis labelled at the measured values only (its own minor ticks read "5 6 7 8 9 1 2 3")."""
    xs = np.unique(x.to_numpy(dtype=float))
    return dict(tickmode="array", tickvals=xs.tolist(), ticktext=[f"{v:g}" for v in xs], minor=dict(ticks=""))


def _lines(df: pd.DataFrame, x: str, y: str, model: str, hover: str, dash_of=None) -> list[go.Scatter]:
    traces, seen = [], {}
    for i, (name, g) in enumerate(df.groupby(model, sort=False)):
        g, style = g.sort_values(x), line_style(i)
        points = (tuple(g[x].tolist()), tuple(np.round(g[y].to_numpy(dtype=float), 12).tolist()))
        twin = seen.setdefault(points, str(name))  # a line drawn exactly on an earlier one: said
        traces.append(go.Scatter(
            x=g[x].to_numpy(), y=g[y].to_numpy(dtype=float), mode="lines+markers",
            name=str(name) if twin == str(name) else f"{name} (on {twin}'s line)",
            line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], width=style["width"],
                      dash=dash_of(name) if dash_of else style["dash"]),
            marker=dict(symbol=style["symbol"], size=style["width"] + 5),
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
    _trained_band(fig, df["distance"], df["trained"], "distances", log=True)
    chance = float(df["chance"].iloc[0])
    fig.add_hline(y=chance, line=dict(dash="dot", color="#6b7280"),
                  annotation_text=f"chance {chance:.3f}", annotation_position="bottom right")
    fig.update_xaxes(title=dict(text="distance (filler tokens between the key and the question)"),
                     type="log", **_data_ticks(df["distance"]))
    fig.update_yaxes(title=dict(text="accuracy (fresh sequences)"), range=[0, Y_ROOM],
                     tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1])
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
        colour, style = HEAD_COLOURS[i % len(HEAD_COLOURS)], line_style(i)
        fig.add_trace(go.Scatter(
            x=g["steps_back"].to_numpy(), y=g["grad_norm"].to_numpy(dtype=float), mode="lines",
            name=str(name), line=dict(color=colour, width=min(style["width"], 4), dash=style["dash"]),
            customdata=g[["token_kind"]].to_numpy(),
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


def gradient_through_time(df: pd.DataFrame, *, model: str = "model", stage: str = "stage",
                          title: str = "The gradient at earlier tokens, untrained and trained"):
    """x = steps back from the question (1 = the token just before it), y = the gradient there
    relative to the gradient one step back (``relative``, log scale: 1 = as strong as a neighbour's,
    1e-8 = a hundred-millionth); one colour per model, a dashed line at initialisation and a solid
    one trained (``df``: model, stage, steps_back, relative, token_kind — ``longrange.gradient_through_time``).
    The key is starred on each line."""
    _need(df, {model, stage, "steps_back", "relative", "token_kind"}, "gradient_through_time")
    fig = go.Figure()
    d = df[df["steps_back"] >= 1]
    colours = {m: HEAD_COLOURS[i % len(HEAD_COLOURS)] for i, m in enumerate(d[model].unique())}
    for j, (st, gs) in enumerate(d.groupby(stage, sort=False)):
        for name, g in gs.groupby(model, sort=False):
            g = g.sort_values("steps_back")
            label = f"{name}, {st}"
            fig.add_trace(go.Scatter(
                x=g["steps_back"].to_numpy(), y=g["relative"].to_numpy(dtype=float), mode="lines",
                name=label, line=dict(color=colours[name], width=3 if j else 2, dash="solid" if j else "dash"),
                customdata=g[["token_kind"]].to_numpy(),
                hovertemplate=(f"{label}: %{{x}} steps back (%{{customdata[0]}}) → %{{y:.3g}}× the "
                               "gradient one step back<extra></extra>")))
            key = g[g["token_kind"] == "key"]
            if len(key):
                fig.add_trace(go.Scatter(
                    x=key["steps_back"].to_numpy(), y=key["relative"].to_numpy(dtype=float),
                    mode="markers", marker=dict(symbol="star", size=13, color=colours[name]),
                    name=f"{label}: the key", showlegend=False,
                    hovertemplate=f"{label}: the key, %{{x}} steps back → %{{y:.3g}}×<extra></extra>"))
    fig.update_xaxes(title=dict(text="steps back from the question (★ the key)"))
    fig.update_yaxes(title=dict(text="÷ 1 step back (log)"), type="log",  # short: a longer one ran into the title
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
    fig.update_yaxes(title=dict(text=f"accuracy ({what})"), range=[0, Y_ROOM],  # fresh: in the hover
                     tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1])
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
