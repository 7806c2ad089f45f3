"""Word vectors: where words land in two dimensions, one-hot vs learned cosine similarity, and
analogy arithmetic (``tfviz.analysis.word2vec``; also a transformer's input embeddings).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .data import cosine_similarity
from .theme import HEAD_COLOURS, apply_theme, default_tokens, diverging_colour, show_token
from .tokens import row_axis


def embedding_map(coords, labels: Sequence[str], groups: Sequence[str] | None = None, *,
                  explained: Sequence[float] | None = None,
                  title: str = "Word vectors projected to 2-D (PCA)"):
    """Scatter of ``coords [n, 2]`` (e.g. ``project_2d``) with each word written beside its
    point; ``groups`` (one per word, e.g. "animal") colour the points and name the legend
    entries; ``explained``: the share of variance each axis keeps (shown in the axis titles).
    Hover: the word, its group and both exact coordinates."""
    xy = np.asarray(coords, dtype=float)
    if xy.ndim != 2 or xy.shape[1] != 2:
        raise ValueError(f"coords must be [n, 2], got shape {xy.shape}")
    labels = default_tokens(len(xy), labels)
    groups = ["word"] * len(xy) if groups is None else [str(g) for g in groups]
    if len(groups) != len(xy):
        raise ValueError(f"got {len(groups)} groups for {len(xy)} points")
    fig = go.Figure()
    for i, group in enumerate(dict.fromkeys(groups)):
        idx = [j for j, g in enumerate(groups) if g == group]
        fig.add_scatter(
            x=xy[idx, 0], y=xy[idx, 1], mode="markers+text", name=group,
            text=[show_token(labels[j]) for j in idx], textposition="top center",
            marker=dict(size=8, color=HEAD_COLOURS[i % len(HEAD_COLOURS)]),
            hovertemplate=f"%{{text}} ({group})<br>axis 1 %{{x:.4f}}<br>axis 2 %{{y:.4f}}"
                          "<extra></extra>")
    share = ["", ""] if explained is None else [f" ({100 * float(e):.1f}% of the variance)"
                                                for e in explained]
    fig.update_xaxes(title=dict(text=f"principal axis 1{share[0]}"))
    fig.update_yaxes(title=dict(text=f"principal axis 2{share[1]}"))
    fig.update_layout(legend=dict(title=dict(text="group")))
    return apply_theme(fig, title=title, height=560)


def one_hot_vs_learned(vectors, labels: Sequence[str], *,
                       title: str = "Cosine similarity: one-hot vectors vs learned vectors"):
    """Two heatmaps side by side for the same words: left, the cosine similarity of their one-hot
    vectors (the identity: every pair orthogonal, exactly 0); right, of the learned ``vectors
    [n, d]``. Same diverging scale (−1..1) for both; hover names both words and the exact
    cosine."""
    v = np.asarray(vectors, dtype=float)
    n = v.shape[0]
    cats, axis = row_axis(n, labels)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("one-hot (every pair 0)", "learned"))
    colour = diverging_colour(None, "cosine", limit=1.0)
    for col, (name, sim) in enumerate([("one-hot", cosine_similarity(np.eye(n))),
                                       ("learned", cosine_similarity(v))], start=1):
        fig.add_trace(go.Heatmap(z=sim, x=cats, y=cats, name=name, showscale=col == 2,
                                 hovertemplate=f"{name}: %{{y}} ↔ %{{x}}: cos %{{z:.4f}}"
                                               "<extra></extra>", **colour), row=1, col=col)
        fig.update_xaxes(axis, title=dict(text="word"), row=1, col=col)
        fig.update_yaxes(axis, title=dict(text="word" if col == 1 else ""), autorange="reversed",
                         row=1, col=col)
    c = max(4, min(22, 440 // max(n, 1)))
    return apply_theme(fig, title=title, height=n * c + 200, width=2 * n * c + 320)


def analogy_bars(candidates: Sequence[tuple[str, float]], a: str, b: str, c: str, *,
                 expected: str | None = None, title: str | None = None):
    """Horizontal bars: the best answers to ``a − b + c`` (``analogy``'s (word, cosine) list, best
    first) with their cosine to the target vector; ``expected`` is drawn in another colour. Hover:
    the word and the exact cosine."""
    words = [w for w, _ in candidates][::-1]
    cos = [float(s) for _, s in candidates][::-1]
    colours = [HEAD_COLOURS[1] if w == expected else HEAD_COLOURS[0] for w in words]
    fig = go.Figure(go.Bar(x=cos, y=[show_token(w) for w in words], orientation="h",
                           marker=dict(color=colours), name="cosine to a − b + c",
                           hovertemplate="%{y}: cos %{x:.4f}<extra></extra>"))
    fig.update_xaxes(title=dict(text="cosine similarity to the target vector"))
    fig.update_yaxes(title=dict(text="candidate word"), type="category")
    label = f"{show_token(a)} − {show_token(b)} + {show_token(c)} ≈ ?"
    return apply_theme(fig, title=title or label, height=120 + 36 * len(words))


__all__ = ["analogy_bars", "embedding_map", "one_hot_vs_learned"]
