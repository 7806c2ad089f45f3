"""Path patching: which earlier head's output feeds this head's queries, keys or values?

Activation patching replaces an activation and lets the change flow everywhere downstream. Path
patching (Wang et al. 2022, "Interpretability in the Wild", §3; Goldowsky-Dill et al. 2023)
lets it flow along one path only: from a *sender* (a head's output) to a *receiver* (one head's
query, key or value input, or the logits), every other head held at its value on the run being
patched. Two runs per sender, batched over senders:

  1. ``inputs`` with the sender's output taken from ``reference`` and every other head's output
     frozen at its value on ``inputs`` (MLPs recomputed, or frozen too with ``freeze_mlps``);
     keep the residual stream each receiver reads.
  2. ``inputs`` again, with only the receiver's own input replaced by what 1 kept — one head's
     slice of ``hook_q_input`` / ``hook_k_input`` / ``hook_v_input`` ([batch, pos, head,
     d_model], TransformerLens's ``use_split_qkv_input``) — and the metric read.

    r = Receiver(2, 1, "k")                                   # L2H1's keys
    e = path_sweep(model, corrupt, [r], metric, reference=clean)   # senders: every head before layer 2
    e.values                                                  # [layer, head], NaN at and after layer 2

Receivers may be several heads at once (e.g. all name movers' queries); ``Receiver.logits()``
reads the metric straight after step 1 (the sender's direct path to the output through frozen
heads). Single-stack models (decoder or encoder).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..model.hooks import hook_name
from . import interventions as iv
from ..recording import record

INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class Receiver:
    """Head ``head`` of ``layer``'s ``input`` ("q", "k" or "v"; for k / v a key/value head under
    GQA), or the logits (``layer`` None)."""
    layer: int | None
    head: int = 0
    input: str = "q"

    @classmethod
    def logits(cls) -> "Receiver":
        return cls(None)

    @property
    def name(self) -> str | None:
        return None if self.layer is None else hook_name(self.layer, f"hook_{self.input}_input")

    def __str__(self) -> str:
        return "logits" if self.layer is None else f"L{self.layer}H{self.head} {self.input}"


def _check(model, receivers: Sequence[Receiver], senders) -> None:
    cfg = model.config
    if cfg.arch == "encoder-decoder":
        raise ValueError("path patching here takes one-stack models (decoder or encoder)")
    if not receivers:
        raise ValueError("name at least one receiver (a head's q, k or v input, or Receiver.logits())")
    if any(r.layer is None for r in receivers) and len(receivers) > 1:
        raise ValueError("the logits are a receiver of their own: do not mix them with heads")
    for r in receivers:
        if r.layer is None:
            continue
        n = cfg.n_heads if r.input == "q" else cfg.n_kv_heads
        if r.input not in INPUTS:
            raise ValueError(f"a receiver's input is one of {', '.join(INPUTS)}, not {r.input!r}")
        if not 0 <= r.layer < cfg.n_layers or not 0 <= r.head < n:
            raise ValueError(f"{r}: the model has {cfg.n_layers} layers of {n} {'query' if r.input == 'q' else 'key/value'} heads")
    first = min((r.layer for r in receivers if r.layer is not None), default=cfg.n_layers)
    late = [s for s in senders if iv._layer_of(s.name)[1] is None or iv._layer_of(s.name)[1] >= first]
    if late:
        raise ValueError(f"a sender must come before its receivers (layer < {first}): {late[0]}")


def path_patch(model, inputs, senders: Sequence[iv.Site], receivers: Sequence[Receiver], metric, *,
               mode: str = "patch", reference=None, freeze_mlps: bool = False, reduce: str = "mean",
               progress: iv.Progress | None = None, max_rows: int = iv.MAX_ROWS, **forward_kwargs) -> np.ndarray:
    """The metric with each sender's effect let through to ``receivers`` only -> float64
    [len(senders)] (``reduce="none"``: [len(senders), batch]). A sender is a ``Site`` (usually
    ``interventions.head``) before every receiver; its value comes from ``mode`` (``MODES``:
    "patch" from ``reference``, "zero", "mean", ...). See the module docstring for the two runs."""
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce must be 'mean' or 'none', not {reduce!r}")
    means, rows = _path_patch(model, inputs, senders, receivers, metric, mode, reference, freeze_mlps,
                              reduce == "none", progress, max_rows, forward_kwargs)
    return means if reduce == "mean" else rows


def _path_patch(model, inputs, senders, receivers, metric, mode, reference, freeze_mlps, want_rows,
                progress, max_rows, forward_kwargs):
    inputs = iv._as_inputs(inputs)
    senders, receivers = list(senders), list(receivers)
    _check(model, receivers, senders)
    cfg = model.config
    to_logits = receivers[0].layer is None
    top = cfg.n_layers if to_logits else max(r.layer for r in receivers)
    z_names = [hook_name(l, "attn.hook_z") for l in range(top)]
    mlp_names = [hook_name(l, "hook_mlp_out") for l in range(top)
                 if freeze_mlps and hook_name(l, "hook_mlp_out") in model.hook_points()]
    frozen = record(model, *inputs, names=z_names + mlp_names, device=None, **forward_kwargs)
    shapes = {n: tuple(frozen[n].shape) for n in z_names + mlp_names}
    s_names = {s.name for s in senders} - set(shapes)
    if s_names:
        shapes.update(iv._shapes(model, inputs, s_names, forward_kwargs))
    values = iv._reference_values(model, senders, mode, reference, inputs, forward_kwargs, shapes)
    B = inputs[0].shape[0]
    k_max = max(1, max_rows // B)
    out = np.zeros(len(senders))
    rows = np.zeros((len(senders), B)) if want_rows else None
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(senders), k_max):
                chunk = senders[start:start + k_max]
                m, r = _chunk(model, inputs, chunk, receivers, frozen, values, z_names + mlp_names,
                              metric, B, to_logits, want_rows, forward_kwargs)
                out[start:start + len(chunk)] = m
                if rows is not None:
                    rows[start:start + len(chunk)] = r
                if progress is not None:
                    stop = start + len(chunk)
                    progress(min(1.0, stop / len(senders)), f"{stop} of {len(senders)} senders")
    finally:
        model.train(was)
    return out, rows


def _chunk(model, inputs, chunk, receivers, frozen, values, frozen_names, metric, B, to_logits,
           want_rows, forward_kwargs):
    k = len(chunk)
    run_inputs = tuple(iv._repeat(t, k) for t in inputs)
    kw = {n: iv._repeat(v, k) for n, v in forward_kwargs.items()}

    # 1. the sender from the reference, every other head (and MLP, if asked) frozen
    def freeze(name):
        def fn(x):
            x = iv._repeat(frozen[name], k).to(x.dtype).clone()
            for j, s in enumerate(chunk):
                if s.name == name:
                    _put(x, slice(j * B, (j + 1) * B), s, values[name])
            return x
        return fn

    def sender_only(name):
        def fn(x):
            x = x.clone()
            for j, s in enumerate(chunk):
                if s.name == name:
                    _put(x, slice(j * B, (j + 1) * B), s, values[name])
            return x
        return fn
    fwd = [(n, freeze(n)) for n in frozen_names]
    fwd += [(n, sender_only(n)) for n in {s.name for s in chunk} - set(frozen_names)]
    kept: dict[str, torch.Tensor] = {}
    layers = sorted({r.layer for r in receivers if r.layer is not None})
    for l in layers:
        name = hook_name(l, "hook_resid_pre")
        fwd.append((name, lambda x, name=name: kept.__setitem__(name, x.clone())))
    with iv.hooks(model, fwd):
        logits = model(*run_inputs, **kw)
    if not to_logits:
        # 2. only the receivers' inputs replaced by what run 1 kept
        def receive(r):
            src = kept[hook_name(r.layer, "hook_resid_pre")]

            def fn(x):
                x = x.clone()
                x[:, :, r.head] = src.to(x.dtype)
                return x
            return r.name, fn
        with iv.hooks(model, [receive(r) for r in receivers]):
            logits = model(*run_inputs, **kw)
    parts = [logits[j * B:(j + 1) * B] for j in range(k)]
    means = [float(metric(lg)) for lg in parts]
    rows = [iv.rows_of(metric, lg).cpu().numpy() for lg in parts] if want_rows else None
    return means, rows


def _put(x: torch.Tensor, rows: slice, site: iv.Site, value) -> None:
    idx = (rows, *site.index)
    if value is None:
        x[idx] = 0
    else:  # [1, ...] (a mean) or [B, ...] (row by row)
        x[idx] = value[(slice(None), *site.index)].to(x.dtype)


def path_sweep(model, inputs, receivers: Sequence[Receiver], metric, *, mode: str = "patch",
               reference=None, freeze_mlps: bool = False, reduce: str = "mean",
               progress: iv.Progress | None = None, max_rows: int = iv.MAX_ROWS, **forward_kwargs) -> iv.Effect:
    """Every head before the first receiver as the sender, one at a time -> an ``Effect`` laid out
    [layer, head] (NaN where a head is not before the receivers; ``grid`` "path to <receivers>",
    ``baseline`` the unpatched metric; ``reduce="none"``: ``per_example`` too)."""
    receivers = list(receivers)
    inputs = iv._as_inputs(inputs)
    cfg = model.config
    first = cfg.n_layers if receivers and receivers[0].layer is None else \
        min((r.layer for r in receivers if r.layer is not None), default=0)
    senders = [iv.head(l, h) for l in range(first) for h in range(cfg.n_heads)]
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce must be 'mean' or 'none', not {reduce!r}")
    want = reduce == "none"
    vals, rows = _path_patch(model, inputs, senders, receivers, metric, mode, reference, freeze_mlps,
                             want, progress, max_rows, forward_kwargs)
    base, base_rows = iv._effect(model, inputs, [[]], metric, "zero", None, None, max_rows, want, forward_kwargs)
    L, H = cfg.n_layers, cfg.n_heads
    grid = np.full((L, H), np.nan)
    grid[:first] = vals.reshape(first, H)
    per = None
    if want:
        per = np.full((L, H, rows.shape[-1]), np.nan)
        per[:first] = rows.reshape(first, H, -1)
    labels = [[f"L{l}H{h}" for h in range(H)] for l in range(L)]
    what = " + ".join(map(str, receivers))
    return iv.Effect(grid, float(base[0]), f"path to {what}", mode, labels, per,
                     None if base_rows is None else base_rows[0])


__all__ = ["INPUTS", "Receiver", "path_patch", "path_sweep"]
