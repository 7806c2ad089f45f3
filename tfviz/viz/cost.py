"""Figures for the Cost page: measured attention cost against n, analytic curves beside it.

Input: the DataFrame of ``tfviz.bench.attention.run`` (or its ``--csv``), one row per
(n, variant, pass) with columns ``n, variant, pass, time_s, peak_bytes, flops, bytes_analytic,
skipped`` (``skipped`` is a reason, empty when measured); and for the KV cache the bytes frame of
``tfviz.bench.kvcache.run``: ``kind, pos, measured_bytes, analytic_bytes``.

Both axes are logarithmic, so a power law is a straight line: slope 1 for the window's O(n·w),
slope 2 for full attention's O(n²). Measured = solid with markers, analytic = dashed, same colour.
The analytic *time* curve is FLOPs / (the variant's median measured FLOP/s): only its slope is
analytic, its height is fitted. Analytic *memory* is ``attention_bytes`` as is, nothing fitted.

Also the analytic curves alone, before anything is measured (``analytic_figure``, from
``tfviz.bench.attention.analytic_frame``: n, variant, pass, flops, bytes_analytic), generation
speed with and without the KV cache (``speed_figure``, from ``kvcache.generation_speed``: kind,
cache, tokens_per_s) and ``compact`` (one legend entry per variant, ticks at the n plotted).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .theme import HEAD_COLOURS, apply_theme

GIB = 2 ** 30


def _measured(df: pd.DataFrame, pass_: str) -> pd.DataFrame:
    rows = df[df["pass"] == pass_]
    if "skipped" in rows:
        rows = rows[rows["skipped"].fillna("").astype(str) == ""]
    return rows.sort_values("n")


def _skipped_note(df: pd.DataFrame, pass_: str, labels: Mapping[str, str]) -> str:
    if "skipped" not in df:
        return ""
    rows = df[(df["pass"] == pass_) & (df["skipped"].fillna("").astype(str) != "")]
    return "; ".join(f"{labels.get(v, v)} not run at n = {', '.join(str(n) for n in g['n'])}"
                     for v, g in rows.groupby("variant", sort=False))


def _figure(df, pass_, measured_col, analytic, y_title, title, dark, labels) -> go.Figure:
    fig = go.Figure()
    rows = _measured(df, pass_)
    labels = labels or {}
    for i, (variant, g) in enumerate(rows.groupby("variant", sort=False)):
        colour, name = HEAD_COLOURS[i % len(HEAD_COLOURS)], labels.get(variant, variant)
        fig.add_trace(go.Scatter(x=g["n"], y=g[measured_col], name=f"{name} (measured)",
                                 mode="lines+markers", line=dict(color=colour), legendgroup=variant))
        fig.add_trace(go.Scatter(x=g["n"], y=analytic(g), name=f"{name} (analytic)", mode="lines",
                                 line=dict(color=colour, dash="dash"), legendgroup=variant))
    fig.update_xaxes(type="log", title="sequence length n")
    fig.update_yaxes(type="log", title=y_title)
    note = _skipped_note(df, pass_, labels)
    if note:
        fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=-0.22, showarrow=False,
                           xanchor="left", font=dict(size=11))
    return apply_theme(fig, title=title, dark=dark)


def fitted_time(g: pd.DataFrame, time_col: str = "time_s") -> np.ndarray:
    """FLOPs / median(FLOPs / measured time): the analytic shape at the variant's own speed."""
    rate = float(np.median(g["flops"] / g[time_col]))
    return (g["flops"] / rate).to_numpy()


def time_figure(df: pd.DataFrame, pass_: str = "fwd+bwd", dark: bool = False,
                labels: Mapping[str, str] | None = None, time_col: str = "time_s",
                y_title: str = "time per call (s)") -> go.Figure:
    """Log-log time (s) against n, one colour per variant (named by ``labels``, else its code);
    ``time_col``: "time_s" (wall) or "cpu_s" (the work's CPU time)."""
    return _figure(df, pass_, time_col, lambda g: fitted_time(g, time_col), y_title,
                   f"Attention time vs n ({pass_})", dark, labels)


def memory_figure(df: pd.DataFrame, pass_: str = "fwd+bwd", dark: bool = False,
                  labels: Mapping[str, str] | None = None) -> go.Figure:
    """Log-log peak extra memory (GiB) against n, measured and analytic."""
    rows = df.assign(peak_gib=df["peak_bytes"] / GIB)
    return _figure(rows, pass_, "peak_gib", lambda g: (g["bytes_analytic"] / GIB).to_numpy(),
                   "peak extra memory (GiB)", f"Attention memory vs n ({pass_})", dark, labels)


def kv_cache_figure(sizes: pd.DataFrame, dark: bool = False) -> go.Figure:
    """KV-cache bytes (MiB) against cached positions for MHA / GQA / MQA."""
    fig = go.Figure()
    for i, (kind, g) in enumerate(sizes.sort_values("pos").groupby("kind", sort=False)):
        colour = HEAD_COLOURS[i % len(HEAD_COLOURS)]
        label = f"{kind} ({int(g['n_kv_heads'].iloc[0])} kv heads)" if "n_kv_heads" in g else kind
        fig.add_trace(go.Scatter(x=g["pos"], y=g["measured_bytes"] / 2 ** 20, mode="markers",
                                 name=f"{label}: cache.nbytes", marker=dict(color=colour),
                                 legendgroup=kind))
        fig.add_trace(go.Scatter(x=g["pos"], y=g["analytic_bytes"] / 2 ** 20, mode="lines",
                                 name=f"{label}: 2·L·n_kv·d_head·pos·B·bytes",
                                 line=dict(color=colour, dash="dash"), legendgroup=kind))
    fig.update_xaxes(title="cached positions")
    fig.update_yaxes(title="KV cache (MiB)", rangemode="tozero")
    return apply_theme(fig, title="KV cache size: MHA vs GQA vs MQA", dark=dark)


def analytic_figure(frame: pd.DataFrame, what: str = "flops", pass_: str = "fwd+bwd",
                    dark: bool = False, labels: Mapping[str, str] | None = None) -> go.Figure:
    """Log-log FLOPs (``what="flops"``) or analytic peak memory in GiB (``what="bytes"``) against
    n, one dashed line per variant: slope 2 for anything over n×n scores, slope 1 for the band."""
    if what not in ("flops", "bytes"):
        raise ValueError(f"what={what!r} must be 'flops' or 'bytes'")
    rows = frame[frame["pass"] == pass_].sort_values("n")
    fig = go.Figure()
    for i, (variant, g) in enumerate(rows.groupby("variant", sort=False)):
        y = g["flops"] if what == "flops" else g["bytes_analytic"] / GIB
        fig.add_trace(go.Scatter(x=g["n"], y=y, name=f"{(labels or {}).get(variant, variant)} (analytic)",
                                 mode="lines+markers",
                                 line=dict(color=HEAD_COLOURS[i % len(HEAD_COLOURS)], dash="dash"),
                                 marker=dict(size=5)))
    fig.update_xaxes(type="log", title="sequence length n")
    fig.update_yaxes(type="log", title="FLOPs per call" if what == "flops" else "peak extra memory (GiB)")
    title = "Attention FLOPs vs n" if what == "flops" else "Attention memory vs n"
    return apply_theme(fig, title=f"{title} ({pass_}, analytic)", dark=dark)


def speed_figure(speed: pd.DataFrame, dark: bool = False) -> go.Figure:
    """Tokens/s of ``generate`` with and without the KV cache, grouped by attention kind."""
    fig = go.Figure()
    for i, (use_cache, label) in enumerate(((True, "with KV cache"), (False, "without (re-run everything)"))):
        g = speed[speed["cache"] == use_cache]
        fig.add_trace(go.Bar(x=g["kind"], y=g["tokens_per_s"], name=label,
                             marker_color=HEAD_COLOURS[i],
                             text=[f"{v:,.0f}" for v in g["tokens_per_s"]], textposition="outside"))
    fig.update_layout(barmode="group", height=380)
    fig.update_xaxes(title="attention kind")
    fig.update_yaxes(title="generated tokens per second", rangemode="tozero")
    return apply_theme(fig, title="Generation speed: with and without the cache", dark=dark)


def compact(fig: go.Figure, height: int = 430) -> go.Figure:
    """A cost figure for the page: one legend entry per variant where measured and analytic share
    a colour (the dashed twin's entry is hidden, so say "dashed = analytic" beside the figure) and
    the x ticks at the n values plotted (not log-minor ticks)."""
    groups = [t.legendgroup for t in fig.data if t.legendgroup]
    for t in fig.data:
        if (t.name or "").endswith("(analytic)") and t.legendgroup and groups.count(t.legendgroup) > 1:
            t.showlegend = False
    xs = sorted({float(x) for t in fig.data if t.x is not None for x in t.x})
    if xs and fig.layout.xaxis.type == "log":
        fig.update_xaxes(tickvals=xs, ticktext=[f"{x:,.0f}" for x in xs], tickangle=0)
    fig.update_layout(height=height)
    return fig


def cost_figure(kind: str, df: pd.DataFrame, pass_: str, labels: dict | None = None, **kwargs) -> go.Figure:
    """The Cost page's figure ``kind`` ("time", "memory": measured; "flops", "bytes": analytic),
    compacted (:func:`compact`): one call, so a page can build it once for every session."""
    if kind == "time":
        fig = time_figure(df, pass_, labels=labels, **kwargs)
    elif kind == "memory":
        fig = memory_figure(df, pass_, labels=labels, **kwargs)
    else:
        fig = analytic_figure(df, kind, pass_, labels=labels, **kwargs)
    return compact(fig)
