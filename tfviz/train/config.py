"""Training configuration: a frozen, validated dataclass saved with every checkpoint.

Every field is checked at construction, so a bad value fails here with a sentence a student can act
on (``TrainConfig(lr=0)`` -> "lr=0 must be above 0 ...") instead of as a silent non-learning run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ..model.config import VersionedConfig

TRAIN_CONFIG_FORMAT_VERSION = 1  # of TrainConfig.to_dict()
SCHEDULES = ("cosine", "inverse_sqrt", "constant")
DEVICES = ("auto", "cpu", "cuda", "mps")
MAX_LR = 1.0  # above this AdamW diverges on anything we train; almost surely a typo (e.g. 3 for 3e-3)


def _int(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be a whole number")
    if not low <= value <= high:
        raise ValueError(f"{name}={value} must be between {low} and {high}")


def _num(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite number")
    return float(value)


@dataclass(frozen=True)
class TrainConfig(VersionedConfig):
    """How to train (the model itself is described by :class:`tfviz.ModelConfig`).

    steps            optimizer steps in total (a resumed run continues up to this number)
    batch_size       examples per step; under DDP the *global* batch, split evenly over ranks
    lr               peak learning rate, reached at the end of warmup
    weight_decay     AdamW decoupled decay, applied to Linear weight matrices only
                     (not to biases, norms or embeddings)
    warmup           steps of linear warmup 0 -> lr
    schedule         "cosine": lr -> lr/10 along a half cosine after warmup;
                     "inverse_sqrt": Vaswani et al. 2017, d_model^-0.5 * min(s^-0.5, s * w^-1.5),
                     rescaled so its peak (at s = w) equals lr, i.e. lr * min(sqrt(w/s), s/w);
                     "constant": lr after warmup
    label_smoothing  cross-entropy label smoothing epsilon in [0, 1)
    grad_clip        clip the global gradient L2 norm to this value (None or 0 = no clipping)
    seed             seeds the batch sampler's torch.Generator (and dropout's global RNG)
    device           "auto" (cuda > mps > cpu), or force "cpu" / "cuda" / "mps"
    log_every        stream train metrics every N steps
    eval_every       evaluate on the validation split every N steps (0 = only at the end)
    eval_examples    validation examples per evaluation
    snapshot_every   record the probe's attention patterns every N steps (0 = first/last only)
    checkpoint_every save a resumable checkpoint every N steps (0 = only at the end / on stop)
    bf16             bfloat16 autocast on CUDA; None = on when the GPU supports it (ignored on CPU/MPS)
    num_threads      torch CPU threads for this run (None = leave torch's setting alone)
    patience         early stopping: end the run once the validation loss has not fallen by
                     ``min_delta`` below its best for this many evaluations in a row (0 = never)
    min_delta        the smallest fall of the validation loss that counts as an improvement
    compile          run the training forward through ``torch.compile`` (worth it on a GPU: fused
                     kernels; the first steps pay the compilation, tens of seconds)
    """

    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 100
    schedule: str = "cosine"
    label_smoothing: float = 0.0
    grad_clip: float | None = 1.0
    seed: int = 0
    device: str = "auto"
    log_every: int = 10
    eval_every: int = 100
    eval_examples: int = 512
    snapshot_every: int = 50
    checkpoint_every: int = 500
    bf16: bool | None = None
    num_threads: int | None = None
    patience: int = 0
    min_delta: float = 0.0
    compile: bool = False

    FORMAT_VERSION: ClassVar[int] = TRAIN_CONFIG_FORMAT_VERSION
    WHAT: ClassVar[str] = "train config"

    def __post_init__(self) -> None:
        _int("steps", self.steps, 1, 10_000_000)
        _int("batch_size", self.batch_size, 1, 65_536)
        lr = _num("lr", self.lr)
        if lr <= 0:
            raise ValueError(f"lr={self.lr} must be above 0: with a zero learning rate nothing is learned "
                             "(typical values: 1e-4 to 3e-3)")
        if lr > MAX_LR:
            raise ValueError(f"lr={self.lr} is absurdly large (at most {MAX_LR}); typical values "
                             f"are 1e-4 to 3e-3 — did you mean {lr * 1e-3:g}?")
        if not 0 <= _num("weight_decay", self.weight_decay) < 1:
            raise ValueError(f"weight_decay={self.weight_decay} must be in [0, 1) (typical: 0 to 0.1)")
        _int("warmup", self.warmup, 0, 10_000_000)
        if self.warmup >= self.steps:
            raise ValueError(f"warmup={self.warmup} must be below steps={self.steps} "
                             "(warmup is the first part of training, e.g. 5-10% of the steps)")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r} is not one of {', '.join(map(repr, SCHEDULES))}")
        if not 0 <= _num("label_smoothing", self.label_smoothing) < 1:
            raise ValueError(f"label_smoothing={self.label_smoothing} must be in [0, 1) (typical: 0 or 0.1)")
        if self.grad_clip is not None and _num("grad_clip", self.grad_clip) < 0:
            raise ValueError(f"grad_clip={self.grad_clip} must be positive (or None / 0 for no clipping)")
        _int("seed", self.seed, 0, 2**63 - 1)
        if self.device not in DEVICES:
            raise ValueError(f"device={self.device!r} is not one of {', '.join(map(repr, DEVICES))}")
        _int("log_every", self.log_every, 1, 10_000_000)
        for name in ("eval_every", "snapshot_every", "checkpoint_every"):
            _int(name, getattr(self, name), 0, 10_000_000)
        _int("eval_examples", self.eval_examples, 1, 1_000_000)
        if self.bf16 is not None and not isinstance(self.bf16, bool):
            raise ValueError(f"bf16={self.bf16!r} must be True, False or None (= automatic)")
        if self.num_threads is not None:
            _int("num_threads", self.num_threads, 1, 1024)
        _int("patience", self.patience, 0, 1_000_000)
        if _num("min_delta", self.min_delta) < 0:
            raise ValueError(f"min_delta={self.min_delta} must be >= 0")
        if self.patience and not self.eval_every:
            raise ValueError("patience needs evaluations during the run: set eval_every > 0")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile={self.compile!r} must be True or False")

    @property
    def clip(self) -> float | None:
        return self.grad_clip or None
