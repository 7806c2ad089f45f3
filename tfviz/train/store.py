"""The run store: every training run as a record, and the disk ledger, in one place every process
reaches (never imports streamlit, never trains).

A run = a record + a spec. The web server inserts records and reads them; worker processes
(``tfviz.train.worker``) claim queued ones, train, and write their progress back. States borrow
Celery's vocabulary: queued (PENDING), running (STARTED), done (SUCCESS), failed (FAILURE),
stopped (REVOKED). A run whose worker died (its lease ran out) goes back to "queued" and resumes
from its last checkpoint; one paused to free a slot for another session does the same.

``RunStore`` is the interface; ``SqliteRunStore`` the embedded default: one SQLite file in WAL
mode (``tfviz.paths.runs_db()``, in the checkpoint folder: nothing to install or start). Every
change that must not race is one ``BEGIN IMMEDIATE`` transaction: inserting runs together with
their disk reservations (so simultaneous submits cannot pass the quota together), claiming a run
(the fair order and the slot count read and written at once), preempting. SQLite must sit on a
local disk, never on a network filesystem (its locks are not reliable there); a store for several
machines implements the same interface elsewhere (see docs/architecture.md).

Tables: ``runs`` (one row per run), ``ledger`` (bytes reserved for files about to be written: a
run's checkpoint until it ends, an upload while it is checked), ``settings`` (the slot count the
server set, the start counter of the fair queue).
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

from .. import limits

STATES = ("queued", "running", "done", "stopped", "failed")
ACTIVE = ("queued", "running")
MB = 2**20

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, owner TEXT, name TEXT NOT NULL, state TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,      -- the teacher's "move to the front"
    spec TEXT NOT NULL,                       -- JSON: model_config, task, train_config, checkpoint, init, ...
    created REAL NOT NULL, started REAL, finished REAL,
    step INTEGER NOT NULL DEFAULT 0, total_steps INTEGER NOT NULL,
    history TEXT NOT NULL DEFAULT '[]',       -- JSON list of metrics dicts (compacted like a checkpoint's)
    n_snapshots INTEGER NOT NULL DEFAULT 0,   -- attention snapshots taken (they live in the checkpoint)
    error TEXT, message TEXT NOT NULL DEFAULT '', checkpoint TEXT,
    resume_from TEXT,                         -- a checkpoint to continue from (interrupted, paused)
    worker TEXT, lease REAL,                  -- who trains it, until when (renewed every second)
    stop_requested INTEGER NOT NULL DEFAULT 0,
    start_seq INTEGER,                        -- when (a counter) it last started: the fair queue
    ran_s REAL NOT NULL DEFAULT 0,            -- seconds of training before this attempt
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_state ON runs (state);
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner);
CREATE TABLE IF NOT EXISTS ledger (
    key TEXT PRIMARY KEY, run_id TEXT, path TEXT, bytes INTEGER NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class QuotaError(ValueError):
    """Not enough room left for a file; the message says how full the space is."""


class JobLimitError(ValueError):
    """An owner already has as many jobs running or queued as the server allows."""


def quota_message(used: int, quota: int, need: int, what: str) -> str:
    seconds = limits.idle_seconds()
    days = "a while" if seconds is None else f"{seconds / 86400:g} idle days"
    return (f"the class's space for uploads and trained models is full: {used / MB:,.0f} of "
            f"{quota / MB:,.0f} MB used, and {what} needs {max(need, 1) / MB:,.1f} MB more. Ask "
            f"your teacher to free space (files of idle sessions are deleted after {days}; "
            "TFVIZ_DISK_QUOTA_MB sets the space)")


def owner_limit_message(mine: int, n: int, per_owner: int) -> str:
    if n > per_owner:
        return (f"{n} runs at once is more than the {per_owner} trainings a session may have running "
                "or queued on this server (TFVIZ_JOBS_PER_SESSION): start fewer")
    asked = "" if n == 1 else f" and asked for {n} more at once"
    return (f"you already have {mine} training{'s' if mine != 1 else ''} running or queued{asked}; "
            f"the limit is {per_owner} per session on this server: stop one, or wait for one to finish")


@dataclass(frozen=True)
class Quota:
    """Where the disk quota comes from: ``limit()`` bytes in all, ``usage()`` bytes already on disk
    (``tfviz.classroom.disk`` passes the session folders' size)."""

    limit: Callable[[], int]
    usage: Callable[[], int]


def sessions_usage() -> int:
    """Bytes of every session's files together (``tfviz.paths.sessions_dir``)."""
    from .. import paths, storage

    root = paths.sessions_dir()
    return storage.folder_bytes(root) if root.is_dir() else 0


def session_quota() -> Quota:
    """The class's quota: ``TFVIZ_DISK_QUOTA_MB`` over every session's files (published and
    shipped models do not count); the store adds what is reserved."""
    return Quota(limit=limits.disk_quota_bytes, usage=sessions_usage)


@dataclass(frozen=True)
class NewRun:
    """What ``RunStore.insert`` needs for one run."""

    id: str
    owner: str | None
    name: str
    spec: dict[str, Any]
    total_steps: int
    reserve: int = 0  # bytes of its checkpoint, reserved until it ends
    path: str | None = None  # the file those bytes are for


class RunStore(Protocol):
    """What a run store does; ``SqliteRunStore`` is the embedded one, and a store for several
    machines (e.g. a named, detached Ray actor holding the same tables) implements the same
    methods. Records are plain dicts (the ``runs`` columns, ``spec`` and ``history`` decoded);
    every method is one atomic step."""

    lease_s: float

    def insert(self, runs: list[NewRun], *, per_owner: int | None = None,
               quota: Quota | None = None, what: str = "this training's checkpoint") -> None: ...
    def get(self, run_id: str) -> dict[str, Any]: ...
    def list(self, owner: str | None = None, active_only: bool = False) -> list[dict[str, Any]]: ...
    def queue_order(self) -> list[str]: ...
    def remove(self, run_id: str) -> None: ...
    def claim(self, worker: str, run_id: str | None = None) -> dict[str, Any] | None: ...
    def renew(self, run_id: str, worker: str) -> str | None: ...
    def progress(self, run_id: str, worker: str, **fields: Any) -> None: ...
    def finish(self, run_id: str, worker: str | None, state: str, **fields: Any) -> None: ...
    def requeue(self, run_id: str, worker: str, **fields: Any) -> None: ...
    def request_stop(self, run_id: str) -> bool: ...
    def move_to_front(self, run_id: str) -> None: ...
    def set_slots(self, n: int) -> None: ...
    def reserve(self, key: str, need: int, quota: Quota, what: str, path: str | None = None) -> None: ...
    def release(self, key: str) -> None: ...
    def reserved(self) -> int: ...
    def prepare_hints(self) -> list[dict]: ...
    def hint_prepare(self, spec: dict, keep: int = 16) -> None: ...


def _now() -> float:
    return time.time()


def _gone(worker: str | None) -> bool:
    """A worker id ("host:pid:tag") of this machine whose process has ended."""
    try:
        host, pid, _ = (worker or "").split(":")
        if host != socket.gethostname():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (ValueError, PermissionError, OSError):
        return False
    return False


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    rec = dict(row)
    rec["spec"] = json.loads(rec["spec"])
    rec["history"] = json.loads(rec["history"])
    return rec


def fair_order(queued: list[dict], running: Iterable[dict], last_start: dict) -> list[str]:
    """The queued runs' ids in the order they start: the teacher's "front" first; then a session
    with nothing running before one that already trains (so while another's run waits, nobody
    holds two slots); then round-robin by owner (the owner whose last run started longest ago, or
    never, first); first come, first served within an owner."""
    busy: dict = {}
    for r in running:
        busy[r["owner"]] = busy.get(r["owner"], 0) + 1
    last = dict(last_start)
    pending: dict = {}
    for r in sorted(queued, key=lambda r: (-r["priority"], r["created"])):
        pending.setdefault(r["owner"], []).append(r)
    order, tick = [], max([0, *[v for v in last.values() if v is not None]])
    while pending:
        owner = min(pending, key=lambda o: (-pending[o][0]["priority"], busy.get(o, 0) > 0,
                                            last.get(o) or -1, pending[o][0]["created"]))
        order.append(pending[owner].pop(0)["id"])
        tick += 1
        last[owner] = tick
        busy[owner] = busy.get(owner, 0) + 1
        if not pending[owner]:
            del pending[owner]
    return order


class SqliteRunStore:
    """``RunStore`` on one SQLite file (WAL mode). Safe to share between threads (one connection
    per thread) and processes (SQLite's locks; ``BEGIN IMMEDIATE`` where a decision is made)."""

    def __init__(self, path: str | os.PathLike, lease_s: float | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lease_s = lease_s if lease_s is not None else limits.run_lease_seconds()
        self._local = threading.local()
        self._db().executescript(SCHEMA)

    # -- connections and transactions ------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=60000")
            self._local.db, self._local.pid = db, os.getpid()
        return db

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: the write lock is taken at once, so what is read
        inside cannot change before it commits."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- the ledger ----------------------------------------------------------------------------
    @staticmethod
    def _reserved(db: sqlite3.Connection) -> int:
        """Bytes reserved and not yet on disk: each reservation tops its file up to its estimate
        (a checkpoint being written counts once, not twice)."""
        total = 0
        for row in db.execute("SELECT path, bytes FROM ledger"):
            have = 0
            if row["path"]:
                try:
                    have = os.stat(row["path"]).st_size
                except OSError:
                    pass
            total += max(0, row["bytes"] - have)
        return total

    def _check_room(self, db, need: int, quota: Quota | None, what: str) -> None:
        if quota is None:
            return
        limit = quota.limit()
        used = quota.usage() + self._reserved(db)
        if used + need > limit:
            raise QuotaError(quota_message(used, limit, need, what))

    def reserve(self, key: str, need: int, quota: Quota, what: str, path: str | None = None) -> None:
        """Reserve ``need`` bytes under ``key`` (QuotaError when they do not fit with everything
        on disk and reserved); ``release(key)`` when the file is written (it then counts itself)."""
        with self._tx() as db:
            self._check_room(db, need, quota, what)
            db.execute("INSERT OR REPLACE INTO ledger VALUES (?, NULL, ?, ?, ?)",
                       (key, path, int(need), _now()))

    def release(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM ledger WHERE key = ?", (key,))

    def reserved(self) -> int:
        return self._reserved(self._db())

    # -- submitting and reading -----------------------------------------------------------------
    def insert(self, runs: list[NewRun], *, per_owner: int | None = None,
               quota: Quota | None = None, what: str = "this training's checkpoint") -> None:
        """Queue ``runs`` (all of one owner), all or none: the owner's limit and the quota (their
        checkpoints' estimates together) are checked and the bytes reserved in the same
        transaction that inserts them. JobLimitError / QuotaError say why nothing was queued."""
        if not runs:
            return
        owner = runs[0].owner
        with self._tx() as db:
            if per_owner is not None:
                mine = db.execute("SELECT COUNT(*) FROM runs WHERE owner IS ? AND state IN ('queued', 'running')",
                                  (owner,)).fetchone()[0]
                if len(runs) > per_owner or mine + len(runs) > per_owner:
                    raise JobLimitError(owner_limit_message(mine, len(runs), per_owner))
            need = sum(r.reserve for r in runs)
            self._check_room(db, need, quota, what if len(runs) == 1 else f"these {len(runs)} trainings' checkpoints")
            now = _now()
            for r in runs:
                db.execute("INSERT INTO runs (id, owner, name, state, spec, created, total_steps) "
                           "VALUES (?, ?, ?, 'queued', ?, ?, ?)",
                           (r.id, r.owner, r.name, json.dumps(r.spec), now, r.total_steps))
                if r.reserve:
                    db.execute("INSERT OR REPLACE INTO ledger VALUES (?, ?, ?, ?, ?)",
                               (f"run:{r.id}", r.id, r.path, int(r.reserve), now))

    def get(self, run_id: str) -> dict[str, Any]:
        row = self._db().execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no job with id {run_id!r} (it may have been removed)")
        return _decode(row)

    def list(self, owner: str | None = None, active_only: bool = False) -> list[dict[str, Any]]:
        """Runs, oldest first (only ``owner``'s when given)."""
        q, args = "SELECT * FROM runs", []
        where = []
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
        if active_only:
            where.append("state IN ('queued', 'running')")
        if where:
            q += " WHERE " + " AND ".join(where)
        return [_decode(r) for r in self._db().execute(q + " ORDER BY created, rowid", args)]

    def _order(self, db) -> list[str]:
        queued = [dict(r) for r in db.execute(
            "SELECT id, owner, priority, created FROM runs WHERE state = 'queued'")]
        running = [dict(r) for r in db.execute("SELECT owner FROM runs WHERE state = 'running'")]
        last = {r["owner"]: r["s"] for r in db.execute(
            "SELECT owner, MAX(start_seq) AS s FROM runs GROUP BY owner")}
        return fair_order(queued, running, last)

    def queue_order(self) -> list[str]:
        return self._order(self._db())

    def remove(self, run_id: str) -> None:
        with self._tx() as db:
            row = db.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is not None and row["state"] in ACTIVE:
                raise ValueError(f"job {run_id} is still {row['state']}: stop it first")
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # -- settings --------------------------------------------------------------------------------
    def set_slots(self, n: int) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES ('slots', ?)", (str(int(n)),))

    def slots(self, db=None) -> int:
        row = (db or self._db()).execute("SELECT value FROM settings WHERE key = 'slots'").fetchone()
        return int(row[0]) if row else limits.max_jobs()

    def prepare_hints(self) -> list[dict]:
        """Task specs a run may soon need (the Train page's chosen preset): idle workers generate
        their examples ahead, so a Start goes straight to the first step."""
        row = self._db().execute("SELECT value FROM settings WHERE key = 'prepare'").fetchone()
        return json.loads(row[0]) if row else []

    def hint_prepare(self, spec: dict, keep: int = 16) -> None:
        if spec in self.prepare_hints():
            return
        with self._tx() as db:
            row = db.execute("SELECT value FROM settings WHERE key = 'prepare'").fetchone()
            hints = [h for h in (json.loads(row[0]) if row else []) if h != spec][-(keep - 1):] + [spec]
            db.execute("INSERT OR REPLACE INTO settings VALUES ('prepare', ?)", (json.dumps(hints),))

    # -- workers ---------------------------------------------------------------------------------
    def _requeue_dead(self, db) -> list[str]:
        """Runs whose worker stopped renewing its lease (killed, crashed, machine gone), or whose
        worker process on this machine no longer exists (no need to wait for its lease): back to
        the queue, to resume from their last complete checkpoint."""
        now, dead = _now(), []
        for r in db.execute("SELECT id, worker, lease FROM runs WHERE state = 'running'"):
            if (r["lease"] or 0) < now or _gone(r["worker"]):
                dead.append(r["id"])
        for run_id in dead:
            db.execute("UPDATE runs SET state = 'queued', worker = NULL, lease = NULL, "
                       "resume_from = checkpoint, message = 'interrupted (its worker stopped): it "
                       "resumes from its last checkpoint' WHERE id = ?", (run_id,))
        return dead

    def requeue_dead(self) -> list[str]:
        with self._tx() as db:
            return self._requeue_dead(db)

    def claim(self, worker: str, run_id: str | None = None) -> dict[str, Any] | None:
        """The next run to train, now "running" and leased to ``worker``; None when nothing is
        queued or every slot is taken. ``run_id``: that run only (an executor that starts one
        task per run, like Ray's)."""
        with self._tx() as db:
            self._requeue_dead(db)
            running = db.execute("SELECT COUNT(*) FROM runs WHERE state = 'running'").fetchone()[0]
            if running >= self.slots(db):
                return None
            order = self._order(db)
            if run_id is not None:
                order = [i for i in order if i == run_id]
            if not order:
                return None
            seq = 1 + (db.execute("SELECT MAX(start_seq) FROM runs").fetchone()[0] or 0)
            now = _now()
            db.execute("UPDATE runs SET state = 'running', worker = ?, lease = ?, start_seq = ?, "
                       "started = COALESCE(started, ?), attempts = attempts + 1 WHERE id = ?",
                       (worker, now + self.lease_s, seq, now, order[0]))
            return _decode(db.execute("SELECT * FROM runs WHERE id = ?", (order[0],)).fetchone())

    def renew(self, run_id: str, worker: str) -> str | None:
        """The worker's heartbeat: extend its lease. -> what it should do: None (go on), "stop"
        (asked to stop), "pause" (give the slot to a waiting session: it holds two while another
        waits) or "lost" (the run is no longer its own: stop without writing)."""
        with self._tx() as db:
            row = db.execute("SELECT owner, worker, state, stop_requested, start_seq FROM runs WHERE id = ?",
                             (run_id,)).fetchone()
            if row is None or row["worker"] != worker or row["state"] != "running":
                return "lost"
            db.execute("UPDATE runs SET lease = ? WHERE id = ?", (_now() + self.lease_s, run_id))
            if row["stop_requested"]:
                return "stop"
            mine = db.execute("SELECT id, start_seq FROM runs WHERE state = 'running' AND owner IS ?",
                              (row["owner"],)).fetchall()
            full = db.execute("SELECT COUNT(*) FROM runs WHERE state = 'running'").fetchone()[0] >= self.slots(db)
            if full and len(mine) > 1 and max(m["start_seq"] or 0 for m in mine) == (row["start_seq"] or 0):
                idle_waiting = db.execute(
                    "SELECT COUNT(*) FROM runs q WHERE q.state = 'queued' AND q.owner IS NOT ? AND NOT EXISTS "
                    "(SELECT 1 FROM runs r WHERE r.state = 'running' AND r.owner IS q.owner)",
                    (row["owner"],)).fetchone()[0]
                if idle_waiting:
                    return "pause"
            return None

    _FIELDS = ("step", "history", "n_snapshots", "checkpoint", "message", "error", "ran_s")

    def _set(self, db, run_id: str, fields: dict[str, Any]) -> None:
        cols = {k: (json.dumps(v) if k == "history" else v) for k, v in fields.items() if k in self._FIELDS}
        if cols:
            db.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in cols)} WHERE id = ?",
                       (*cols.values(), run_id))

    def progress(self, run_id: str, worker: str, **fields: Any) -> None:
        """A running run's step, history, checkpoint, ... (only while ``worker`` holds it)."""
        with self._tx() as db:
            if db.execute("SELECT 1 FROM runs WHERE id = ? AND worker = ? AND state = 'running'",
                          (run_id, worker)).fetchone():
                self._set(db, run_id, fields)

    def finish(self, run_id: str, worker: str | None, state: str, **fields: Any) -> None:
        """The run ended (done / stopped / failed): its reservation is released (its checkpoint,
        now on disk, counts itself)."""
        assert state in ("done", "stopped", "failed")
        with self._tx() as db:
            if worker is not None and not db.execute(
                    "SELECT 1 FROM runs WHERE id = ? AND worker = ?", (run_id, worker)).fetchone():
                return  # no longer ours (re-queued after a lost lease): another worker finishes it
            self._set(db, run_id, fields)
            db.execute("UPDATE runs SET state = ?, finished = ?, worker = NULL, lease = NULL WHERE id = ?",
                       (state, _now(), run_id))
            db.execute("DELETE FROM ledger WHERE run_id = ?", (run_id,))

    def requeue(self, run_id: str, worker: str, **fields: Any) -> None:
        """Back to the queue (paused for another session), to resume from its checkpoint."""
        with self._tx() as db:
            if not db.execute("SELECT 1 FROM runs WHERE id = ? AND worker = ?", (run_id, worker)).fetchone():
                return
            self._set(db, run_id, fields)
            db.execute("UPDATE runs SET state = 'queued', worker = NULL, lease = NULL, "
                       "resume_from = checkpoint WHERE id = ?", (run_id,))

    def request_stop(self, run_id: str) -> bool:
        """A queued run is stopped at once; a running one is asked to (its worker stops after the
        current step and saves). False when it had already ended."""
        with self._tx() as db:
            row = db.execute("SELECT state, step FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"no job with id {run_id!r}")
            if row["state"] == "queued":
                msg = "stopped before it started" if not row["step"] else f"stopped at step {row['step']}"
                db.execute("UPDATE runs SET state = 'stopped', finished = ?, message = ? WHERE id = ?",
                           (_now(), msg, run_id))
                db.execute("DELETE FROM ledger WHERE run_id = ?", (run_id,))
                return True
            if row["state"] == "running":
                db.execute("UPDATE runs SET stop_requested = 1 WHERE id = ?", (run_id,))
                return True
            return False

    def move_to_front(self, run_id: str) -> None:
        """The teacher's choice: this queued run starts next."""
        with self._tx() as db:
            top = db.execute("SELECT MAX(priority) FROM runs").fetchone()[0] or 0
            db.execute("UPDATE runs SET priority = ? WHERE id = ? AND state = 'queued'", (top + 1, run_id))


_OPEN: dict[tuple[str, int], SqliteRunStore] = {}
_OPEN_LOCK = threading.Lock()


def open_store(path: str | os.PathLike | None = None) -> SqliteRunStore:
    """The store at ``path`` (default ``tfviz.paths.runs_db()``: this checkpoint folder's), one
    object per file and process."""
    from .. import paths

    key = (str(Path(path or paths.runs_db()).resolve()), os.getpid())
    with _OPEN_LOCK:
        if key not in _OPEN:
            _OPEN[key] = SqliteRunStore(key[0])
        return _OPEN[key]


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


__all__ = ["ACTIVE", "JobLimitError", "NewRun", "Quota", "QuotaError", "RunStore", "STATES",
           "SqliteRunStore", "fair_order", "new_run_id", "open_store", "session_quota", "sessions_usage", "owner_limit_message", "quota_message"]
