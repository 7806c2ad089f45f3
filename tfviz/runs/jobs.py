"""Background training jobs in threads of the calling process, for library use (never imports
streamlit). The app's manager is ``tfviz.runs.manager.RunManager`` (runs as records, worker processes).

    jobs = JobManager(max_concurrent=1)
    job_id = jobs.submit(model_config, "copy", TrainConfig(steps=500), owner=session_id)
    jobs.get(job_id).snapshot()   # JobSnapshot: state, queue_position, step, history, error, ...
    jobs.stop(job_id)

At most ``max_concurrent`` jobs train at once, each in its own thread; later ones wait in a queue
and know their 1-based position. Jobs live in the manager (not in a browser session), keyed by
id, so a reloaded tab finds its job again. A job whose worker raises becomes "failed" with the error
text; the others go on. torch's CPU thread count is capped so the web server keeps a core.

Shared by a class, one student must not block the others (the app sets all of these from
``tfviz.limits``; by default the manager sets none):
  * ``per_owner``: at most this many jobs per owner, running + queued (``JobLimitError``);
  * the queue is fair: a free slot goes to the owner who started a job least recently (round-robin
    by owner), FIFO within an owner, so three long jobs of one student never keep another's
    quick job waiting behind all three;
  * ``max_seconds``: a job's running time; it then stops like a Stop press (a resumable
    checkpoint is saved) and says why;
  * ``check_budget``: memory and checkpoint size are estimated before a job is queued and again
    when it starts (``tfviz.train.budget``); a run that would not fit is refused with the estimate;
  * ``jobs()`` / ``stop(id)`` reach every job (the app's teacher view).
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..model import ModelConfig
from ..model.families import config_from_dict
from ..train.budget import BudgetError, check_training
from ..train.config import TrainConfig
from ..train.loop import Event, TrainResult, train
from ..device import cpu_count
from ..train.checkpoint import MAX_HISTORY, compact_history, load_checkpoint
from ..train.setup import as_task, new_model
from ..train.snapshot import AttentionSnapshot
from .store import JobLimitError  # noqa: F401 - one class for every manager

STATES = ("queued", "running", "done", "stopped", "failed")


def _init_model(path: str | os.PathLike, task, open_folder: Callable[[Any], Any] | None):
    """The weights a fine-tuning job starts from: a tfviz checkpoint, or a model folder opened by
    ``open_folder`` (the app passes ``tfviz.interop.from_pretrained``: training sits below the
    interop layer and does not import it), checked against the task's tokenizer (its ids must be
    the model's)."""
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


@dataclass(frozen=True)
class JobSnapshot:
    """A consistent, immutable copy of a job's progress (safe to read from any thread)."""

    id: str
    name: str
    owner: str | None
    state: str  # one of STATES
    queue_position: int | None  # 1 = next to start; None unless queued
    step: int
    total_steps: int
    history: list[dict]  # one metrics dict per logged step (see tfviz.train.Event)
    latest_snapshot: int | None  # index of the newest attention snapshot, None before the first
    error: str | None
    message: str
    checkpoint: str | None
    created: float
    started: float | None
    finished: float | None

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    @property
    def latest(self) -> dict:
        return self.history[-1] if self.history else {}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Job:
    def __init__(self, manager: "JobManager", job_id: str, name: str, owner: str | None,
                 spec: dict[str, Any]):
        self._manager, self.id, self.name, self.owner, self.spec = manager, job_id, name, owner, spec
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._finished = threading.Event()
        self.state, self.step, self.error, self.message, self.checkpoint = "queued", 0, None, "", None
        self.history: list[dict] = []
        self.attention: list[AttentionSnapshot] = []
        self.result: TrainResult | None = None
        self.traceback: str | None = None
        self.created, self.started, self.finished = time.time(), None, None
        self.total_steps = spec["train_config"].steps

    def snapshot(self) -> JobSnapshot:
        position = self._manager._queue_position(self.id)
        with self._lock:
            return JobSnapshot(self.id, self.name, self.owner, self.state, position, self.step,
                               self.total_steps, [dict(h) for h in self.history],
                               len(self.attention) - 1 if self.attention else None, self.error,
                               self.message, self.checkpoint, self.created, self.started, self.finished)

    def attention_snapshot(self, index: int = -1) -> AttentionSnapshot | None:
        with self._lock:
            return self.attention[index] if self.attention else None

    def attention_snapshots(self) -> list[AttentionSnapshot]:
        with self._lock:
            return list(self.attention)

    def stop(self) -> None:
        self._manager.stop(self.id)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has ended; False on timeout."""
        return self._finished.wait(timeout)

    # -- called from the worker thread ------------------------------------------------------
    def _on_event(self, event: Event) -> bool:
        with self._lock:
            if event.kind == "metrics":
                self.history.append(dict(event.metrics))
                if len(self.history) > 2 * MAX_HISTORY:  # a long run's curve stays compact
                    self.history = compact_history(self.history)
                self.step = event.step
            elif event.kind == "snapshot":
                self.attention.append(event.snapshot)
            elif event.kind == "checkpoint":
                self.checkpoint = str(event.path)
        return self._stop.is_set()


class JobManager:
    def __init__(self, max_concurrent: int = 1, torch_threads: int | None = None, *,
                 per_owner: int | None = None, max_seconds: float | None = None,
                 check_budget: bool = False, open_folder: Callable[[Any], Any] | None = None):
        """``open_folder(path) -> Checkpoint``: how a fine-tuning job (``submit(init=folder)``) reads
        a model folder, e.g. ``tfviz.interop.from_pretrained``; without it only tfviz checkpoints."""
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"max_concurrent={max_concurrent!r} must be a whole number >= 1")
        if per_owner is not None and (isinstance(per_owner, bool) or not isinstance(per_owner, int)
                                      or per_owner < 1):
            raise ValueError(f"per_owner={per_owner!r} must be a whole number >= 1 (or None)")
        if max_seconds is not None and not max_seconds > 0:
            raise ValueError(f"max_seconds={max_seconds!r} must be above 0 (or None)")
        self.max_concurrent, self.per_owner = max_concurrent, per_owner
        self.max_seconds, self.check_budget = max_seconds, check_budget
        self.open_folder = open_folder
        self.torch_threads = torch_threads or max(1, cpu_count() - 1)
        torch.set_num_threads(self.torch_threads)
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._queue: list[str] = []  # submission order; started in _fair_order
        self._running: set[str] = set()
        self._starts = 0
        self._last_start: dict[str | None, int] = {}  # owner -> when (a counter) a job of theirs last started

    # -- public API -------------------------------------------------------------------------
    def submit(self, model_config: ModelConfig | dict, task: Any, train_config: TrainConfig | dict | None = None,
               *, checkpoint: str | os.PathLike | None = None, resume: str | os.PathLike | None = None,
               init: str | os.PathLike | None = None, owner: str | None = None,
               name: str | None = None, client: str | None = None) -> str:
        """Queue a training job and return its id (``client``: the run store's student, for
        ``tfviz.runs.manager.RunManager``'s surface; here every owner counts alone). ``task``: a Task, a registry name or a spec dict.
        ``resume``: a checkpoint path to continue from (``model_config`` is then taken from it).
        ``init``: fine-tune — start from these weights (a tfviz checkpoint, or a Hugging Face model
        folder, read with ``open_folder``) with a fresh optimizer at step 0; ``model_config``
        is then the loaded model's (pass None). The file is read again in the job, so a model the
        app shares between sessions is never trained in place."""
        job = self._new_job(model_config, task, train_config, checkpoint=checkpoint, resume=resume,
                            init=init, owner=owner, name=name)
        self._enqueue([job], owner)
        return job.id

    def submit_group(self, runs: list[dict[str, Any]], task: Any, *, owner: str | None = None,
                     client: str | None = None) -> list[str]:
        """Queue several jobs of one owner at once, all or none (e.g. a pair of runs that differ
        in one setting, ``tfviz.runs.pairs``): ``runs`` are ``submit``'s keyword arguments
        (model_config, train_config, checkpoint, name) for one ``task``. The owner's limit counts
        every run of the group; the fair queue then treats them like any other jobs of theirs."""
        jobs = [self._new_job(r["model_config"], task, r.get("train_config"),
                              checkpoint=r.get("checkpoint"), owner=owner, name=r.get("name"))
                for r in runs]
        self._enqueue(jobs, owner)
        return [j.id for j in jobs]

    def free_slots(self, owner: str | None) -> int | None:
        """How many more jobs ``owner`` may queue now (None: no per-owner limit)."""
        if self.per_owner is None:
            return None
        with self._lock:
            return max(0, self.per_owner - self._owned(owner))

    def _owned(self, owner: str | None) -> int:  # call with _lock held
        return sum(1 for i in (*self._queue, *self._running) if self._jobs[i].owner == owner)

    def _new_job(self, model_config, task, train_config, *, checkpoint=None, resume=None, init=None,
                 owner=None, name=None) -> Job:
        if resume is not None and init is not None:
            raise ValueError("resume continues a run, init starts a new one from weights: not both")
        if init is not None:
            model_config = None
        elif isinstance(model_config, dict):
            model_config = config_from_dict(model_config)
        if isinstance(train_config, dict):
            train_config = TrainConfig.from_dict(train_config)
        train_config = train_config or TrainConfig()
        if self.check_budget and resume is None and init is None:
            check_training(model_config, train_config)  # BudgetError: the run would not fit
        job_id = uuid.uuid4().hex[:12]
        spec = {"model_config": model_config, "task": task, "train_config": train_config,
                "checkpoint": checkpoint, "resume": resume, "init": init}
        return Job(self, job_id, name or f"job-{job_id[:6]}", owner, spec)

    def _enqueue(self, jobs: list[Job], owner: str | None) -> None:
        with self._lock:
            if self.per_owner is not None:
                mine, n = self._owned(owner), len(jobs)
                if n > self.per_owner:
                    raise JobLimitError(
                        f"{n} runs at once is more than the {self.per_owner} trainings a session may "
                        "have running or queued on this server (TFVIZ_JOBS_PER_SESSION): start fewer")
                if mine + n > self.per_owner:
                    asked = "" if n == 1 else f" and asked for {n} more at once"
                    raise JobLimitError(
                        f"you already have {mine} training{'s' if mine != 1 else ''} running or "
                        f"queued{asked}; the limit is {self.per_owner} per session on this server: "
                        "stop one, or wait for one to finish")
            for job in jobs:
                self._jobs[job.id] = job
                self._queue.append(job.id)
        self._start_next()

    def get(self, job_id: str) -> Job:
        with self._lock:
            if job_id not in self._jobs:
                raise KeyError(f"no job with id {job_id!r} (it may have been removed, or the server restarted)")
            return self._jobs[job_id]

    def jobs(self, owner: str | None = None) -> list[Job]:
        """All jobs, oldest first (only ``owner``'s when given)."""
        with self._lock:
            return [j for j in self._jobs.values() if owner is None or j.owner == owner]

    def snapshot(self, job_id: str) -> JobSnapshot:
        return self.get(job_id).snapshot()

    def stop(self, job_id: str) -> bool:
        """Ask a job to stop: a queued job is dropped, a running one stops after its current step and
        saves a resumable checkpoint. False when the job had already ended."""
        job = self.get(job_id)
        with self._lock:
            if job_id in self._queue:
                self._queue.remove(job_id)
                with job._lock:
                    job.state, job.message, job.finished = "stopped", "stopped before it started", time.time()
                job._finished.set()
                return True
        job._stop.set()
        return job_id in self._running

    def remove(self, job_id: str) -> None:
        """Forget an ended job (a running or queued one is an error: stop it first)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and (job_id in self._queue or job_id in self._running):
                raise ValueError(f"job {job_id} is still {job.state}: stop it first")
            self._jobs.pop(job_id, None)

    def wait_all(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for job in self.jobs():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not job.wait(left):
                return False
        return True

    def shutdown(self, timeout: float | None = 30.0) -> None:
        for job in self.jobs():
            if job.state in ("queued", "running"):
                self.stop(job.id)
        self.wait_all(timeout)

    # -- internals --------------------------------------------------------------------------
    def _fair_order(self) -> list[str]:
        """The queued jobs in the order they will start (call with ``_lock`` held): round-robin
        by owner — the owner whose last job started longest ago (or never) goes first — and
        first come, first served within an owner."""
        last = dict(self._last_start)
        pending: dict[str | None, list[str]] = {}
        for job_id in self._queue:
            pending.setdefault(self._jobs[job_id].owner, []).append(job_id)
        first_seen = {owner: self._queue.index(ids[0]) for owner, ids in pending.items()}
        order, tick = [], self._starts
        while pending:
            owner = min(pending, key=lambda o: (last.get(o, -1), first_seen[o]))
            order.append(pending[owner].pop(0))
            tick += 1
            last[owner] = tick
            if not pending[owner]:
                del pending[owner]
        return order

    def _queue_position(self, job_id: str) -> int | None:
        with self._lock:
            order = self._fair_order()
            return order.index(job_id) + 1 if job_id in order else None

    def _start_next(self) -> None:
        with self._lock:
            while self._queue and len(self._running) < self.max_concurrent:
                job = self._jobs[self._fair_order()[0]]
                self._queue.remove(job.id)
                self._starts += 1
                self._last_start[job.owner] = self._starts
                self._running.add(job.id)
                with job._lock:
                    job.state, job.started = "running", time.time()
                threading.Thread(target=self._work, args=(job,), name=f"tfviz-job-{job.id}",
                                 daemon=True).start()

    def _work(self, job: Job) -> None:
        spec = job.spec
        try:
            torch.set_num_threads(self.torch_threads)
            task = as_task(spec["task"])
            cfg: TrainConfig = spec["train_config"]
            resume = None
            if spec["resume"] is not None:
                resume = load_checkpoint(spec["resume"])
                model = resume.model
                with job._lock:  # the job's curves continue the checkpoint's
                    job.history, job.step = [dict(h) for h in resume.history], resume.step
                    job.attention = list(resume.snapshots)
            elif spec.get("init") is not None:
                model = _init_model(spec["init"], task, self.open_folder)
                if self.check_budget:
                    check_training(model.config, cfg)
            else:
                if self.check_budget:  # again: free memory may have changed while it queued
                    check_training(spec["model_config"], cfg)
                model = new_model(spec["model_config"], cfg.seed)
            started, timed_out = time.monotonic(), []

            def stop() -> bool:
                if job._stop.is_set():
                    return True
                if self.max_seconds is not None and time.monotonic() - started > self.max_seconds:
                    timed_out.append(True)
                    return True
                return False

            result = train(model, task, cfg, [job._on_event], checkpoint=spec["checkpoint"],
                           resume=resume, stop=stop)
            state = {"done": "done", "stopped": "stopped"}.get(result.status, "failed")
            message = result.message
            if timed_out and result.status == "stopped":
                minutes = self.max_seconds / 60
                message = (f"{message}: a training may run {minutes:g} minute{'s' if minutes != 1 else ''} "
                           "on this server (TFVIZ_JOB_MAX_MINUTES); what it learned so far is saved")
            with job._lock:
                job.result, job.state, job.message = result, state, message
                job.step = result.step
                job.error = None if result.ok else result.message
                job.checkpoint = str(result.checkpoint) if result.checkpoint else job.checkpoint
        except Exception as e:  # noqa: BLE001 - a failing job must not take the others down
            with job._lock:
                job.state = "failed"
                job.error = str(e) if isinstance(e, BudgetError) else f"{type(e).__name__}: {e}"
                job.message, job.traceback = job.error, traceback.format_exc()
        finally:
            with job._lock:
                job.finished = time.time()
            with self._lock:
                self._running.discard(job.id)
            job._finished.set()
            self._start_next()
