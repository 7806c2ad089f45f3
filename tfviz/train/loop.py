"""The training loop, as a plain function: ``train(model, task, TrainConfig(...)) -> TrainResult``.

Each step draws a batch from ``task`` with a seeded ``torch.Generator`` and minimises the mean
token cross-entropy over target positions (targets == -100 are ignored)

    loss = -(1/N) * sum_{(b,t): y_bt != -100} log softmax(logits_bt)[y_bt]     (N = target tokens)

with AdamW, a warmup + decay schedule (``optim.lr_at``) and global-norm gradient clipping.
Progress goes to ``callbacks``: each is called with an :class:`Event` and may return True to stop.
A stop (flag, callback or Ctrl-C) saves a resumable checkpoint; NaN/inf stops the run and keeps the
last good checkpoint; running out of (GPU) memory ends the run with advice instead of a crash.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from .checkpoint import MAX_HISTORY, TrainState, compact_history, save_checkpoint
from ..analysis.cost import train_flops_per_token
from ..tasks.base import IGNORE, Batch
from .. import device as devices
from . import distributed
from .budget import is_out_of_memory as _is_oom
from .config import TrainConfig
from ..analysis import phase as phase_io
from ..analysis.gradients import group_grad_norms
from .optim import load_optimizer_state, lr_at, make_optimizer, optimizer_state
from .snapshot import AttentionSnapshot, Prober

STATUSES = ("done", "stopped", "diverged", "out_of_memory")


@dataclass
class Event:
    """kind "metrics" (``metrics``: step, train_loss, lr, grad_norm, tokens_per_s, elapsed, eta,
    grad_norms (group -> that step's gradient norm before clipping, ``tfviz.analysis.gradients``),
    plus val_loss, val_accuracy, ... on evaluation steps; on CUDA also mfu, gpu_memory_gib, bf16), "snapshot" (``snapshot``) or
    "checkpoint" (``path``)."""

    kind: str
    step: int
    metrics: dict[str, float] | None = None
    snapshot: AttentionSnapshot | None = None
    path: Path | None = None


@dataclass
class TrainResult:
    status: str  # one of STATUSES
    message: str
    step: int
    history: list[dict[str, float]]
    snapshots: list[AttentionSnapshot] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)  # val_* and test_* of the final model
    checkpoint: Path | None = None
    elapsed: float = 0.0
    device: str = "cpu"
    phase: dict | None = None  # an induction run's phase-change records (tfviz.analysis.phase)

    @property
    def ok(self) -> bool:
        return self.status in ("done", "stopped")


def token_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float, n_tokens: int) -> torch.Tensor:
    """Summed cross-entropy over non-ignored targets / n_tokens (the *global* count under DDP)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE,
                           label_smoothing=label_smoothing, reduction="sum") / max(n_tokens, 1)


def _shard(batch: Batch, d: distributed.Dist) -> Batch:
    """This rank's contiguous rows of the global batch."""
    if not d.active:
        return batch
    n = batch.tokens.shape[0] // d.world
    rows = slice(d.rank * n, (d.rank + 1) * n)
    return Batch(batch.tokens[rows], batch.targets[rows], None if batch.src is None else batch.src[rows])


def _stop_requested(stop: Any) -> bool:
    if stop is None:
        return False
    return bool(stop.is_set() if hasattr(stop, "is_set") else stop())


def _train_state(model, opt, gen: torch.Generator, step: int) -> TrainState:
    tensors, info = optimizer_state(model, opt)
    tensors["rng.batch"] = gen.get_state()
    tensors["rng.torch"] = torch.get_rng_state()
    return TrainState(step, tensors, info)


class _Diverged(Exception):
    pass


class _Run:
    """The state of one training run; ``train`` below drives it. Rank 0 evaluates, snapshots,
    saves and calls the callbacks; every rank agrees on when to stop."""

    def __init__(self, model, task, cfg: TrainConfig, callbacks, checkpoint, resume, stop, extra=None):
        self.model, self.task, self.cfg, self.callbacks = model, task, cfg, list(callbacks)
        self.checkpoint, self.stop_flag, self.extra = checkpoint, stop, dict(extra or {})
        self.d = d = distributed.current()
        if cfg.batch_size % d.world:
            raise ValueError(f"batch_size={cfg.batch_size} must divide evenly over {d.world} processes")
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        self.device = devices.resolve_device(cfg.device, d.local_rank)
        self.bf16 = devices.use_bf16(cfg.bf16, self.device)
        model.to(self.device).train()
        self.net = model if not d.active else DistributedDataParallel(
            model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        # The checks and padding decisions (host syncs) run eagerly in model.prepare; the compiled
        # forward gets their result, so it holds no graph break.
        self.forward = torch.compile(self.net) if cfg.compile else self.net
        self.peak_flops = devices.bf16_peak_flops(self.device) if self.bf16 else None
        self.opt = make_optimizer(model, cfg)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.step, self.history = 0, []
        if model.config.dropout > 0:
            torch.manual_seed(cfg.seed)
        if resume is not None:
            self._resume(resume)
        self.start_step, self.t_start = self.step, time.perf_counter()
        # attention snapshots of the probe (none for a model without attention: a plain RNN)
        self.prober = Prober(task, self.device) if d.main and Prober.applies(model) else None
        self.snapshots: list[AttentionSnapshot] = list(getattr(resume, "snapshots", None) or [])
        # an induction run: loss per token index and head scores on fresh repeats, every logged step
        self.phase_probe = (phase_io.PhaseProbe.for_task(task, model.config)
                            if d.main and phase_io.applies(task, model) else None)
        resumed = getattr(resume, "phase", None)
        self.phase = None if self.phase_probe is None else (
            {**resumed, "records": list(resumed["records"])} if resumed
            else phase_io.new_phase(self.phase_probe))
        self.saved: tuple[Path, int] | None = None
        self.window = self._new_window()
        self.width = 0
        self.layer_norms: dict[str, float] = {}  # per-group gradient norms of the last logged step
        self.best, self.early = (math.inf, 0, 0), None  # (val loss, step, evaluations since), message
        self.best_val, self.last_val, self.best_weights = (math.inf, 0), math.inf, None

    def _resume(self, ck) -> None:
        state = ck.train_state
        if state is None:
            raise ValueError(f"{ck.path} holds no training state, so it cannot be resumed")
        load_optimizer_state(self.model, self.opt, state.tensors, state.info)
        try:
            self.gen.set_state(state.tensors["rng.batch"])
            if self.model.config.dropout > 0 and "rng.torch" in state.tensors:
                torch.set_rng_state(state.tensors["rng.torch"])
        except RuntimeError as e:
            raise ValueError(f"{ck.path}: invalid RNG state ({e})") from None
        self.step, self.history = state.step, list(ck.history)

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def emit(self, event: Event) -> bool:
        return any([bool(cb(event)) for cb in self.callbacks]) if self.d.main else False

    def agreed(self, flag: bool) -> bool:
        """Every rank stops at the same step: the max of the ranks' flags."""
        if not self.d.active:
            return flag
        t = torch.tensor([float(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    # -- one optimizer step -----------------------------------------------------------------
    def train_step(self) -> tuple[float, float, float]:
        """-> (global mean loss, gradient norm before clipping, lr). Raises _Diverged on NaN/inf
        (before the weights are touched)."""
        cfg, d = self.cfg, self.d
        batch = self.task.batch("train", cfg.batch_size, self.gen)  # the global batch, same on every rank
        n_targets = int((batch.targets != IGNORE).sum())
        pad = self.task.tokenizer.pad_id  # None: a tokenizer without padding (every token is real)
        self.window[2] += sum(x.numel() if pad is None else int((x != pad).sum()) for x in batch.inputs)
        self.window[4] += sum(x.numel() for x in batch.inputs)  # computed, padding included
        self.width = max(x.shape[1] for x in batch.inputs)
        local = _shard(batch, d).to(self.device)
        lr = lr_at(self.step + 1, cfg)
        for g in self.opt.param_groups:
            g["lr"] = lr
        with self.autocast():
            logits = self.forward(*local.inputs, pads=self.model.prepare(*local.inputs))
        # DDP averages gradients over ranks; x world makes that the global-batch gradient.
        loss = token_loss(logits, local.targets, cfg.label_smoothing, n_targets) * d.world
        value = loss.detach().float() / d.world
        if d.active:
            dist.all_reduce(value)
        value = float(value)
        if not math.isfinite(value):
            raise _Diverged(f"loss became {value} (lr={lr:.3g})")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.d.main and self.logs(self.step + 1):
            self.layer_norms = group_grad_norms(self.model)  # before clipping changes them
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip or math.inf))
        if not math.isfinite(grad_norm):
            raise _Diverged(f"the gradient norm became {grad_norm} (lr={lr:.3g})")
        self.opt.step()
        self.step += 1
        return value, grad_norm, lr

    # -- reporting --------------------------------------------------------------------------
    def evaluates(self, step: int) -> bool:
        return step == self.cfg.steps or bool(self.cfg.eval_every and step % self.cfg.eval_every == 0)

    def logs(self, step: int) -> bool:
        """Step ``step`` (1-based) streams metrics: the first step of this run (the first loss
        point comes at once, not after log_every), every ``log_every`` steps and on evaluations."""
        return (self.evaluates(step) or step == self.start_step + 1
                or step % self.cfg.log_every == 0)

    def log(self, loss: float, grad_norm: float, lr: float) -> bool:
        """Metrics (and validation on eval steps) after a step; True = a callback asked to stop."""
        cfg, step, w = self.cfg, self.step, self.window
        w[0], w[1] = w[0] + loss, w[1] + 1
        last, evaluate = step == cfg.steps, self.evaluates(step)
        stop = False
        if self.d.main and self.logs(step):
            now = time.perf_counter()
            elapsed = now - self.t_start
            m = {"step": step, "train_loss": w[0] / w[1], "lr": lr, "grad_norm": grad_norm,
                 "tokens_per_s": w[2] / max(now - w[3], 1e-9), "elapsed": elapsed,
                 "eta": elapsed / (step - self.start_step) * (cfg.steps - step),
                 "grad_norms": self.layer_norms}
            if evaluate:
                m.update({f"val_{k}": float(v) for k, v in self.evaluate("validation", cfg.eval_examples).items()})
            m.update(self.gpu_metrics(w[4] / max(now - w[3], 1e-9)))
            self.history.append(m)
            self.measure_phase()
            if len(self.history) > 2 * MAX_HISTORY:  # a long run keeps a thinned curve
                self.history = compact_history(self.history)
            stop = self.emit(Event("metrics", step, metrics=m))
            if "val_loss" in m and self.plateaued(m["val_loss"], step) and not last:
                stop = True
            self.window = self._new_window()
        if self.d.main and (last or (cfg.snapshot_every and step % cfg.snapshot_every == 0)):
            stop = self.snapshot() or stop
        return stop

    def plateaued(self, val_loss: float, step: int) -> bool:
        """Early stopping: True once the validation loss has not fallen by ``min_delta`` below
        its best for ``patience`` evaluations in a row (never with patience 0)."""
        best, _, bad = self.best
        self.last_val = val_loss
        if val_loss < best:  # the weights to end with (patience only): the best seen
            if self.cfg.patience:
                self.best_weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.best_val = (val_loss, step)
        if val_loss < best - self.cfg.min_delta:
            self.best = (val_loss, step, 0)
            return False
        self.best = (best, self.best[1], bad + 1)
        if self.cfg.patience and bad + 1 >= self.cfg.patience:
            self.early = (f"stopped early at step {step} of {self.cfg.steps}: the validation loss has not "
                          f"improved for {self.cfg.patience} evaluations (best {best:.3f} at step "
                          f"{self.best[1]})")
            return True
        return False

    def restore_best(self) -> str:
        """With early stopping: end with the weights of the best validation loss, when the last
        evaluation was worse. -> a sentence for the result message ("" when nothing changed)."""
        if self.best_weights is None or not self.last_val > self.best_val[0]:
            return ""
        self.model.load_state_dict(self.best_weights)
        return (f"kept the weights of step {self.best_val[1]} (validation loss {self.best_val[0]:.3f}; "
                f"{self.last_val:.3f} at the last evaluation)")

    @staticmethod
    def _new_window() -> list:
        return [0.0, 0, 0, time.perf_counter(), 0]  # loss sum, steps, tokens, start, computed tokens

    def gpu_metrics(self, computed_per_s: float) -> dict[str, float]:
        """On CUDA: mfu (model FLOPs utilisation against the GPU's bf16 peak, when bf16 is on and
        the GPU is known), gpu_memory_gib (peak allocated since the last log), bf16 (1 = on)."""
        if self.device.type != "cuda":
            return {}
        out = {"gpu_memory_gib": devices.gpu_memory_gib(self.device), "bf16": float(self.bf16)}
        torch.cuda.reset_peak_memory_stats(self.device)
        if self.peak_flops:
            # the global batch's tokens over every rank's GPU
            out["mfu"] = train_flops_per_token(self.model, self.width) * computed_per_s \
                / (self.peak_flops * self.d.world)
        return out

    def evaluate(self, split: str, max_examples: int) -> dict[str, float]:
        with self.autocast():
            out = self.task.evaluate(self.model, split, max_examples=max_examples)
        self.model.train()
        return out

    def measure_phase(self) -> None:
        if self.phase_probe is not None:
            phase_io.add_record(self.phase, self.phase_probe.measure(self.model, self.step))

    def snapshot(self) -> bool:
        if self.prober is None or (self.snapshots and self.snapshots[-1].step == self.step):
            return False  # e.g. resuming right where the last snapshot was taken
        self.snapshots.append(self.prober.take(self.model, self.step))
        return self.emit(Event("snapshot", self.step, snapshot=self.snapshots[-1]))

    def save(self, status: str, final: dict | None = None) -> Path | None:
        if self.checkpoint is None or not self.d.main:
            return None
        path = save_checkpoint(self.checkpoint, self.model, task=self.task, train_config=self.cfg,
                               history=self.history, train_state=_train_state(self.model, self.opt, self.gen, self.step),
                               extra={**self.extra, "status": status, **({"final": final} if final else {})},
                               snapshots=self.snapshots, phase=self.phase)
        self.saved = (path, self.step)
        self.emit(Event("checkpoint", self.step, path=path))
        return path

    def oom_message(self) -> str:
        self.opt.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        bs = self.cfg.batch_size
        return (f"out of memory on {devices.device_label(self.device)} at step {self.step + 1} "
                f"(batch_size={bs}, sequences up to {self.width or '?'} tokens). Try a smaller batch size "
                f"(e.g. {max(bs // 2, 1)}), shorter sequences or a smaller model.")


def train(model, task, config: TrainConfig | None = None,
          callbacks: Iterable[Callable[[Event], Any]] = (), *, checkpoint: str | Path | None = None,
          resume=None, stop=None, checkpoint_seconds: float | None = None,
          extra: dict | None = None) -> TrainResult:
    """Train ``model`` (a tfviz.Transformer or recurrent model, moved to the chosen device) on ``task``.

    checkpoint: path to save to (every ``checkpoint_every`` steps, on stop and at the end).
    resume:     a :class:`tfviz.Checkpoint` with a train_state (its ``.model`` should be
                ``model``); optimizer, RNG, step and history continue from it.
    stop:       a ``threading.Event`` (or a no-argument callable) checked after every step.
    checkpoint_seconds: also save (resumable) once this many seconds of training have passed since
                the last save (the run store's workers: a killed run loses at most that much).
    extra:      JSON-able fields saved in every checkpoint's ``extra`` (the run store's workers: the
                run's identity, so a lost store can list it again).
    Under torch.distributed (torchrun) the model is wrapped in DistributedDataParallel.
    """
    cfg = config or TrainConfig()
    run = _Run(model, task, cfg, callbacks, checkpoint, resume, stop, extra)
    status, message = "done", ""
    last_save = time.monotonic()
    try:
        if run.step == 0:
            run.measure_phase()  # the phase change's first column: the untrained model
        want_stop = run.agreed(run.d.main and run.snapshot())
        while run.step < cfg.steps and not want_stop:
            want_stop = run.log(*run.train_step())
            due = (cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0) or (
                checkpoint_seconds is not None and time.monotonic() - last_save >= checkpoint_seconds)
            if due and run.step < cfg.steps:
                run.save("running")
                last_save = time.monotonic()
            want_stop = run.agreed(want_stop or _stop_requested(stop))
        if run.early:
            message = run.early
        elif run.step < cfg.steps:
            status, message = "stopped", f"stopped at step {run.step} of {cfg.steps}"
    except _Diverged as e:
        kept = (f"the last good checkpoint (step {run.saved[1]}) is kept at {run.saved[0]}" if run.saved
                else "no checkpoint had been saved yet")
        status = "diverged"
        message = (f"training stopped at step {run.step + 1}: {e}. The weights were not updated; {kept}. "
                   "Try a smaller lr, more warmup or grad_clip.")
    except KeyboardInterrupt:
        status, message = "stopped", f"interrupted at step {run.step} of {cfg.steps}"
    except Exception as e:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
        if not _is_oom(e):
            raise
        status, message = "out_of_memory", run.oom_message()
    final: dict[str, float] = {}
    if status in ("done", "stopped") and run.d.main:
        run.snapshot()  # the replay ends where training ended
        kept = run.restore_best()
        if kept:
            run.early = f"{run.early}; {kept}" if run.early else kept
            message = f"{message}; {kept}" if message else kept
        try:
            for split, prefix, n in (("validation", "val", cfg.eval_examples), ("test", "test", 10**9)):
                final.update({f"{prefix}_{k}": float(v) for k, v in run.evaluate(split, n).items()})
        except Exception as e:  # noqa: BLE001 - the trained weights are still worth saving
            if not _is_oom(e):
                raise
            message = f"{message} (the final evaluation ran out of memory)".strip()
        run.save(status, final)
        if status == "done" and "test_accuracy" in final:
            message = (f"{run.early + '; ' if run.early else ''}"
                       f"finished {run.step} steps in {time.perf_counter() - run.t_start:.1f} s: "
                       f"test accuracy {final.get('test_accuracy', float('nan')):.3f}")
    model.eval()
    return TrainResult(status, message, run.step, run.history, run.snapshots, final,
                       run.saved[0] if run.saved else None, time.perf_counter() - run.t_start, str(run.device),
                       phase_io.thin(run.phase))
