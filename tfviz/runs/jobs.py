"""``JobManager``: the run manager for library use — ``RunManager`` (``tfviz.runs.manager``) over
an embedded run store (a SQLite file in a temporary folder of its own) and an in-process
executor (``tfviz.runs.executor.InProcessExecutor``: runs train in threads of the calling
process). Queueing, the per-owner limit, the fair queue, the time cap, the budget check and Stop
are the app's own code, one implementation; never imports streamlit.

    jobs = JobManager(max_concurrent=1)
    job_id = jobs.submit(model_config, "copy", TrainConfig(steps=500), owner=session_id)
    jobs.get(job_id).snapshot()   # JobSnapshot: state, queue_position, step, history, error, ...
    jobs.stop(job_id)

At most ``max_concurrent`` runs train at once; a run that can start is "running" when ``submit``
returns, later ones wait in the queue and know their 1-based position. What a record cannot
hold stays in this process (``LocalRuns``): a Task object given to ``submit`` (trained as it is,
not rebuilt from its spec), the attention snapshots as they are recorded, the ``TrainResult`` and
a failure's traceback. A run given no ``checkpoint`` saves into the manager's temporary folder
(removed with the manager). torch's CPU thread count is capped so the calling program keeps a
core.

Shared by a class, one student must not block the others (the app sets all of these from
``tfviz.limits``; by default the manager sets none):
  * ``per_owner``: at most this many runs per owner, running + queued (``JobLimitError``);
  * the queue is fair: a free slot goes to the owner who started a run least recently (round-robin
    by owner), FIFO within an owner;
  * ``max_seconds``: a run's training time; it then stops like a Stop press (a resumable
    checkpoint is saved) and says why;
  * ``check_budget``: memory and checkpoint size are estimated before a run is queued and again
    when it starts (``tfviz.train.budget``); a run that would not fit is refused with the estimate;
  * ``jobs()`` / ``stop(id)`` reach every run (the app's teacher view).

``JobManager`` and ``Job`` are kept as documented names for one release: a ``Job`` is a
``RunJob``; new code may build ``RunManager(SqliteRunStore(path), InProcessExecutor(...))`` itself.
"""
from __future__ import annotations

import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

import torch

from ..device import cpu_count
from .executor import InProcessExecutor
from .manager import STATES, JobSnapshot, RunJob, RunManager  # noqa: F401 - names of this module since issue 16
from .store import JobLimitError, SqliteRunStore  # noqa: F401 - one class for every manager

Job = RunJob  # the name before issue 34: one run as the pages and the library see it


class LocalRuns:
    """What runs trained in this process keep beside their records, by run id: the Task objects
    they were submitted with, their attention snapshots (live), Stop presses, results, tracebacks.
    Thread-safe; an entry goes with ``forget`` (``RunManager.remove``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tasks: dict[str, Any] = {}
        self.results: dict[str, Any] = {}
        self.tracebacks: dict[str, str] = {}
        self._snapshots: dict[str, list] = {}
        self._cancelled: set[str] = set()

    def task(self, run_id: str):
        return self.tasks.get(run_id)

    def begin(self, run_id: str, snapshots: list) -> None:
        """An attempt starts: its snapshots so far (a resumed run's, from its checkpoint)."""
        with self._lock:
            self._snapshots[run_id] = list(snapshots)

    def snapshot(self, run_id: str, snap) -> None:
        with self._lock:
            self._snapshots.setdefault(run_id, []).append(snap)

    def snapshots_of(self, run_id: str) -> list | None:
        with self._lock:
            got = self._snapshots.get(run_id)
            return None if got is None else list(got)

    def cancel(self, run_id: str) -> None:
        with self._lock:
            self._cancelled.add(run_id)

    def cancelled(self, run_id: str) -> bool:
        return run_id in self._cancelled

    def forget(self, run_id: str) -> None:
        with self._lock:
            for d in (self.tasks, self.results, self.tracebacks, self._snapshots):
                d.pop(run_id, None)
            self._cancelled.discard(run_id)


class JobManager(RunManager):
    def __init__(self, max_concurrent: int = 1, torch_threads: int | None = None, *,
                 per_owner: int | None = None, max_seconds: float | None = None,
                 check_budget: bool = False, open_folder: Callable[[Any], Any] | None = None,
                 folder: str | Path | None = None):
        """``open_folder(path) -> Checkpoint``: how a fine-tuning run (``submit(init=folder)``) reads
        a model folder, e.g. ``tfviz.interop.from_pretrained``; without it only tfviz checkpoints.
        ``folder``: where the store and the checkpoints of runs given none live (default: a
        temporary folder, removed with the manager)."""
        if folder is None:
            tmp = tempfile.TemporaryDirectory(prefix="tfviz-jobs-")
            root = Path(tmp.name)
        else:
            tmp, root = None, Path(folder)
            root.mkdir(parents=True, exist_ok=True)
        self.local = LocalRuns()
        self.checkpoint_dir = root / "checkpoints"
        store = SqliteRunStore(root / "runs.sqlite")
        super().__init__(store, InProcessExecutor(store, self.local, open_folder=open_folder),
                         max_concurrent, torch_threads or max(1, cpu_count() - 1), per_owner=per_owner,
                         max_seconds=max_seconds, check_budget=check_budget)
        self.open_folder = open_folder
        torch.set_num_threads(self.torch_threads)
        self.executor.start()  # runs a manager on this folder left queued (a restart) train on
        if tmp is not None:  # the folder goes when the manager does (after its threads: they hold it)
            self._cleanup = weakref.finalize(self, _remove, tmp, self.executor)

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Stop every active run, wait for them, and end the executor's threads."""
        super().shutdown(timeout)
        self.executor.shutdown(timeout or 30.0)


def _remove(tmp: tempfile.TemporaryDirectory, executor: InProcessExecutor) -> None:
    executor.shutdown(30.0)
    tmp.cleanup()


__all__ = ["Job", "JobLimitError", "JobManager", "JobSnapshot", "LocalRuns", "STATES"]
