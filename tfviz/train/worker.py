"""A training worker: a process (never a thread of the web server) that claims queued runs from
the run store (``tfviz.train.store``), trains each with ``tfviz.train.train`` and writes its
progress back as it goes. Started by an executor (``tfviz.train.executor``) as
``python -m tfviz worker --db PATH``; any number may serve one store (the store's slot count
decides how many train at once).

Restart-safety lives here: a run saves a resumable checkpoint (model + optimiser + RNG + step) at
least every ``TFVIZ_CHECKPOINT_SECONDS`` of training, on Stop and at the end; the worker renews
its lease every second, so a run whose worker died is queued again by the next claim and resumes
from its last complete checkpoint, finishing with as many steps as an uninterrupted run.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, Callable

from .. import limits
from .store import SqliteRunStore

FLUSH_S = 0.5  # progress reaches the store at most this often (the first loss point at once)


def _build_task(spec: dict, open_folder):
    """The run's task from its spec; a task reading text with the model's own tokenizer
    (``tokenizer="given"``: fine-tuning) gets the tokenizer of the model it starts from."""
    from ..tasks import cached_task, make_task
    from .checkpoint import load_checkpoint

    task = spec["task"]
    if isinstance(task, dict) and task.get("tokenizer") == "given":
        init = spec.get("init")
        if init is None:
            raise ValueError("a task read with a model's own tokenizer needs the model (init)")
        if os.path.isdir(init):
            if open_folder is None:
                raise ValueError("this worker reads no model folders (it was given no open_folder)")
            tok = open_folder(init).tokenizer
        else:
            tok = load_checkpoint(init).tokenizer
        return make_task(task, given_tokenizer=tok)
    return cached_task(task if isinstance(task, dict) else {"name": task})


def _sweep_own_temps(checkpoint: Path) -> None:
    """Temp files an earlier, killed attempt of this run left beside its checkpoint (its worker
    is gone: nobody else writes them)."""
    for tmp in checkpoint.parent.glob(f".{checkpoint.name}.*.tmp"):
        tmp.unlink(missing_ok=True)
    for tmp in checkpoint.parent.glob(f".{checkpoint.with_suffix('.json').name}.*.tmp"):
        tmp.unlink(missing_ok=True)


class _Heartbeat(threading.Thread):
    """Renews the run's lease every second and keeps the store's word: stop, pause or lost."""

    def __init__(self, store: SqliteRunStore, run_id: str, worker: str):
        super().__init__(daemon=True, name=f"tfviz-heartbeat-{run_id}")
        self.store, self.run_id, self.worker = store, run_id, worker
        self.directive: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        every = min(1.0, self.store.lease_s / 3)
        while not self.done.wait(every):
            try:
                said = self.store.renew(self.run_id, self.worker)
            except Exception:  # noqa: BLE001 - a busy database: try again next beat
                continue
            if said is not None and self.directive is None:
                self.directive = said


def run_one(store: SqliteRunStore, worker: str, rec: dict[str, Any],
            open_folder: Callable[[Any], Any] | None = None, stopping: threading.Event | None = None) -> str:
    """Train the claimed run ``rec`` to its end (or until asked to stop / pause) -> its state."""
    import torch

    from ..model.families import config_from_dict
    from .budget import BudgetError, check_training
    from .checkpoint import MAX_HISTORY, compact_history, load_checkpoint
    from .config import TrainConfig
    from .jobs import _init_model
    from .loop import train
    from .setup import new_model

    run_id, spec = rec["id"], rec["spec"]
    beat = _Heartbeat(store, run_id, worker)
    beat.start()
    history: list[dict] = list(rec["history"])
    state = {"step": rec["step"], "n_snapshots": rec["n_snapshots"], "checkpoint": rec["checkpoint"],
             "flushed": 0.0, "first": True}
    t_attempt = time.monotonic()

    def ran() -> float:
        return rec["ran_s"] + time.monotonic() - t_attempt

    def flush(force: bool = False) -> None:
        now = time.monotonic()
        if force or state["first"] or now - state["flushed"] >= FLUSH_S:
            store.progress(run_id, worker, step=state["step"], history=history,
                           n_snapshots=state["n_snapshots"], checkpoint=state["checkpoint"], ran_s=ran())
            state["flushed"], state["first"] = now, False

    def on_event(event) -> bool:
        nonlocal history
        if event.kind == "metrics":
            history.append(dict(event.metrics))
            if len(history) > 2 * MAX_HISTORY:
                history = compact_history(history)
            state["step"] = event.step
        elif event.kind == "snapshot":
            state["n_snapshots"] += 1
        elif event.kind == "checkpoint":
            state["checkpoint"] = str(event.path)
        flush(force=event.kind == "checkpoint")
        return False

    max_seconds = spec.get("max_seconds")
    timed_out: list[bool] = []

    def stop() -> bool:
        if beat.directive is not None or (stopping is not None and stopping.is_set()):
            return True
        if max_seconds is not None and ran() > max_seconds:
            timed_out.append(True)
            return True
        return False

    try:
        torch.set_num_threads(int(spec.get("torch_threads") or 1))
        cfg = TrainConfig.from_dict(spec["train_config"])
        ckpt = Path(spec["checkpoint"])
        if rec["attempts"] > 1:
            _sweep_own_temps(ckpt)
        task = _build_task(spec, open_folder)
        resume = None
        source = rec.get("resume_from") or spec.get("resume")
        if source and Path(source).is_file():
            resume = load_checkpoint(source)
            if resume.train_state is None:
                resume = None
        if resume is not None:
            model = resume.model
            history = [dict(h) for h in resume.history]
            state["step"], state["n_snapshots"] = resume.step, len(resume.snapshots)
        elif spec.get("init") is not None:
            model = _init_model(spec["init"], task, open_folder)
            if spec.get("check_budget"):
                check_training(model.config, cfg)
        else:
            config = config_from_dict(spec["model_config"])
            if spec.get("check_budget"):  # again: free memory may have changed while it queued
                check_training(config, cfg)
            model = new_model(config, cfg.seed)
            history, state["step"], state["n_snapshots"] = [], 0, 0
        result = train(model, task, cfg, [on_event], checkpoint=ckpt, resume=resume, stop=stop,
                       checkpoint_seconds=limits.checkpoint_seconds())
        beat.done.set()
        state["step"] = result.step
        if result.checkpoint:
            state["checkpoint"] = str(result.checkpoint)
        fields = dict(step=state["step"], history=history, n_snapshots=state["n_snapshots"],
                      checkpoint=state["checkpoint"], ran_s=ran())
        said = beat.directive
        if result.status == "stopped" and (said == "pause" or (stopping is not None and stopping.is_set()
                                                               and said != "stop")):
            why = ("paused to give another session's waiting run a slot" if said == "pause"
                   else "paused: its worker was shut down")
            store.requeue(run_id, worker, message=f"{why}; it resumes from step {result.step}", **fields)
            return "queued"
        if said == "lost":
            return "lost"
        final = {"done": "done", "stopped": "stopped"}.get(result.status, "failed")
        message = result.message
        if timed_out and result.status == "stopped":
            minutes = max_seconds / 60
            message = (f"{message}: a training may run {minutes:g} minute{'s' if minutes != 1 else ''} "
                       "on this server (TFVIZ_JOB_MAX_MINUTES); what it learned so far is saved")
        store.finish(run_id, worker, final, message=message,
                     error=None if result.ok else result.message, **fields)
        return final
    except Exception as e:  # noqa: BLE001 - a failing run must not take the worker down
        beat.done.set()
        error = str(e) if isinstance(e, BudgetError) else f"{type(e).__name__}: {e}"
        store.finish(run_id, worker, "failed", error=error, message=error, step=state["step"],
                     history=history)
        traceback.print_exc()
        return "failed"
    finally:
        beat.done.set()


def warm_up() -> None:
    """What the first run of a process would otherwise pay before its first loss point: the
    training modules, and AdamW's first construction (it imports torch._dynamo: seconds)."""
    import torch

    from . import loop  # noqa: F401

    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])


def _prepare(store: SqliteRunStore, prepared: list) -> None:
    """Generate the examples of one task the store hints at (``RunManager.prepare``), once."""
    from ..tasks import cached_task

    try:
        todo = [h for h in store.prepare_hints() if h not in prepared]
    except Exception:  # noqa: BLE001 - a busy database: next time
        return
    if todo:
        prepared.append(todo[-1])
        try:
            task = cached_task(todo[-1])
            for split in ("train", "validation"):
                task.examples(split)
        except Exception:  # noqa: BLE001 - a bad hint is the run's error to report, not ours
            pass


def serve(db: str | os.PathLike, *, open_folder=None, idle_s: float | None = None,
          parent: int | None = None, poll_s: float = 0.2, once: bool = False,
          stopping: threading.Event | None = None) -> int:
    """Claim and train runs until idle for ``idle_s`` (default ``TFVIZ_WORKER_IDLE_S``), or idle
    after ``parent`` (the process that started it) has gone, or SIGTERM (a running run is paused:
    checkpointed and queued again), or ``stopping`` set. ``once``: one run, then return. -> runs
    trained."""
    store = SqliteRunStore(db)
    worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    idle_s = limits.worker_idle_seconds() if idle_s is None else idle_s
    stopping = stopping or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    warm_up()
    last, n, prepared = time.monotonic(), 0, []
    while not stopping.is_set():
        rec = store.claim(worker)
        if rec is not None:
            run_one(store, worker, rec, open_folder, stopping)
            n, last = n + 1, time.monotonic()
            if once:
                break
            continue
        if time.monotonic() - last > idle_s or (parent is not None and os.getppid() != parent):
            break
        _prepare(store, prepared)
        stopping.wait(poll_s)
    return n
