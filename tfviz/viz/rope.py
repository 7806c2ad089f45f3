"""RoPE (Su et al. 2021): each pair (x_2i, x_2i+1) of q and k is rotated by the angle p·θ_i,
θ_i = base^(−2i/d_head), exactly as ``tfviz.model.positional.apply_rotary``:
(x0, x1) -> (x0 cos a − x1 sin a, x0 sin a + x1 cos a). So q_m · k_n depends on m − n only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .theme import HEAD_COLOURS, apply_theme, cell_size, diverging_colour, play_controls


def rotate_pair(pair, angle: float) -> np.ndarray:
    """Rotate a 2-vector by ``angle`` radians (the RoPE rotation of one pair)."""
    x0, x1 = np.asarray(pair, dtype=float)
    c, s = np.cos(angle), np.sin(angle)
    return np.array([x0 * c - x1 * s, x0 * s + x1 * c])


def rope_pair_scores(q, k, freq: float, n: int) -> np.ndarray:
    """``[m, n]`` dot products of one rotated q pair at position m with one rotated k pair at n."""
    rq = np.array([rotate_pair(q, m * freq) for m in range(n)])
    rk = np.array([rotate_pair(k, j * freq) for j in range(n)])
    return rq @ rk.T


def _arrow(v: np.ndarray, name: str, colour: str) -> go.Scatter:
    return go.Scatter(x=[0.0, float(v[0])], y=[0.0, float(v[1])], mode="lines+markers", name=name,
                      line=dict(color=colour, width=3),
                      marker=dict(symbol=["circle", "arrow"], size=[4, 14], angleref="previous",
                                  color=colour),
                      hovertemplate=f"{name}: (%{{x:.3f}}, %{{y:.3f}})<extra></extra>")


def rope_rotation_animation(q, freq: float, positions: Sequence[int], *, k=None,
                            k_position: int | None = None, pair_index: int | None = None,
                            title: str | None = None, start: int | None = None,
                            totals: Sequence[float] | None = None):
    """One q pair (and optionally one k pair) in its 2-D plane, rotating as the position grows.
    x = first component x_2i, y = second x_2i+1. One animation frame per position m (play button
    and slider): q is drawn at angle m·θ. With ``k``: at ``k_position`` if given (q moves, k stays:
    the score changes with m − n) or at the same position m (both turn together: the score stays
    constant). Each frame's title gives the angle and this pair's part of q·k; with ``totals``
    (the whole vectors' q·k at each position, aligned with ``positions``) the whole q·k first.
    ``start``: the position the figure opens on (default the first), e.g. the page's chosen m."""
    q = np.asarray(q, dtype=float)
    positions = [int(p) for p in positions]
    if q.shape != (2,) or not positions:
        raise ValueError("expected q as one pair [2] and at least one position")
    kv = None if k is None else np.asarray(k, dtype=float)
    pair = "" if pair_index is None else f" (pair {pair_index}, dims {2 * pair_index}, "\
                                         f"{2 * pair_index + 1})"
    base_title = title or f"RoPE rotation{pair}, θ = {freq:.4g} rad/position"

    def traces(m: int) -> tuple[list[go.Scatter], str]:
        rq = rotate_pair(q, m * freq)
        out = [_arrow(rq, f"q at m={m}", HEAD_COLOURS[0])]
        text = f"m = {m} · angle {m * freq:.3f} rad"
        if kv is not None:
            n = m if k_position is None else int(k_position)
            rk = rotate_pair(kv, n * freq)
            out.append(_arrow(rk, f"k at n={n}", HEAD_COLOURS[1]))
            part = f"pair's part of q·k {float(rq @ rk):.3f}"
            text += (f" · m − n = {m - n} · " + (part if totals is None else
                                                  f"q·k = {float(totals[positions.index(m)]):.4f} ({part})"))
        return out, text

    if totals is not None and len(totals) != len(positions):
        raise ValueError(f"totals has {len(totals)} values for {len(positions)} positions")
    first = positions[0] if start is None or int(start) not in positions else int(start)
    trail = np.array([rotate_pair(q, m * freq) for m in positions])
    fig = go.Figure([go.Scatter(x=trail[:, 0], y=trail[:, 1], mode="markers", name="q tips",
                                marker=dict(size=5, color="rgba(128,128,128,0.5)"),
                                customdata=positions,
                                hovertemplate="m = %{customdata}<extra>q tip</extra>")]
                    + traces(first)[0])
    frames = []
    for m in positions:
        data, text = traces(m)
        frames.append(go.Frame(data=data, traces=list(range(1, 1 + len(data))), name=str(m),
                               layout=dict(title=dict(text=f"{base_title}<br><sup>{text}</sup>"))))
    fig.frames = frames
    fig.update_layout(title=dict(text=f"{base_title}<br><sup>{traces(first)[1]}</sup>"))
    fig.update_layout(**play_controls([f.name for f in frames], "position m = ", 250),
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"))
    fig.layout.sliders[0].active = positions.index(first)  # the slider opens where the figure does
    fig.update_layout(margin=dict(t=120))
    r = 1.15 * max(np.linalg.norm(q), 0 if kv is None else np.linalg.norm(kv), 1e-9)
    fig.update_xaxes(title=dict(text="x_2i (first of the pair)"), range=[-r, r], zeroline=True)
    fig.update_yaxes(title=dict(text="x_2i+1 (second of the pair)"), range=[-r, r],
                     scaleanchor="x", scaleratio=1, zeroline=True)
    return apply_theme(fig, height=760, width=640)


def rope_frequencies(freqs, *, context_length: int | None = None,
                     title: str = "RoPE frequencies per pair"):
    """Left: θ_i (radians per position) against pair index i (dims 2i, 2i+1), log scale. Right:
    wavelength 2π/θ_i in positions; a dashed line at ``context_length``: pairs above it never
    complete a turn inside the context (they carry coarse, slowly varying position)."""
    f = np.asarray(freqs, dtype=float)
    i = np.arange(len(f))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("frequency θ_i", "wavelength 2π/θ_i"))
    fig.add_trace(go.Scatter(x=i, y=f, mode="lines+markers", name="θ_i",
                             hovertemplate="pair %{x}: θ = %{y:.4g} rad/position<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=i, y=2 * np.pi / f, mode="lines+markers", name="wavelength",
                             hovertemplate="pair %{x}: one turn every %{y:.4g} positions"
                                           "<extra></extra>"), row=1, col=2)
    if context_length is not None:
        # a trace, not add_hline: shapes and their annotations disagree about log coordinates
        fig.add_trace(go.Scatter(x=[-0.5, len(f) - 0.5], y=[context_length] * 2, mode="lines+text",
                                 line=dict(dash="dash", color="#9ca3af"), name="context",
                                 text=["", f"context {context_length}"], textposition="top left",
                                 hovertemplate=f"context length {context_length}<extra></extra>"),
                      row=1, col=2)
    fig.update_xaxes(title=dict(text="pair i (dims 2i, 2i+1)"))
    fig.update_yaxes(type="log", title=dict(text="θ_i (radians / position)"), row=1, col=1)
    fig.update_yaxes(type="log", title=dict(text="wavelength (positions)"), row=1, col=2)
    fig.update_layout(showlegend=False)
    return apply_theme(fig, title=title, height=400, width=900)


def rope_relative_scores(scores, *, title: str = "RoPE: one q/k pair's score over (m, n)"):
    """Heatmap ``scores [m, n]``: y = q_pos m, x = k_pos n, diverging around 0. The score of one
    rotated pair depends only on m − n, so it is constant along every diagonal; the subtitle
    reports the largest spread along a diagonal (≈ 0 up to float error)."""
    s = np.asarray(scores, dtype=float)
    nm, nn = s.shape
    spread = max(np.ptp(np.diagonal(s, d)) for d in range(-nm + 1, nn))
    rel = np.subtract.outer(np.arange(nm), np.arange(nn))
    fig = go.Figure(go.Heatmap(z=s, x=list(range(nn)), y=list(range(nm)), customdata=rel,
                               name="score", **diverging_colour(s, "q·k"),
                               hovertemplate="m = %{y}, n = %{x} (m − n = %{customdata}): "
                                             "%{z:.4f}<extra></extra>"))
    fig.update_xaxes(title=dict(text="k_pos n"), showgrid=False)
    fig.update_yaxes(title=dict(text="q_pos m"), autorange="reversed", showgrid=False)
    c = cell_size(max(nm, nn), lo=3, hi=20)
    return apply_theme(fig, title=f"{title}<br><sup>constant along diagonals: largest spread "
                                  f"{spread:.2e}</sup>", height=nm * c + 180, width=nn * c + 230)
