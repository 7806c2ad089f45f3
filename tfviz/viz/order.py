"""Word order: a bag of words' two identical vectors, and how much a model's residual stream
changes when the words are rearranged (``tfviz.analysis.order``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme, default_tokens, position_labels, show_token

FLOOR = 1e-17  # a difference of exactly 0 is drawn here on the log axis (hover says 0)


def bag_of_words_bars(vocab: Sequence[str], counts, sentences: Sequence[str], *,
                      title: str = "A bag of words: one count per word, order thrown away"):
    """Grouped bars: for each sentence (``counts [sentence, word]``), how often each word of
    ``vocab`` occurs. Identical bars = identical vectors. Hover: sentence, word, exact count."""
    counts = np.asarray(counts, dtype=float)
    fig = go.Figure()
    for i, s in enumerate(sentences):
        fig.add_bar(x=[show_token(w) for w in vocab], y=counts[i], name=show_token(s),
                    marker=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)]),
                    hovertemplate=f"{show_token(s)}<br>%{{x}}: %{{y}}<extra></extra>")
    fig.update_xaxes(title=dict(text="word"), type="category")
    fig.update_yaxes(title=dict(text="count"), dtick=1, rangemode="tozero")
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.3))
    return apply_theme(fig, title=title, height=420)


def order_bars(tables: Mapping[str, pd.DataFrame], *,
               title: str = "Rearranged words: the largest change in each layer's output"):
    """Grouped bars on a log axis: for each model (``tables``: name -> ``order_differences``'s
    table), the largest |difference| at each stage after undoing the rearrangement. Float
    rounding is ~1e-7 (float32) / 1e-16 (float64); real differences are 1e-3 and up. Exact zeros
    sit at the bottom (hover shows the exact value)."""
    fig = go.Figure()
    for i, (name, t) in enumerate(tables.items()):
        y = t["matched"].to_numpy(dtype=float)
        fig.add_bar(x=list(t["stage"]), y=np.maximum(y, FLOOR), name=name, customdata=y,
                    marker=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)]),
                    hovertemplate=f"{name}<br>%{{x}}<br>largest |difference| %{{customdata:.3g}}"
                                  "<extra></extra>")
    fig.update_xaxes(title=dict(text="where in the model"), type="category")
    fig.update_yaxes(title=dict(text="largest |difference|"), type="log", exponentformat="power")
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.3), margin=dict(t=80))
    return apply_theme(fig, title=title, height=460)


def order_positions(per_position, tokens: Sequence[str], stages: Sequence[str], *,
                    forced_equal=None,
                    title: str = "Change at each position (after matching the words)"):
    """Heatmap ``per_position [stage, pos]`` (``order_differences``'s second value) of the
    rearranged sentence's tokens, on a log colour scale (log10 of the difference); ``forced_equal``
    [stage, pos] (bool) marks with "=" the positions a model without positions must leave equal.
    Hover: stage, token, exact difference, and whether it is forced equal."""
    d = np.asarray(per_position, dtype=float)
    tokens = default_tokens(d.shape[1], tokens)
    x = position_labels(tokens, "token")
    forced = np.zeros_like(d, dtype=bool) if forced_equal is None else np.asarray(forced_equal, bool)
    custom = np.empty(d.shape + (2,), dtype=object)  # exact value, note (mixed types: object)
    custom[..., 0] = d
    custom[..., 1] = np.where(forced, "forced equal (no positions)", "")
    z = np.log10(np.maximum(d, FLOOR))
    fig = go.Figure(go.Heatmap(
        z=z, x=x, y=list(stages), customdata=custom, name="log10 |difference|",
        colorscale="Viridis", zmin=-17, zmax=max(1.0, float(z.max())),
        colorbar=dict(title=dict(text="log10 |diff|"), thickness=12, outlinewidth=0),
        text=np.where(forced, "=", ""), texttemplate="%{text}",
        hovertemplate="%{y}<br>%{x}<br>largest |difference| %{customdata[0]:.3g}"
                      "<br>%{customdata[1]}<extra></extra>"))
    fig.update_xaxes(title=dict(text="token of the rearranged sentence"), type="category")
    fig.update_yaxes(title=dict(text="where in the model"), type="category", autorange="reversed")
    return apply_theme(fig, title=title, height=140 + 50 * d.shape[0] + 120,
                       width=max(520, 90 * d.shape[1] + 260))


__all__ = ["bag_of_words_bars", "order_bars", "order_positions"]
