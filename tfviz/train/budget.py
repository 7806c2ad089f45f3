"""Before a training starts: will it fit? Memory (weights + gradients + optimizer + activations,
``tfviz.analysis.cost.training_bytes``) against a budget, and the checkpoint it will write against
the size the app opens (``tfviz.limits.checkpoint_bytes``), so the app never trains what it cannot
open. The job manager checks both when a job is submitted and again when it starts (free memory
changes); a refusal is a :class:`BudgetError` whose message gives the estimate, the budget and a
batch size that would fit.

The budget: ``TFVIZ_TRAIN_MEMORY_MB`` if set, else a share of what is free on the device when the
job starts (half the available RAM on the CPU, 80% of the free GPU memory): other sessions, the
server and the loaded models keep the rest.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import device as devices
from .. import limits
from ..analysis.cost import recurrent_training_bytes, training_bytes
from ..model import parameter_count
from ..model.families import lacks
from .snapshot import MAX_SAVED, SAVED_BYTES
from .config import TrainConfig

GB = 2**30
MB = 2**20


class BudgetError(ValueError):
    """A training that would not fit (memory, or the checkpoint it writes); the message says why."""


@dataclass(frozen=True)
class Estimate:
    parts: dict[str, int]   # weights, gradients, optimizer, activations, total (bytes)
    per_example: int        # activation bytes of one example
    checkpoint: int         # bytes of the (resumable) checkpoint it saves
    n_params: int
    positions: int

    @property
    def total(self) -> int:
        return self.parts["total"]


def estimate(model_config, train_config: TrainConfig, positions: int | None = None) -> Estimate:
    """Memory and checkpoint size of training ``model_config`` (a transformer's or a recurrent
    model's, ``tfviz.model.families``) with ``train_config``'s batch on sequences of ``positions``
    tokens (default: the model's ``max_len``, the longest it takes)."""
    c = model_config
    pos = int(positions or c.max_len)
    n_params = parameter_count(c)
    if lacks(c, "self_attention"):  # a recurrent model: no scores, a state per token and layer
        parts = recurrent_training_bytes(c, n_params, train_config.batch_size, pos)
        one = recurrent_training_bytes(c, n_params, 1, pos)["activations"]
        # snapshots: additive attention's [1, pos, pos] pattern (float16), if any
        snapshots = min(SAVED_BYTES, MAX_SAVED * c.n_heads * pos * pos * 2)
        return Estimate(parts, one, 3 * 4 * n_params + snapshots + MB, n_params, pos)
    shape = dict(n_layers=c.n_layers, d_model=c.d_model, d_ff=0 if c.attn_only else c.d_ff,
                 n_heads=c.n_heads, vocab_size=c.vocab_size, pos=pos,
                 src_pos=pos if c.arch == "encoder-decoder" else 0, cross=c.arch == "encoder-decoder")
    parts = training_bytes(n_params, batch=train_config.batch_size, **shape)
    one = training_bytes(n_params, batch=1, **shape)["activations"]
    # weights + AdamW's two moments (a resumable checkpoint) + attention snapshots (at most
    # MAX_SAVED float16 [head, pos, pos] per attention, within SAVED_BYTES) + metadata
    attentions = 3 if c.arch == "encoder-decoder" else 1
    snapshots = min(SAVED_BYTES, MAX_SAVED * attentions * c.n_layers * c.n_heads * pos * pos * 2)
    checkpoint = 3 * 4 * n_params + snapshots + MB
    return Estimate(parts, one, checkpoint, n_params, pos)


def memory_budget(device: torch.device | str = "cpu") -> tuple[int | None, str]:
    """(bytes one training may use on ``device`` now, where that number comes from)."""
    fixed = limits.train_memory_bytes()
    if fixed is not None:
        return fixed, "TFVIZ_TRAIN_MEMORY_MB"
    free = devices.free_memory(device)
    if free is None:
        return None, "unknown"
    if torch.device(device).type == "cuda":
        return int(limits.GPU_MEMORY_SHARE * free), f"{limits.GPU_MEMORY_SHARE:.0%} of the GPU's free memory"
    return int(limits.CPU_MEMORY_SHARE * free), f"{limits.CPU_MEMORY_SHARE:.0%} of the free memory"


def _size(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= GB else f"{n / MB:.0f} MB"


def check_training(model_config, train_config: TrainConfig, positions: int | None = None,
                   device: torch.device | str | None = None) -> Estimate:
    """The estimate, or a BudgetError when the run would not fit in memory or would write a
    checkpoint larger than the app opens."""
    est = estimate(model_config, train_config, positions)
    cap = limits.checkpoint_bytes()
    if est.checkpoint > cap:
        raise BudgetError(
            f"this model has {est.n_params:,} parameters: its checkpoint (weights + the optimizer's "
            f"state, so it can be resumed) would be about {_size(est.checkpoint)}, over the "
            f"{_size(cap)} this server opens (TFVIZ_CHECKPOINT_MB). Make it smaller (d_model, layers).")
    if device is None:
        device = devices.resolve_device(train_config.device)
    budget, source = memory_budget(device)
    if budget is not None and est.total > budget:
        p = est.parts
        fixed = est.total - p["activations"]
        fits = max(0, (budget - fixed) // max(est.per_example, 1))
        advice = (f"A batch size of {fits} or less would fit." if fits >= 1 else
                  "Even one example would not fit: make the model smaller (d_model, layers).")
        raise BudgetError(
            f"this training would need about {_size(est.total)} of memory (weights {_size(p['weights'])}, "
            f"gradients {_size(p['gradients'])}, optimizer {_size(p['optimizer'])}, activations "
            f"{_size(p['activations'])} for batch {train_config.batch_size} x {est.positions} positions), "
            f"more than the {_size(budget)} one training may use on this server now ({source}). {advice}")
    return est


def is_out_of_memory(e: BaseException) -> bool:
    """A failed allocation: CUDA's OutOfMemoryError, the CPU allocator's RuntimeError
    ("[enforce fail at alloc_cpu.cpp] ... can't allocate memory", "DefaultCPUAllocator: not enough
    memory"), or Python's MemoryError."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and any(s in text for s in (
        "out of memory", "can't allocate memory", "cannot allocate memory", "not enough memory",
        "defaultcpuallocator"))
