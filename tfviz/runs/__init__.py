"""Runs as records: where and when a run trains, above ``tfviz.train`` (how a model is trained).

* ``store`` — the run store (``RunStore``; ``SqliteRunStore``: one SQLite file), the fair queue,
  the disk ledger;
* ``worker`` — a worker process (``python -m tfviz worker``) claiming runs and training them;
* ``executor`` — where runs train (``LocalProcessExecutor``: worker processes, the app's;
  ``InProcessExecutor``: threads of the calling process, the library's; ``ThreadExecutor``);
* ``ray`` — the same interfaces over a Ray cluster (imported only when ``TFVIZ_RAY_ADDRESS`` is set);
* ``manager`` — ``RunManager``: the one manager — submit / stop / list runs over a store and an
  executor;
* ``jobs`` — ``JobManager``: a ``RunManager`` over an embedded store and the in-process executor
  (library use; the name kept for one release);
* ``pairs`` — runs that differ in one setting; ``timecap`` — the runtime cap said before it happens.
"""
from .jobs import Job, JobManager, JobSnapshot
from .manager import RunJob, RunManager
from .store import JobLimitError

__all__ = ["Job", "JobLimitError", "JobManager", "JobSnapshot", "RunJob", "RunManager"]
