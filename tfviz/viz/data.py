"""Data behind figures, for CSV download: a generic ``figure_data(fig)`` and shared numerics.

Builders with a natural tidy form also have their own ``*_frame`` function (``pattern_frame``,
``mask_frame``, ``step_through_table`` …); ``figure_data`` works for every figure: one row per
heatmap cell / per point, columns named after the trace's axis titles.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go


def cosine_similarity(vectors) -> np.ndarray:
    """``vectors [n, d]`` -> cosine similarity ``[n, n]``; a zero vector has similarity 0."""
    v = np.asarray(vectors, dtype=float)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    u = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
    return np.clip(u @ u.T, -1.0, 1.0)


NEIGHBOUR_CHUNK_BYTES = 8 * 2**20  # one block of similarities at a time


def nearest_by_cosine(vectors, rows=None, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``rows`` (indices into ``vectors [n, d]``; default every row): the ``k`` other
    rows with the highest cosine similarity -> (indices [len(rows), k'], cosines [len(rows), k']),
    best first, k' = min(k, n - 1). Computed in blocks of rows, so memory is O(n · k + block · n),
    never n x n (a 50,000-token vocabulary: 10 GB as one float32 matrix). Ties keep the lower index."""
    v = np.asarray(vectors)
    if v.dtype not in (np.float32, np.float64):
        v = v.astype(np.float32)
    n = v.shape[0]
    rows = np.arange(n) if rows is None else np.asarray(list(rows), dtype=np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"rows must be in [0, {n})")
    k = max(0, min(int(k), n - 1))
    norms = np.sqrt(np.einsum("ij,ij->i", v, v))  # no normalised copy of the matrix
    inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    index = np.zeros((rows.size, k), dtype=np.int64)
    cosine = np.zeros((rows.size, k), dtype=np.float64)
    if k == 0:
        return index, cosine
    block = max(1, NEIGHBOUR_CHUNK_BYTES // (4 * n))
    for start in range(0, rows.size, block):
        r = rows[start:start + block]
        s = v[r] @ v.T  # [block, n]
        s *= inverse[r][:, None]
        s *= inverse[None, :]
        np.clip(s, -1.0, 1.0, out=s)
        s[np.arange(r.size), r] = -np.inf  # never its own neighbour
        np.negative(s, out=s)
        top = np.argpartition(s, k - 1, axis=1)[:, :k]
        vals = -np.take_along_axis(s, top, axis=1)
        order = np.lexsort((top, -vals), axis=1)  # by cosine, then by index
        index[start:start + r.size] = np.take_along_axis(top, order, axis=1)
        cosine[start:start + r.size] = np.take_along_axis(vals, order, axis=1)
    return index, cosine


def _axis_title(fig: go.Figure, trace, letter: str) -> str:
    """The title of the trace's x or y axis, following ``matches`` (shared subplot axes)."""
    ref = getattr(trace, f"{letter}axis", None) or letter
    seen = set()
    while ref and ref not in seen:
        seen.add(ref)
        axis = fig.layout[f"{letter}axis{ref[1:]}"]
        if axis is None:
            break
        if axis.title is not None and axis.title.text:
            return axis.title.text
        ref = axis.matches
    return letter


def _values(v) -> list:
    return [] if v is None else list(np.asarray(v, dtype=object).ravel())


def _trace_rows(fig: go.Figure, trace, label: str) -> pd.DataFrame:
    xt, yt = _axis_title(fig, trace, "x"), _axis_title(fig, trace, "y")
    if xt == yt:
        xt, yt = f"{xt} (x)", f"{yt} (y)"
    if trace.type == "heatmap":
        z = np.asarray(trace.z, dtype=float)
        ny, nx = z.shape
        x = _values(trace.x) or list(range(nx))
        y = _values(trace.y) or list(range(ny))
        iy, ix = np.nonzero(np.isfinite(z))
        return pd.DataFrame({"trace": label, yt: np.asarray(y, dtype=object)[iy],
                             xt: np.asarray(x, dtype=object)[ix], "value": z[iy, ix]})
    x, y = _values(getattr(trace, "x", None)), _values(getattr(trace, "y", None))
    n = max(len(x), len(y))
    if n == 0:
        return pd.DataFrame()
    x = x or list(range(n))
    y = y or list(range(n))
    df = pd.DataFrame({"trace": label, xt: x, yt: y})
    return df[[a is not None for a in x]]  # drop the None separators of line segments


def figure_data(fig: go.Figure) -> pd.DataFrame:
    """Long-format data of a figure: heatmaps give one row per non-NaN cell (y label, x label,
    value), scatter/bar traces one row per point. Click-selection overlays (``meta="select"``) and
    token label traces are skipped. Animations give one block per frame (column ``frame``)."""
    parts = []
    frames = list(fig.frames) if fig.frames else [None]
    for frame in frames:
        traces = list(fig.data)
        if frame is not None:  # a frame's traces replace the base traces they point at
            idx = frame.traces if frame.traces is not None else range(len(frame.data))
            for i, t in zip(idx, frame.data):
                base = traces[i].to_plotly_json()
                base.update({k: v for k, v in t.to_plotly_json().items() if v is not None})
                traces[i] = type(traces[i])(base)
        for i, t in enumerate(traces):
            if t.meta in ("select", "labels") or t.type not in ("heatmap", "scatter", "bar"):
                continue
            df = _trace_rows(fig, t, t.name or f"trace {i}")
            if frame is not None:
                df.insert(0, "frame", frame.name)
            parts.append(df)
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
