"""Generation: where each newly generated token's query looked, step by step.

At generation step t the model reads the last token (position p_t) and attends over the keys
0..p_t (the KV cache), then emits the next token. Row t of the figure is that attention row, so
the filled cells form a lower-triangular staircase.

Also the generated text as coloured tokens (``generated_tokens_html``: token strings and
probabilities in, HTML out) and the KV cache growing step by step (``kv_cache_growth``).
"""
from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .attention import token_axis
from .theme import (HEAD_COLOURS, apply_theme, attention_colour, cell_size, default_tokens,
                    show_token)


def generation_matrix(patterns_per_step, head: int | None = None) -> np.ndarray:
    """``[step, k_pos]`` (NaN where a step had no key yet) from a list of per-step rows
    ``[k_len]`` or ``[head, k_len]`` (heads averaged, or ``head`` picked), or a ready matrix."""
    if isinstance(patterns_per_step, np.ndarray) and patterns_per_step.ndim == 2 and head is None:
        return patterns_per_step.astype(float)
    rows = []
    for r in patterns_per_step:
        r = np.asarray(r, dtype=float)
        if r.ndim == 2:
            r = r.mean(0) if head is None else r[head]
        rows.append(r)
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), np.nan)
    for t, r in enumerate(rows):
        out[t, :len(r)] = r
    return out


def _query_positions(z: np.ndarray, q_positions: Sequence[int] | None) -> list[int]:
    """Each step's query position: given, or the last key with a finite weight."""
    if q_positions is not None:
        if len(q_positions) != z.shape[0]:
            raise ValueError(f"{len(q_positions)} q_positions for {z.shape[0]} steps")
        return [int(p) for p in q_positions]
    return [int(np.nonzero(np.isfinite(r))[0].max()) if np.isfinite(r).any() else 0 for r in z]


def generation_attention(patterns_per_step, tokens: Sequence[str], *, head: int | None = None,
                         q_positions: Sequence[int] | None = None,
                         title: str = "Attention of each generated token"):
    """Heatmap: y = generation step (row label "step t · query 'x' (pos p) → 'next'"), x = k_pos
    over the whole sequence ``tokens`` (prompt + generated). Step t's query sits at the last key
    it sees (p = its row length − 1, or ``q_positions[t]``; keys after p are blanked) and generates
    tokens[p + 1]. Heads are averaged unless ``head`` is given."""
    z = generation_matrix(patterns_per_step, head)
    z[~np.isfinite(z)] = np.nan
    qpos = _query_positions(z, q_positions)
    for t, p in enumerate(qpos):
        z[t, p + 1:] = np.nan
    steps, width = z.shape
    tokens = default_tokens(len(tokens), tokens)
    if len(tokens) < width:
        raise ValueError(f"{len(tokens)} tokens but attention rows reach {width} keys")
    x, xaxis = token_axis(tokens[:width], "key", "k_pos (key)")
    y = []
    for t, p in enumerate(qpos):
        nxt = f" → '{show_token(tokens[p + 1])}'" if p + 1 < len(tokens) else ""
        y.append(f"step {t} · query '{show_token(tokens[p])}' (pos {p}){nxt}")
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, hoverongaps=False, name="attention",
                               hovertemplate="%{y}<br>%{x}: %{z:.3f}<extra></extra>",
                               **attention_colour()))
    fig.update_layout(xaxis=xaxis, yaxis=dict(type="category", autorange="reversed", showgrid=False,
                                              title=dict(text="generation step (query)")))
    c = cell_size(max(steps, width), hi=24)
    sub = "mean over heads" if head is None else f"head {head}"
    return apply_theme(fig, title=f"{title} ({sub})", height=steps * c + 200,
                       width=width * c + 420)


def generation_frame(patterns_per_step, tokens: Sequence[str], head: int | None = None,
                     q_positions: Sequence[int] | None = None) -> pd.DataFrame:
    """Tidy rows: step, q_pos, q_token, k_pos, k_token, weight (only the keys each step saw)."""
    z = generation_matrix(patterns_per_step, head)
    z[~np.isfinite(z)] = np.nan
    qpos = _query_positions(z, q_positions)
    for s, p in enumerate(qpos):
        z[s, p + 1:] = np.nan
    tokens = default_tokens(len(tokens), tokens)
    t, k = np.nonzero(np.isfinite(z))
    q = np.asarray(qpos, dtype=int)[t]
    tk = np.asarray(tokens, dtype=object)
    return pd.DataFrame({"step": t, "q_pos": q, "q_token": tk[q], "k_pos": k, "k_token": tk[k],
                         "weight": z[t, k]})


PROMPT_STYLE = ("border:1px solid rgba(128,128,128,0.55);border-radius:4px;padding:1px 4px;"
                "margin:2px;opacity:0.75;display:inline-block;")
NEW_STYLE = ("background:rgba(0,114,178,{a:.2f});border:1px solid rgba(0,114,178,0.8);"
             "border-radius:4px;padding:1px 4px;margin:2px;display:inline-block;")


def generated_tokens_html(tokens: Sequence[str], n_prompt: int, probs: Sequence[float]) -> str:
    """One chip per token, for ``st.html``: prompt tokens outlined grey, generated tokens filled
    blue with opacity = the probability the model gave the chosen token (hover: step, p).
    ``probs`` has one entry per generated token. All text is HTML-escaped."""
    if len(tokens) - n_prompt != len(probs) or n_prompt < 0:
        raise ValueError(f"{len(tokens)} tokens, {n_prompt} in the prompt, {len(probs)} probabilities")
    out = []
    for i, tok in enumerate(tokens):
        text = html.escape(str(tok).replace(" ", "␣").replace("\n", "↵"))
        if i < n_prompt:
            out.append(f'<span style="{PROMPT_STYLE}" title="prompt · pos {i}">{text}</span>')
        else:
            p = float(probs[i - n_prompt])
            tip = f"step {i - n_prompt} · pos {i} · p = {p:.3f}"
            out.append(f'<span style="{NEW_STYLE.format(a=0.1 + 0.6 * p)}" title="{tip}">{text}</span>')
    return ('<div class="tfviz-generated" style="line-height:2.1;font-family:ui-monospace,'
            f'monospace;">{"".join(out)}</div>')


def kv_cache_growth(positions: Sequence[int], nbytes: Sequence[int],
                    formula: Sequence[int] | None = None, *, title: str = "KV cache size"):
    """Bytes held by the self-attention KV cache (y) against cached positions (x), measured after
    each generation step; ``formula`` (same length) adds 2 · layers · kv_heads · d_head · pos ·
    bytes as a dashed line, which the measured points should sit on."""
    if len(positions) != len(nbytes) or (formula is not None and len(formula) != len(nbytes)):
        raise ValueError("positions, nbytes (and formula) need one entry per step")
    fig = go.Figure(go.Scatter(x=list(positions), y=list(nbytes), mode="lines+markers",
                               name="measured (cache.nbytes)", line=dict(color=HEAD_COLOURS[0]),
                               hovertemplate="%{x} positions: %{y:,} bytes<extra></extra>"))
    if formula is not None:
        fig.add_trace(go.Scatter(x=list(positions), y=list(formula), mode="lines",
                                 name="2·layers·kv_heads·d_head·pos·4 B",
                                 line=dict(color=HEAD_COLOURS[1], dash="dash")))
    span = max(positions) - min(positions) if len(positions) else 0
    fig.update_xaxes(title=dict(text="cached positions (pos)"), dtick=max(1, -(-span // 10)))
    fig.update_yaxes(title=dict(text="bytes"), rangemode="tozero")
    fig.update_layout(legend=dict(orientation="h", y=-0.3))
    return apply_theme(fig, title=title, height=320)


def next_token_bars(tokens: Sequence[str], plain, chosen, *, chosen_name: str,
                    title: str = "The next token's probabilities"):
    """Logits -> the next token (a lesson step): one group of bars per candidate token (``tokens``,
    most likely first), its probability under the plain softmax (temperature 1, ``plain``) beside
    the probability the chosen sampling setting gives it (``chosen``; ``chosen_name`` says the
    setting). Both from 0 to 1 on one axis, the exact values in the hover."""
    labels = [show_token(t) for t in tokens]
    fig = go.Figure()
    for name, p, colour in (("softmax (temperature 1)", plain, HEAD_COLOURS[7]),
                            (chosen_name, chosen, HEAD_COLOURS[0])):
        fig.add_trace(go.Bar(x=labels, y=np.asarray(p, dtype=float), name=name, marker_color=colour,
                             hovertemplate=f"'%{{x}}': {name} p=%{{y:.4f}}<extra></extra>"))
    fig.update_xaxes(type="category", title=dict(text="candidate next token"))
    fig.update_yaxes(title=dict(text="probability"), range=[0, 1.05])
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.3))
    return apply_theme(fig, title=title, height=380, width=700)
