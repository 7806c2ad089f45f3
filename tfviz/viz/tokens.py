"""Tokens and embeddings: the text cut into coloured token spans (HTML), and how similar token
vectors are (cosine similarity: one-hot gives the identity, learned embeddings show structure).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .data import cosine_similarity, nearest_by_cosine
from .theme import apply_theme, cell_size, default_tokens, diverging_colour, show_token, tick_step

# Translucent fills read on light and dark pages alike; text keeps the page's colour.
SPAN_COLOURS = ("rgba(0,114,178,0.22)", "rgba(230,159,0,0.28)", "rgba(0,158,115,0.22)")
SPAN_STYLE = "background:{bg};border-radius:3px;padding:1px 0;margin:0 1px;"
SPECIAL_STYLE = ("border:1px solid rgba(128,128,128,0.6);border-radius:3px;padding:0 3px;"
                 "margin:0 2px;font-size:0.85em;opacity:0.8;")


def token_spans_html(text: str, offsets: Sequence[tuple[int, int]], tokens: Sequence[str],
                     ids: Sequence[int] | None = None) -> str:
    """``text`` as HTML with one coloured ``<span>`` per token (colours alternate), for
    ``st.html``. ``offsets`` are character offsets (``tokenizers``' ``encode(text).offsets``);
    each span's ``title`` shows "#i · id 12 · 'law' · chars 3–6". Text between tokens is kept
    uncoloured; special tokens with empty offsets (0, 0) appear as small outlined chips; spans
    overlapping earlier ones (byte-level BPE inside one character) are clipped. All text is
    HTML-escaped."""
    if len(offsets) != len(tokens) or (ids is not None and len(ids) != len(tokens)):
        raise ValueError("offsets, tokens (and ids) must have one entry per token")
    out, cursor = [], 0
    for i, ((start, end), tok) in enumerate(zip(offsets, tokens)):
        start, end = int(start), int(end)
        tip = f"#{i}" + ("" if ids is None else f" · id {int(ids[i])}") + f" · {tok!r}" \
              + f" · chars {start}–{end}"
        tip = html.escape(tip, quote=True)
        if end <= start:  # special token: no text of its own
            out.append(f'<span style="{SPECIAL_STYLE}" title="{tip}">{html.escape(str(tok))}'
                       "</span>")
            continue
        start = max(start, cursor)
        if start > cursor:
            out.append(html.escape(text[cursor:start]))
        piece = text[start:end] if end > start else ""
        bg = SPAN_COLOURS[i % len(SPAN_COLOURS)]
        out.append(f'<span style="{SPAN_STYLE.format(bg=bg)}" title="{tip}">'
                   f"{html.escape(piece)}</span>")
        cursor = max(cursor, end)
    out.append(html.escape(text[cursor:]))
    return ('<div class="tfviz-tokens" style="white-space:pre-wrap;line-height:1.9;'
            f'font-family:ui-monospace,monospace;">{"".join(out)}</div>')


def row_axis(n: int, labels: Sequence[str] | None) -> tuple[list[str], dict]:
    """One category per row, ``"'tok' (row i)"`` (equal labels stay apart), and the axis settings
    that show the bare tokens as ticks (thinned when crowded) -> (categories, axis kwargs)."""
    labels = default_tokens(n, labels)
    cats = [f"'{show_token(t)}' (row {i})" for i, t in enumerate(labels)]
    step = tick_step(n)
    return cats, dict(type="category", tickmode="array", tickvals=cats[::step],
                      ticktext=[show_token(t) for t in labels][::step], showgrid=False)


def similarity_heatmap(vectors, labels: Sequence[str], *,
                       title: str = "Cosine similarity of embeddings"):
    """Heatmap ``[n, n]`` of the cosine similarity of ``vectors [n, d]`` (token embeddings, or
    residual vectors per position): y and x = the labelled rows, −1..1 centred on 0. Equal labels
    stay separate (one category per row)."""
    v = np.asarray(vectors, dtype=float)
    s = cosine_similarity(v)
    n = s.shape[0]
    cats, axis = row_axis(n, labels)
    fig = go.Figure(go.Heatmap(z=s, x=cats, y=cats, name="cosine",
                               **diverging_colour(s, "cosine", limit=1.0),
                               hovertemplate="%{y} ↔ %{x}: cos %{z:.3f}<extra></extra>"))
    fig.update_xaxes(axis, title=dict(text="token"))
    fig.update_yaxes(axis, title=dict(text="token"), autorange="reversed")
    c = cell_size(n, lo=3, hi=24)
    return apply_theme(fig, title=title, height=n * c + 170, width=n * c + 240)


def nearest_neighbours_frame(vectors, labels: Sequence[str], k: int = 5, rows=None) -> pd.DataFrame:
    """For each of ``rows`` (default: every row): its ``k`` most cosine-similar other rows.
    Columns: token, rank, neighbour, cosine. Memory O(vocab · shown) (``nearest_by_cosine``)."""
    n = np.asarray(vectors).shape[0]
    labels = default_tokens(n, labels)
    rows = list(range(n)) if rows is None else [int(i) for i in rows]
    index, cosine = nearest_by_cosine(vectors, rows, k)
    out = [(labels[i], r + 1, labels[j], float(c))
           for i, js, cs in zip(rows, index, cosine) for r, (j, c) in enumerate(zip(js, cs))]
    return pd.DataFrame(out, columns=["token", "rank", "neighbour", "cosine"])


def token_pieces(rows: Sequence[dict], *, title: str | None = None):
    """The same text cut by several tokenizers (``tfviz.analysis.embeddings.tokenize_all``'s rows:
    kind, tokens, ids, offsets, count, unknowns): one bar per tokenizer, each token a segment as
    wide as the characters it covers, its text written inside when it fits; hover: the token's
    index, text, id and character span. Special tokens (empty spans) are left out."""
    fig = go.Figure()
    kinds = [f"{r['kind']} ({r['count']})" for r in rows]
    for k, (r, kind) in enumerate(zip(rows, kinds)):
        seg = [(i, int(a), int(b)) for i, (a, b) in enumerate(r["offsets"]) if int(b) > int(a)]
        toks = [show_token(str(r["tokens"][i])) for i, _, _ in seg]
        fig.add_trace(go.Bar(
            y=[kind] * len(seg), x=[b - a for _, a, b in seg], base=[a for _, a, _ in seg],
            orientation="h", name=r["kind"], text=toks, textposition="inside",
            insidetextanchor="middle", textangle=0, cliponaxis=False,
            marker=dict(color=[SPAN_COLOURS[i % 3].replace("0.22", "0.55").replace("0.28", "0.6")
                               for i, _, _ in seg], line=dict(width=1, color="rgba(255,255,255,0.9)")),
            customdata=[[i, int(r["ids"][i]), a, b] for i, a, b in seg],
            hovertemplate=f"{r['kind']}: token #%{{customdata[0]}} '%{{text}}' · id %{{customdata[1]}}"
                          " · chars %{customdata[2]}–%{customdata[3]}<extra></extra>",
            showlegend=False))
    fig.update_xaxes(title=dict(text="character position in the text"), showgrid=False)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(barmode="overlay", bargap=0.35, uniformtext=dict(minsize=9, mode="hide"))
    n = sum(r["count"] for r in rows)
    return apply_theme(fig, title=title or f"One text, three ways to cut it: {n} tokens in all",
                       height=110 * len(rows) + 150)
