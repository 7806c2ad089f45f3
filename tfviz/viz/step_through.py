"""One query, on real numbers, through the attention formula

    z = Σ_j softmax_j( mask_j( q·k_j / √d_k + bias_j ) ) · v_j

The caller passes the recorded vectors (for RoPE models the *rotated* q and k, ``hook_rot_q`` /
``hook_rot_k``; for ALiBi/T5 the row of ``hook_pos_bias``; the mask row as bool, True = may attend,
like ``tfviz.model.masks``). Nothing here knows about a model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .theme import ATTENTION_SCALE, apply_theme, default_tokens, diverging_colour, show_token

STAGES = ("q·k", "q·k/√d", "+bias", "masked", "softmax")


def step_through_table(q, K, tokens: Sequence[str], query_index: int, *, bias_row=None,
                       mask_row=None, d_k: int | None = None) -> pd.DataFrame:
    """One row per key: k_pos, token, then each stage of the formula — ``q·k``, ``q·k/√d``
    (÷√d_k, d_k defaults to len(q)), ``+bias`` (ALiBi/T5 bias, 0 if none), ``masked`` (−inf where
    the mask forbids), ``softmax`` (sums to 1). ``q [d_head]``, ``K [k_pos, d_head]``."""
    q, K = np.asarray(q, dtype=float), np.asarray(K, dtype=float)
    if q.ndim != 1 or K.ndim != 2 or K.shape[1] != q.shape[0]:
        raise ValueError(f"expected q [d_head] and K [k_pos, d_head], got {q.shape} and {K.shape}")
    n = K.shape[0]
    tokens = default_tokens(n, tokens)
    d_k = q.shape[0] if d_k is None else int(d_k)
    qk = K @ q
    scaled = qk / np.sqrt(d_k)
    biased = scaled + (0.0 if bias_row is None else np.asarray(bias_row, dtype=float))
    allowed = np.ones(n, bool) if mask_row is None else np.asarray(mask_row, dtype=bool)
    masked = np.where(allowed, biased, -np.inf)
    if not allowed.any():
        raise ValueError(f"query {query_index} may attend to no key: its softmax is undefined")
    e = np.exp(masked - masked[allowed].max())
    return pd.DataFrame({"k_pos": np.arange(n), "token": tokens, "q·k": qk, "q·k/√d": scaled,
                         "+bias": biased, "masked": masked, "softmax": e / e.sum()})


def step_through_output(table_or_weights, V) -> np.ndarray:
    """z = Σ_j softmax_j · v_j, i.e. ``softmax @ V`` (``V [k_pos, d_head]``): the head's output for
    this query (one row of ``hook_z``)."""
    w = table_or_weights["softmax"] if isinstance(table_or_weights, pd.DataFrame) \
        else table_or_weights
    return np.asarray(w, dtype=float) @ np.asarray(V, dtype=float)


CELL_FONT = 12  # px: the printed numbers stay readable on a 1024 px projector


def _fmt(v: float) -> str:
    """At most six characters, so a cell's number fits at ``CELL_FONT`` (the hover has more)."""
    if v == -np.inf:
        return "−∞"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def step_through_figure(q, K, V, tokens: Sequence[str], query_index: int, *, bias_row=None,
                        mask_row=None, d_k: int | None = None, query_token: str | None = None,
                        title: str | None = None, subtitle: str | None = None):
    """Three panels sharing one y axis (top row = the query, one row per key, bottom row = z):
    left: q and each k_j over d_head; middle: the stages of the formula per key (the numbers are
    printed; colour ranks each column); right: each softmax_j · v_j over d_head and their sum z.

    Laid out for a narrow container (a 1024 px projector leaves ~600 px beside the sidebar): the
    middle panel gets most of the width so its numbers print at ``CELL_FONT``, the d_head panels
    are thin, short subplot titles, no colour bar (the hover has every value), and the title on
    two lines (``subtitle`` under it)."""
    table = step_through_table(q, K, tokens, query_index, bias_row=bias_row, mask_row=mask_row,
                               d_k=d_k)
    q, K, V = (np.asarray(a, dtype=float) for a in (q, K, V))
    n, d, dv = K.shape[0], K.shape[1], V.shape[1]
    tokens = list(table["token"])
    qt = show_token(tokens[query_index] if query_token is None else query_token)
    z = step_through_output(table, V)
    labels = [f"q '{qt}' ({query_index})"] + \
             [f"k '{show_token(t)}' ({j})" for j, t in enumerate(tokens)] + ["z = Σ softmax·v"]
    ys = list(range(-1, n + 1))  # -1 = q row, 0..n-1 = keys, n = z row
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, column_widths=[0.2, 0.6, 0.2],
                        horizontal_spacing=0.025,
                        subplot_titles=("q and k", "the formula, key by key", "softmax·v, z"))
    fig.update_annotations(font_size=CELL_FONT)
    qk_rows = np.vstack([q, K])
    fig.add_trace(go.Heatmap(
        z=qk_rows, x=list(range(d)), y=ys[:-1], name="q, k",
        customdata=np.repeat(np.array(labels[:-1], dtype=object)[:, None], d, 1),
        hovertemplate="%{customdata}<br>d_head %{x}: %{z:.3f}<extra></extra>",
        **dict(diverging_colour(qk_rows, "q, k"), showscale=False)), row=1, col=1)
    vals = table[list(STAGES)].to_numpy()
    colour = np.zeros_like(vals)
    for c in range(vals.shape[1]):  # rank within each column so every stage shows its contrast
        col = vals[:, c]
        fin = np.isfinite(col)
        lo, hi = (col[fin].min(), col[fin].max()) if fin.any() else (0.0, 1.0)
        colour[:, c] = np.where(fin, (col - lo) / (hi - lo if hi > lo else 1.0), 0.0)
    text = np.vectorize(_fmt, otypes=[object])(vals)
    fig.add_trace(go.Heatmap(
        z=colour, x=list(STAGES), y=ys[1:-1], text=text, texttemplate="%{text}",
        textfont=dict(size=CELL_FONT), xgap=1, ygap=1,
        customdata=np.repeat(np.array(labels[1:-1], dtype=object)[:, None], len(STAGES), 1),
        hovertemplate="%{customdata}<br>%{x}: %{text}<extra></extra>", name="stages",
        colorscale=ATTENTION_SCALE, zmin=0, zmax=1, showscale=False), row=1, col=2)
    contrib = np.vstack([table["softmax"].to_numpy()[:, None] * V, z[None]])
    fig.add_trace(go.Heatmap(
        z=contrib, x=list(range(dv)), y=ys[1:], name="softmax·v",
        customdata=np.repeat(np.array(labels[1:], dtype=object)[:, None], dv, 1),
        hovertemplate="%{customdata}<br>d_head %{x}: %{z:.3f}<extra></extra>",
        **dict(diverging_colour(contrib, "value"), showscale=False)), row=1, col=3)
    fig.update_yaxes(tickmode="array", tickvals=ys, ticktext=labels, range=[n + 0.5, -1.5],
                     showgrid=False)
    fig.update_yaxes(title=dict(text="q, keys, z", font_size=CELL_FONT), row=1, col=1)
    fig.update_xaxes(title=dict(text="d_head"), showgrid=False, row=1, col=1)
    fig.update_xaxes(title=dict(text="stage"), type="category", side="bottom", tickangle=-45,
                     row=1, col=2)
    fig.update_xaxes(title=dict(text="d_head"), showgrid=False, row=1, col=3)
    fig.add_hline(y=-0.5, line=dict(color="#9ca3af", width=1), row="all", col="all")
    fig.add_hline(y=n - 0.5, line=dict(color="#9ca3af", width=1), row=1, col=3)
    title = title or f"Query '{qt}' (pos {query_index}) step by step, d_k = {d_k or d}"
    if subtitle:
        title += f"<br><span style='font-size:{CELL_FONT}px'>{subtitle}</span>"
    fig.update_layout(margin=dict(t=110, r=10))
    return apply_theme(fig, title=title, height=min(1600, 250 + 28 * (n + 2)))
