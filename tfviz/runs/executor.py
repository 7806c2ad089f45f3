"""Where runs train: an executor gets runs (by id) to the workers that claim them from the run
store (``tfviz.runs.store``). The web server never trains.

    class Executor(Protocol):
        submit(run_id)   a run was queued: make sure a worker will claim it
        cancel(run_id)   a run was asked to stop (the store already says so; a worker reads it)
        alive()          the workers alive now (ids)
        start()          keep a worker warm, so a Start goes to its first step at once (optional)
        keep(activity)   supervision (optional; ``RunManager`` calls it about every quarter lease with
                         ``store.activity()``): workers for the queued runs that can start, dead ones replaced
        shutdown()       stop this executor's workers (a running run is paused: checkpointed, queued again)

``LocalProcessExecutor`` (the default): up to ``workers`` processes ``python -m tfviz worker``
on this machine, started on demand and kept warm (``warm``) so Start goes to the first step at
once; each claims runs from the store, so which run trains next is the store's decision (its fair
queue), not the executor's. Workers are their own process group: a Ctrl-C or ``kill -9`` of the
web server leaves their runs training; an idle worker exits once the server that started it has
gone. A cluster executor (e.g. Ray: one ``ray.remote(num_gpus=...)`` task per run that calls
``tfviz.runs.worker.run_one`` after ``store.claim(worker, run_id)``, with a store every node
reaches) implements the same four methods.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol, Sequence

from .. import limits, paths

EARLY_EXIT_S = 30.0  # a worker that ended with an error within this of its start: the next waits longer


class Executor(Protocol):
    def start(self) -> None: ...  # keep a worker warm (an executor without a pool: nothing)
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
        self._born: dict[int, float] = {}
        self._lock = threading.Lock()
        self._warm_until = 0.0  # keep the warm worker until then (pages were used lately)
        self._next_spawn, self._crash_wait = 0.0, 0.0
        self._closed = False  # shut down: no worker is started again

    def _spawn(self) -> subprocess.Popen:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = os.pathsep.join([str(paths.REPO), *filter(None, [env.get("PYTHONPATH")])])
        env.setdefault("OMP_NUM_THREADS", "1")
        try:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log, "ab")
        except OSError:  # a full or read-only disk: the worker still runs, unlogged
            out = subprocess.DEVNULL
        try:
            p = subprocess.Popen([*self.command, "--db", str(self.db), "--parent", str(os.getpid())],
                                 cwd=paths.REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        self._born[p.pid] = time.monotonic()
        return p

    def _note(self, message: str) -> None:
        """A line in workers.log from the executor itself (the teacher's panel shows the log)."""
        try:
            with open(self.log, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} executor: {message}\n")
        except OSError:
            pass

    def _reap(self) -> None:
        """Forget ended workers (call with ``_lock`` held); one that failed soon after its start
        makes the next start wait (doubling, at most a minute): a worker that cannot start is
        not started again ten times a second."""
        alive = []
        for p in self._procs:
            rc = p.poll()
            if rc is None:
                alive.append(p)
                continue
            born = self._born.pop(p.pid, time.monotonic())
            if rc != 0 and time.monotonic() - born < EARLY_EXIT_S:
                self._crash_wait = min(60.0, 2 * self._crash_wait or 1.0)
                self._next_spawn = time.monotonic() + self._crash_wait
                self._note(f"worker {p.pid} ended with code {rc} {time.monotonic() - born:.0f} s after it "
                           f"started; the next starts in {self._crash_wait:g} s")
            elif rc != 0:
                self._note(f"worker {p.pid} ended with code {rc} (killed or crashed); its run goes back "
                           "to the queue")
        self._procs = alive

    def ensure(self, n: int) -> None:
        """At least ``n`` (at most ``workers``) of this executor's worker processes alive."""
        with self._lock:
            self._reap()
            while (not self._closed and len(self._procs) < min(n, self.workers)
                   and time.monotonic() >= self._next_spawn):
                self._procs.append(self._spawn())

    def start(self, run_id: str = "") -> None:
        """The warm pool: ``warm`` workers waiting (each has paid for torch's import already),
        kept by ``keep`` for ``TFVIZ_WORKER_IDLE_S`` after the last call (pages in use)."""
        self._warm_until = time.monotonic() + limits.worker_idle_seconds()
        self.ensure(self.warm)

    def keep(self, activity: dict[str, Any]) -> list[int]:
        """Supervision: ``activity`` = ``store.activity()`` (queued runs, running runs' workers,
        slots). As many idle workers of this executor as queued runs can start now (free slots),
        and the warm one while pages are used: a worker killed mid-run is replaced at once (its
        run is back in the queue: ``store.activity`` re-queues runs of ended workers), and
        queued runs start after a restart with no page visited. -> pids started."""
        host = socket.gethostname()
        busy = set()
        for w in activity.get("workers", []):
            parts = (w or "").split(":")
            if len(parts) == 3 and parts[0] == host and parts[1].isdigit():
                busy.add(int(parts[1]))
        free = max(0, int(activity.get("slots", self.workers)) - len(activity.get("workers", [])))
        want = min(int(activity.get("queued", 0)), free)
        if time.monotonic() < self._warm_until:
            want = max(want, self.warm)
        started = []
        with self._lock:
            self._reap()
            idle = [p for p in self._procs if p.pid not in busy]
            room = self.workers + self.warm - (len(self._procs) - len(idle))  # at most slots + spare
            while not self._closed and len(idle) < min(want, room) and time.monotonic() >= self._next_spawn:
                p = self._spawn()
                self._procs.append(p)
                idle.append(p)
                started.append(p.pid)
            if not started and self._crash_wait and time.monotonic() - self._next_spawn > EARLY_EXIT_S:
                self._crash_wait = 0.0  # workers have lived a while again
        return started

    def fence(self, after_s: float = 0.0) -> list[int]:
        """Workers of this store (this server's or an earlier one's) that hold its write lock while
        stopped (SIGSTOP, a debugger) — every Start waits on them — seen so for at least
        ``after_s``. Each is ended (SIGKILL: a stopped process can be killed; its process group,
        its own), so SQLite's lock is free; its run goes back to the queue as a dead worker's does
        and resumes from its last checkpoint. -> the pids ended. The supervisor calls it every
        tick with the store's ``busy_s``."""
        from .store import is_worker_of, lock_holders, process_state

        ended, now = [], time.monotonic()
        stopped = {pid for pid in lock_holders(self.db)
                   if process_state(pid) in ("T", "t") and is_worker_of(pid, self.db)}
        seen = getattr(self, "_stopped_since", {})
        self._stopped_since = {pid: seen.get(pid, now) for pid in stopped}
        for pid in stopped:
            if now - self._stopped_since[pid] < after_s:
                continue
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            ended.append(pid)
            self._note(f"worker {pid} was stopped (frozen) while it held the run store's lock: ended, "
                       "its run resumes from its last checkpoint")
        if ended:
            with self._lock:
                self._reap()
        return ended

    def submit(self, run_id: str) -> None:
        self.ensure(self.workers)

    def cancel(self, run_id: str) -> None:
        pass  # the store holds the request; the run's worker reads it within a second

    def alive(self) -> list[str]:
        with self._lock:
            self._reap()
            return [str(p.pid) for p in self._procs]

    def pids(self) -> list[int]:
        return [int(p) for p in self.alive()]

    def shutdown(self, timeout: float = 30.0) -> None:
        """SIGTERM every worker (a running run is checkpointed and queued again), then wait."""
        with self._lock:
            procs, self._procs, self._closed = self._procs, [], True
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
    """Workers as threads of this process (``tfviz.runs.worker.serve``), each exiting after
    ``idle_s`` idle: for tests that patch the training code in-process, and for debugging —
    never for a web server (a fault in one run would take the server down)."""

    def __init__(self, db: str | os.PathLike, workers: int = 1, *, idle_s: float = 5.0,
                 open_folder=None):
        self.db, self.workers, self.idle_s, self.open_folder = Path(db), int(workers), idle_s, open_folder
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def submit(self, run_id: str = "") -> None:
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


class InProcessExecutor:
    """Runs trained by threads of this process (the library's ``tfviz.JobManager``): a run is
    claimed from the store the moment it is submitted when a slot is free (so it is "running"
    when ``submit`` returns), and the thread that ends a run claims the next one in the fair
    queue, or ends. ``local`` (``tfviz.runs.jobs.LocalRuns``): the Task objects, live snapshots,
    results and tracebacks kept in memory, and Stop acted on at the next step. Never for a web
    server: a fault in a run's native code would take the server down."""

    def __init__(self, store, local=None, *, open_folder=None):
        self.store, self.local, self.open_folder = store, local, open_folder
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def submit(self, run_id: str = "") -> None:
        from .store import worker_id

        with self._lock:
            if self._stopping.is_set():
                return
            while (rec := self.store.claim(worker := worker_id())) is not None:
                t = threading.Thread(target=self._train, args=(worker, rec), daemon=True,
                                     name=f"tfviz-run-{rec['id']}")
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
                t.start()

    start = submit

    def _train(self, worker: str, rec) -> None:
        from .worker import log, run_one

        while rec is not None:
            try:
                run_one(self.store, worker, rec, self.open_folder, self._stopping, local=self.local)
            except Exception as e:  # noqa: BLE001 - run_one reports its own; this is a bug's trace
                log(worker, f"run {rec['id']}: {type(e).__name__}: {e}")
            if self._stopping.is_set():
                return
            with self._lock:  # the next run in the fair queue, if a slot is still this thread's
                rec = self.store.claim(worker)

    def cancel(self, run_id: str) -> None:
        if self.local is not None:
            self.local.cancel(run_id)

    def alive(self) -> list[str]:
        return [t.name for t in self._threads if t.is_alive()]

    def shutdown(self, timeout: float = 30.0) -> None:
        """Running runs pause (checkpointed and queued again); the threads end."""
        self._stopping.set()
        for t in list(self._threads):
            if t is not threading.current_thread():
                t.join(timeout)


__all__ = ["Executor", "InProcessExecutor", "LocalProcessExecutor", "ThreadExecutor"]
