"""Does this head matter? Ablation and activation patching, addressed by the public hook names.

Attention weights say where a head looks, not whether the answer depends on it (Jain & Wallace
2019; Wiegreffe & Pinter 2019). An intervention answers that: replace one activation and measure
what the output does (TransformerLens's ``run_with_hooks`` / ``generic_activation_patch``; Meng et
al. 2022's causal tracing; Wang et al. 2022's patching on indirect-object identification).

    with hooks(model, [("blocks.1.attn.hook_z", fn)]): ...    # fn(x) -> x', removed afterwards
    mine = private(shared)                                    # hooks on mine never touch shared
    effect(model, tokens, [[head(1, 1)], [head(1, 1), head(1, 3)]], metric)   # one value per variant
    sweep(model, tokens, "head", metric)                      # every layer x head, zero-ablated
    sweep(model, corrupt, "resid_pre", metric, mode="patch", reference=clean)  # layer x position

What is replaced is a ``Site``: a hook name and an index after the batch axis (a head's slice of
``attn.hook_z`` [batch, pos, head, d_head], a position of ``hook_resid_pre`` [batch, pos, d_model],
or all of ``hook_mlp_out``). What replaces it is a ``MODES`` entry: zeros, the mean over a
reference batch, or the reference's own activation row by row ("patch"; "resample" is the same
with another input as the reference). A sweep's cases are data (``GRIDS``: which hook, which axis),
never one function per case. A metric is any ``f(logits [batch, ...]) -> number``; ``METRICS``
builds the usual ones (logit difference, probability, loss, accuracy) as ``RowMetric``s, which also
give one value per example (``rows``): ``effect(..., reduce="none")`` returns those (TransformerLens's
``reduce="none"`` / ``per_prompt=True``), and ``tfviz.analysis.spread`` turns them into a standard
error and a 95% interval.

Variants are batched: the input is repeated once per variant and each copy gets its own edit. In a
single-stack model without padding the shared prefix runs once: the batch is widened at the first
edited layer's ``hook_resid_pre`` (a 12 x 12 head grid of GPT-2 small costs 12 forwards of the
blocks at and after each layer, not 144 forwards).
"""
from __future__ import annotations

import contextlib
import copy
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..model.hooks import hook_name, parse_hook_name, shape_of
from ..recording import record

Metric = Callable[[torch.Tensor], "float | torch.Tensor"]
Progress = Callable[[float, str], None]
MAX_ROWS = 256  # rows (variants x batch) in one forward of a sweep


# ------------------------------------------------------------------------------ a private copy
def private(model):
    """A copy of ``model``'s module tree that shares its weights (every parameter and buffer is
    the same tensor: no weight is copied): hooks added to the copy — recording, switching heads
    off, patching — never touch ``model``'s own modules, so other threads may run ``model``
    meanwhile (a server's shared model, ``ui.models``). Take it while no one has hooks on
    ``model`` (under its lock: milliseconds); the copy starts without hooks or recording sinks."""
    memo = {id(t): t for t in (*model.parameters(), *model.buffers())}
    twin = copy.deepcopy(model, memo)
    for m in twin.modules():
        m._forward_hooks.clear()
        m._forward_pre_hooks.clear()
        if getattr(m, "sink", None) is not None:  # a HookPoint that was recording
            m.sink = None
    return twin


# ------------------------------------------------------------------------------ hooks for one call
HookFn = Callable[[torch.Tensor], "torch.Tensor | None"]


def _on_grad(out: torch.Tensor, fn: HookFn, name: str) -> None:
    if not out.requires_grad:
        raise ValueError(f"a backward hook on {name!r} needs gradients: run the forward outside "
                         "torch.no_grad (run_with_hooks(..., bwd_hooks=...) does)")
    out.register_hook(fn)  # fires when the backward pass reaches this activation
    return None  # the forward's value is untouched


@contextlib.contextmanager
def hooks(model, fwd_hooks: Iterable[tuple[str, HookFn]] = (),
          bwd_hooks: Iterable[tuple[str, HookFn]] = ()) -> Iterator:
    """Add ``fn(x) -> x'`` (or None: x unchanged) at each named hook point for the body of the
    ``with``; the hooks are removed afterwards, also when the body raises. Several functions on
    one name run in the order given, each on the previous one's output.

    ``bwd_hooks``: ``fn(grad) -> grad'`` (or None) on the gradient of a point's output, attached
    to the activation each forward in the body computes (a tensor hook: it fires in the backward
    pass of that forward, also after the ``with`` ended); the forward's numbers do not change."""
    points = model.hook_points()
    handles = []
    try:
        for name, fn in fwd_hooks:
            if name not in points:
                raise ValueError(f"this model has no hook point {name!r}")
            handles.append(points[name].register_forward_hook(lambda m, i, out, fn=fn: fn(out)))
        for name, fn in bwd_hooks:
            if name not in points:
                raise ValueError(f"this model has no hook point {name!r}")
            handles.append(points[name].register_forward_hook(
                lambda m, i, out, fn=fn, name=name: _on_grad(out, fn, name)))
        yield model
    finally:
        for h in handles:
            h.remove()


def run_with_hooks(model, *inputs: torch.Tensor, fwd_hooks=(), bwd_hooks=(), **forward_kwargs) -> torch.Tensor:
    """One forward in eval mode with ``fwd_hooks`` added for it -> the output. Without gradients,
    unless ``bwd_hooks`` are given: then the output stays in the graph and the backward hooks fire
    when you call ``.backward()`` on something computed from it."""
    was = model.training
    model.eval()
    try:
        with torch.enable_grad() if bwd_hooks else torch.no_grad(), hooks(model, fwd_hooks, bwd_hooks):
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


_HEAD_FIRST = ("hook_pattern", "hook_attn_scores")  # [batch, head, q_pos, k_pos]: the head axis first
_KV = ("hook_k", "hook_v", "hook_rot_k")             # [batch, pos, kv_head, d_head]


@dataclass(frozen=True)
class Grid:
    """A sweep's case: one hook per layer and the axis along which its sites are taken: "head"
    (each head, all positions), "pos" (each position), "pos_head" (each head at each position:
    values [layer, pos, head]; for a pattern, the query position), or "" (the whole activation).
    ``parts``: a composite grid, the named ``GRIDS`` swept together (values [part, layer, ...],
    TransformerLens's ``*_every`` layout)."""
    hook: str
    axis: str
    label: str
    parts: tuple = ()

    def heads(self, model) -> int:
        """Query heads, or key/value heads for a key/value hook (GQA: fewer)."""
        kv = self.hook.split(".")[-1] in _KV
        return model.config.n_kv_heads if kv else model.config.n_heads

    def dims(self, model, length: int) -> tuple[int, ...]:
        h = self.heads(model)
        return {"head": (h,), "pos": (length,), "pos_head": (length, h), "": (1,)}[self.axis]

    def size(self, model, length: int) -> int:
        return int(np.prod(self.dims(model, length)))

    def site(self, layer: int, i: int, stack: str = "", model=None, length: int | None = None) -> Site:
        """The ``i``-th site (flat index over ``dims``) of ``layer``."""
        attention, point = self.hook.split(".")[0], self.hook.split(".")[-1]
        if self.axis == "head" and point == "hook_z":
            return head(layer, i, stack, attention)
        if self.axis == "pos":
            return resid(layer, i, self.hook, stack)
        if self.axis == "":
            return Site(hook_name(layer, self.hook, stack), (), f"L{layer} {self.hook[5:]}")
        prefix = {"encoder": "enc ", "decoder": "dec "}.get(stack, "")
        tag = "KV" if point in _KV else "H"
        what = "" if point == "hook_z" else f" {point.removeprefix('hook_').replace('rot_', 'rotated ')}"
        if self.axis == "head":
            index, where = ((i,) if point in _HEAD_FIRST else (slice(None), i)), ""
        else:  # pos_head: i = pos * heads + head
            p, h = divmod(i, self.heads(model))
            index, where, i = ((h, p) if point in _HEAD_FIRST else (p, h)), f" @{p}", h
        return Site(hook_name(layer, self.hook, stack), index, f"{prefix}L{layer}{tag}{i}{what}{where}")


GRIDS: dict[str, Grid] = {g_name: g for g_name, g in (
    ("head", Grid("attn.hook_z", "head", "each head's output (its slice of hook_z)")),
    ("cross_head", Grid("cross_attn.hook_z", "head", "each cross-attention head's output")),
    ("resid_pre", Grid("hook_resid_pre", "pos", "the residual stream entering each layer, per position")),
    ("resid_mid", Grid("hook_resid_mid", "pos", "the residual stream between attention and MLP, per position")),
    ("resid_post", Grid("hook_resid_post", "pos", "the residual stream leaving each layer, per position")),
    ("attn_out", Grid("hook_attn_out", "pos", "each attention layer's output, per position")),
    ("mlp_out", Grid("hook_mlp_out", "pos", "each MLP's output, per position")),
    ("attn", Grid("hook_attn_out", "", "each attention layer's whole output")),
    ("mlp", Grid("hook_mlp_out", "", "each whole MLP")),
    # TransformerLens's patching.py cases: each head's q / k / v / pattern, and everything by position
    ("head_q", Grid("attn.hook_q", "head", "each head's queries (before any rotation)")),
    ("head_k", Grid("attn.hook_k", "head", "each key head's keys (before any rotation)")),
    ("head_v", Grid("attn.hook_v", "head", "each value head's values")),
    ("head_pattern", Grid("attn.hook_pattern", "head", "each head's attention pattern")),
    ("head_pos", Grid("attn.hook_z", "pos_head", "each head's output at each position")),
    ("head_q_pos", Grid("attn.hook_q", "pos_head", "each head's query at each position")),
    ("head_k_pos", Grid("attn.hook_k", "pos_head", "each key head's key at each position")),
    ("head_v_pos", Grid("attn.hook_v", "pos_head", "each value head's value at each position")),
    ("head_pattern_pos", Grid("attn.hook_pattern", "pos_head", "each head's pattern row at each query position")),
    # composites (TransformerLens's get_act_patch_block_every / attn_head_all_pos_every / _by_pos_every)
    ("every_block", Grid("", "pos", "residual stream, attention output and MLP output, per position",
                         ("resid_pre", "attn_out", "mlp_out"))),
    ("every_head", Grid("", "head", "each head's output, queries, keys, values and pattern",
                        ("head", "head_q", "head_k", "head_v", "head_pattern"))),
    ("every_head_pos", Grid("", "pos_head", "each head's output, q, k, v and pattern, at each position",
                            ("head_pos", "head_q_pos", "head_k_pos", "head_v_pos", "head_pattern_pos"))),
)}
"""Sweep cases as data: name -> which hook in every layer and along which axis (or, for the
``every_*`` composites, which grids together)."""


# ------------------------------------------------------------------------------ what replaces it
def _zero(ref: torch.Tensor | None, x_shape) -> None:
    return None


def _mean(ref: torch.Tensor, x_shape) -> torch.Tensor:
    """The mean over the reference batch, position by position [1, pos, ...]: the reference must
    have the input's shape (its length); "mean_pos" averages over positions too."""
    if tuple(ref.shape[1:]) != tuple(x_shape[1:]):
        raise ValueError(f"mean-ablation takes the mean at each position, so the reference needs the "
                         f"input's shape: {tuple(ref.shape[1:])} vs {tuple(x_shape[1:])}; for a reference "
                         "of another length use mode='mean_pos' (the mean over its examples and positions)")
    return ref.mean(0, keepdim=True)


def _mean_pos(ref: torch.Tensor, x_shape) -> torch.Tensor:
    """The mean over the reference batch and its positions [1, 1, ...]: one vector for every
    position, whatever the reference's length (only for [batch, pos, ...] activations)."""
    return ref.mean((0, 1), keepdim=True)


def _rows(ref: torch.Tensor, x_shape) -> torch.Tensor:
    if tuple(ref.shape[1:]) != tuple(x_shape[1:]):
        raise ValueError(f"patching needs a reference of the same shape: {tuple(ref.shape[1:])} "
                         f"vs {tuple(x_shape[1:])} (inputs of the same length)")
    return ref[torch.arange(x_shape[0], device=ref.device) % ref.shape[0]]  # row i <- ref row i


MODES: dict[str, tuple[Callable, str]] = {
    "zero": (_zero, "set to zero"),
    "mean": (_mean, "set to its mean over the reference batch, position by position"),
    "mean_pos": (_mean_pos, "set to its mean over the reference batch and all its positions"),
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


class RowMetric:
    """A metric with one value per example: ``rows(logits) -> [batch]``. Called, it is the usual
    one number: ``reduce(logits)`` when given (a loss weighting every token alike), else the mean
    of the rows. ``effect(..., reduce="none")`` and ``tfviz.analysis.spread`` read the rows."""

    def __init__(self, rows: Callable[[torch.Tensor], torch.Tensor],
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None, name: str = ""):
        self.rows, self._reduce, self.name = rows, reduce, name

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return self._reduce(logits) if self._reduce is not None else self.rows(logits).mean()

    def __repr__(self) -> str:
        return f"RowMetric({self.name or self.rows!r})"


def per_row(fn: Callable[[torch.Tensor], torch.Tensor], name: str = "") -> RowMetric:
    """A metric from ``fn(logits) -> [batch]`` (one value per example): the mean when called."""
    return RowMetric(fn, name=name)


def rows_of(metric, logits: torch.Tensor) -> torch.Tensor:
    """One value per row of ``logits`` -> [batch] float: a ``RowMetric``'s rows, or a plain metric's
    own output when it already gives one per row. ValueError for a metric that gives one number."""
    out = metric.rows(logits) if isinstance(metric, RowMetric) else metric(logits)
    out = torch.as_tensor(out)
    if out.dim() != 1 or out.shape[0] != logits.shape[0]:
        raise ValueError("per-example values need a metric with one value per example: build it "
                         "with interventions.METRICS (logit_diff, prob, ...) or per_row(f) where "
                         f"f(logits) -> [batch]; this one gave shape {tuple(out.shape)}")
    return out.float()


def _ids(t, what: str) -> None:
    if t is None or isinstance(t, (str, float)) or (isinstance(t, torch.Tensor) and t.dtype.is_floating_point):
        raise ValueError(f"{what} must be a token id (an int) or one id per row, not {t!r}")


def logit_diff(good, bad, pos=-1) -> RowMetric:
    """logit[good] - logit[bad] at ``pos`` (ints or one per row), the mean over rows."""
    _ids(good, "good"), _ids(bad, "bad")

    def rows(logits):
        lg = _at(logits, pos)
        return (lg.gather(1, _tok(good, lg)) - lg.gather(1, _tok(bad, lg)))[:, 0]
    return RowMetric(rows, name="logit_diff")


def prob(token, pos=-1) -> RowMetric:
    """probability of ``token`` at ``pos`` (softmax over the whole vocabulary), the mean over rows."""
    _ids(token, "token")
    return RowMetric(lambda logits: _at(logits, pos).softmax(-1).gather(1, _tok(token, logits))[:, 0], name="prob")


def top1(token, pos=-1) -> RowMetric:
    """share of rows whose argmax over the whole vocabulary at ``pos`` is ``token`` (per row 0 / 1)."""
    _ids(token, "token")
    return RowMetric(lambda logits: (_at(logits, pos).argmax(-1, keepdim=True) == _tok(token, logits)
                                     ).float()[:, 0], name="top1")


def pairwise(good, bad, pos=-1) -> RowMetric:
    """share of rows where logit[good] > logit[bad] at ``pos`` (the choice between two tokens)."""
    _ids(good, "good"), _ids(bad, "bad")

    def rows(logits):
        lg = _at(logits, pos)
        return (lg.gather(1, _tok(good, lg)) > lg.gather(1, _tok(bad, lg))).float()[:, 0]
    return RowMetric(rows, name="pairwise")


def loss(targets: torch.Tensor, ignore_index: int = -100) -> RowMetric:
    """mean cross-entropy against ``targets`` [batch, pos] (``ignore_index`` skipped), every token
    alike; per example (``rows``): the mean over that row's own targets (so the rows' mean is the
    loss when every row has as many targets)."""
    def reduce(logits):
        t = targets.to(logits.device)
        return F.cross_entropy(logits.float().transpose(1, 2), t, ignore_index=ignore_index)

    def rows(logits):
        t = targets.to(logits.device)
        ce = F.cross_entropy(logits.float().transpose(1, 2), t, ignore_index=ignore_index, reduction="none")
        n = (t != ignore_index).sum(1)
        return ce.sum(1) / n.clamp(min=1)  # [batch]
    return RowMetric(rows, reduce, name="loss")


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
    if mode == "mean_pos":
        bad = [n for n in names if not shape_of(n).startswith("[batch, pos,")]
        if bad:
            raise ValueError(f"mode 'mean_pos' averages over positions: {bad[0]} is {shape_of(bad[0])}, "
                             "not [batch, pos, ...]")
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


def effect(model, inputs, variants: Sequence[Sequence[Site]], metric: Metric, *, mode: str = "zero",
           reference=None, progress: Progress | None = None, max_rows: int = MAX_ROWS,
           reduce: str = "mean", **forward_kwargs) -> np.ndarray:
    """The metric with each variant's sites replaced (all of a variant's sites at once; ``[]`` =
    the unchanged run) -> float64 [len(variants)] (a dict of metrics: [len(variants), n_metrics],
    all measured on the same forwards). ``mode``: a ``MODES`` key; ``reference``: the
    input(s) "mean" averages over (default: ``inputs``) or "patch" / "resample" reads from.
    Patching clean -> corrupted: ``inputs`` = corrupted, ``reference`` = clean (and the reverse).

    ``reduce="none"``: one value per example instead, the example axis last: [len(variants),
    batch] (a dict: [len(variants), n_metrics, batch]); the metric must give one value per row
    (``RowMetric``, every ``METRICS`` builder, or f(logits) -> [batch])."""
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce must be 'mean' or 'none', not {reduce!r}")
    means, rows = _effect(model, inputs, variants, metric, mode, reference, progress, max_rows,
                          reduce == "none", forward_kwargs)
    return means if reduce == "mean" else rows


@torch.no_grad()
def _effect(model, inputs, variants, metric, mode, reference, progress, max_rows, want_rows: bool,
            forward_kwargs) -> tuple[np.ndarray, np.ndarray | None]:
    """``effect``'s work: the reduced values and, with ``want_rows``, the per-example ones, both
    from the same forwards."""
    inputs = _as_inputs(inputs)
    names = {s.name for v in variants for s in v}
    shapes = {} if mode == "zero" else _shapes(model, inputs, names, forward_kwargs)
    values = _reference_values(model, [s for v in variants for s in v], mode, reference, inputs,
                               forward_kwargs, shapes)
    B = inputs[0].shape[0]
    k_max = max(1, max_rows // B)
    n_m = len(metric) if isinstance(metric, dict) else None
    out = np.zeros((len(variants), n_m) if n_m else len(variants))
    out_rows = np.zeros((len(variants), *((n_m,) if n_m else ()), B)) if want_rows else None
    was = model.training
    model.eval()
    try:
        pads = model.prepare(*inputs, **{k: v for k, v in forward_kwargs.items()
                                         if k in ("padding_mask", "token_types")})
        single = getattr(model.config, "arch", "") != "encoder-decoder" and all(p is None for p in pads)
        for start, stop in _chunks(variants, k_max, single):
            chunk = variants[start:stop]
            m, r = _run_chunk(model, inputs, chunk, values, metric, B, single, forward_kwargs, want_rows)
            out[start:stop] = m
            if want_rows:
                out_rows[start:stop] = r
            if progress is not None:
                progress(min(1.0, stop / len(variants)), f"{stop} of {len(variants)} variants")
    finally:
        model.train(was)
    return out, out_rows


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


def _run_chunk(model, inputs, chunk, values, metric, B, single, forward_kwargs, want_rows=False):
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
    fs = list(metric.values()) if isinstance(metric, dict) else [metric]
    parts = [logits[j * B:(j + 1) * B] for j in range(k)]
    means = [[float(f(lg)) for f in fs] for lg in parts]
    rows = [[rows_of(f, lg).cpu().numpy() for f in fs] for lg in parts] if want_rows else None
    if not isinstance(metric, dict):  # one metric: no metric axis
        means = [m[0] for m in means]
        rows = None if rows is None else [r[0] for r in rows]
    return means, rows


@dataclass(frozen=True)
class GridCost:
    """What ``effect`` will cost for some variants, before it runs: ``flops`` of its forwards
    (each variant from its first edited layer on, as a single-stack model runs them: the prefix is
    shared), ``forward``: one plain forward of the inputs (``batch`` rows), ``tokens``: batch x
    positions, ``variants``, ``rows``: the rows of its typical forward (variants of one layer
    batched: a batch-1 forward of a big model is bound by reading its weights, a sweep's are not).
    ``seconds(t)``: its time if a forward of ``rows`` rows takes ``t`` seconds."""
    flops: float
    forward: float
    tokens: int
    variants: int
    batch: int = 1
    rows: int = 1

    def seconds(self, rows_seconds: float) -> float:
        return rows_seconds * self.flops / (self.forward * self.rows / self.batch)


def grid_cost(model, batch: int, length: int, first_layers: Sequence[int | None]) -> GridCost:
    """``GridCost`` of one variant per entry of ``first_layers`` (the first layer it edits; None:
    a whole forward) on ``batch`` inputs of ``length`` tokens. Per token a forward costs
    ``analysis.cost.train_flops_per_token / 3`` (2 x the multiplying weights + the attention
    scores): the unembedding's 2 x vocab x d_model always, the blocks' share from the first
    edited layer on (all of it for an encoder-decoder, whose stacks do not share a prefix)."""
    from .cost import train_flops_per_token

    cfg = model.config
    per_token = train_flops_per_token(model, length) / 3
    head = min(per_token, 2.0 * cfg.vocab_size * cfg.d_model)
    blocks, layers = per_token - head, cfg.n_layers
    single = getattr(cfg, "arch", "") != "encoder-decoder"
    share = [1.0 if (l is None or not single) else (layers - l) / layers for l in first_layers]
    tokens = batch * length
    runs = [len(list(g)) for _, g in itertools.groupby(first_layers)]  # effect's chunks: one layer's
    rows = batch * min(max(1, MAX_ROWS // batch), max(runs, default=1))
    return GridCost(float(tokens * sum(head + blocks * f for f in share)), float(tokens * per_token),
                    int(tokens), len(first_layers), int(batch), int(rows))


def head_grid_layers(model) -> list[int | None]:
    """``grid_cost``'s first_layers for every head switched off one at a time, after the unchanged
    run (``analysis.effects.head_effects``, ``sweep(..., "head")``)."""
    cfg = model.config
    return [None] + [l for l in range(cfg.n_layers) for _ in range(cfg.n_heads)]


@dataclass
class Effect:
    """A sweep's result: ``values`` [layer, *dims] (the metric with that site replaced; dims = the
    grid's: (head,), (pos,), (pos, head) or (1,); a composite grid: [part, layer, *dims]),
    ``baseline`` (unchanged), the grid, mode and the sites' labels (nested like ``values``).
    With ``reduce="none"``: ``per_example`` [*values.shape, batch] and ``baseline_rows`` [batch]
    (a dict of metrics: a metric axis before the batch axis)."""
    values: np.ndarray
    baseline: float
    grid: str
    mode: str
    labels: list
    per_example: np.ndarray | None = None
    baseline_rows: np.ndarray | None = None
    parts: tuple = ()

    @property
    def change(self) -> np.ndarray:
        """values - baseline: what replacing each site does to the metric."""
        return self.values - self.baseline

    @property
    def change_rows(self) -> np.ndarray:
        """Per example: the metric with the site replaced minus the same example unchanged
        [*values.shape, batch] (paired: the spread of a change is the spread of these)."""
        if self.per_example is None:
            raise ValueError("this sweep kept no per-example values: run it with reduce='none'")
        return self.per_example - self.baseline_rows

    def spread(self, level: float = 0.95, method: str = "bootstrap", **kw) -> dict[str, np.ndarray]:
        """The change's mean, standard error and ``level`` interval over the examples, each shaped
        like ``values`` (``tfviz.analysis.spread.summary``; ``method`` "bootstrap" or "normal")."""
        from .spread import summary
        return summary(self.change_rows, level=level, method=method, **kw)


def _grid_sites(model, g: Grid, layers, length: int, stack: str) -> list:
    """[layer][*dims] Site objects of grid ``g``."""
    dims = g.dims(model, length)
    flat = [[g.site(l, i, stack, model, length) for i in range(int(np.prod(dims)))] for l in layers]
    return [np.array(row, dtype=object).reshape(dims).tolist() for row in flat]


def _flat(nested) -> list:
    return list(np.array(nested, dtype=object).reshape(-1))


def sweep(model, inputs, grid: str, metric: Metric, *, mode: str = "zero", reference=None,
          stack: str = "", layers: Sequence[int] | None = None, progress: Progress | None = None,
          max_rows: int = MAX_ROWS, reduce: str = "mean", **forward_kwargs) -> Effect:
    """``effect`` over every site of ``GRIDS[grid]`` (one at a time), laid out [layer, *dims] (a
    dict of metrics: [layer, *dims, n_metrics], ``baseline`` one per metric; a composite grid,
    ``every_*``: [part, layer, *dims], its parts in ``Effect.parts``). ``reduce="none"`` also
    keeps every example's value (``Effect.per_example``, ``Effect.spread()``)."""
    if grid not in GRIDS:
        raise ValueError(f"grid {grid!r} is not one of {', '.join(GRIDS)}")
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce must be 'mean' or 'none', not {reduce!r}")
    g = GRIDS[grid]
    parts = g.parts or (grid,)
    inputs = _as_inputs(inputs)
    length = inputs[-1].shape[1]
    layers = list(range(model.config.n_layers)) if layers is None else list(layers)
    sites = {p: _grid_sites(model, GRIDS[p], layers, length, stack) for p in parts}
    dims = {GRIDS[p].dims(model, length) for p in parts}
    if len(dims) > 1:
        raise ValueError(f"the parts of {grid!r} differ in shape ({', '.join(map(str, sorted(dims)))}): "
                         "with fewer key/value heads than query heads (GQA) sweep them one by one")
    # layer by layer, every part of a layer together: the layers before it run once for all of them
    order = [(p, li) for li in range(len(layers)) for p in parts]
    variants = [[]] + [[s] for p, li in order for s in _flat(sites[p][li])]
    vals, rows = _effect(model, inputs, variants, metric, mode, reference, progress, max_rows,
                         reduce == "none", forward_kwargs)
    n = int(np.prod(next(iter(dims))))

    def lay(a):  # variants' values [1 + ..., *rest] -> [part, layer, *dims, *rest]
        rest = a.shape[1:]
        body = a[1:].reshape(len(layers), len(parts), n, *rest).swapaxes(0, 1)
        out = body.reshape(len(parts), len(layers), *next(iter(dims)), *rest)
        return out if g.parts else out[0]
    base = vals[0] if isinstance(metric, dict) else float(vals[0])
    labels = [[_label_tree(sites[p][li]) for li in range(len(layers))] for p in parts]
    return Effect(lay(vals), base, grid, mode, labels if g.parts else labels[0],
                  None if rows is None else lay(rows), None if rows is None else rows[0], g.parts)


def _label_tree(nested):
    return [_label_tree(x) for x in nested] if isinstance(nested, list) else str(nested)


__all__ = ["Effect", "GRIDS", "Grid", "GridCost", "METRICS", "MODES", "RowMetric", "Site", "effect",
           "grid_cost", "head", "head_grid_layers", "hooks", "logit_diff", "loss", "mlp", "pairwise",
           "parse_heads", "per_row", "private", "prob", "resid", "rows_of", "run_with_hooks", "sweep", "top1"]
