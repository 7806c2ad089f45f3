"""The one training job manager of this server, shared by every session.

Jobs run in background threads (tfviz.train.jobs never touches Streamlit); a page only reads
their snapshots. Each job is owned by the session id that started it, so a student sees their
own jobs, also after a reload (the id lives in the URL).
"""
from __future__ import annotations

import threading

import streamlit as st

from .models import session_dir
from .session import session_id


@st.cache_resource
def job_manager():
    from tfviz.device import cpu_count
    from tfviz.train.jobs import JobManager

    from tfviz import limits
    from tfviz.interop import from_pretrained

    # At most TFVIZ_MAX_JOBS trainings at once (the rest queue, fairly by session), each session
    # at most TFVIZ_JOBS_PER_SESSION, each run at most TFVIZ_JOB_MAX_MINUTES; torch uses all but
    # one core, so the web server always has a core to answer with. check_budget: a run whose
    # memory (TFVIZ_TRAIN_MEMORY_MB) or checkpoint (TFVIZ_CHECKPOINT_MB) would not fit is refused
    # before it is queued, with the estimate and a batch size that fits (tfviz.train.budget).
    if limits.ray_address():  # a school's Ray cluster: runs, records and queue live there
        return _ray_manager(limits.ray_address(), from_pretrained)
    threading.Thread(target=_warm_up, daemon=True, name="tfviz-warm-up").start()
    return JobManager(max_concurrent=limits.max_jobs(), torch_threads=max(1, cpu_count() - 1),
                      per_owner=limits.jobs_per_session(), max_seconds=limits.job_max_seconds(),
                      check_budget=True, open_folder=from_pretrained)


def _ray_manager(address: str, open_folder):
    """Runs on the Ray cluster at ``address`` (``tfviz.train.ray_runs``, docs/deploy.md): the run
    store is the cluster's actor, so every app server of the school shows the same runs; a run
    trains in a Ray task (a GPU each where the cluster has them) and outlives this server. The
    same limits as on one machine; as many runs at once as the cluster has slots for."""
    from tfviz import limits
    from tfviz.classroom import disk
    from tfviz.train.ray_runs import connect
    from tfviz.train.runs import RunManager
    from tfviz.train.store import Quota

    store, executor = connect(address, open_folder=open_folder)
    return RunManager(store, executor, max_concurrent=executor.capacity(),
                      per_owner=limits.jobs_per_session(), max_seconds=limits.job_max_seconds(),
                      check_budget=True, quota=Quota(limits.disk_quota_bytes, disk.usage))


def _warm_up() -> None:
    """The first AdamW a process builds imports torch._dynamo: 2.4 s of CPU (20 s of wall time
    at load average 14), all of it between a first Start and its first loss point. Done here,
    in the background, when the Train page first opens."""
    import torch

    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])


def my_jobs():
    return job_manager().jobs(owner=session_id())


def trained_dir():
    d = session_dir() / "trained"
    d.mkdir(parents=True, exist_ok=True)
    return d


def housekeeping() -> None:
    """Record this session's visit, and (at most once an hour per server) delete the folders of
    sessions idle for TFVIZ_SESSION_IDLE_DAYS (never one with a running or queued job) and temp
    files killed writers left behind (``tfviz.classroom.disk``)."""
    from tfviz.classroom import disk

    disk.touch(session_id())
    busy = {j.owner for j in job_manager().jobs() if j.owner and j.snapshot().active}
    disk.maintain(keep=busy)
