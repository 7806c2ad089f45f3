"""Training: loss/accuracy curves (one run, or several on the same axes), per-layer gradient norms,
and a player that replays one head's pattern over training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .attention import HOVER, head_heatmap
from .theme import HEAD_COLOURS, MAGNITUDE_SCALE, MARGIN, apply_theme, below_axis_px, play_controls

SERIES = (("train_loss", "train loss", 1), ("val_loss", "validation loss", 1),
          ("accuracy", "accuracy", 2), ("val_accuracy", "validation accuracy", 2))


def _loss_accuracy_axes(fig: go.Figure, log_y: bool, has_acc: bool, accuracy: str) -> None:
    """Loss on row 1 (log or linear), ``accuracy`` in [0, 1] on row 2 when shown, steps below."""
    fig.update_yaxes(title=dict(text="loss"), type="log" if log_y else "linear", row=1, col=1)
    if has_acc:
        fig.update_yaxes(title=dict(text=accuracy), range=[0, 1.02], row=2, col=1)
    fig.update_xaxes(title=dict(text="step"), row=2 if has_acc else 1, col=1)


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
    _loss_accuracy_axes(fig, log_y, has_acc, "accuracy")
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


CURVE_LABELS = {"train_loss": "train loss", "val_loss": "validation loss",
                "val_accuracy": "validation accuracy", "grad_norm": "gradient norm", "lr": "learning rate"}


def compare_curves(df: pd.DataFrame, *, metrics: Sequence[str] = ("train_loss", "val_loss"),
                   log_y: bool = False, title: str = "Training curves, same axes"):
    """Several runs on one set of axes: one colour per model, train loss solid, validation loss
    dashed with markers; a lower panel with validation accuracy when any run has it. ``df`` is
    long form (model, step, metric, value; ``tfviz.analysis.compare.curves_frame``)."""
    missing = {"model", "step", "metric", "value"} - set(df.columns)
    if missing:
        raise ValueError(f"compare_curves needs columns {sorted(missing)}")
    has_acc = bool((df["metric"] == "val_accuracy").any())
    fig = make_subplots(rows=2 if has_acc else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.65, 0.35] if has_acc else None)
    models = list(dict.fromkeys(df["model"]))
    for i, name in enumerate(models):
        colour = HEAD_COLOURS[i % len(HEAD_COLOURS)]
        panels = [(m, 1) for m in metrics] + ([("val_accuracy", 2)] if has_acc else [])
        for metric, row in panels:
            g = df[(df["model"] == name) & (df["metric"] == metric)].sort_values("step")
            if g.empty:
                continue
            dashed = metric.startswith("val_")
            label = CURVE_LABELS.get(metric, metric)
            fig.add_trace(go.Scatter(
                x=g["step"].to_numpy(), y=g["value"].to_numpy(dtype=float),
                mode="lines+markers" if dashed else "lines", name=f"{name}: {label}",
                legendgroup=str(name), line=dict(color=colour, dash="dash" if dashed else "solid",
                                                 width=2 if dashed else 1.6),
                marker=dict(size=6),
                hovertemplate=f"{name}, step %{{x}}: {label} %{{y:.4f}}<extra></extra>"),
                row=row, col=1)
    _loss_accuracy_axes(fig, log_y, has_acc, "validation accuracy")
    fig.update_layout(legend=dict(orientation="h", y=-0.18))
    return apply_theme(fig, title=title, height=560 if has_acc else 420, width=800)


def grad_norm_heatmap(frames: Mapping[str, pd.DataFrame], *,
                      title: str = "Gradient norm per layer over training"):
    """One row of cells per parameter group (embed, L0.attn, L0.mlp, …, head; the first layer
    at the top), one column per logged step, colour = log10 of the group's gradient norm before
    clipping; several runs stacked as tiles with one shared colour scale (``frames``: name ->
    ``tfviz.analysis.compare.grad_norm_frame``). Hover shows the exact norm."""
    frames = {k: v for k, v in frames.items() if len(v)}
    if not frames:
        raise ValueError("no gradient norms recorded (the runs predate per-layer recording)")
    fig = make_subplots(rows=len(frames), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=list(frames))
    values = np.concatenate([v["norm"].to_numpy(dtype=float) for v in frames.values()])
    positive = values[values > 0]
    lo, hi = (np.log10(positive.min()), np.log10(positive.max())) if positive.size else (0, 1)
    hi = hi if hi > lo else lo + 1
    for r, (name, df) in enumerate(frames.items(), 1):
        groups = list(dict.fromkeys(df["group"]))
        steps = sorted(df["step"].unique())
        table = df.pivot_table(index="group", columns="step", values="norm", aggfunc="first")
        table = table.reindex(index=groups, columns=steps)
        norm = table.to_numpy(dtype=float)
        with np.errstate(divide="ignore"):
            z = np.where(norm > 0, np.log10(np.where(norm > 0, norm, 1)), np.nan)
        fig.add_trace(go.Heatmap(
            z=z, x=steps, y=groups, customdata=norm, coloraxis="coloraxis",
            hovertemplate=f"{name}, step %{{x}}, %{{y}}: gradient norm %{{customdata:.4g}}<extra></extra>"),
            row=r, col=1)
        fig.update_yaxes(autorange="reversed", title=dict(text="parameters"), row=r, col=1)
    ticks = np.arange(np.floor(lo), np.ceil(hi) + 1)
    fig.update_layout(coloraxis=dict(
        colorscale=MAGNITUDE_SCALE, cmin=lo, cmax=hi,
        colorbar=dict(title=dict(text="gradient norm"), tickvals=ticks,
                      ticktext=[f"{10 ** t:g}" for t in ticks], thickness=12, outlinewidth=0)))
    fig.update_xaxes(title=dict(text="step"), row=len(frames), col=1)
    n_groups = max(len(set(v["group"])) for v in frames.values())
    return apply_theme(fig, title=title, height=120 + len(frames) * max(180, 18 * n_groups),
                       width=800)


def layer_grad_norm_bars(df: pd.DataFrame, *, log_y: bool = True,
                         title: str = "Gradient norm per layer"):
    """Grouped bars: x = layer (block), y = its mean gradient norm, one colour per model
    (``df``: model, layer, norm, steps; ``tfviz.analysis.compare.layer_grad_norms`` per model)."""
    missing = {"model", "layer", "norm"} - set(df.columns)
    if missing:
        raise ValueError(f"layer_grad_norm_bars needs columns {sorted(missing)}")
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby("model", sort=False)):
        g = g.sort_values("layer")
        fig.add_trace(go.Bar(x=[f"layer {int(l)}" for l in g["layer"]],
                             y=g["norm"].to_numpy(dtype=float), name=str(name),
                             marker_color=HEAD_COLOURS[i % len(HEAD_COLOURS)],
                             hovertemplate=f"{name}, %{{x}}: gradient norm %{{y:.4g}}<extra></extra>"))
    fig.update_xaxes(title=dict(text="block (layer 0 = nearest the input)"), type="category")
    fig.update_yaxes(title=dict(text="gradient norm"), type="log" if log_y else "linear")
    fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.25))
    return apply_theme(fig, title=title, height=420, width=800)
