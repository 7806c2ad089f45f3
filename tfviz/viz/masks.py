"""Attention masks as two-colour grids. A mask is bool ``[q_pos, k_pos]`` with True = the query
may attend to the key (``tfviz.model.masks`` convention): causal, padding, sliding window, global
tokens and their combinations.

Also the decoder's "no peeking" test as a figure (``logit_change_bars``): how much each
position's logits moved when one token was edited. Positions before the edit cannot see it through
a causal mask, so their bars are exactly 0; a bidirectional encoder moves everywhere.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .theme import (ALLOWED_COLOUR, BLOCKED_COLOUR, FONT_SIZE, HEAD_COLOURS, apply_theme,
                    cell_size, default_tokens, position_labels, show_token, tick_step)
from .tiles import tile, tiled_axis

LABEL_PX = FONT_SIZE + 3  # the least height a token label on the q_pos axis needs
SCALE = [[0.0, BLOCKED_COLOUR], [0.5, BLOCKED_COLOUR], [0.5, ALLOWED_COLOUR], [1.0, ALLOWED_COLOUR]]
COLOUR = dict(colorscale=SCALE, zmin=0, zmax=1,
              colorbar=dict(tickvals=[0.25, 0.75], ticktext=["blocked", "allowed"], thickness=12,
                            outlinewidth=0, len=0.4, title=dict(text="mask")))


def _mask(mask) -> np.ndarray:
    m = np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"expected a mask [q_pos, k_pos], got shape {m.shape}")
    return m.astype(bool)


def _axis(n: int, tokens: Sequence[str] | None, role: str) -> tuple[list[str], list[str]]:
    """(unique category labels, tick texts) for one axis of a mask."""
    if tokens is None:
        return [f"{role} pos {i}" for i in range(n)], [str(i) for i in range(n)]
    tokens = default_tokens(n, tokens)
    return position_labels(tokens, role), [show_token(t) for t in tokens]


def mask_grid(mask, tokens: Sequence[str] | None = None, *, title: str = "Attention mask"):
    """Two-colour grid of ``mask [q_pos, k_pos]``: y = q_pos (query, top to bottom), x = k_pos
    (key); allowed / blocked in the legend and in every cell's hover."""
    m = _mask(mask)
    nq, nk = m.shape
    y, yt = _axis(nq, tokens, "query")
    x, xt = _axis(nk, tokens if nk == nq else None, "key")
    fig = go.Figure(go.Heatmap(z=m.astype(float), x=x, y=y, xgap=1, ygap=1, name="mask",
                               text=np.where(m, "allowed", "blocked").astype(object),
                               hovertemplate="%{y} → %{x}: %{text}<extra></extra>", **COLOUR))
    sx, sy = tick_step(nk), tick_step(nq)
    fig.update_xaxes(type="category", tickmode="array", tickvals=x[::sx], ticktext=xt[::sx],
                     title=dict(text="k_pos (key)"), showgrid=False, side="top")
    fig.update_yaxes(type="category", tickmode="array", tickvals=y[::sy], ticktext=yt[::sy],
                     title=dict(text="q_pos (query)"), showgrid=False, autorange="reversed")
    # The title stays at the very top and the top margin holds the (maybe rotated) token ticks and
    # the axis title below it, so long tokens never run into the title.
    top = max(110, 80 + 7 * max((len(t) for t in xt[::sx]), default=1))
    fig.update_layout(margin=dict(t=top),
                      title=dict(yref="container", y=1, yanchor="top", pad=dict(t=12)))
    c = cell_size(max(nq, nk), hi=24)
    return apply_theme(fig, title=f"{title} — {int(m.sum())} of {m.size} pairs allowed",
                       height=nq * c + 80 + top, width=max(480, nk * c + 230))


def masks_side_by_side(masks: Mapping[str, object], tokens: Sequence[str] | None = None, *,
                       title: str = "Masks side by side", gap: int = 2):
    """Several masks of one shape as ONE tiled grid, one tile per mask (tile label = its name);
    inside a tile y = q_pos, x = k_pos. Hover names the mask, query, key and allowed/blocked."""
    names = list(masks)
    ms = np.stack([_mask(masks[n]) for n in names])  # [n_masks, q_pos, k_pos]
    _, nq, nk = ms.shape
    y, yt = _axis(nq, tokens, "query")
    xin, _ = _axis(nk, tokens if nk == nq else None, "key")
    xa = tiled_axis(names, xin, gap)
    z = tile(ms[None].astype(float), gap)
    text = np.full(z.shape, "", dtype=object)
    for i, start in enumerate(range(0, z.shape[1], nk + gap)):
        text[:, start:start + nk] = np.where(ms[i], "allowed", "blocked")
    fig = go.Figure(go.Heatmap(z=z, x=xa["categories"], y=y, text=text, xgap=1, ygap=1,
                               hoverongaps=False, name="masks",
                               hovertemplate="%{y} → %{x}: %{text}<extra></extra>", **COLOUR))
    sy = tick_step(nq)
    fig.update_xaxes(type="category", tickmode="array", tickvals=xa["tickvals"],
                     ticktext=xa["ticktext"], side="top", showgrid=False, ticks="",
                     title=dict(text="mask (k_pos within a tile)"))
    fig.update_yaxes(type="category", tickmode="array", tickvals=y[::sy], ticktext=yt[::sy],
                     title=dict(text="q_pos (query)"), showgrid=False, autorange="reversed")
    fig.update_layout(margin=dict(t=110))
    c = max(4, min(20, 1100 // max(1, len(names) * (nk + gap))))  # a cell's width
    row = max(c, LABEL_PX)  # a row's height: each token label gets its own line (33 tokens at
    return apply_theme(fig, title=title, height=nq * row + 180,  # 7 px each overlapped)
                       width=len(names) * (nk + gap) * c + 230)


def mask_frame(masks, tokens: Sequence[str] | None = None) -> pd.DataFrame:
    """Tidy rows of one mask or a dict name → mask: (mask,) q_pos, q_token, k_pos, k_token,
    allowed."""
    named = masks if isinstance(masks, Mapping) else {None: masks}
    parts = []
    for name, mask in named.items():
        m = _mask(mask)
        nq, nk = m.shape
        qt = default_tokens(nq, tokens)
        kt = qt if nk == nq else default_tokens(nk)
        q, k = np.indices(m.shape).reshape(2, -1)
        df = pd.DataFrame({"q_pos": q, "q_token": np.asarray(qt, dtype=object)[q], "k_pos": k,
                           "k_token": np.asarray(kt, dtype=object)[k], "allowed": m.reshape(-1)})
        if name is not None:
            df.insert(0, "mask", name)
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


def logit_change_bars(delta, tokens: Sequence[str] | None = None, edit_pos: int | None = None, *,
                      title: str = "How much each position's output changed"):
    """Bars: x = pos (labelled with its token), y = max |Δ logit| over the vocabulary between two
    forwards. ``edit_pos`` (the edited position) gets a dashed line; bars before it are grey,
    from it on coloured. Exact zeros are labelled "0" on the bar."""
    d = np.asarray(delta, dtype=float)
    if d.ndim != 1:
        raise ValueError(f"expected one value per position, got shape {d.shape}")
    n = d.shape[0]
    toks = [show_token(t) for t in default_tokens(n, tokens)]
    before = np.arange(n) < (edit_pos if edit_pos is not None else 0)
    colours = np.where(before, "#9ca3af", HEAD_COLOURS[5]).tolist()
    fig = go.Figure(go.Bar(
        x=list(range(n)), y=d, name="max |Δ logit|", marker=dict(color=colours),
        customdata=np.array(toks, dtype=object),
        text=["0" if v == 0 else "" for v in d], textposition="outside",
        hovertemplate="pos %{x} '%{customdata}': max |Δ logit| %{y:.3g}<extra></extra>"))
    if edit_pos is not None:
        fig.add_vline(x=edit_pos - 0.5, line=dict(dash="dash", color="#6b7280"),
                      annotation_text=f"edited pos {edit_pos}", annotation_position="top right")
    step = tick_step(n, 40)
    fig.update_xaxes(title=dict(text="pos"), tickmode="array", tickvals=list(range(n))[::step],
                     ticktext=[f"{t}<br>{i}" for i, t in enumerate(toks)][::step])
    fig.update_yaxes(title=dict(text="max |Δ logit| (over the vocabulary)"), rangemode="tozero")
    return apply_theme(fig, title=title, height=420, width=max(600, min(1200, 30 * n + 200)))
