"""Does this head matter? Ablation and activation patching, addressed by the public hook names.

Attention weights say where a head looks, not whether the answer depends on it (Jain & Wallace
2019; Wiegreffe & Pinter 2019). An intervention answers that: replace one activation and measure
what the output does (TransformerLens's ``run_with_hooks`` / ``generic_activation_patch``; Meng et
al. 2022's causal tracing; Wang et al. 2022's patching on indirect-object identification).

    with hooks(model, [("blocks.1.attn.hook_z", fn)]): ...    # fn(x) -> x', removed afterwards
    effect(model, tokens, [[head(1, 1)], [head(1, 1), head(1, 3)]], metric)   # one value per variant
    sweep(model, tokens, "head", metric)                      # every layer x head, zero-ablated
    sweep(model, corrupt, "resid_pre", metric, mode="patch", reference=clean)  # layer x position

What is replaced is a ``Site``: a hook name and an index after the batch axis (a head's slice of
``attn.hook_z`` [batch, pos, head, d_head], a position of ``hook_resid_pre`` [batch, pos, d_model],
or all of ``hook_mlp_out``). What replaces it is a ``MODES`` entry: zeros, the mean over a
reference batch, or the reference's own activation row by row ("patch"; "resample" is the same
with another input as the reference). A sweep's cases are data (``GRIDS``: which hook, which axis),
never one function per case. A metric is any ``f(logits [batch, ...]) -> number``; ``METRICS``
builds the usual ones (logit difference, probability, loss, accuracy).

Variants are batched: the input is repeated once per variant and each copy gets its own edit. In a
single-stack model without padding the shared prefix runs once: the batch is widened at the first
edited layer's ``hook_resid_pre`` (a 12 x 12 head grid of GPT-2 small costs 12 forwards of the
blocks at and after each layer, not 144 forwards).
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..model.hooks import hook_name, parse_hook_name
from ..recording import record

Metric = Callable[[torch.Tensor], "float | torch.Tensor"]
Progress = Callable[[float, str], None]
MAX_ROWS = 256  # rows (variants x batch) in one forward of a sweep


# ------------------------------------------------------------------------------ hooks for one call
@contextlib.contextmanager
def hooks(model, fwd_hooks: Iterable[tuple[str, Callable[[torch.Tensor], torch.Tensor | None]]]
          ) -> Iterator:
    """Add ``fn(x) -> x'`` (or None: x unchanged) at each named hook point for the body of the
    ``with``; the hooks are removed afterwards, also when the body raises. Several functions on
    one name run in the order given, each on the previous one's output."""
    points = model.hook_points()
    handles = []
    try:
        for name, fn in fwd_hooks:
            if name not in points:
                raise ValueError(f"this model has no hook point {name!r}")
            handles.append(points[name].register_forward_hook(lambda m, i, out, fn=fn: fn(out)))
        yield model
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def run_with_hooks(model, *inputs: torch.Tensor, fwd_hooks=(), **forward_kwargs) -> torch.Tensor:
    """One forward in eval mode without gradients with ``fwd_hooks`` added for it -> the output."""
    was = model.training
    model.eval()
    try:
        with hooks(model, fwd_hooks):
            return model(*inputs, **forward_kwargs)
    finally:
        model.train(was)


# ------------------------------------------------------------------------------ what is replaced
@dataclass(frozen=True)
class Site:
    """One activation to replace: ``name`` (a public hook name) and ``index``, the indices after
    the batch axis (``(slice(None), 3)``: head 3 of ``attn.hook_z``; ``(5,)``: position 5)."""
    name: str
    index: tuple = ()
    label: str = ""

    def __post_init__(self):
        parse_hook_name(self.name)  # ValueError for anything that is not a hook name

    def __str__(self) -> str:
        return self.label or self.name


def head(layer: int, h: int, stack: str = "", attention: str = "attn") -> Site:
    """Head ``h`` of ``layer``: its slice of ``attn.hook_z`` (its output before W_o mixes heads)."""
    prefix = {"encoder": "enc ", "decoder": "dec "}.get(stack, "")
    cross = "x" if attention == "cross_attn" else ""
    return Site(hook_name(layer, f"{attention}.hook_z", stack), (slice(None), int(h)),
                f"{prefix}L{layer}{cross}H{h}")


def mlp(layer: int, stack: str = "") -> Site:
    return Site(hook_name(layer, "hook_mlp_out", stack), (), f"L{layer} MLP")


def resid(layer: int, pos: int, where: str = "hook_resid_pre", stack: str = "") -> Site:
    return Site(hook_name(layer, where, stack), (int(pos),), f"L{layer} {where[5:]} @{pos}")


_HEADS = re.compile(r"^L(\d+)(?:H(\d+))?$")


def parse_heads(model, text: str, stack: str = "", attention: str = "attn") -> list[Site]:
    """"L1H1+L1H3" -> those heads; "L1" -> every head of layer 1. ValueError for a head or layer
    the model does not have, a head named twice ("L1H1+L1H1", "L1+L1H2": the set would read as
    two heads switched off where one is), and a set that names no head ("", "+")."""
    cfg, out, seen = model.config, [], {}
    for part in filter(None, (p.strip() for p in re.split(r"[+, ]", text))):
        m = _HEADS.match(part.upper())
        if m is None:
            raise ValueError(f"{part!r}: write heads as L1H3, a layer as L1, joined by +")
        layer = int(m[1])
        hs = range(cfg.n_heads) if m[2] is None else [int(m[2])]
        if layer >= cfg.n_layers or any(h >= cfg.n_heads for h in hs):
            raise ValueError(f"{part!r}: the model has {cfg.n_layers} layers of {cfg.n_heads} heads")
        for h in hs:
            if (layer, h) in seen:
                raise ValueError(f"L{layer}H{h} is in the set twice ({seen[layer, h]!r} and "
                                 f"{part!r}): name each head once")
            seen[layer, h] = part
        out += [head(layer, h, stack, attention) for h in hs]
    if not out:
        raise ValueError(f"{text.strip()!r} names no head: write heads as L1H3, a layer as L1, "
                         "joined by +")
    return out


@dataclass(frozen=True)
class Grid:
    """A sweep's case: one hook per layer and the axis along which its sites are taken
    ("head", "pos", or "" for the whole activation)."""
    hook: str
    axis: str
    label: str

    def size(self, model, length: int) -> int:
        return {"head": model.config.n_heads, "pos": length, "": 1}[self.axis]

    def site(self, layer: int, i: int, stack: str = "") -> Site:
        if self.axis == "head":
            return head(layer, i, stack, self.hook.split(".")[0])
        if self.axis == "pos":
            return resid(layer, i, self.hook, stack)
        return Site(hook_name(layer, self.hook, stack), (), f"L{layer} {self.hook[5:]}")


GRIDS: dict[str, Grid] = {g_name: g for g_name, g in (
    ("head", Grid("attn.hook_z", "head", "each head's output (its slice of hook_z)")),
    ("cross_head", Grid("cross_attn.hook_z", "head", "each cross-attention head's output")),
    ("resid_pre", Grid("hook_resid_pre", "pos", "the residual stream entering each layer, per position")),
    ("resid_post", Grid("hook_resid_post", "pos", "the residual stream leaving each layer, per position")),
    ("attn_out", Grid("hook_attn_out", "pos", "each attention layer's output, per position")),
    ("mlp_out", Grid("hook_mlp_out", "pos", "each MLP's output, per position")),
    ("attn", Grid("hook_attn_out", "", "each attention layer's whole output")),
    ("mlp", Grid("hook_mlp_out", "", "each whole MLP")),
)}
"""Sweep cases as data: name -> which hook in every layer and along which axis."""


# ------------------------------------------------------------------------------ what replaces it
def _zero(ref: torch.Tensor | None, x_shape) -> None:
    return None


def _mean(ref: torch.Tensor, x_shape) -> torch.Tensor:
    m = ref.mean(0, keepdim=True)  # [1, pos, ...] over the reference batch
    if m.dim() > 1 and len(x_shape) > 1 and m.shape[1] != x_shape[1]:
        m = m.mean(1, keepdim=True)  # another length: the mean over positions too
    return m


def _rows(ref: torch.Tensor, x_shape) -> torch.Tensor:
    if tuple(ref.shape[1:]) != tuple(x_shape[1:]):
        raise ValueError(f"patching needs a reference of the same shape: {tuple(ref.shape[1:])} "
                         f"vs {tuple(x_shape[1:])} (inputs of the same length)")
    return ref[torch.arange(x_shape[0], device=ref.device) % ref.shape[0]]  # row i <- ref row i


MODES: dict[str, tuple[Callable, str]] = {
    "zero": (_zero, "set to zero"),
    "mean": (_mean, "set to its mean over the reference batch"),
    "patch": (_rows, "replaced by the reference run's activation, row by row"),
    "resample": (_rows, "replaced by another input's activation (the reference), row by row"),
}
"""mode -> (value(reference activation, target shape) -> tensor | None for zero, description)."""


# ------------------------------------------------------------------------------ metrics
def _at(logits: torch.Tensor, pos) -> torch.Tensor:
    """logits [batch, pos, vocab] at ``pos`` (an int, or one per row) -> [batch, vocab]."""
    b = torch.arange(logits.shape[0], device=logits.device)
    p = torch.as_tensor(pos, device=logits.device).expand(logits.shape[0])
    return logits[b, p].float()


def _tok(t, logits) -> torch.Tensor:
    return torch.as_tensor(t, device=logits.device).expand(logits.shape[0]).unsqueeze(1)


def logit_diff(good, bad, pos=-1) -> Metric:
    """mean over rows of logit[good] - logit[bad] at ``pos`` (ints or one per row)."""
    def f(logits):
        lg = _at(logits, pos)
        return (lg.gather(1, _tok(good, lg)) - lg.gather(1, _tok(bad, lg))).mean()
    return f


def prob(token, pos=-1) -> Metric:
    """mean probability of ``token`` at ``pos`` (softmax over the whole vocabulary)."""
    return lambda logits: _at(logits, pos).softmax(-1).gather(1, _tok(token, logits)).mean()


def top1(token, pos=-1) -> Metric:
    """share of rows whose argmax over the whole vocabulary at ``pos`` is ``token``."""
    return lambda logits: (_at(logits, pos).argmax(-1, keepdim=True) == _tok(token, logits)).float().mean()


def pairwise(good, bad, pos=-1) -> Metric:
    """share of rows where logit[good] > logit[bad] at ``pos`` (the choice between two tokens)."""
    def f(logits):
        lg = _at(logits, pos)
        return (lg.gather(1, _tok(good, lg)) > lg.gather(1, _tok(bad, lg))).float().mean()
    return f


def loss(targets: torch.Tensor, ignore_index: int = -100) -> Metric:
    """mean cross-entropy against ``targets`` [batch, pos] (``ignore_index`` skipped)."""
    def f(logits):
        t = targets.to(logits.device)
        return F.cross_entropy(logits.float().transpose(1, 2), t, ignore_index=ignore_index)
    return f


METRICS: dict[str, Callable[..., Metric]] = {
    "logit_diff": logit_diff, "prob": prob, "top1": top1, "pairwise": pairwise, "loss": loss}
"""name -> metric builder (each returns f(logits) -> number)."""


# ------------------------------------------------------------------------------ the generic runner
def _as_inputs(inputs) -> tuple[torch.Tensor, ...]:
    return (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)


def _layer_of(name: str) -> tuple[str, int | None]:
    p = parse_hook_name(name)
    return p.stack, p.layer


def _reference_values(model, sites, mode, reference, inputs, forward_kwargs, x_shapes) -> dict:
    value_fn = MODES[mode][0] if mode in MODES else None
    if value_fn is None:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    names = sorted({s.name for s in sites})
    if mode == "zero" or not names:
        return {n: None for n in names}
    if mode in ("patch", "resample") and reference is None:
        raise ValueError(f"mode {mode!r} needs a reference input to take the activations from")
    ref = _as_inputs(inputs if reference is None else reference)
    rec = record(model, *ref, names=names, device=None, **forward_kwargs)
    return {n: value_fn(rec[n], x_shapes[n]) for n in names}


def _shapes(model, inputs, names, forward_kwargs) -> dict:
    """The shape of each named activation on ``inputs`` (one recorded forward)."""
    if not names:
        return {}
    rec = record(model, *inputs, names=sorted(names), device=None, **forward_kwargs)
    return {n: tuple(rec[n].shape) for n in names}


def _repeat(t, k):
    return t.repeat(k, *([1] * (t.dim() - 1))) if isinstance(t, torch.Tensor) else t


@torch.no_grad()
def effect(model, inputs, variants: Sequence[Sequence[Site]], metric: Metric, *, mode: str = "zero",
           reference=None, progress: Progress | None = None, max_rows: int = MAX_ROWS,
           **forward_kwargs) -> np.ndarray:
    """The metric with each variant's sites replaced (all of a variant's sites at once; ``[]`` =
    the unchanged run) -> float64 [len(variants)] (a dict of metrics: [len(variants), n_metrics],
    all measured on the same forwards). ``mode``: a ``MODES`` key; ``reference``: the
    input(s) "mean" averages over (default: ``inputs``) or "patch" / "resample" reads from.
    Patching clean -> corrupted: ``inputs`` = corrupted, ``reference`` = clean (and the reverse)."""
    inputs = _as_inputs(inputs)
    names = {s.name for v in variants for s in v}
    shapes = {} if mode == "zero" else _shapes(model, inputs, names, forward_kwargs)
    values = _reference_values(model, [s for v in variants for s in v], mode, reference, inputs,
                               forward_kwargs, shapes)
    B = inputs[0].shape[0]
    k_max = max(1, max_rows // B)
    out = np.zeros((len(variants), len(metric))) if isinstance(metric, dict) else np.zeros(len(variants))
    was = model.training
    model.eval()
    try:
        pads = model.prepare(*inputs, **{k: v for k, v in forward_kwargs.items()
                                         if k in ("padding_mask", "token_types")})
        single = getattr(model.config, "arch", "") != "encoder-decoder" and all(p is None for p in pads)
        for start, stop in _chunks(variants, k_max, single):
            chunk = variants[start:stop]
            out[start:stop] = _run_chunk(model, inputs, chunk, values, metric, B, single, forward_kwargs)
            if progress is not None:
                progress(min(1.0, stop / len(variants)), f"{stop} of {len(variants)} variants")
    finally:
        model.train(was)
    return out


def _first_layer(sites) -> int | None:
    layers = [_layer_of(s.name)[1] for s in sites]
    return None if not layers or None in layers else min(layers)


def _chunks(variants, k_max: int, single: bool) -> list[tuple[int, int]]:
    """[start, stop) ranges of at most ``k_max`` variants; in a single-stack model a range never
    mixes variants whose first edited layer differs, so the layers before it run once, at batch B
    (the variants of a sweep come layer by layer)."""
    out, start = [], 0
    for i in range(1, len(variants) + 1):
        if i == len(variants) or i - start == k_max or (
                single and _first_layer(variants[i]) != _first_layer(variants[start])):
            out.append((start, i))
            start = i
    return out


def _run_chunk(model, inputs, chunk, values, metric, B, single, forward_kwargs) -> list[float]:
    k = len(chunk)
    edits: dict[str, list] = {}
    for j, sites in enumerate(chunk):
        for s in sites:
            edits.setdefault(s.name, []).append((slice(j * B, (j + 1) * B), s))
    layers = [_layer_of(n) for n in edits]
    first = min((l for st, l in layers), default=None) if all(l is not None for _, l in layers) else None
    widen = None
    if single and first is not None:
        widen = hook_name(first, "hook_resid_pre")  # the shared prefix runs once, at batch B

    def edit(name):
        def fn(x):
            x = x.clone()
            for rows, s in edits[name]:
                v = values[name]
                idx = (rows, *s.index)
                if v is None:
                    x[idx] = 0
                else:  # [1, ...] (a mean) or [B, ...] (row by row): broadcast onto the B rows
                    x[idx] = v[(slice(None), *s.index)].to(x.dtype)
            return x
        return fn

    fwd = []
    if widen is not None:
        fwd.append((widen, lambda x: _repeat(x, k)))
        run_inputs, kw = inputs, forward_kwargs
    else:
        run_inputs = tuple(_repeat(t, k) for t in inputs)
        kw = {n: _repeat(v, k) for n, v in forward_kwargs.items()}
    fwd += [(n, edit(n)) for n in edits]
    with hooks(model, fwd):
        logits = model(*run_inputs, **kw)
    if isinstance(metric, dict):  # several metrics of the same forwards: one row each
        return [[float(f(logits[j * B:(j + 1) * B])) for f in metric.values()] for j in range(k)]
    return [float(metric(logits[j * B:(j + 1) * B])) for j in range(k)]


@dataclass
class Effect:
    """A sweep's result: ``values`` [layer, n] (the metric with that site replaced), ``baseline``
    (unchanged), the grid, mode and the sites' labels [layer][n]."""
    values: np.ndarray
    baseline: float
    grid: str
    mode: str
    labels: list

    @property
    def change(self) -> np.ndarray:
        """values - baseline: what replacing each site does to the metric."""
        return self.values - self.baseline


def sweep(model, inputs, grid: str, metric: Metric, *, mode: str = "zero", reference=None,
          stack: str = "", layers: Sequence[int] | None = None, progress: Progress | None = None,
          max_rows: int = MAX_ROWS, **forward_kwargs) -> Effect:
    """``effect`` over every site of ``GRIDS[grid]`` (one at a time), laid out [layer, n] (a dict
    of metrics: [layer, n, n_metrics], ``baseline`` one per metric)."""
    if grid not in GRIDS:
        raise ValueError(f"grid {grid!r} is not one of {', '.join(GRIDS)}")
    g = GRIDS[grid]
    inputs = _as_inputs(inputs)
    length = inputs[-1].shape[1]
    layers = list(range(model.config.n_layers)) if layers is None else list(layers)
    n = g.size(model, length)
    labels = [[g.site(l, i, stack) for i in range(n)] for l in layers]
    variants = [[]] + [[s] for row in labels for s in row]
    vals = effect(model, inputs, variants, metric, mode=mode, reference=reference,
                  progress=progress, max_rows=max_rows, **forward_kwargs)
    base = vals[0] if isinstance(metric, dict) else float(vals[0])
    return Effect(vals[1:].reshape(len(layers), n, *vals.shape[1:]), base, grid, mode,
                  [[str(s) for s in row] for row in labels])


__all__ = ["Effect", "GRIDS", "Grid", "METRICS", "MODES", "Site", "effect", "head", "hooks",
           "logit_diff", "loss", "mlp", "pairwise", "parse_heads", "prob", "resid",
           "run_with_hooks", "sweep", "top1"]
