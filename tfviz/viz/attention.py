"""Attention patterns: one head, every head of every layer, cross-attention alignment, a pronoun
probe — plus ``pattern_frame`` (tidy data for CSV download of any of them).

Conventions (README's recorded shapes): a pattern is ``[q_pos, k_pos]`` (rows = queries, the
token doing the looking; columns = keys, the tokens looked at), stacks are ``[head, q_pos, k_pos]``
and ``[layer, head, q_pos, k_pos]``. Weights are coloured on one fixed 0..1 scale.
``line_view`` (bertviz-style lines) and the step-through of one query live in ``lines.py`` and
``step_through.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .theme import (HEAD_COLOURS, apply_theme, attention_colour, cell_size, default_tokens,
                    position_labels, show_token, tick_step)
from .tiles import tile_starts, tiled_heatmap

HOVER = "%{y} → %{x}: %{z:.3f}<extra></extra>"


def _finite(a) -> np.ndarray:
    a = np.array(a, dtype=float)
    a[~np.isfinite(a)] = np.nan
    return a


def token_axis(tokens: Sequence[str], role: str, title: str) -> tuple[list[str], dict]:
    """Unique category labels for one token axis plus axis settings whose ticks show the bare
    tokens (thinned for long inputs). Duplicate tokens stay separate: one category per position."""
    cats = position_labels(tokens, role)
    step = tick_step(len(cats))
    axis = dict(type="category", title=dict(text=title), tickmode="array", tickvals=cats[::step],
                ticktext=[show_token(t) for t in tokens][::step], showgrid=False)
    return cats, axis


def head_heatmap(pattern, q_tokens: Sequence[str], k_tokens: Sequence[str] | None = None, *,
                 title: str = "Attention pattern", q_role: str = "query", k_role: str = "key"):
    """One head's pattern ``[q_pos, k_pos]``. y: q_pos (query tokens, top to bottom),
    x: k_pos (key tokens). Colour = weight on the fixed 0..1 scale; hover
    "query 'it' (pos 12) → key 'law' (pos 3): 0.734"."""
    z = _finite(pattern)
    if z.ndim != 2:
        raise ValueError(f"head_heatmap expects [q_pos, k_pos], got shape {z.shape}")
    nq, nk = z.shape
    q_tokens = default_tokens(nq, q_tokens)
    k_tokens = default_tokens(nk, q_tokens if k_tokens is None and nk == nq else k_tokens)
    x, xaxis = token_axis(k_tokens, k_role, f"k_pos ({k_role})")
    y, yaxis = token_axis(q_tokens, q_role, f"q_pos ({q_role})")
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, hovertemplate=HOVER, hoverongaps=False,
                               name=title, **attention_colour()))
    fig.update_layout(xaxis=xaxis, yaxis=dict(yaxis, autorange="reversed"))
    c = cell_size(max(nq, nk))
    return apply_theme(fig, title=title, height=nq * c + 170, width=max(480, nk * c + 230))


def heads_grid(patterns, tokens: Sequence[str], k_tokens: Sequence[str] | None = None, *,
               title: str = "Attention patterns: every layer × head", selected=None, gap: int = 1,
               layer_names: Sequence[str] | None = None, head_names: Sequence[str] | None = None):
    """All heads ``[layer, head, q_pos, k_pos]`` as ONE tiled heatmap: tile rows = layers
    ("L0"…), tile columns = heads ("H0"…); inside a tile y = q_pos, x = k_pos. NaN gutters
    separate tiles. An invisible marker at each tile's centre (trace ``meta="select"``,
    ``customdata=[layer, head]``) makes a click select a head — heatmap clicks return no points.
    ``selected=(layer, head)`` outlines that tile."""
    p = np.asarray(patterns, dtype=np.float32)
    if p.ndim == 3:
        p = p[None]
    if p.ndim != 4:
        raise ValueError(f"heads_grid expects [layer, head, q_pos, k_pos], got shape {p.shape}")
    n_layers, n_heads, nq, nk = p.shape
    q_tokens = default_tokens(nq, tokens)
    k_tokens = default_tokens(nk, q_tokens if k_tokens is None and nk == nq else k_tokens)
    rows = list(layer_names or [f"L{i}" for i in range(n_layers)])
    cols = list(head_names or [f"H{i}" for i in range(n_heads)])
    trace, xaxis, yaxis = tiled_heatmap(
        p, rows, cols, position_labels(q_tokens, "query"), position_labels(k_tokens, "key"),
        colour=attention_colour(), gap=gap, name="pattern",
        hovertemplate="%{y}<br>%{x}<br>weight %{z:.3f}<extra></extra>")
    c = max(1, min(12, 900 // max(n_heads * (nk + gap), n_layers * (nq + gap))))
    ls, hs = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    pick = go.Scatter(
        x=[xaxis["tickvals"][h] for h in hs.ravel()], y=[yaxis["tickvals"][l] for l in ls.ravel()],
        mode="markers", meta="select", name="select head", showlegend=False,
        customdata=np.stack([ls.ravel(), hs.ravel()], 1).tolist(),
        marker=dict(size=max(8, int(0.45 * c * min(nq, nk))), opacity=0, symbol="square"),
        hovertemplate="layer %{customdata[0]} · head %{customdata[1]}<br>click to select"
                      "<extra></extra>")
    fig = go.Figure([trace, pick])
    fig.update_layout(xaxis=dict(xaxis, side="top", title=dict(text="head (k_pos within a tile)")),
                      yaxis=dict(yaxis, title=dict(text="layer (q_pos within a tile)")),
                      margin=dict(t=110))
    if selected is not None:
        l, h = selected
        x0, y0 = tile_starts(n_heads, nk, gap)[h], tile_starts(n_layers, nq, gap)[l]
        fig.add_shape(type="rect", x0=x0 - 0.5, x1=x0 + nk - 0.5, y0=y0 - 0.5, y1=y0 + nq - 0.5,
                      line=dict(color="#ff4d4f", width=2), fillcolor="rgba(0,0,0,0)")
    w, h = n_heads * (nk + gap) * c, n_layers * (nq + gap) * c
    return apply_theme(fig, title=title, width=w + 200, height=h + 170)


def pattern_frame(patterns, q_tokens: Sequence[str], k_tokens: Sequence[str] | None = None, *,
                  value_name: str = "weight") -> pd.DataFrame:
    """Tidy rows of ``[q_pos, k_pos]``, ``[head, q_pos, k_pos]`` or ``[layer, head, q_pos, k_pos]``:
    columns (layer, head,) q_pos, q_token, k_pos, k_token, weight — for CSV download."""
    p = np.asarray(patterns, dtype=float)
    if not 2 <= p.ndim <= 4:
        raise ValueError(f"expected 2-4 dims ending in [q_pos, k_pos], got shape {p.shape}")
    nq, nk = p.shape[-2:]
    q_tokens = default_tokens(nq, q_tokens)
    k_tokens = default_tokens(nk, q_tokens if k_tokens is None and nk == nq else k_tokens)
    names = ["layer", "head", "q_pos", "k_pos"][4 - p.ndim:]
    idx = np.indices(p.shape).reshape(p.ndim, -1)
    df = pd.DataFrame({n: idx[i] for i, n in enumerate(names)})
    df.insert(len(names) - 1, "q_token", np.asarray(q_tokens, dtype=object)[df["q_pos"]])
    df["k_token"] = np.asarray(k_tokens, dtype=object)[df["k_pos"]]
    df[value_name] = p.reshape(-1)
    return df


def _alignment_pairs(alignment) -> list[tuple[int, int]]:
    if alignment is None:
        return []
    if isinstance(alignment, Mapping):
        items = alignment.items()
    elif np.ndim(alignment) == 1 and not (len(alignment) and np.ndim(alignment[0])):
        items = enumerate(alignment)
    else:
        return [(int(t), int(s)) for t, s in alignment]
    pairs = []
    for t, s in items:
        for s1 in np.atleast_1d(s):
            if int(s1) >= 0:
                pairs.append((int(t), int(s1)))
    return pairs


def cross_attention_alignment(pattern, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                              alignment=None, *, title: str = "Cross-attention"):
    """Cross-attention ``[tgt_pos, src_pos]``: y = target (decoder query) tokens, x = source
    (encoder key) tokens. ``alignment`` — pairs ``(tgt, src)``, a dict tgt → src (or list), or a
    per-target array of source indices (−1 = none) — is drawn as open squares; the title reports
    how many target tokens put their largest weight on an expected source token."""
    fig = head_heatmap(pattern, tgt_tokens, src_tokens, title=title, q_role="target",
                       k_role="source")
    fig.update_xaxes(title=dict(text="source k_pos (encoder tokens)"))
    fig.update_yaxes(title=dict(text="target q_pos (decoder tokens)"))
    pairs = _alignment_pairs(alignment)
    if pairs:
        z = _finite(pattern)
        x, y = fig.data[0].x, fig.data[0].y
        fig.add_trace(go.Scatter(
            x=[x[s] for _, s in pairs], y=[y[t] for t, _ in pairs], mode="markers",
            name="expected alignment", customdata=[z[t, s] for t, s in pairs],
            marker=dict(symbol="square-open", size=cell_size(max(z.shape)) + 2, color="#ff4d4f",
                        line=dict(width=2)),
            hovertemplate="expected: %{y} ↔ %{x}<br>weight %{customdata:.3f}<extra></extra>"))
        expected: dict[int, set[int]] = {}
        for t, s in pairs:
            expected.setdefault(t, set()).add(s)
        hits = sum(int(np.nanargmax(z[t])) in ss for t, ss in expected.items())
        fig.update_layout(title=dict(text=f"{title}<br><sup>argmax on the expected source for "
                                          f"{hits}/{len(expected)} target tokens</sup>"),
                          legend=dict(orientation="h", y=-0.15))
    return fig


def pronoun_probe(weights, tokens: Sequence[str], candidates: Mapping[str, Sequence[int]], *,
                  pronoun_index: int | None = None, title: str = "Where does the pronoun look?"):
    """The pronoun's attention row in every head, ``weights [layer, head, k_pos]`` (or
    ``[head, k_pos]``). Left: heatmap, y = layer·head, x = k_pos (tokens), candidate columns
    outlined. Right: attention mass each head puts on each candidate (sum over its positions)."""
    w = _finite(weights)
    if w.ndim == 2:
        w = w[None]
    n_layers, n_heads, nk = w.shape
    tokens = default_tokens(nk, tokens)
    x, xaxis = token_axis(tokens, "key", "k_pos (key)")
    y = [f"L{l} · H{h}" for l in range(n_layers) for h in range(n_heads)]
    q = "" if pronoun_index is None else \
        f"query '{show_token(tokens[pronoun_index])}' (pos {pronoun_index}) → ".replace("%{", "% {")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, column_widths=[0.72, 0.28],
                        horizontal_spacing=0.03)
    fig.add_trace(go.Heatmap(z=w.reshape(-1, nk), x=x, y=y, hoverongaps=False, name="weights",
                             hovertemplate="%{y}<br>" + q + "%{x}: %{z:.3f}<extra></extra>",
                             **attention_colour()), row=1, col=1)
    for i, (name, idx) in enumerate(candidates.items()):
        colour = HEAD_COLOURS[(i + 1) % len(HEAD_COLOURS)]
        for j in idx:
            fig.add_vrect(x0=j - 0.5, x1=j + 0.5, line=dict(color=colour, width=2),
                          fillcolor="rgba(0,0,0,0)", row=1, col=1)
        mass = w[:, :, list(idx)].sum(-1).reshape(-1)
        fig.add_trace(go.Bar(x=mass, y=y, orientation="h", name=name, marker_color=colour,
                             hovertemplate="%{y}: %{x:.3f} on '" + name.replace("%{", "% {")
                             + "'<extra></extra>"), row=1, col=2)
    if pronoun_index is not None:
        fig.add_vrect(x0=pronoun_index - 0.5, x1=pronoun_index + 0.5, row=1, col=1,
                      line=dict(color="#9ca3af", width=2, dash="dot"), fillcolor="rgba(0,0,0,0)")
    fig.update_xaxes(xaxis, row=1, col=1)
    fig.update_xaxes(title=dict(text="mass on candidate"), range=[0, 1], row=1, col=2)
    fig.update_yaxes(type="category", autorange="reversed", title=dict(text="layer · head"),
                     row=1, col=1)
    # the legend above the plot, right: below it, it sat on the rotated token labels
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1,
                                                   xanchor="right"))
    c = cell_size(max(nk, len(y)), hi=24)
    return apply_theme(fig, title=title, height=len(y) * max(c, 26) + 240, width=nk * c + 520)


def pronoun_probe_frame(weights, tokens: Sequence[str],
                        candidates: Mapping[str, Sequence[int]]) -> pd.DataFrame:
    """Tidy rows: layer, head, k_pos, k_token, weight, candidate ("" when not a candidate)."""
    w = np.asarray(weights, dtype=float)
    w = w[None] if w.ndim == 2 else w
    df = pattern_frame(w[:, :, None, :], ["?"], tokens).drop(columns=["q_pos", "q_token"])
    label = {int(j): name for name, idx in candidates.items() for j in idx}
    df["candidate"] = [label.get(int(k), "") for k in df["k_pos"]]
    return df
