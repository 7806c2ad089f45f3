"""Positional encodings: the table itself, its waves, how similar positions are, and how well each
scheme extrapolates. RoPE figures live in ``rope.py``, ALiBi/T5 biases in ``bias.py``.

Inputs are tables from ``tfviz.positional_tables``: sinusoidal / learned ``[pos, d_model]``,
``rope_freqs [d_head/2]``, ``alibi_bias`` / ``t5_bias [head, q_pos, k_pos]``, ``t5_buckets``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .data import cosine_similarity
from .theme import HEAD_COLOURS, apply_theme, cell_size, diverging_colour


def _table(table) -> np.ndarray:
    t = np.asarray(table, dtype=float)
    if t.ndim != 2:
        raise ValueError(f"expected a positional table [pos, d_model], got shape {t.shape}")
    return t


def pe_matrix(table, *, title: str = "Positional encoding table"):
    """Heatmap of ``table [pos, d_model]``: y = pos (0 at the top), x = d_model dimension; diverging
    colours centred on 0. Sinusoidal tables show fast waves on the left, slow ones on the right."""
    t = _table(table)
    fig = go.Figure(go.Heatmap(z=t, x=list(range(t.shape[1])), y=list(range(t.shape[0])),
                               name="encoding", **diverging_colour(t, "value"),
                               hovertemplate="pos %{y} · dim %{x}: %{z:.4f}<extra></extra>"))
    fig.update_xaxes(title=dict(text="d_model dimension"), showgrid=False)
    fig.update_yaxes(title=dict(text="pos"), autorange="reversed", showgrid=False)
    return apply_theme(fig, title=title, height=min(800, max(320, 160 + 6 * t.shape[0])), width=900)


def default_dims(d_model: int) -> list[int]:
    """A few dimensions spread from fast (0, 1) to slow (d_model − 2, d_model − 1)."""
    return sorted({d for d in (0, 1, d_model // 4, d_model // 2, d_model - 2, d_model - 1)
                   if 0 <= d < d_model})


def pe_waves(table, dims: Sequence[int] | None = None, *, title: str = "Positional waves"):
    """One line per chosen dimension of ``table [pos, d_model]``: x = pos, y = value."""
    t = _table(table)
    fig = go.Figure()
    for d in dims if dims is not None else default_dims(t.shape[1]):
        fig.add_trace(go.Scatter(x=np.arange(t.shape[0]), y=t[:, d], mode="lines", name=f"dim {d}",
                                 hovertemplate=f"dim {d} · pos %{{x}}: %{{y:.4f}}<extra></extra>"))
    fig.update_xaxes(title=dict(text="pos"))
    fig.update_yaxes(title=dict(text="encoding value"))
    return apply_theme(fig, title=title, height=420, width=900)


def position_similarity(table, *, title: str = "Cosine similarity between positions"):
    """Heatmap ``[pos, pos]`` of the cosine similarity of the position vectors (rows of
    ``table``): y = pos i, x = pos j, −1..1 centred on 0. Sinusoidal: a band along the diagonal."""
    s = cosine_similarity(_table(table))
    n = s.shape[0]
    fig = go.Figure(go.Heatmap(z=s, x=list(range(n)), y=list(range(n)), name="cosine",
                               **diverging_colour(s, "cosine", limit=1.0),
                               hovertemplate="pos %{y} · pos %{x}: cos %{z:.3f}<extra></extra>"))
    fig.update_xaxes(title=dict(text="pos j"), showgrid=False)
    fig.update_yaxes(title=dict(text="pos i"), autorange="reversed", showgrid=False)
    c = cell_size(n, lo=2, hi=16)
    return apply_theme(fig, title=title, height=n * c + 170, width=n * c + 230)


def similarity_by_distance(table) -> np.ndarray:
    """Mean cosine similarity of position pairs at each distance Δ = |i − j|, Δ = 0..pos−1."""
    s = cosine_similarity(_table(table))
    return np.array([np.diagonal(s, d).mean() for d in range(s.shape[0])])


def similarity_vs_distance(tables, *, title: str = "Similarity vs distance"):
    """Line(s): x = distance |i − j| between positions, y = mean cosine similarity of the position
    vectors at that distance. ``tables`` is one ``[pos, d_model]`` table or a dict name → table
    (compare schemes)."""
    tables = tables if isinstance(tables, Mapping) else {"positions": tables}
    fig = go.Figure()
    for i, (name, t) in enumerate(tables.items()):
        m = similarity_by_distance(t)
        fig.add_trace(go.Scatter(x=np.arange(len(m)), y=m, mode="lines", name=str(name),
                                 line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)]),
                                 hovertemplate=f"{name}: distance %{{x}} → mean cos %{{y:.3f}}"
                                               "<extra></extra>"))
    fig.update_xaxes(title=dict(text="distance |i − j| (positions)"))
    fig.update_yaxes(title=dict(text="mean cosine similarity"))
    return apply_theme(fig, title=title, height=400, width=800)


def extrapolation_curves(df: pd.DataFrame, train_length: int | None = None, *,
                         scheme: str = "scheme", length: str = "length", loss: str = "loss",
                         log_y: bool = False, title: str = "Loss vs evaluation length"):
    """One line per positional scheme: x = evaluation length (tokens), y = loss; a dashed vertical
    line marks the training length — to its right the model sees positions it never trained on."""
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby(scheme, sort=False)):
        g = g.sort_values(length)
        fig.add_trace(go.Scatter(
            x=g[length].to_numpy(), y=g[loss].to_numpy(dtype=float), mode="lines+markers",
            name=str(name), line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)]),
            hovertemplate=f"{name}: length %{{x}} → loss %{{y:.4f}}<extra></extra>"))
    if train_length is not None:
        fig.add_vline(x=train_length, line=dict(dash="dash", color="#9ca3af"),
                      annotation_text=f"training length {train_length}",
                      annotation_position="top left")
    fig.update_xaxes(title=dict(text="evaluation length (tokens)"))
    fig.update_yaxes(title=dict(text="loss"), type="log" if log_y else "linear")
    return apply_theme(fig, title=title, height=420, width=800)
