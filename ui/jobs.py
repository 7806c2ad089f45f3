"""The one run manager of this server, shared by every session.

A run is a record in the run store of the checkpoint folder (``tfviz.runs.store``: SQLite, one
file), trained by worker processes (``python -m tfviz worker``), never by the web server's
threads; a page only reads records. Each run is owned by the session id that started it, so a
student sees their own runs after a reload (the id lives in the URL), and after a restart of the
server (the records and checkpoints are on disk; interrupted runs resume). The manager is made
when the server starts (``ui.server.lifespan``) and supervises the workers from then on; the
sessions of one browser count as one student (``ui.session.client_id``). A fault of the store
itself (locked, read-only, full disk, unreadable) is a ``StoreUnavailable`` whose sentence the
pages show (``store_trouble``).
"""
from __future__ import annotations

import threading

import streamlit as st

from .models import session_dir
from .session import client_id, session_id

_MANAGERS: dict[str, object] = {}  # run store path -> its manager (one folder at a time)
_LOCK = threading.Lock()


def job_manager():
    """The manager of this checkpoint folder's run store (a test pointing TFVIZ_CHECKPOINT_DIR
    elsewhere gets that folder's; the previous folder's workers are let go)."""
    from tfviz import paths

    db = str(paths.runs_db())
    with _LOCK:
        manager = _MANAGERS.get(db)
        if manager is None:
            for old in _MANAGERS.values():  # one folder's workers at a time
                old.close()  # its supervision first: it would start them again
                threading.Thread(target=old.executor.shutdown, daemon=True).start()
            _MANAGERS.clear()
            manager = _MANAGERS[db] = _new_manager(db)
    warm = getattr(manager.executor, "start", None)  # an executor without a pool has none
    if warm is not None:
        warm()  # a warm worker while pages are used (an idle one exits after a while)
    return manager


def _new_manager(db: str):
    from tfviz import limits
    from tfviz.classroom import disk
    from tfviz.device import cpu_count
    from tfviz.runs.executor import LocalProcessExecutor
    from tfviz.runs.manager import RunManager
    from tfviz.runs.store import open_store

    # At most TFVIZ_MAX_JOBS trainings at once (the rest queue, fairly by session), each session
    # at most TFVIZ_JOBS_PER_SESSION, each run at most TFVIZ_JOB_MAX_MINUTES; the workers share
    # all but one core, so the web server always has a core to answer with. check_budget: a run
    # whose memory (TFVIZ_TRAIN_MEMORY_MB) or checkpoint (TFVIZ_CHECKPOINT_MB) would not fit is
    # refused before it is queued; its checkpoint's estimate is reserved in the disk ledger.
    disk.sweep_temp_files(older_than=disk.STARTUP_TEMP_AGE_S)  # what killed writers left
    if limits.ray_address():  # a school's Ray cluster: runs, records and queue live there
        return _ray_manager(limits.ray_address())
    slots = limits.max_jobs()
    executor = LocalProcessExecutor(db, workers=slots, warm=1)
    executor.start()  # a warm worker: Start goes to the first step at once
    manager = RunManager(open_store(db), executor, max_concurrent=slots,
                         torch_threads=max(1, (cpu_count() - 1) // slots),
                         per_owner=limits.jobs_per_session(), max_seconds=limits.job_max_seconds(),
                         check_budget=True, quota=disk.quota(), supervise=True)
    # runs queued or interrupted before a restart continue: the supervision (every quarter lease)
    # starts workers for them, with or without anyone on a page
    return manager


def _ray_manager(address: str):
    """Runs on the Ray cluster at ``address`` (``tfviz.runs.ray``, docs/deploy.md): the run
    store is the cluster's actor (the quota's ledger too: ``disk.ledger``), so every app server
    shows the same runs; a run trains in a Ray task (a GPU each where the cluster has them) and
    outlives this server. The same limits as on one machine; as many runs at once as the cluster
    has slots for."""
    from tfviz import limits
    from tfviz.classroom import disk
    from tfviz.interop import from_pretrained
    from tfviz.runs.ray import connect
    from tfviz.runs.manager import RunManager

    store, executor = connect(address, open_folder=from_pretrained)
    manager = RunManager(store, executor, max_concurrent=executor.capacity(),
                         per_owner=limits.jobs_per_session(), max_seconds=limits.job_max_seconds(),
                         check_budget=True, quota=disk.quota())
    executor.submit("")  # runs queued or interrupted while no server was up: continue them
    return manager


def my_jobs():
    """This session's runs (StoreUnavailable: the store's fault, as a sentence)."""
    return job_manager().jobs(owner=session_id())


def store_trouble(e: Exception) -> str:
    """The sentence a page shows when the run store cannot be used now."""
    return (f"Training is not available right now: {e}. Models you trained before are safe and "
            "listed in the sidebar.")


def trained_dir():
    d = session_dir() / "trained"
    d.mkdir(parents=True, exist_ok=True)
    return d


def housekeeping() -> None:
    """Record this session's visit, and (at most once an hour per server) delete the folders of
    sessions idle for TFVIZ_SESSION_IDLE_DAYS (never one with a running or queued job) and temp
    files killed writers left behind (``tfviz.classroom.disk``)."""
    from tfviz.classroom import disk

    from tfviz.runs.store import StoreUnavailable

    disk.touch(session_id())
    try:
        busy = {r["owner"] for r in job_manager().store.list(active_only=True) if r["owner"]}
    except StoreUnavailable:
        return  # who has a running job cannot be known now: nothing expires this time
    disk.maintain(keep=busy, store=job_manager().store)
