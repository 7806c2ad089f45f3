"""A training worker: a process (never a thread of the web server) that claims queued runs from
the run store (``tfviz.runs.store``), trains each with ``tfviz.train.train`` and writes its
progress back as it goes. Started by an executor (``tfviz.runs.executor``) as
``python -m tfviz worker --db PATH``; any number may serve one store (the store's slot count
decides how many train at once).

Restart-safety lives here: a run saves a resumable checkpoint (model + optimiser + RNG + step) at
least every ``TFVIZ_CHECKPOINT_SECONDS`` of training, on Stop and at the end; the worker renews
its lease every second, so a run whose worker died is queued again by the next claim and resumes
from its last complete checkpoint, finishing with as many steps as an uninterrupted run.
"""
from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from .. import limits
from .store import ATTEMPTS_DIR, SqliteRunStore, attempt_files, attempt_path, worker_id

FLUSH_S = 0.5  # progress reaches the store at most this often (the first loss point at once)


def _build_task(spec: dict, open_folder):
    """The run's task from its spec; a task reading text with the model's own tokenizer
    (``tokenizer="given"``: fine-tuning) gets the tokenizer of the model it starts from."""
    from ..tasks import cached_task, make_task
    from ..train.checkpoint import load_checkpoint

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


def _init_model(path: str | os.PathLike, task, open_folder: Callable[[Any], Any] | None):
    """The weights a fine-tuning run starts from: a tfviz checkpoint, or a model folder opened by
    ``open_folder`` (the app passes ``tfviz.interop.from_pretrained``: runs sit below the interop
    layer and do not import it), checked against the task's tokenizer (its ids must be the
    model's)."""
    from ..train.checkpoint import load_checkpoint

    if os.path.isdir(path):
        if open_folder is None:
            raise ValueError("this job manager starts only from tfviz checkpoints (it was given no "
                             "open_folder to read a model folder with)")
        ck = open_folder(path)
    else:
        ck = load_checkpoint(path)
    tok = task.tokenizer
    if tok.vocab_size > ck.config.vocab_size:
        raise ValueError(f"the task's tokenizer has {tok.vocab_size:,} tokens, the model only "
                         f"{ck.config.vocab_size:,} embeddings: fine-tune with the model's own tokenizer")
    if ck.tokenizer is not None and ck.tokenizer.fingerprint() != tok.fingerprint():
        raise ValueError("the task reads its text with another tokenizer than the model's: its ids "
                         "would mean other tokens (build the task with the model's tokenizer)")
    return ck.model


def _sweep_own_temps(checkpoint: Path) -> None:
    """Temp files an earlier, killed attempt of this run left beside its checkpoint or its attempt
    files (that worker is gone, or has lost the run: its writes no longer count)."""
    for folder in (checkpoint.parent, checkpoint.parent / ATTEMPTS_DIR):
        for pattern in (f".{checkpoint.stem}.*.tmp",):
            for tmp in folder.glob(pattern):
                tmp.unlink(missing_ok=True)


def log(worker: str, message: str) -> None:
    """One line on stderr: the executor sends it to ``workers.log``, which the teacher's panel
    shows. (On a full disk the line itself may not be written: the panel then says so.)"""
    try:
        pid = worker.split(":")[1] if worker.count(":") >= 2 else worker
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} worker {pid}: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class Backoff:
    """Waits that double (``first`` .. ``most`` seconds) while the run store cannot be written,
    each new fault (or each doubling) logged once; ``ok()`` when it answers again."""

    def __init__(self, worker: str, first: float = 0.5, most: float = 30.0):
        self.worker, self.first, self.most = worker, first, most
        self.delay, self.said = 0.0, ""

    def failed(self, doing: str, e: BaseException) -> float:
        self.delay = self.first if not self.delay else min(self.most, 2 * self.delay)
        said = f"cannot {doing}: {e}"
        if said != self.said or self.delay < self.most:
            log(self.worker, f"{said}; trying again in {self.delay:g} s")
            self.said = said
        return self.delay

    def ok(self) -> None:
        if self.delay:
            log(self.worker, "the run store answers again")
        self.delay, self.said = 0.0, ""


class _Heartbeat(threading.Thread):
    """Renews the run's lease every second (on connections of its own, which wait at most a third
    of the lease for a lock) and keeps the store's word: stop, pause, yield or lost."""

    def __init__(self, store, run_id: str, worker: str, attempt: int | None = None):
        super().__init__(daemon=True, name=f"tfviz-heartbeat-{run_id}")
        own = getattr(store, "_for_heartbeat", None)  # SqliteRunStore's: connections of its own
        self.store = own() if own is not None else store
        self.run_id, self.worker, self.attempt = run_id, worker, attempt
        self.directive: str | None = None
        self.done = threading.Event()
        self.backoff = Backoff(worker)

    def run(self) -> None:
        every = min(1.0, self.store.lease_s / 3)
        while not self.done.wait(every):
            try:
                said = (self.store.renew(self.run_id, self.worker) if self.attempt is None
                        else self.store.renew(self.run_id, self.worker, self.attempt))
            except Exception as e:  # noqa: BLE001 - a locked, read-only or full store: next beat
                self.backoff.failed(f"renew the lease of run {self.run_id}", e)
                continue
            self.backoff.ok()
            if said is not None and self.directive is None:
                self.directive = said
        close = getattr(self.store, "close", None)
        if close is not None:
            close()


def _disk_full(e: BaseException) -> bool:
    return (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left on device" in str(e)


def _retry(call: Callable[[], Any], backoff: Backoff, doing: str, stopping: threading.Event | None,
           give_up_s: float = 10.0) -> Any:
    """``call()`` until the store takes it (a locked, read-only or full store: wait and try again,
    logging); after ``give_up_s`` once ``stopping`` is set, give up (-> None): the record stays
    as it was and the run resumes from its last checkpoint when the store answers again."""
    from .store import StoreUnavailable

    since = None
    while True:
        try:
            out = call()
            backoff.ok()
            return out
        except StoreUnavailable as e:
            wait = backoff.failed(doing, e)
        if stopping is not None and stopping.is_set():
            since = since or time.monotonic()
            if time.monotonic() - since > give_up_s:
                log(backoff.worker, f"gave up trying to {doing}: the worker is shutting down")
                return None
        if stopping is None or stopping.is_set():
            time.sleep(min(wait, 1.0) if stopping is not None else wait)
        else:
            stopping.wait(wait)


def _drop_attempt(store, run_id: str, mine: Path) -> None:
    """After losing a run: remove this attempt's file unless the record still names it (another
    worker may be resuming from it); a record that cannot be read keeps it (the sweep of
    ``tfviz.classroom.disk`` removes it later)."""
    try:
        rec = store.get(run_id)
    except Exception:  # noqa: BLE001
        return
    if rec.get("state") not in ("queued", "running") or str(mine) not in (rec.get("checkpoint"),
                                                                          rec.get("resume_from")):
        mine.unlink(missing_ok=True)
        mine.with_suffix(".json").unlink(missing_ok=True)


def _resume_source(rec: dict[str, Any], spec: dict[str, Any]) -> Path | None:
    """Where this attempt continues from: the record's resume point, else its last recorded
    checkpoint, else (a publish whose record was not written) the run's own checkpoint; a
    first attempt: the checkpoint the run was asked to resume (``spec["resume"]``)."""
    later = int(rec.get("attempts") or 0) > 1 or rec.get("resume_from")
    candidates = [rec.get("resume_from"), rec.get("checkpoint")] if later else []
    candidates += [spec.get("resume")] + ([spec.get("checkpoint")] if later else [])
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    return None


def run_one(store, worker: str, rec: dict[str, Any],
            open_folder: Callable[[Any], Any] | None = None, stopping: threading.Event | None = None,
            local=None) -> str:
    """Train the claimed run ``rec`` to its end (or until asked to stop / pause) -> its state
    ("lost": another attempt holds it now; nothing of this one was written to its record).
    ``local``: a run trained in the process that submitted it (``tfviz.runs.jobs.LocalRuns``):
    its Task object, its live snapshots, an immediate Stop, its result and traceback.

    Fenced: the attempt number of the claim goes with every write to the store, and the run
    trains into its attempt's own file (``store.attempt_path``), which ``finish`` publishes onto
    the run's checkpoint only while this attempt still holds the run."""
    import torch

    from ..model.families import config_from_dict
    from ..train.budget import BudgetError, check_training
    from ..train.checkpoint import MAX_HISTORY, compact_history, load_checkpoint
    from ..train.config import TrainConfig
    from ..train.loop import train
    from ..train.setup import new_model
    from .store import StoreUnavailable

    run_id, spec = rec["id"], rec["spec"]
    attempt = int(rec.get("attempts") or 0) or None
    final = Path(spec["checkpoint"])
    mine = attempt_path(final, attempt) if attempt is not None else final
    beat = _Heartbeat(store, run_id, worker, attempt)
    beat.start()
    backoff = Backoff(worker)
    history: list[dict] = list(rec["history"])
    state = {"step": rec["step"], "n_snapshots": rec["n_snapshots"], "checkpoint": rec["checkpoint"],
             "flushed": 0.0, "first": True, "saved_step": None}
    t_attempt = time.monotonic()

    def ran() -> float:
        return rec["ran_s"] + time.monotonic() - t_attempt

    def flush(force: bool = False) -> bool:
        now = time.monotonic()
        if not (force or state["first"] or now - state["flushed"] >= FLUSH_S):
            return False
        try:
            held = store.progress(run_id, worker, attempt=attempt, step=state["step"], history=history,
                                  n_snapshots=state["n_snapshots"], checkpoint=state["checkpoint"], ran_s=ran())
        except StoreUnavailable as e:  # training goes on; the next flush tries again
            backoff.failed(f"record the progress of run {run_id}", e)
            return False
        backoff.ok()
        state["flushed"], state["first"] = now, False
        if held is False and beat.directive is None:
            beat.directive = "lost"
        return held is not False

    def on_event(event) -> bool:
        nonlocal history
        if event.kind == "metrics":
            history.append(dict(event.metrics))
            if len(history) > 2 * MAX_HISTORY:
                history = compact_history(history)
            state["step"] = event.step
        elif event.kind == "snapshot":
            state["n_snapshots"] += 1
            if local is not None:
                local.snapshot(run_id, event.snapshot)
        elif event.kind == "checkpoint":
            state["checkpoint"], state["saved_step"] = str(event.path), event.step
        if flush(force=event.kind == "checkpoint") and event.kind == "checkpoint" and attempt is not None:
            for n, old in attempt_files(final).items():  # the record names this attempt's file now
                if n < attempt:
                    old.unlink(missing_ok=True)
                    old.with_suffix(".json").unlink(missing_ok=True)
        return False

    max_seconds = spec.get("max_seconds")
    timed_out: list[bool] = []

    def stop() -> bool:
        if local is not None and beat.directive is None and local.cancelled(run_id):
            beat.directive = "stop"  # the submitting process's Stop: now, not at the next beat
        if beat.directive is not None or (stopping is not None and stopping.is_set()):
            return True
        if max_seconds is not None and ran() > max_seconds:
            timed_out.append(True)
            return True
        return False

    def lost() -> str:
        if attempt is not None:
            _drop_attempt(store, run_id, mine)
        return "lost"

    def end(state_: str, **fields) -> str:
        held = _retry(lambda: store.finish(run_id, worker, state_, attempt=attempt,
                                           publish=None if attempt is None else (str(mine), str(final)),
                                           **fields),
                      backoff, f"record the end of run {run_id}", stopping)
        return lost() if held is False else state_

    try:
        torch.set_num_threads(int(spec.get("torch_threads") or 1))
        cfg = TrainConfig.from_dict(spec["train_config"])
        if int(rec.get("attempts") or 0) > 1:
            _sweep_own_temps(final)
        if attempt is not None:
            final.parent.mkdir(parents=True, exist_ok=True)
            mine.parent.mkdir(mode=stat.S_IMODE(os.stat(final.parent).st_mode), exist_ok=True)
        task = local.task(run_id) if local is not None else None
        task = task if task is not None else _build_task(spec, open_folder)
        resume = None
        source = _resume_source(rec, spec)
        if source is not None:
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
        if local is not None:
            local.begin(run_id, list(resume.snapshots) if resume is not None else [])
        identity = {"id": run_id, "name": rec["name"], "created": rec["created"],
                    **{k: spec.get(k) for k in ("init", "resume", "max_seconds", "check_budget", "torch_threads")}}
        result = train(model, task, cfg, [on_event], checkpoint=mine, resume=resume, stop=stop,
                       checkpoint_seconds=limits.checkpoint_seconds(), extra={"run": identity})
        beat.done.set()
        if local is not None:
            local.results[run_id] = result
        state["step"] = result.step
        if result.checkpoint:
            state["checkpoint"] = str(result.checkpoint)
        fields = dict(step=state["step"], history=history, n_snapshots=state["n_snapshots"],
                      checkpoint=state["checkpoint"], ran_s=ran())
        said = beat.directive
        if said == "lost":
            return lost()
        if result.status == "stopped" and (said in ("pause", "yield") or (
                stopping is not None and stopping.is_set() and said != "stop")):
            why = {"pause": "paused to give another session's waiting run a slot",
                   "yield": "paused so that the run your teacher started next could train"
                   }.get(said, "paused: its worker was shut down")
            held = _retry(lambda: store.requeue(run_id, worker, attempt=attempt,
                                                message=f"{why}; it resumes from step {result.step}", **fields),
                          backoff, f"put run {run_id} back in the queue", stopping)
            return lost() if held is False else "queued"
        final_state = {"done": "done", "stopped": "stopped"}.get(result.status, "failed")
        message = result.message
        if timed_out and result.status == "stopped":
            minutes = max_seconds / 60
            message = (f"{message}: a training may run {minutes:g} minute{'s' if minutes != 1 else ''} "
                       "on this server (TFVIZ_JOB_MAX_MINUTES); what it learned so far is saved")
        return end(final_state, message=message, error=None if result.ok else result.message, **fields)
    except Exception as e:  # noqa: BLE001 - a failing run must not take the worker down
        beat.done.set()
        if _disk_full(e):
            kept = (f"its checkpoint of step {state['saved_step']} is kept" if state["saved_step"] is not None
                    else "nothing of it had been saved yet")
            error = (f"the disk is full: its checkpoint could not be written at step {state['step']} "
                     f"(No space left on device); {kept}. Ask your teacher to free space on the "
                     "server, then start it again")
        else:
            error = str(e) if isinstance(e, BudgetError) else f"{type(e).__name__}: {e}"
        log(worker, f"run {run_id} failed: {error}")
        if local is not None:
            local.tracebacks[run_id] = traceback.format_exc()
        else:
            traceback.print_exc()
        if beat.directive == "lost":
            return lost()
        return end("failed", error=error, message=error, step=state["step"], history=history,
                   checkpoint=state["checkpoint"])
    finally:
        beat.done.set()


def warm_up() -> None:
    """What the first run of a process would otherwise pay before its first loss point: the
    training modules, and AdamW's first construction (it imports torch._dynamo: seconds)."""
    import torch

    from ..train import loop  # noqa: F401

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
    from .store import StoreUnavailable

    store = SqliteRunStore(db)
    worker = worker_id()
    idle_s = limits.worker_idle_seconds() if idle_s is None else idle_s
    stopping = stopping or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    warm_up()
    log(worker, "ready: waiting for runs")
    backoff = Backoff(worker)
    last, n, prepared = time.monotonic(), 0, []
    while not stopping.is_set():
        try:
            rec = store.claim(worker)
        except StoreUnavailable as e:  # locked, read-only, a full disk: wait, say so, try again
            rec, wait = None, backoff.failed("claim a run", e)
        except Exception as e:  # noqa: BLE001 - never die silently: the log says why
            rec, wait = None, backoff.failed("claim a run", e)
            traceback.print_exc()
        else:
            backoff.ok()
            wait = poll_s
        if rec is not None:
            try:
                run_one(store, worker, rec, open_folder, stopping)
            except Exception as e:  # noqa: BLE001 - run_one reports its own; this is a bug's trace
                log(worker, f"run {rec['id']}: {type(e).__name__}: {e}")
                traceback.print_exc()
            n, last = n + 1, time.monotonic()
            if once:
                break
            continue
        if time.monotonic() - last > idle_s or (parent is not None and os.getppid() != parent):
            log(worker, "idle: exiting" if time.monotonic() - last > idle_s else "its server is gone: exiting")
            break
        if not backoff.delay:
            _prepare(store, prepared)
        stopping.wait(wait)
    return n
