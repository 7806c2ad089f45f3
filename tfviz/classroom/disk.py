"""Students' files on a shared server: private folders, a server-wide quota, expiry of idle
sessions, and the sweep of temp files a killed process left behind.

    checkpoints/user/<sid>/          0700 (files 0600): no other local user lists or reads them
        .seen                        touched on each visit (at most once a minute): last activity
        trained/*.safetensors        the session's trained models
        uploaded/*.safetensors       its uploads

* ``check_room(need)``: every session's files together stay under ``TFVIZ_DISK_QUOTA_MB``
  (published and shipped models do not count); beyond it an upload or a training is refused with
  a message saying how full the space is. Files about to be written count too: the run store's
  ledger (``tfviz.runs.store``) holds each queued or running training's estimated checkpoint and
  each upload being checked, reserved in one transaction (``reserve``, ``quota()``), so two
  sessions cannot both pass the quota at the same moment. One session's uploads also stay under
  ``TFVIZ_SESSION_UPLOAD_MB`` (``tfviz.classroom.uploads``).
* ``expire_idle()``: a session folder whose last activity is older than
  ``TFVIZ_SESSION_IDLE_DAYS`` is deleted (not one with a running job); published models live in
  ``published/`` and never expire.
* ``sweep_temp_files()``: hidden ``*.tmp`` files (atomic writes, uploads and publishing being
  checked) older than ``TEMP_AGE_S`` are deleted: a live writer finishes in seconds.
* ``maintain()``: both, at most once per ``MAINTAIN_EVERY_S`` per process (the app calls it on
  every page run; it costs nothing in between).
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import limits, paths
from ..runs.store import (ACTIVE, ATTEMPTS_DIR, Quota, QuotaError, file_key, open_store, quota_message,
                           session_quota, sessions_usage)

MB = 2**20
SEEN = ".seen"
TEMP_AGE_S = 600.0
STARTUP_TEMP_AGE_S = 60.0  # at a server's start: a writer still alive finishes within this
MAINTAIN_EVERY_S = 3600.0
TOUCH_EVERY_S = 60.0


def private_dir(folder: Path) -> Path:
    """``folder`` (under the sessions folder), created 0700 along with its parents below it."""
    root = paths.sessions_dir()
    folder = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    here = root
    for part in folder.relative_to(root).parts:
        here = here / part
        try:
            here.mkdir(mode=0o700)
        except FileExistsError:
            pass
        os.chmod(here, 0o700)
    return folder


def usage() -> int:
    """Bytes of every session's files together."""
    return sessions_usage()


def quota() -> Quota:
    """The server-wide quota as the run store's ledger checks it: the limit, and the session
    folders' bytes on disk (reservations are added by the store)."""
    return session_quota()


def ledger():
    """The run store whose ledger the quota counts: this checkpoint folder's, or on a school's Ray
    cluster (``TFVIZ_RAY_ADDRESS``) the cluster's one, which every app server shares
    (``tfviz.runs.ray``): trainings and uploads of every server reserve in one place."""
    address = limits.ray_address()
    if address:
        from ..runs.ray import connect

        return connect(address)[0]
    return open_store()


def check_room(need: int, what: str = "this file") -> None:
    """QuotaError unless ``need`` more bytes fit in the server-wide quota, counting the files on
    disk and the bytes reserved for files being written (trainings, uploads)."""
    limit, used = limits.disk_quota_bytes(), usage() + ledger().reserved()
    if used + need > limit:
        raise QuotaError(quota_message(used, limit, need, what))


@contextmanager
def reserve(need: int, what: str, path: Path | None = None) -> Iterator[None]:
    """Hold ``need`` bytes of the quota (QuotaError when they do not fit) while a file is written
    (``path``: the file they are for, counted once it exists); released afterwards, when the file
    counts itself. The key names this process (host, pid, start time): if it dies before the
    release, the next reader of the ledger drops the row (``tfviz.runs.store``)."""
    store, key = ledger(), file_key()
    store.reserve(key, need, quota(), what, None if path is None else str(path))
    try:
        yield
    finally:
        store.release(key)


def touch(sid: str) -> None:
    """Record a visit of session ``sid`` (its folder's ``.seen``), if it has a folder."""
    folder = paths.session_dir(sid)
    if not folder.is_dir():
        return
    seen = folder / SEEN
    try:
        if time.time() - seen.stat().st_mtime < TOUCH_EVERY_S:
            return
    except FileNotFoundError:
        pass
    try:
        seen.touch()
    except OSError:
        pass


def last_activity(folder: Path) -> float:
    """The newest modification time of the folder, its ``.seen`` and any file in it."""
    newest = 0.0
    for dirpath, _, files in os.walk(folder):
        for name in [".", *files]:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                pass
    return newest


def expire_idle(keep: Iterable[str] = (), now: float | None = None) -> list[str]:
    """Delete the folders of sessions idle for longer than ``TFVIZ_SESSION_IDLE_DAYS`` (except the
    ids in ``keep``: sessions with a running or queued job) -> the ids removed."""
    idle = limits.idle_seconds()
    root = paths.sessions_dir()
    if idle is None or not root.is_dir():
        return []
    now, keep, removed = time.time() if now is None else now, set(keep), []
    for folder in root.iterdir():
        if (not folder.is_dir() or folder.is_symlink() or folder.name in keep
                or not paths.SESSION_ID.fullmatch(folder.name)):
            continue
        if now - last_activity(folder) > idle:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed


def sweep_temp_files(folders: Iterable[Path] | None = None, older_than: float = TEMP_AGE_S,
                     now: float | None = None) -> list[Path]:
    """Delete hidden ``.*.tmp`` files older than ``older_than`` seconds in ``folders`` (default: the
    checkpoint folder, published/ and every session's folders) -> the files removed."""
    if folders is None:
        folders = [paths.checkpoint_dir(), paths.published_dir()]
        root = paths.sessions_dir()
        if root.is_dir():
            folders += [Path(d) for d, _, _ in os.walk(root)]
    now, removed = time.time() if now is None else now, []
    for folder in folders:
        try:
            entries = list(Path(folder).glob(".*.tmp"))
        except OSError:
            continue
        for tmp in entries:
            try:
                if tmp.is_file() and now - tmp.lstat().st_mtime > older_than:
                    tmp.unlink()
                    removed.append(tmp)
            except OSError:
                pass
    return removed


_last_maintained = [0.0]
_maintain_lock = threading.Lock()


def sweep_attempts(store=None, older_than: float = TEMP_AGE_S, now: float | None = None) -> list[Path]:
    """Delete attempt files (``.attempts/`` beside trained checkpoints: ``tfviz.runs.store``)
    that no active run names and that nobody wrote for ``older_than`` seconds: those of workers
    killed after they lost their run. Nothing when the store cannot be read."""
    from ..runs.store import StoreUnavailable

    try:
        named = {p for r in (store or ledger()).list(active_only=True)
                 for p in (r.get("checkpoint"), r.get("resume_from")) if p and r["state"] in ACTIVE}
    except (StoreUnavailable, OSError):
        return []
    folders = [paths.runs_dir() / ATTEMPTS_DIR]
    root = paths.sessions_dir()
    if root.is_dir():
        folders += [Path(d) for d, _, _ in os.walk(root) if Path(d).name == ATTEMPTS_DIR]
    now, removed = time.time() if now is None else now, []
    for folder in folders:
        try:
            files = list(folder.glob("*.safetensors"))
        except OSError:
            continue
        for f in files:
            try:
                if str(f) not in named and now - f.lstat().st_mtime > older_than:
                    f.unlink()
                    f.with_suffix(".json").unlink(missing_ok=True)
                    removed.append(f)
            except OSError:
                pass
    return removed


def maintain(keep: Iterable[str] = (), force: bool = False, store=None) -> bool:
    """Expire idle sessions and sweep temp files, at most once per ``MAINTAIN_EVERY_S`` in this
    process (``force``: now). True when it ran."""
    now = time.monotonic()
    with _maintain_lock:
        if not force and _last_maintained[0] and now - _last_maintained[0] < MAINTAIN_EVERY_S:
            return False
        _last_maintained[0] = now
    expire_idle(keep)
    sweep_temp_files()
    sweep_attempts(store)
    return True
