"""The one run manager (issue 34): submit / submit_group / get(id).snapshot() / stop / jobs /
free_slots, where a run is a record in a run store (``tfviz.runs.store``) trained by workers
(``tfviz.runs.worker.run_one``) that an executor (``tfviz.runs.executor``) provides. The manager
only writes and reads records, so queueing, the per-owner limit, the fair queue, the time cap and
restart have one implementation: the app's (SQLite + worker processes: ``ui.jobs``), a Ray
cluster's (``tfviz.runs.ray``) and the library's (``tfviz.JobManager``: an embedded store and
threads of the calling process, ``tfviz.runs.jobs``).

    store = SqliteRunStore(paths.runs_db())
    runs = RunManager(store, LocalProcessExecutor(store.path, workers=2), max_concurrent=2)
    run_id = runs.submit(model_config, "copy", TrainConfig(steps=500), owner=sid, checkpoint=path)
    runs.get(run_id).snapshot()   # a JobSnapshot read from the store: any process, any restart

A run's spec is data (configs as dicts, the task as its spec): a worker anywhere rebuilds it.
``quota``: each run's estimated checkpoint (``tfviz.train.budget.estimate``) is reserved in the
transaction that queues it, released when it ends.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from ..train.budget import check_training, estimate
from ..train.config import TrainConfig
from .store import ACTIVE, NewRun, Quota, RunStore, StoreUnavailable, new_run_id

STATES = ("queued", "running", "done", "stopped", "failed")

_SNAPSHOTS: dict[tuple[str, float], list] = {}
_SNAPSHOTS_LOCK = threading.Lock()


def _task_spec(task: Any) -> dict:
    """A run's task as data, in the registry's full form (seed included: a worker's cached task
    and a hinted one are the same entry); a spec the registry refuses is kept as given, for the
    worker to report as the run's error."""
    if hasattr(task, "spec") and not isinstance(task, (str, dict)):
        return task.spec()
    if not isinstance(task, (str, dict)):
        raise ValueError(f"a run's task is a name, a spec dict or a Task, not {type(task).__name__}")
    spec = {"name": task} if isinstance(task, str) else dict(task)
    if spec.get("tokenizer") == "given":
        return spec
    from ..tasks import make_task

    try:
        return make_task(spec).spec()
    except (TypeError, ValueError):
        return spec


@dataclass(frozen=True)
class JobSnapshot:
    """A consistent, immutable copy of a run's progress (safe to read from any thread)."""

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


class RunJob:
    """One run, as the pages see it, read from the store each time it is asked. Of a run trained
    in this process (``tfviz.runs.jobs.JobManager``) also what a record cannot hold: the
    attention snapshots as they are recorded, ``result`` (the ``TrainResult``) and ``traceback``."""

    def __init__(self, manager: "RunManager", rec: dict[str, Any]):
        self._manager, self.id, self.name, self.owner = manager, rec["id"], rec["name"], rec["owner"]
        s = rec["spec"]
        from ..model.families import config_from_dict

        self.spec = {"model_config": None if s.get("model_config") is None else config_from_dict(s["model_config"]),
                     "task": s["task"], "train_config": TrainConfig.from_dict(s["train_config"]),
                     "checkpoint": s.get("checkpoint"), "resume": s.get("resume"), "init": s.get("init")}

    def record(self) -> dict[str, Any]:
        return self._manager.store.get(self.id)

    def snapshot(self) -> JobSnapshot:
        r = self.record()
        position = None
        if r["state"] == "queued":
            order = self._manager.store.queue_order()
            position = order.index(self.id) + 1 if self.id in order else None
        ckpt = r["checkpoint"] if r["checkpoint"] and Path(r["checkpoint"]).is_file() else None
        return JobSnapshot(r["id"], r["name"], r["owner"], r["state"], position, r["step"],
                           r["total_steps"], r["history"],
                           r["n_snapshots"] - 1 if r["n_snapshots"] else None, r["error"],
                           r["message"], ckpt, r["created"], r["started"], r["finished"])

    @property
    def state(self) -> str:
        return self.record()["state"]

    # what the threads' ``Job`` (before issue 34) had as attributes, read from the record
    step = property(lambda self: self.snapshot().step)
    history = property(lambda self: self.snapshot().history)
    error = property(lambda self: self.snapshot().error)
    message = property(lambda self: self.snapshot().message)
    checkpoint = property(lambda self: self.snapshot().checkpoint)

    @property
    def result(self):
        """The run's ``TrainResult`` when it trained in this process and has ended, else None."""
        local = self._manager.local
        return None if local is None else local.results.get(self.id)

    @property
    def traceback(self) -> str | None:
        """The failure's traceback when the run failed in this process, else None."""
        local = self._manager.local
        return None if local is None else local.tracebacks.get(self.id)

    def attention_snapshots(self) -> list:
        """The attention snapshots the run recorded: live while it trains in this process, else
        as saved in its checkpoint (read once per version of the file)."""
        local = self._manager.local
        if local is not None and (live := local.snapshots_of(self.id)) is not None:
            return live
        path = self.record()["checkpoint"]
        if not path or not Path(path).is_file():
            return []
        key = (path, os.stat(path).st_mtime)
        with _SNAPSHOTS_LOCK:
            if key in _SNAPSHOTS:
                return list(_SNAPSHOTS[key])
        from ..train.checkpoint import load_checkpoint

        snaps = load_checkpoint(path).snapshots
        with _SNAPSHOTS_LOCK:
            if len(_SNAPSHOTS) > 32:
                _SNAPSHOTS.clear()
            _SNAPSHOTS[key] = snaps
        return list(snaps)

    def attention_snapshot(self, index: int = -1):
        snaps = self.attention_snapshots()
        return snaps[index] if snaps else None

    def stop(self) -> None:
        self._manager.stop(self.id)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run has ended; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.record()["state"] in ACTIVE:
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True


class RunManager:
    """``supervise``: a thread of this process keeps the executor's workers (``executor.keep``,
    about every quarter lease): as many as queued runs can use, a spare one while pages are
    used, a dead worker's run back in the queue and another worker for it — from the moment the
    manager exists (the app makes it when its server starts: ``ui.server``), page visit or not."""

    local = None  # tfviz.runs.jobs.LocalRuns: what runs trained in this process keep in memory
    checkpoint_dir: Path | None = None  # where a run saves when submit names no checkpoint (None: paths.runs_dir())

    def __init__(self, store: RunStore, executor=None, max_concurrent: int = 1,
                 torch_threads: int | None = None, *, per_owner: int | None = None,
                 max_seconds: float | None = None, check_budget: bool = False,
                 quota: Quota | None = None, supervise: bool = False):
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"max_concurrent={max_concurrent!r} must be a whole number >= 1")
        if per_owner is not None and (isinstance(per_owner, bool) or not isinstance(per_owner, int)
                                      or per_owner < 1):
            raise ValueError(f"per_owner={per_owner!r} must be a whole number >= 1 (or None)")
        if max_seconds is not None and not max_seconds > 0:
            raise ValueError(f"max_seconds={max_seconds!r} must be above 0 (or None)")
        self.store, self.executor = store, executor
        self.max_concurrent, self.per_owner = max_concurrent, per_owner
        self.max_seconds, self.check_budget, self.quota = max_seconds, check_budget, quota
        self.torch_threads = torch_threads or 1
        self._closing = threading.Event()
        self._supervisor: threading.Thread | None = None
        try:
            store.set_slots(max_concurrent)
        except StoreUnavailable:
            pass  # set again with the next submit; the pages say what is wrong with the store
        if supervise:
            self.supervise()

    # -- supervision -----------------------------------------------------------------------------
    def supervise(self, every: float | None = None) -> None:
        """Start the supervision thread (once)."""
        if self._supervisor is not None:
            return
        every = every or max(0.1, min(1.0, self.store.lease_s / 4))

        def loop() -> None:
            while not self._closing.wait(every):
                keep = getattr(self.executor, "keep", None)
                if keep is None or not hasattr(self.store, "activity"):
                    continue
                fence = getattr(self.executor, "fence", None)
                if fence is not None:  # a worker stopped while it holds the lock is ended (issue 40)
                    try:
                        fence(getattr(self.store, "busy_s", 0.0))
                    except Exception:  # noqa: BLE001 - supervision outlives any one fault
                        pass
                try:
                    keep(self.store.activity())
                except StoreUnavailable:
                    pass  # the pages and the workers' log say why; tried again next tick
                except Exception:  # noqa: BLE001 - supervision outlives any one fault
                    import traceback

                    traceback.print_exc()

        self._supervisor = threading.Thread(target=loop, daemon=True, name="tfviz-runs-supervisor")
        self._supervisor.start()

    def close(self) -> None:
        """Stop supervising (the workers and their runs go on)."""
        self._closing.set()

    # -- submitting -----------------------------------------------------------------------------
    def _new_run(self, model_config, task, train_config, *, checkpoint=None, resume=None, init=None,
                 owner=None, name=None, client=None) -> NewRun:
        from ..model.families import config_from_dict

        if resume is not None and init is not None:
            raise ValueError("resume continues a run, init starts a new one from weights: not both")
        if isinstance(model_config, dict):
            model_config = config_from_dict(model_config)
        if isinstance(train_config, dict):
            train_config = TrainConfig.from_dict(train_config)
        train_config = train_config or TrainConfig()
        if resume is not None:  # ".safetensors" may be omitted, as everywhere a checkpoint is read
            from ..storage import checkpoint_path

            resume = resume if Path(resume).exists() else checkpoint_path(resume)
        if resume is not None and model_config is None:
            from ..train.checkpoint import read_metadata

            model_config = config_from_dict(read_metadata(resume)["model_config"])
        sized = model_config  # a fine-tuning run's config is given for its estimates only
        if self.check_budget and resume is None and init is None:
            check_training(model_config, train_config)  # BudgetError: the run would not fit
        held = self.local is not None and not isinstance(task, (str, dict))  # the object itself trains
        spec_task = _task_spec(task)
        if spec_task.get("tokenizer") == "given" and init is None and not held:
            raise ValueError("a task read with a model's own tokenizer trains only from that model (init)")
        run_id = new_run_id()
        folder = self.checkpoint_dir if self.checkpoint_dir is not None else paths.runs_dir()
        checkpoint = Path(checkpoint) if checkpoint is not None else folder / f"{run_id}.safetensors"
        if checkpoint.suffix != ".safetensors":
            checkpoint = checkpoint.with_name(checkpoint.name + ".safetensors")
        spec = {"model_config": None if init is not None or model_config is None else model_config.to_dict(),
                "task": spec_task, "train_config": train_config.to_dict(), "checkpoint": str(checkpoint),
                "resume": None if resume is None else str(resume),
                "init": None if init is None else str(init), "max_seconds": self.max_seconds,
                "check_budget": self.check_budget, "torch_threads": self.torch_threads}
        reserve = estimate(sized, train_config).checkpoint if sized is not None and self.quota else 0
        if held:
            self.local.tasks[run_id] = task
        return NewRun(run_id, owner, name or f"job-{run_id[:6]}", spec, train_config.steps, reserve,
                      str(checkpoint), client)

    def _queue(self, runs: list[NewRun]) -> list[str]:
        try:
            self.store.set_slots(self.max_concurrent)  # (StoreUnavailable: the store's fault, as a sentence)
            self.store.insert(runs, per_owner=self.per_owner, quota=self.quota)
        except BaseException:
            if self.local is not None:  # nothing was queued: nothing of it kept
                for r in runs:
                    self.local.forget(r.id)
            raise
        if self.executor is not None:
            for r in runs:
                self.executor.submit(r.id)
        return [r.id for r in runs]

    def submit(self, model_config, task, train_config=None, *, checkpoint=None, resume=None,
               init=None, owner: str | None = None, name: str | None = None,
               client: str | None = None) -> str:
        """Queue a run and return its id. ``task``: a registry name, a spec dict or a Task (a Task
        object trains as it is only in the process that submitted it: ``tfviz.runs.jobs``; elsewhere
        its spec is rebuilt). ``checkpoint``: where it saves (default: ``checkpoint_dir`` or
        ``paths.runs_dir()``). ``resume``: a checkpoint to continue from (``model_config`` may be
        None: taken from it). ``init``: fine-tune from these weights (a tfviz checkpoint or a model
        folder) with a fresh optimizer. ``client``: the student behind the owning session, whose
        tabs share one limit and one fair share. JobLimitError, BudgetError, QuotaError,
        StoreUnavailable (all ValueErrors) say why nothing was queued."""
        return self._queue([self._new_run(model_config, task, train_config, checkpoint=checkpoint,
                                          resume=resume, init=init, owner=owner, name=name,
                                          client=client)])[0]

    def submit_group(self, runs: list[dict[str, Any]], task, *, owner: str | None = None,
                     client: str | None = None) -> list[str]:
        """Several runs of one owner, all or none (the owner's limit and the quota count all)."""
        return self._queue([self._new_run(r["model_config"], task, r.get("train_config"),
                                          checkpoint=r.get("checkpoint"), owner=owner, name=r.get("name"),
                                          client=client)
                            for r in runs])

    def free_slots(self, owner: str | None) -> int | None:
        if self.per_owner is None:
            return None
        return max(0, self.per_owner - len(self.store.list(owner=owner, active_only=True)))

    def prepare(self, task) -> None:
        """A run of ``task`` may come soon: idle workers generate its examples now."""
        self.store.hint_prepare(_task_spec(task))

    # -- reading ---------------------------------------------------------------------------------
    def get(self, job_id: str) -> RunJob:
        return RunJob(self, self.store.get(job_id))

    def jobs(self, owner: str | None = None) -> list[RunJob]:
        """Every run in the store, oldest first (only ``owner``'s when given)."""
        return [RunJob(self, r) for r in self.store.list(owner=owner)]

    def snapshot(self, job_id: str) -> JobSnapshot:
        return self.get(job_id).snapshot()

    # -- acting ----------------------------------------------------------------------------------
    def stop(self, job_id: str) -> bool:
        """A queued run is stopped at once; a running one stops after its current step and saves
        a resumable checkpoint. False when it had already ended."""
        asked = self.store.request_stop(job_id)
        if asked and self.executor is not None:
            self.executor.cancel(job_id)
        return asked

    def move_to_front(self, job_id: str) -> None:
        self.store.move_to_front(job_id)

    def remove(self, job_id: str) -> None:
        """Forget an ended run (a running or queued one is an error: stop it first)."""
        self.store.remove(job_id)
        if self.local is not None:
            self.local.forget(job_id)

    def wait_all(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for job in self.jobs():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not job.wait(left):
                return False
        return True

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Stop every active run and wait (the executor's workers keep serving other managers)."""
        self.close()
        for job in self.jobs():
            if job.state in ACTIVE:
                self.stop(job.id)
        self.wait_all(timeout)


__all__ = ["STATES", "JobSnapshot", "RunJob", "RunManager"]
