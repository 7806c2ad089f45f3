"""Where runs train: an executor gets runs (by id) to the workers that claim them from the run
store (``tfviz.train.store``). The web server never trains.

    class Executor(Protocol):
        submit(run_id)   a run was queued: make sure a worker will claim it
        cancel(run_id)   a run was asked to stop (the store already says so; a worker reads it)
        alive()          the workers alive now (ids)
        shutdown()       stop this executor's workers (a running run is paused: checkpointed, queued again)

``LocalProcessExecutor`` (the default): up to ``workers`` processes ``python -m tfviz worker``
on this machine, started on demand and kept warm (``warm``) so Start goes to the first step at
once; each claims runs from the store, so which run trains next is the store's decision (its fair
queue), not the executor's. Workers are their own process group: a Ctrl-C or ``kill -9`` of the
web server leaves their runs training; an idle worker exits once the server that started it has
gone. A cluster executor (e.g. Ray: one ``ray.remote(num_gpus=...)`` task per run that calls
``tfviz.train.worker.run_one`` after ``store.claim(worker, run_id)``, with a store every node
reaches) implements the same four methods.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Protocol, Sequence

from .. import paths


class Executor(Protocol):
    def submit(self, run_id: str) -> None: ...
    def cancel(self, run_id: str) -> None: ...
    def alive(self) -> list[str]: ...
    def shutdown(self, timeout: float = 30.0) -> None: ...


class LocalProcessExecutor:
    """Worker processes on this machine for the store at ``db``."""

    def __init__(self, db: str | os.PathLike, workers: int = 1, *, warm: int = 1,
                 command: Sequence[str] | None = None, env: dict[str, str] | None = None,
                 log: str | os.PathLike | None = None):
        self.db, self.workers, self.warm = Path(db), int(workers), int(warm)
        self.command = list(command or [sys.executable, "-m", "tfviz", "worker"])
        self.env = env
        self.log = Path(log) if log else self.db.parent / "workers.log"
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def _spawn(self) -> subprocess.Popen:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = os.pathsep.join([str(paths.REPO), *filter(None, [env.get("PYTHONPATH")])])
        env.setdefault("OMP_NUM_THREADS", "1")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            return subprocess.Popen([*self.command, "--db", str(self.db), "--parent", str(os.getpid())],
                                    cwd=paths.REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def ensure(self, n: int) -> None:
        """At least ``n`` (at most ``workers``) of this executor's worker processes alive."""
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None]
            while len(self._procs) < min(n, self.workers):
                self._procs.append(self._spawn())

    def start(self, run_id: str = "") -> None:
        """The warm pool: ``warm`` workers waiting (each has paid for torch's import already)."""
        self.ensure(self.warm)

    def submit(self, run_id: str) -> None:
        self.ensure(self.workers)

    def cancel(self, run_id: str) -> None:
        pass  # the store holds the request; the run's worker reads it within a second

    def alive(self) -> list[str]:
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None]
            return [str(p.pid) for p in self._procs]

    def pids(self) -> list[int]:
        return [int(p) for p in self.alive()]

    def shutdown(self, timeout: float = 30.0) -> None:
        """SIGTERM every worker (a running run is checkpointed and queued again), then wait."""
        with self._lock:
            procs, self._procs = self._procs, []
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


class ThreadExecutor:
    """Workers as threads of this process (``tfviz.train.worker.serve``), each exiting after
    ``idle_s`` idle: for tests that patch the training code in-process, and for debugging —
    never for a web server (a fault in one run would take the server down)."""

    def __init__(self, db: str | os.PathLike, workers: int = 1, *, idle_s: float = 5.0,
                 open_folder=None):
        self.db, self.workers, self.idle_s, self.open_folder = Path(db), int(workers), idle_s, open_folder
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def submit(self, run_id: str) -> None:
        from .worker import serve

        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            while len(self._threads) < self.workers:
                t = threading.Thread(target=serve, args=(self.db,), daemon=True, name="tfviz-worker",
                                     kwargs=dict(open_folder=self.open_folder, idle_s=self.idle_s,
                                                 stopping=self._stopping))
                t.start()
                self._threads.append(t)

    start = submit

    def cancel(self, run_id: str) -> None:
        pass

    def alive(self) -> list[str]:
        return [t.name for t in self._threads if t.is_alive()]

    def shutdown(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        for t in self._threads:
            t.join(timeout)


__all__ = ["Executor", "LocalProcessExecutor", "ThreadExecutor"]
