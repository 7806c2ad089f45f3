"""Runs as records: where and when a run trains, above ``tfviz.train`` (how a model is trained).

* ``store`` — the run store (``RunStore``; ``SqliteRunStore``: one SQLite file), the fair queue,
  the disk ledger;
* ``worker`` — a worker process (``python -m tfviz worker``) claiming runs and training them;
* ``executor`` — where workers run (``LocalProcessExecutor``, ``ThreadExecutor``);
* ``ray`` — the same interfaces over a Ray cluster (imported only when ``TFVIZ_RAY_ADDRESS`` is set);
* ``manager`` — ``RunManager``: submit / stop / list runs over a store and an executor (the app's);
* ``jobs`` — ``JobManager``: the same surface with threads in the calling process (library use);
* ``pairs`` — runs that differ in one setting; ``timecap`` — the runtime cap said before it happens.
"""
from .jobs import Job, JobManager, JobSnapshot
from .manager import RunJob, RunManager
from .store import JobLimitError

__all__ = ["Job", "JobLimitError", "JobManager", "JobSnapshot", "RunJob", "RunManager"]
