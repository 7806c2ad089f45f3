"""Training: loss/accuracy curves, and a player that replays one head's pattern over training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .attention import HOVER, head_heatmap
from .theme import HEAD_COLOURS, MARGIN, apply_theme, below_axis_px, play_controls

SERIES = (("train_loss", "train loss", 1), ("val_loss", "validation loss", 1),
          ("accuracy", "accuracy", 2), ("val_accuracy", "validation accuracy", 2))


def loss_curves(history: Sequence[Mapping], *, log_y: bool = False,
                title: str = "Training curves"):
    """Top panel: train/validation loss against step; bottom panel (only if any record has an
    accuracy): accuracy 0..1 against step. ``history`` is a list of dicts with ``step`` and any of
    train_loss, val_loss, accuracy, val_accuracy (missing or None values are skipped, so
    validation every k steps works)."""
    has_acc = any(h.get("accuracy") is not None or h.get("val_accuracy") is not None
                  for h in history)
    fig = make_subplots(rows=2 if has_acc else 1, cols=1, shared_xaxes=True,
                        vertical_spacing=0.08, row_heights=[0.65, 0.35] if has_acc else None)
    for i, (key, name, row) in enumerate(SERIES):
        pts = [(h["step"], float(h[key])) for h in history if h.get(key) is not None]
        if not pts or (row == 2 and not has_acc):
            continue
        x, y = zip(*pts)
        fig.add_trace(go.Scatter(x=list(x), y=list(y), mode="lines+markers" if len(x) < 30 else
                                 "lines", name=name, line=dict(color=HEAD_COLOURS[i]),
                                 hovertemplate=f"step %{{x}}: {name} %{{y:.4f}}<extra></extra>"),
                      row=row, col=1)
    fig.update_yaxes(title=dict(text="loss"), type="log" if log_y else "linear", row=1, col=1)
    if has_acc:
        fig.update_yaxes(title=dict(text="accuracy"), range=[0, 1.02], row=2, col=1)
    fig.update_xaxes(title=dict(text="step"), row=2 if has_acc else 1, col=1)
    return apply_theme(fig, title=title, height=520 if has_acc else 380, width=800)


def _pick(snapshot, layer: int, head: int) -> np.ndarray:
    a = np.array(snapshot, dtype=float)  # a copy: NaN-ing infinities must not touch the input
    if a.ndim == 4:
        return a[layer, head]
    if a.ndim == 3:
        return a[head]
    if a.ndim == 2:
        return a
    raise ValueError(f"expected a snapshot [layer, head, q_pos, k_pos], got shape {a.shape}")


def snapshot_player(snapshots: Sequence, steps: Sequence[int], tokens: Sequence[str], *,
                    layer: int = 0, head: int = 0, k_tokens: Sequence[str] | None = None,
                    title: str | None = None):
    """Replay one head's pattern over training: ``snapshots`` is one ``[layer, head, q_pos, k_pos]``
    (or ``[head, …]`` / ``[q_pos, k_pos]``) array per saved step. The heatmap is ``head_heatmap``
    (y = q_pos, x = k_pos, 0..1); one animation frame per step with play button and slider."""
    if len(snapshots) != len(steps) or not len(steps):
        raise ValueError(f"{len(snapshots)} snapshots for {len(steps)} steps (need ≥ 1, equal)")
    zs = [_pick(s, layer, head) for s in snapshots]
    for z in zs:
        z[~np.isfinite(z)] = np.nan
    name = title or f"Layer {layer} head {head} over training"
    fig = head_heatmap(zs[0], tokens, k_tokens, title=f"{name} — step {steps[0]}")
    frames = [go.Frame(data=[go.Heatmap(z=z, hovertemplate=HOVER)], traces=[0], name=str(s),
                       layout=dict(title=dict(text=f"{name} — step {s}")))
              for z, s in zip(zs, steps)]
    fig.frames = frames
    base_b = fig.layout.margin.b if fig.layout.margin.b is not None else MARGIN["b"]
    controls = play_controls([f.name for f in frames], "step ",
                             below_px=below_axis_px(fig.layout.xaxis.ticktext or ()))
    fig.update_layout(**controls)
    fig.update_layout(height=(fig.layout.height or 500) + controls["margin"]["b"] - base_b,
                      width=max(fig.layout.width or 0, 560))
    return fig
