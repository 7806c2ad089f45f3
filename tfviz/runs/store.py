"""The run store: every training run as a record, and the disk ledger, in one place every process
reaches (never imports streamlit, never trains).

A run = a record + a spec. The web server inserts records and reads them; worker processes
(``tfviz.runs.worker``) claim queued ones, train, and write their progress back. States borrow
Celery's vocabulary: queued (PENDING), running (STARTED), done (SUCCESS), failed (FAILURE),
stopped (REVOKED). A run whose worker died (its lease ran out) goes back to "queued" and resumes
from its last checkpoint; one paused to free a slot for another student does the same.

``RunStore`` is the interface; ``SqliteRunStore`` the embedded default: one SQLite file in WAL
mode (``tfviz.paths.runs_db()``, in the checkpoint folder: nothing to install or start). Every
change that must not race is one ``BEGIN IMMEDIATE`` transaction: inserting runs together with
their disk reservations (so simultaneous submits cannot pass the quota together), claiming a run
(the fair order and the slot count read and written at once), preempting. SQLite must sit on a
local disk, never on a network filesystem (its locks are not reliable there); a store for several
machines implements the same interface elsewhere (see docs/architecture.md).

Fencing (issue 29): each claim starts a new *attempt* of a run (``attempts`` + 1). The attempt
number is the run's fencing token: a worker's progress, requeue and finish change the record only
while the record still holds that attempt (checked in the same transaction), so a worker that was
frozen past its lease (a paused laptop, a debugger) and wakes after another worker took the run
over changes nothing. A worker trains into its attempt's own checkpoint file
(``attempt_path``); ``finish`` publishes it onto the run's checkpoint by an atomic rename inside
the fenced transaction, so the file a finished run names is never overwritten by a stale worker.

Faults of the store itself are messages (``StoreUnavailable``, a ValueError): locked by another
program past the busy timeout, read-only, a full disk, unreadable. A missing, emptied or damaged
file is set aside and the store made again, its finished runs listed again from their checkpoints'
metadata (``rebuild_records``); the schema is checked on every new connection. Leases count only
time the store could be written: a lock that held every heartbeat back does not make a live run
look dead.

Tables: ``runs`` (one row per run), ``ledger`` (bytes reserved for files about to be written: a
run's checkpoint until it ends, an upload while it is checked), ``settings`` (the slot count the
server set, the start counter of the fair queue, the last time the store was seen locked).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol
from urllib.parse import quote

from .. import limits
from ..storage import sync_folder

STATES = ("queued", "running", "done", "stopped", "failed")
ACTIVE = ("queued", "running")
MB = 2**20
BUSY_S = 5.0  # how long a transaction waits for another's lock (a heartbeat: at most a third of the lease)
HEAL_WAIT_S = 0.2  # a read's own write (a dead worker's run back to the queue) waits at most this
ATTEMPTS_DIR = ".attempts"  # beside a run's checkpoint: one file per attempt until finish publishes it

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
    attempts INTEGER NOT NULL DEFAULT 0,      -- claims so far: the current attempt = the fencing token
    client TEXT,                              -- the student (browser) behind the owning session: fair share
    claimed REAL,                             -- when the current attempt started (the longest-running yields)
    front_at REAL                             -- when the teacher moved it to the front (cleared at claim)
);
CREATE INDEX IF NOT EXISTS runs_state ON runs (state);
CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner);
CREATE TABLE IF NOT EXISTS ledger (
    key TEXT PRIMARY KEY, run_id TEXT, path TEXT, bytes INTEGER NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
ADDED_COLUMNS = {"client": "TEXT", "claimed": "REAL", "front_at": "REAL"}  # stores made before issue 29


class QuotaError(ValueError):
    """Not enough room left for a file; the message says how full the space is."""


class JobLimitError(ValueError):
    """An owner already has as many jobs running or queued as the server allows."""


class StoreUnavailable(ValueError):
    """The run store cannot be read or written now; the message says why in plain words (never a
    server path) and ``kind`` which fault it is: locked, readonly, full, unreadable."""

    def __init__(self, message: str, kind: str = "unreadable"):
        super().__init__(message)
        self.kind = kind

    def __reduce__(self):  # crosses processes (a Ray actor's answer) with its kind
        return (StoreUnavailable, (str(self), self.kind))


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
            f"the limit is {per_owner} per session on this server (a browser's tabs count as one "
            "session): stop one, or wait for one to finish")


def store_message(e: BaseException, busy_s: float = BUSY_S) -> StoreUnavailable:
    """A database error (or an OSError of the store's folder) as the sentence a page shows."""
    if isinstance(e, StoreUnavailable):
        return e
    text = str(e).lower()
    code = getattr(e, "sqlite_errorname", "") or ""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC or "full" in text or code == "SQLITE_FULL":
        return StoreUnavailable("the disk is full: the run store (runs.sqlite) cannot be written, so no "
                                "training can start or record its progress until space is freed on "
                                "the server", "full")
    if "locked" in text or "busy" in text or code.startswith("SQLITE_BUSY"):
        return StoreUnavailable(f"the run store (runs.sqlite) is locked by another program: it waited "
                                f"{busy_s:g} s for it. Runs that train go on; try again in a minute (if "
                                "it lasts, the program holding runs.sqlite open must end)", "locked")
    if "readonly" in text or "read-only" in text or code.startswith("SQLITE_READONLY") or (
            isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM)):
        return StoreUnavailable("the run store (runs.sqlite) cannot be written: it is read-only (the "
                                "file, its folder or the disk). Finished runs are listed; nothing new "
                                "can start until it is writable again", "readonly")
    if _damaged(e):
        return StoreUnavailable(f"the run store (runs.sqlite) is damaged ({str(e)[:200]}); it is set "
                                "aside and made anew from the checkpoints: try again", "damaged")
    return StoreUnavailable(f"the run store (runs.sqlite) cannot be read ({type(e).__name__}: "
                            f"{str(e)[:200]})", "unreadable")


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
    client: str | None = None  # the student behind ``owner`` (several tabs, one student); None: owner


class RunStore(Protocol):
    """What a run store does; ``SqliteRunStore`` is the embedded one, and a store for several
    machines (e.g. a named, detached Ray actor holding the same tables) implements the same
    methods. Records are plain dicts (the ``runs`` columns, ``spec`` and ``history`` decoded);
    every method is one atomic step. ``attempt``: the fencing token a worker got with its claim."""

    lease_s: float

    def insert(self, runs: list[NewRun], *, per_owner: int | None = None,
               quota: Quota | None = None, what: str = "this training's checkpoint") -> None: ...
    def get(self, run_id: str) -> dict[str, Any]: ...
    def list(self, owner: str | None = None, active_only: bool = False) -> list[dict[str, Any]]: ...
    def queue_order(self) -> list[str]: ...
    def remove(self, run_id: str) -> None: ...
    def claim(self, worker: str, run_id: str | None = None) -> dict[str, Any] | None: ...
    def renew(self, run_id: str, worker: str, attempt: int | None = None) -> str | None: ...
    def progress(self, run_id: str, worker: str, **fields: Any) -> bool: ...
    def finish(self, run_id: str, worker: str | None, state: str, **fields: Any) -> bool: ...
    def requeue(self, run_id: str, worker: str, **fields: Any) -> bool: ...
    def request_stop(self, run_id: str) -> bool: ...
    def move_to_front(self, run_id: str) -> None: ...
    def set_slots(self, n: int) -> None: ...
    def reserve(self, key: str, need: int, quota: Quota, what: str, path: str | None = None) -> None: ...
    def release(self, key: str) -> None: ...
    def reserved(self) -> int: ...
    def reservations(self) -> list[dict[str, Any]]: ...
    def prepare_hints(self) -> list[dict]: ...
    def hint_prepare(self, spec: dict, keep: int = 16) -> None: ...


def _now() -> float:
    return time.time()


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc): with the pid it names one
    process, never a later one that reuses the number. None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, start: str | None = None) -> bool | None:
    """True / False: process ``pid`` (started at ``start``, when given) exists or not on this
    machine; None: cannot tell (another user's process, no /proc)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return None
    if start is None:
        return True
    now = process_start(pid)
    return None if now is None else now == start


def lock_holders(path: str | os.PathLike) -> list[int]:
    """Processes (not this one) holding a write lock on the store's file or its ``-shm`` (where
    WAL mode keeps its write lock), from ``/proc/locks``; [] where there is none (not Linux)."""
    path, want = Path(path), set()
    for p in (path, path.with_name(path.name + "-shm")):
        try:
            st = os.stat(p)
        except OSError:
            continue
        want.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    out = []
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 8 or parts[3] != "WRITE" or not parts[4].isdigit():
            continue  # a waiter's line, or a read lock
        try:
            major, minor, inode = parts[5].split(":")
            ident = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        pid = int(parts[4])
        if ident in want and pid != os.getpid() and pid not in out:
            out.append(pid)
    return out


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (R, S, D, T stopped, t traced, Z, ...), None: unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def is_worker_of(pid: int, db: str | os.PathLike) -> bool:
    """Whether process ``pid`` is a tfviz worker of the store at ``db`` (its command line:
    ``... tfviz worker --db DB ...``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0")]
    except OSError:
        return False
    if "tfviz" not in args or "worker" not in args or "--db" not in args:
        return False
    i = args.index("--db")
    try:
        return i + 1 < len(args) and Path(args[i + 1]).resolve() == Path(db).resolve()
    except OSError:
        return False


def holder_words(db: str | os.PathLike) -> str | None:
    """Who holds the store's write lock, in words, when it is tfviz's own worker (None: another
    program, or unknown)."""
    for pid in lock_holders(db):
        if is_worker_of(pid, db):
            if process_state(pid) in ("T", "t"):
                return (f"tfviz's own worker (process {pid}), which is stopped (frozen): the server ends "
                        "it within a few seconds and its run resumes from its last checkpoint")
            return f"tfviz's own worker (process {pid})"
    return None


def worker_id() -> str:
    """This process as a worker: "host:pid:tag@start" (the start time: a reused pid is not it)."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:6]}@{process_start(pid) or ''}"


def _gone(worker: str | None) -> bool:
    """A worker id ("host:pid:tag[@start]") of this machine whose process has ended."""
    try:
        host, pid, tag = (worker or "").split(":")
        if host != socket.gethostname():
            return False
        start = tag.partition("@")[2] or None
        return process_alive(int(pid), start) is False
    except ValueError:
        return False


def attempt_path(checkpoint: str | os.PathLike, attempt: int) -> Path:
    """Where attempt ``attempt`` of the run with ``checkpoint`` saves: its own hidden file in
    ``.attempts/`` beside it (never listed as a model; ``finish`` renames it onto ``checkpoint``)."""
    final = Path(checkpoint)
    return final.parent / ATTEMPTS_DIR / f"{final.stem}.{int(attempt)}.safetensors"


def attempt_files(checkpoint: str | os.PathLike) -> dict[int, Path]:
    """Attempt number -> file, of every attempt of the run with ``checkpoint`` still on disk."""
    final = Path(checkpoint)
    out = {}
    for p in (final.parent / ATTEMPTS_DIR).glob(f"{final.stem}.*.safetensors"):
        n = p.name[len(final.stem) + 1:-len(".safetensors")]
        if n.isdigit():
            out[int(n)] = p
    return out


def file_key() -> str:
    """A ledger key for a reservation this process holds (an upload being checked): any store
    drops it once the process has ended (host, pid and the process's start time: a later
    process reusing the pid is not it), so a crash mid-check leaks nothing."""
    pid = os.getpid()
    return (f"file:{socket.gethostname()}:{pid}@{process_start(pid) or ''}:"
            f"{threading.get_ident()}:{time.monotonic_ns()}")


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    rec = dict(row)
    rec["spec"] = json.loads(rec["spec"])
    rec["history"] = json.loads(rec["history"])
    return rec


def _group(r: dict) -> Any:
    """Whose share a run counts in: its student (client) where known, else its session (owner)."""
    return r.get("client") or r.get("owner")


def fair_order(queued: list[dict], running: Iterable[dict], last_start: dict) -> list[str]:
    """The queued runs' ids in the order they start: the teacher's "front" first; then a student
    with nothing running before one that already trains (so while another's run waits, nobody
    holds two slots); then round-robin by student (the one whose last run started longest ago, or
    never, first); first come, first served within a student. A student is a run's ``client``
    (every tab of one browser) where known, else its ``owner`` (one session); ``last_start`` is
    keyed the same way."""
    busy: dict = {}
    for r in running:
        busy[_group(r)] = busy.get(_group(r), 0) + 1
    last = dict(last_start)
    pending: dict = {}
    for r in sorted(queued, key=lambda r: (-r["priority"], r["created"])):
        pending.setdefault(_group(r), []).append(r)
    order, tick = [], max([0, *[v for v in last.values() if v is not None]])
    while pending:
        who = min(pending, key=lambda o: (-pending[o][0]["priority"], busy.get(o, 0) > 0,
                                          last.get(o) or -1, pending[o][0]["created"]))
        order.append(pending[who].pop(0)["id"])
        tick += 1
        last[who] = tick
        busy[who] = busy.get(who, 0) + 1
        if not pending[who]:
            del pending[who]
    return order


def _damaged(e: BaseException) -> bool:
    """A database error that means the file is not (or no longer) an SQLite database, or that
    its ``-wal`` / ``-shm`` files no longer agree with it (deleted, truncated or replaced under
    open connections: "disk I/O error", issue 40)."""
    code = getattr(e, "sqlite_errorname", "") or ""
    text = str(e).lower()
    return (code in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or code in SIDE_FAULTS
            or "not a database" in text or "malformed" in text)


SIDE_FAULTS = ("SQLITE_IOERR_SHORT_READ", "SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_SHMMAP", "SQLITE_IOERR_SHMOPEN",
               "SQLITE_CORRUPT_VTAB")
"""SQLite's errors when a store's -wal / -shm no longer agree with it (a -wal deleted under open
connections: every new one reads "disk I/O error", SQLITE_IOERR_SHORT_READ); not a write's
I/O error (a full disk is SQLITE_FULL, said as such)."""


def _locked(e: BaseException) -> bool:
    code = getattr(e, "sqlite_errorname", "") or ""
    return code.startswith("SQLITE_BUSY") or "locked" in str(e).lower()


def _expired(lease: float | None, now: float, stalled: float, lease_s: float) -> bool:
    """A lease ran out: time counts only while the store could be written (``stalled``: the last
    time anyone found it locked), so a lock that held every heartbeat back kills no live run."""
    return max(lease or 0.0, stalled + lease_s) < now


class SqliteRunStore:
    """``RunStore`` on one SQLite file (WAL mode). Safe to share between threads (one connection
    per thread) and processes (SQLite's locks; ``BEGIN IMMEDIATE`` where a decision is made).

    ``busy_s``: how long a statement waits for another connection's lock before the store says it
    is locked (``StoreUnavailable``); ``_for_heartbeat()`` is the same store on connections that
    wait at most a third of the lease. ``rebuild_from``: folders whose checkpoints list the runs
    again when the file has to be made anew ("auto": the sessions' and runs' folders when this is
    the checkpoint folder's own store, ``tfviz.paths.runs_db()``; none for a store elsewhere)."""

    def __init__(self, path: str | os.PathLike, lease_s: float | None = None, *,
                 busy_s: float | None = None, rebuild_from: Any = "auto",
                 front_wait_s: float | None = None, connect: bool = True):
        self.path = Path(path)
        self.lease_s = lease_s if lease_s is not None else limits.run_lease_seconds()
        self.busy_s = BUSY_S if busy_s is None else float(busy_s)
        # the teacher's "Start next": the longest-running run is paused if no slot frees within this
        self.front_wait_s = limits.start_next_wait_seconds() if front_wait_s is None else front_wait_s
        self._rebuild_from = rebuild_from
        self._local = threading.local()
        self._stalled = 0.0  # the last time this process found the store locked past busy_s
        self._stalled_saved = 0.0
        self._healed = 0.0
        if not connect:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db()  # made (or checked) now; a fault is left for the first call to report
        except (StoreUnavailable, OSError):
            pass

    def _for_heartbeat(self) -> "SqliteRunStore":
        """This store on connections of their own that wait at most a third of the lease for a
        lock: a heartbeat held back by a busy store still renews before its lease runs out."""
        return SqliteRunStore(self.path, self.lease_s, busy_s=min(self.busy_s, self.lease_s / 3),
                              rebuild_from=self._rebuild_from, front_wait_s=self.front_wait_s,
                              connect=False)

    # -- the file, connections and transactions -------------------------------------------------
    def _stat(self) -> os.stat_result | None:
        try:
            return os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise store_message(e, self.busy_s) from e

    def _db(self) -> sqlite3.Connection:
        """This thread's connection, after checking the file is still the one it opened (deleted,
        emptied or replaced: a new connection, making the store again where needed)."""
        loc = self._local
        if getattr(loc, "damaged", None):  # a statement found the file damaged: set it aside
            why, loc.damaged = loc.damaged, None
            self._drop_connection()
            st = self._stat()
            if st is not None:
                self._recreate(st, why)
        db = getattr(loc, "db", None)
        if db is not None and getattr(loc, "pid", None) == os.getpid():
            st = self._stat()
            if st is not None and st.st_size > 0 and (st.st_dev, st.st_ino) == loc.ident:
                moved = self._sides_moved(getattr(loc, "sides", {}))
                if moved is None:
                    return db
                # its -wal / -shm deleted or replaced under this open connection: what it writes
                # goes to a file nobody else reads, and new connections fail ("disk I/O error")
                self._drop_connection()
                self._recreate(st, f"damaged: its {moved} file was deleted or replaced while it was open")
            else:
                try:
                    db.close()
                except sqlite3.Error:
                    pass
        loc.db = None  # (a forked child never touches its parent's connection)
        db, ident = self._open()
        loc.db, loc.pid, loc.ident, loc.sides = db, os.getpid(), ident, self._side_idents()
        return db

    SIDES = ("-wal", "-shm")

    def _side_idents(self) -> dict[str, tuple[int, int]]:
        """(device, inode) of the store's ``-wal`` and ``-shm`` as this connection opened them
        (while a connection is open SQLite keeps both: the same files until it closes)."""
        out = {}
        for suffix in self.SIDES:
            try:
                st = os.stat(self.path.with_name(self.path.name + suffix))
            except OSError:
                continue
            out[suffix] = (st.st_dev, st.st_ino)
        return out

    def _sides_moved(self, sides: dict[str, tuple[int, int]]) -> str | None:
        """The first of this connection's ``-wal`` / ``-shm`` that is gone or another file now."""
        now = self._side_idents()
        return next((self.path.name + s for s, ident in sides.items() if now.get(s) != ident), None)

    def _open(self) -> tuple[sqlite3.Connection, tuple[int, int]]:
        for _ in range(4):
            st = self._stat()
            if st is None or st.st_size == 0:
                self._recreate(st, "missing" if st is None else "emptied")
                continue
            try:
                db = sqlite3.connect(f"file:{quote(str(self.path))}?mode=rw", uri=True, timeout=self.busy_s,
                                     isolation_level=None, check_same_thread=False)
            except sqlite3.Error as e:
                if self._stat() is None:
                    continue  # deleted meanwhile
                raise store_message(e, self.busy_s) from e
            try:
                db.row_factory = sqlite3.Row
                db.execute(f"PRAGMA busy_timeout={int(self.busy_s * 1000)}")
                if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA wal_autocheckpoint=100")  # the main file kept fresh: what a heal keeps
                self._check_schema(db)
            except sqlite3.Error as e:
                db.close()
                if _damaged(e):
                    self._recreate(st, f"damaged: {e}")
                    continue
                if _locked(e):
                    self._stalled = _now()
                raise store_message(e, self.busy_s) from e
            return db, (st.st_dev, st.st_ino)
        raise StoreUnavailable("the run store (runs.sqlite) keeps disappearing while it is opened", "unreadable")

    @staticmethod
    def _check_schema(db: sqlite3.Connection) -> None:
        """The tables and columns this code needs, made when missing (a store of an older version
        gains its new columns)."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        cols = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
        if {"runs", "ledger", "settings"} <= tables and set(ADDED_COLUMNS) <= cols:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            cols = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
            for name, kind in ADDED_COLUMNS.items():
                if name not in cols:
                    db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _rebuild_folders(self) -> list[Path]:
        if self._rebuild_from != "auto":
            return [Path(f) for f in (self._rebuild_from or [])]
        from .. import paths

        try:
            if self.path.resolve() != paths.runs_db().resolve():
                return []
        except OSError:
            return []
        root = paths.sessions_dir()
        sessions = sorted(p / "trained" for p in root.iterdir()) if root.is_dir() else []
        return [paths.runs_dir(), *sessions]

    def _recreate(self, seen: os.stat_result | None, why: str) -> None:
        """Make the store file anew (it is missing, empty or damaged): under a lock on its folder,
        so one process does it; a damaged file is kept aside (``runs.sqlite.damaged-TIME``), stale
        ``-wal`` / ``-shm`` files of a deleted one removed (SQLite would mix them into the new
        file); the runs are listed again from the checkpoints' metadata."""
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder, os.O_RDONLY)
        except OSError as e:
            raise store_message(e, self.busy_s) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = self._stat()
            if now is not None and now.st_size > 0 and (
                    seen is None or (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino)):
                return  # another process made it meanwhile
            kept = None
            if now is not None:
                kept = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
                os.replace(self.path, kept)
            for suffix in ("-wal", "-shm", "-journal"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    if kept is not None:
                        os.replace(side, kept.with_name(kept.name + suffix))
                    else:
                        side.unlink(missing_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.new")
            try:
                # the main file alone is sound (its -wal / -shm were the damage): its records, as
                # of its last checkpoint, are kept, queued runs and leases included
                copied = kept is not None and _copy_if_sound(kept, tmp)
                db = sqlite3.connect(tmp, isolation_level=None)
                try:
                    db.executescript(SCHEMA)
                    records = rebuild_records(self._rebuild_folders())
                    db.execute("BEGIN")
                    for rec in records:
                        cols = list(rec)
                        db.execute(f"INSERT OR IGNORE INTO runs ({', '.join(cols)}) VALUES "
                                   f"({', '.join('?' * len(cols))})", [rec[c] for c in cols])
                    if records or why != "missing":
                        note = {"at": _now(), "why": why, "runs": len(records), "copied": copied,
                                "kept": None if kept is None else kept.name}
                        db.execute("INSERT OR REPLACE INTO settings VALUES ('rebuilt', ?)", (json.dumps(note),))
                    db.execute("COMMIT")
                finally:
                    db.close()
                os.replace(tmp, self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        except (OSError, sqlite3.Error) as e:
            raise store_message(e, self.busy_s) from e
        finally:
            os.close(fd)

    def _drop_connection(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None and getattr(self._local, "pid", None) == os.getpid():
            try:
                db.close()
            except sqlite3.Error:
                pass
        self._local.db = None

    @contextmanager
    def _guard(self, mark_stall: bool = True) -> Iterator[None]:
        """SQLite's errors as ``StoreUnavailable`` (a sentence); a connection that met a damaged
        file or missing tables is dropped, so the next call opens the file again. A lock that
        outlasted ``busy_s`` is remembered (``mark_stall``): no lease counts that time."""
        try:
            yield
        except StoreUnavailable as e:
            raise self._named(e) from None
        except sqlite3.Error as e:
            if _locked(e) and mark_stall:
                self._stalled = _now()
            if _damaged(e):
                self._local.damaged = f"damaged: {e}"
            elif "no such table" in str(e) or "no such column" in str(e):
                self._drop_connection()  # the next connection makes the schema again
            raise self._named(store_message(e, self.busy_s)) from e

    def _named(self, e: StoreUnavailable) -> StoreUnavailable:
        """A "locked" sentence naming tfviz's own worker when it is the lock's holder (issue 40)."""
        if e.kind != "locked" or "tfviz's own worker" in str(e):
            return e
        who = holder_words(self.path)
        if who is None:
            return e
        return StoreUnavailable(f"the run store (runs.sqlite) is locked by {who}; it waited {self.busy_s:g} s "
                                "for it. Try again in a minute", "locked")

    @contextmanager
    def _tx(self, wait: float | None = None) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: the write lock is taken at once, so what is read
        inside cannot change before it commits. ``wait``: at most this long for the lock (an
        opportunistic write of a read), instead of ``busy_s``. A long wait for the lock is
        remembered (the store was locked until now: no lease counts that time)."""
        with self._guard(mark_stall=wait is None):
            db = self._db()
            if wait is not None:
                db.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
            t0 = time.monotonic()
            try:
                db.execute("BEGIN IMMEDIATE")
            finally:
                if wait is not None:
                    db.execute(f"PRAGMA busy_timeout={int(self.busy_s * 1000)}")
            if time.monotonic() - t0 > max(1.0, self.busy_s / 2):
                self._stalled = _now()
            try:
                if self._stalled > self._stalled_saved:  # tell every process: leases wait for it
                    db.execute("INSERT OR REPLACE INTO settings VALUES ('stalled', ?)",
                               (str(max(self._stalled, self._saved_stall(db))),))
                    self._stalled_saved = self._stalled
                yield db
                db.execute("COMMIT")
            except BaseException:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise

    def _read(self):
        """A connection for a read (SQLite's errors become sentences through ``_guard``)."""
        return self._db()

    def _reading(self, fn: Callable[[sqlite3.Connection], Any], heal: bool = True) -> Any:
        """``fn(connection)`` as one read; a file found damaged (or its tables gone) is made anew
        and the read done once more, so the caller gets an answer, not the fault."""
        for again in (False, True):
            try:
                with self._guard():
                    if heal:
                        self._heal()
                    return fn(self._read())
            except StoreUnavailable as e:
                if again or e.kind not in ("damaged", "unreadable"):
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._drop_connection()

    @staticmethod
    def _saved_stall(db) -> float:
        row = db.execute("SELECT value FROM settings WHERE key = 'stalled'").fetchone()
        return float(row[0]) if row else 0.0

    def notices(self) -> list[str]:
        """What the teacher should know about the store itself (it was made anew, and why)."""
        row = self._reading(lambda db: db.execute("SELECT value FROM settings WHERE key = 'rebuilt'").fetchone(),
                            heal=False)
        if not row:
            return []
        note = json.loads(row[0])
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(note["at"]))
        kept = f"; the old file was kept as {note['kept']}" if note.get("kept") else ""
        if note.get("copied"):
            return [f"The run store was made anew at {when} (runs.sqlite was {note['why']}): its records "
                    f"as of its last save were kept and {note['runs']} run(s) listed again from their "
                    f"checkpoints{kept}. What runs recorded after that save (their latest steps) was "
                    "lost; a run that was training resumes from its last checkpoint."]
        return [f"The run store was made anew at {when} (runs.sqlite was {note['why']}): "
                f"{note['runs']} run(s) were listed again from their checkpoints{kept}. Runs "
                "that had never saved a checkpoint were lost."]

    # -- the ledger ----------------------------------------------------------------------------
    @staticmethod
    def _dead_key(key: str) -> bool:
        """A reservation whose process on this machine has ended."""
        parts = key.split(":")
        try:
            if len(parts) == 5:  # file:host:pid@start:thread:ns
                if parts[1] != socket.gethostname():
                    return False
                pid, _, start = parts[2].partition("@")
                return process_alive(int(pid), start or None) is False
            if len(parts) == 4:  # file:pid:thread:ns (before issue 29)
                return process_alive(int(parts[1])) is False
        except ValueError:
            pass
        return False

    def _drop_dead(self, db) -> int:
        """Reservations nobody holds any more: of processes that ended, of runs that ended."""
        dead = [r["key"] for r in db.execute("SELECT key FROM ledger WHERE key LIKE 'file:%'")
                if self._dead_key(r["key"])]
        for key in dead:
            db.execute("DELETE FROM ledger WHERE key = ?", (key,))
        gone = db.execute("DELETE FROM ledger WHERE run_id IS NOT NULL AND run_id NOT IN "
                          "(SELECT id FROM runs WHERE state IN ('queued', 'running'))").rowcount
        return len(dead) + max(gone, 0)

    def _heal_ledger(self) -> None:
        db = self._read()
        rows = db.execute("SELECT l.key, l.run_id, r.state FROM ledger l LEFT JOIN runs r ON r.id = l.run_id").fetchall()
        if any((r["key"].startswith("file:") and self._dead_key(r["key"]))
               or (r["run_id"] is not None and r["state"] not in ACTIVE) for r in rows):
            try:
                with self._tx(wait=HEAL_WAIT_S) as db:
                    self._drop_dead(db)
            except StoreUnavailable:
                pass  # the read still answers; dropped next time

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
        self._drop_dead(db)
        limit = quota.limit()
        used = quota.usage() + self._reserved(db)
        if used + need > limit:
            raise QuotaError(quota_message(used, limit, need, what))

    def reserve(self, key: str, need: int, quota: Quota, what: str, path: str | None = None) -> None:
        """Reserve ``need`` bytes under ``key`` (QuotaError when they do not fit with everything
        on disk and reserved); ``release(key)`` when the file is written (it then counts itself).
        A ``file_key()`` reservation is dropped by anyone once its process has ended."""
        with self._tx() as db:
            self._check_room(db, need, quota, what)
            db.execute("INSERT OR REPLACE INTO ledger VALUES (?, NULL, ?, ?, ?)",
                       (key, path, int(need), _now()))

    def release(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM ledger WHERE key = ?", (key,))

    def reserved(self) -> int:
        with self._guard():
            self._heal_ledger()
        return self._reading(self._reserved, heal=False)

    def reservations(self) -> list[dict[str, Any]]:
        """Every reservation (the teacher's view): key, bytes, path, when, and the run's owner,
        name and state for a training's; those of ended processes and runs dropped first."""
        with self._guard():
            self._heal_ledger()
        return self._reading(lambda db: [dict(r) for r in db.execute(
            "SELECT l.key, l.run_id, l.path, l.bytes, l.created, r.owner, r.name, r.state "
            "FROM ledger l LEFT JOIN runs r ON r.id = l.run_id ORDER BY l.created")], heal=False)

    # -- submitting and reading -----------------------------------------------------------------
    def insert(self, runs: list[NewRun], *, per_owner: int | None = None,
               quota: Quota | None = None, what: str = "this training's checkpoint") -> None:
        """Queue ``runs`` (all of one owner), all or none: the owner's limit (counted per student:
        every session of the runs' ``client`` together) and the quota (their checkpoints'
        estimates together) are checked and the bytes reserved in the same transaction that
        inserts them. JobLimitError / QuotaError say why nothing was queued."""
        if not runs:
            return
        group = runs[0].client or runs[0].owner
        with self._tx() as db:
            if per_owner is not None:
                mine = db.execute("SELECT COUNT(*) FROM runs WHERE COALESCE(client, owner) IS ? "
                                  "AND state IN ('queued', 'running')", (group,)).fetchone()[0]
                if len(runs) > per_owner or mine + len(runs) > per_owner:
                    raise JobLimitError(owner_limit_message(mine, len(runs), per_owner))
            need = sum(r.reserve for r in runs)
            self._check_room(db, need, quota, what if len(runs) == 1 else f"these {len(runs)} trainings' checkpoints")
            now = _now()
            for r in runs:
                db.execute("INSERT INTO runs (id, owner, name, state, spec, created, total_steps, client) "
                           "VALUES (?, ?, ?, 'queued', ?, ?, ?, ?)",
                           (r.id, r.owner, r.name, json.dumps(r.spec), now, r.total_steps, r.client))
                if r.reserve:
                    db.execute("INSERT OR REPLACE INTO ledger VALUES (?, ?, ?, ?, ?)",
                               (f"run:{r.id}", r.id, r.path, int(r.reserve), now))

    def _heal(self) -> None:
        """On a read: runs of dead workers back to the queue (a write only when one is dead)."""
        if time.monotonic() - self._healed < 0.25:
            return
        self._healed = time.monotonic()
        db = self._read()
        now, stalled = _now(), max(self._stalled, self._saved_stall(db))
        rows = db.execute("SELECT worker, lease FROM runs WHERE state = 'running'").fetchall()
        if any(_expired(r["lease"], now, stalled, self.lease_s) or _gone(r["worker"]) for r in rows):
            try:
                with self._tx(wait=HEAL_WAIT_S) as db:
                    self._requeue_dead(db)
            except StoreUnavailable:
                pass  # the read still answers; the run goes back to the queue at the next write

    def get(self, run_id: str) -> dict[str, Any]:
        row = self._reading(lambda db: db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone())
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
        return self._reading(lambda db: [_decode(r) for r in db.execute(q + " ORDER BY created, rowid", args)])

    def activity(self) -> dict[str, Any]:
        """What an executor needs to keep its workers: queued runs, running runs' workers, slots."""
        def read(db):
            rows = db.execute("SELECT state, worker FROM runs WHERE state IN ('queued', 'running')").fetchall()
            return {"queued": sum(r["state"] == "queued" for r in rows),
                    "workers": [r["worker"] for r in rows if r["state"] == "running"],
                    "slots": self.slots(db)}

        return self._reading(read)

    def _order(self, db) -> list[str]:
        queued = [dict(r) for r in db.execute(
            "SELECT id, owner, client, priority, created FROM runs WHERE state = 'queued'")]
        running = [dict(r) for r in db.execute("SELECT owner, client FROM runs WHERE state = 'running'")]
        last = {r["g"]: r["s"] for r in db.execute(
            "SELECT COALESCE(client, owner) AS g, MAX(start_seq) AS s FROM runs GROUP BY g")}
        return fair_order(queued, running, last)

    def queue_order(self) -> list[str]:
        return self._reading(self._order)

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
        def read(db):
            return db.execute("SELECT value FROM settings WHERE key = 'slots'").fetchone()

        row = read(db) if db is not None else self._reading(read, heal=False)
        return int(row[0]) if row else limits.max_jobs()

    def prepare_hints(self) -> list[dict]:
        """Task specs a run may soon need (the Train page's chosen preset): idle workers generate
        their examples ahead, so a Start goes straight to the first step."""
        row = self._reading(lambda db: db.execute("SELECT value FROM settings WHERE key = 'prepare'").fetchone(),
                            heal=False)
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
        """Runs whose worker stopped renewing its lease (killed, crashed, frozen, machine gone), or
        whose worker process on this machine no longer exists (no need to wait for its lease):
        back to the queue, to resume from their last complete checkpoint. Lease time counts only
        while the store could be written (``_expired``)."""
        now, dead = _now(), []
        stalled = max(self._stalled, self._saved_stall(db))
        for r in db.execute("SELECT id, worker, lease FROM runs WHERE state = 'running'"):
            if _expired(r["lease"], now, stalled, self.lease_s) or _gone(r["worker"]):
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
        """The next run to train, now "running" and leased to ``worker`` as a new attempt (its
        ``attempts``: the fencing token every later write of this worker must show); None when
        nothing is queued or every slot is taken. ``run_id``: that run only (an executor that
        starts one task per run, like Ray's)."""
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
                       "started = COALESCE(started, ?), attempts = attempts + 1, claimed = ?, "
                       "front_at = NULL WHERE id = ?",
                       (worker, now + self.lease_s, seq, now, now, order[0]))
            return _decode(db.execute("SELECT * FROM runs WHERE id = ?", (order[0],)).fetchone())

    def renew(self, run_id: str, worker: str, attempt: int | None = None) -> str | None:
        """The worker's heartbeat: extend its lease. -> what it should do: None (go on), "stop"
        (asked to stop), "pause" (give the slot to a waiting student: it holds two while another
        waits), "yield" (the teacher's "Start next" has waited ``front_wait_s`` for a slot and
        this is the longest-running run) or "lost" (the run is no longer its attempt: stop
        without writing). A run put back in the queue while this worker lived (its heartbeats
        were held back) and claimed by nobody since is taken back."""
        with self._tx() as db:
            row = db.execute("SELECT owner, client, worker, state, stop_requested, start_seq, attempts "
                             "FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or (attempt is not None and row["attempts"] != attempt):
                return "lost"
            now = _now()
            running = [dict(r) for r in db.execute(
                "SELECT id, owner, client, start_seq, claimed FROM runs WHERE state = 'running'")]
            slots = self.slots(db)
            if row["worker"] != worker or row["state"] != "running":
                return None if self._retake(db, run_id, worker, attempt) else "lost"
            db.execute("UPDATE runs SET lease = ? WHERE id = ?", (now + self.lease_s, run_id))
            if row["stop_requested"]:
                return "stop"
            if len(running) < slots:
                return None
            if db.execute("SELECT 1 FROM runs WHERE state = 'queued' AND front_at IS NOT NULL AND "
                          "front_at <= ? LIMIT 1", (now - self.front_wait_s,)).fetchone():
                longest = min(running, key=lambda r: (r["claimed"] or 0, r["start_seq"] or 0))
                if longest["id"] == run_id:
                    return "yield"
            me = _group(dict(row))
            mine = [r for r in running if _group(r) == me]
            if len(mine) > 1 and max(m["start_seq"] or 0 for m in mine) == (row["start_seq"] or 0):
                training = {_group(r) for r in running}
                for q in db.execute("SELECT owner, client FROM runs WHERE state = 'queued'"):
                    if _group(dict(q)) != me and _group(dict(q)) not in training:
                        return "pause"
            return None

    _FIELDS = ("step", "history", "n_snapshots", "checkpoint", "message", "error", "ran_s")

    def _set(self, db, run_id: str, fields: dict[str, Any]) -> None:
        cols = {k: (json.dumps(v) if k == "history" else v) for k, v in fields.items() if k in self._FIELDS}
        if cols:
            db.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in cols)} WHERE id = ?",
                       (*cols.values(), run_id))

    def _retake(self, db, run_id: str, worker: str, attempt: int | None) -> bool:
        """Attempt ``attempt`` of the run went back to the queue while its worker lived (its
        heartbeats were held back), nobody has claimed it since, and a slot is free: it is this
        worker's again (the same attempt: no restart)."""
        row = db.execute("SELECT worker, state, attempts, stop_requested FROM runs WHERE id = ?",
                         (run_id,)).fetchone()
        if (attempt is None or row is None or row["attempts"] != attempt or row["state"] != "queued"
                or row["worker"] is not None or row["stop_requested"]):
            return False
        if db.execute("SELECT COUNT(*) FROM runs WHERE state = 'running'").fetchone()[0] >= self.slots(db):
            return False
        db.execute("UPDATE runs SET state = 'running', worker = ?, lease = ?, message = '' WHERE id = ?",
                   (worker, _now() + self.lease_s, run_id))
        return True

    @staticmethod
    def _holds(db, run_id: str, worker: str, attempt: int | None, queued_ok: bool = False) -> bool:
        """``worker`` still holds attempt ``attempt`` of the run (the fence). ``queued_ok``: also
        when the run went back to the queue after its lease and nobody has claimed it since."""
        row = db.execute("SELECT worker, state, attempts FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None or (attempt is not None and row["attempts"] != attempt):
            return False
        if row["worker"] == worker and row["state"] == "running":
            return True
        return queued_ok and attempt is not None and row["state"] == "queued" and row["worker"] is None

    def progress(self, run_id: str, worker: str, attempt: int | None = None, **fields: Any) -> bool:
        """A running run's step, history, checkpoint, ... (only while ``worker`` holds attempt
        ``attempt`` of it). -> False when it no longer does (nothing written)."""
        with self._tx() as db:
            if not (self._holds(db, run_id, worker, attempt) or self._retake(db, run_id, worker, attempt)):
                return False
            self._set(db, run_id, fields)
            if fields.get("checkpoint"):  # the reservation tops up the file being written
                db.execute("UPDATE ledger SET path = ? WHERE run_id = ?", (fields["checkpoint"], run_id))
            return True

    @staticmethod
    def _publish(src: Path, dst: Path) -> str | None:
        """Attempt file ``src`` onto the run's checkpoint ``dst`` (its JSON sidecar first; each an
        atomic rename), other attempts' files removed -> the checkpoint now (None: never saved)."""
        if src.is_file():
            side = src.with_suffix(".json")
            if side.is_file():
                os.replace(side, dst.with_suffix(".json"))
            os.replace(src, dst)
            sync_folder(dst.parent)
        for other in attempt_files(dst).values():
            other.unlink(missing_ok=True)
            other.with_suffix(".json").unlink(missing_ok=True)
        return str(dst) if dst.is_file() else None

    def finish(self, run_id: str, worker: str | None, state: str, attempt: int | None = None,
               publish: tuple[str, str] | None = None, **fields: Any) -> bool:
        """The run ended (done / stopped / failed), if ``worker`` still holds attempt ``attempt``
        (or nobody has claimed it since its lease ran out): ``publish`` = (attempt file, the
        run's checkpoint) renames the one onto the other in this same transaction; the
        reservation is released (the checkpoint, now on disk, counts itself). -> False when the
        run was no longer this worker's (nothing written, nothing renamed)."""
        assert state in ("done", "stopped", "failed")
        with self._tx() as db:
            if worker is not None and not self._holds(db, run_id, worker, attempt, queued_ok=True):
                return False  # no longer ours (re-queued after a lost lease): another attempt finishes it
            if publish is not None:
                src, dst = Path(publish[0]), Path(publish[1])
                fields["checkpoint"] = self._publish(src, dst) or fields.get("checkpoint")
                for k in ("message", "error"):
                    if isinstance(fields.get(k), str):
                        fields[k] = fields[k].replace(str(src), str(dst))
            self._set(db, run_id, fields)
            db.execute("UPDATE runs SET state = ?, finished = ?, worker = NULL, lease = NULL, resume_from = NULL "
                       "WHERE id = ?", (state, _now(), run_id))
            db.execute("DELETE FROM ledger WHERE run_id = ?", (run_id,))
            return True

    def requeue(self, run_id: str, worker: str, attempt: int | None = None, **fields: Any) -> bool:
        """Back to the queue (paused for another student), to resume from its checkpoint."""
        with self._tx() as db:
            if not self._holds(db, run_id, worker, attempt):
                return False
            self._set(db, run_id, fields)
            db.execute("UPDATE runs SET state = 'queued', worker = NULL, lease = NULL, "
                       "resume_from = checkpoint WHERE id = ?", (run_id,))
            return True

    def request_stop(self, run_id: str) -> bool:
        """A queued run is stopped at once; a running one is asked to (its worker stops after the
        current step and saves). False when it had already ended."""
        with self._tx() as db:
            row = db.execute("SELECT state, step, checkpoint, spec FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"no job with id {run_id!r}")
            if row["state"] == "queued":
                msg = "stopped before it started" if not row["step"] else f"stopped at step {row['step']}"
                checkpoint = row["checkpoint"]
                final = json.loads(row["spec"]).get("checkpoint")
                if checkpoint and final and Path(checkpoint).parent.name == ATTEMPTS_DIR:
                    checkpoint = self._publish(Path(checkpoint), Path(final)) or checkpoint  # a paused run's
                db.execute("UPDATE runs SET state = 'stopped', finished = ?, message = ?, checkpoint = ?, "
                           "resume_from = NULL WHERE id = ?", (_now(), msg, checkpoint, run_id))
                db.execute("DELETE FROM ledger WHERE run_id = ?", (run_id,))
                return True
            if row["state"] == "running":
                db.execute("UPDATE runs SET stop_requested = 1 WHERE id = ?", (run_id,))
                return True
            return False

    def move_to_front(self, run_id: str) -> None:
        """The teacher's choice: this queued run starts next (and if no slot frees within
        ``front_wait_s``, the longest-running run is paused for it: ``renew``)."""
        with self._tx() as db:
            top = db.execute("SELECT MAX(priority) FROM runs").fetchone()[0] or 0
            db.execute("UPDATE runs SET priority = ?, front_at = ? WHERE id = ? AND state = 'queued'",
                       (top + 1, _now(), run_id))


# -------------------------------------------------------------------------------- rebuilding
def _session_of(path: Path) -> str | None:
    """The session that owns a checkpoint under ``checkpoints/user/<sid>/trained/``, else None."""
    from .. import paths

    try:
        root = paths.sessions_dir().resolve().parts
        here = path.resolve().parts
    except OSError:
        return None
    if here[:len(root)] == root and len(here) > len(root) + 1:
        sid = here[len(root)]
        return sid if paths.SESSION_ID.fullmatch(sid) else None
    return None


def _record_from(path: Path, meta: dict, taken: set) -> dict[str, Any] | None:
    tc = meta.get("train_config")
    if not isinstance(tc, dict) or not isinstance(meta.get("model_config"), dict):
        return None  # not a training's checkpoint
    extra = meta.get("extra") if isinstance(meta.get("extra"), dict) else {}
    run = extra.get("run") if isinstance(extra.get("run"), dict) else {}
    state_meta = meta.get("train_state") if isinstance(meta.get("train_state"), dict) else {}
    history = [h for h in (meta.get("history") or []) if isinstance(h, dict)]
    step = int(state_meta.get("step") or (history[-1].get("step", 0) if history else 0))
    run_id = run.get("id") if isinstance(run.get("id"), str) and run.get("id") not in taken else None
    run_id = run_id or new_run_id()
    taken.add(run_id)
    mtime = path.stat().st_mtime
    owner = _session_of(path)
    spec = {"model_config": meta["model_config"], "task": meta.get("task"), "train_config": tc,
            "checkpoint": str(path), "resume": run.get("resume"), "init": run.get("init"),
            "max_seconds": run.get("max_seconds"), "check_budget": bool(run.get("check_budget")),
            "torch_threads": run.get("torch_threads") or 1}
    return {"id": run_id, "owner": owner, "client": owner, "name": str(run.get("name") or path.stem),
            "state": "stopped", "spec": json.dumps(spec), "created": float(run.get("created") or mtime),
            "started": mtime, "finished": mtime, "step": step, "total_steps": int(tc.get("steps") or step),
            "history": json.dumps(history), "checkpoint": str(path), "attempts": 0,
            "message": f"listed again from its checkpoint (step {step}) after the run store was made anew"}


def _copy_if_sound(src: Path, dst: Path) -> bool:
    """``src`` (a store's main file, set aside without its -wal / -shm) copied to ``dst`` when
    SQLite reads it whole (``PRAGMA integrity_check``); False (``dst`` not left) otherwise."""
    try:
        shutil.copyfile(src, dst)
        db = sqlite3.connect(f"file:{quote(str(dst))}?mode=rw", uri=True, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=DELETE")  # the copy stands alone until it replaces the store
            sound = db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            sound = sound and db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'runs'").fetchone()[0] == 1
        finally:
            db.close()
    except (OSError, sqlite3.Error):
        sound = False
    if not sound:
        dst.unlink(missing_ok=True)
    return sound


def rebuild_records(folders: Iterable[Path]) -> list[dict[str, Any]]:
    """The runs' records as their checkpoints tell them (``runs`` columns, JSON encoded), for a
    store made anew: a finished run's checkpoint (``extra.status`` done / stopped) is listed
    again as it ended; an interrupted run's newest attempt file with no finished checkpoint
    beside it is queued again to resume from it. Runs that never saved a checkpoint are not
    found (nothing of them is on disk)."""
    from ..train.checkpoint import read_metadata

    out, taken = [], set()
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.safetensors")):
            try:
                meta = read_metadata(path)
                rec = _record_from(path, meta, taken)
            except Exception:  # noqa: BLE001 - an unreadable file is simply not a run
                continue
            if rec is None:
                continue
            status = (meta.get("extra") or {}).get("status")
            if status in ("done", "stopped"):
                rec["state"] = status
            out.append(rec)
        newest: dict[str, tuple[int, Path]] = {}
        for p in (folder / ATTEMPTS_DIR).glob("*.safetensors"):
            stem, _, n = p.name[:-len(".safetensors")].rpartition(".")
            if n.isdigit() and not (folder / f"{stem}.safetensors").exists():
                if stem not in newest or int(n) > newest[stem][0]:
                    newest[stem] = (int(n), p)
        for stem, (n, p) in sorted(newest.items()):
            try:
                rec = _record_from(p, read_metadata(p), taken)
            except Exception:  # noqa: BLE001
                continue
            if rec is None:
                continue
            spec = json.loads(rec["spec"])
            spec["checkpoint"] = str(folder / f"{stem}.safetensors")
            rec.update(spec=json.dumps(spec), state="queued", resume_from=str(p), attempts=n,
                       finished=None, name=rec["name"] if rec["name"] != p.stem else stem,
                       message=f"interrupted when the run store was made anew: it resumes from step {rec['step']}")
            out.append(rec)
    return out


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
           "SqliteRunStore", "StoreUnavailable", "attempt_files", "attempt_path", "fair_order", "file_key",
           "new_run_id", "open_store", "owner_limit_message", "process_alive", "process_start",
           "quota_message", "rebuild_records", "session_quota", "sessions_usage", "store_message",
           "worker_id"]
