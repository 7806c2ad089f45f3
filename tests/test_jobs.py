"""JobManager: background training threads, queueing, stopping, failures."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from tfviz.train.checkpoint import load_checkpoint
from tfviz.tasks import make_task
from tfviz.runs import JobManager
from tfviz.train import TrainConfig
from tfviz.train.setup import model_config_for

from stand_ins import ExplodingTask


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def task():
    return make_task("copy", arch="decoder", n_symbols=6, min_len=2, max_len=5,
                     n_train=300, n_val=20, n_test=20)


@pytest.fixture
def manager():
    jobs = JobManager(max_concurrent=2, torch_threads=1)
    yield jobs
    jobs.shutdown(timeout=30)


def mcfg(task):
    return model_config_for(task, d_model=16, n_heads=2, n_layers=1, pos="rope")


def tcfg(steps, **kw):
    return TrainConfig(**{**dict(steps=steps, batch_size=8, lr=3e-3, warmup=1, log_every=1, eval_every=0,
                                 eval_examples=10, snapshot_every=5, checkpoint_every=0), **kw})


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_two_jobs_stop_one_the_other_finishes(manager, task, tmp_path):
    long = manager.submit(mcfg(task), task, tcfg(100_000), checkpoint=tmp_path / "long", name="long")
    short = manager.submit(mcfg(task), task, tcfg(25), checkpoint=tmp_path / "short", owner="alice")
    assert manager.get(long).snapshot().state == manager.get(short).snapshot().state == "running"
    wait_for(lambda: manager.get(long).snapshot().step >= 3)
    assert manager.stop(long) is True
    assert manager.get(long).wait(30) and manager.get(short).wait(30)

    a, b = manager.get(long).snapshot(), manager.get(short).snapshot()
    assert a.state == "stopped" and a.error is None and 3 <= a.step < 100_000 and a.name == "long"
    assert load_checkpoint(a.checkpoint).train_state.step == a.step  # resumable
    assert b.state == "done" and b.step == 25 and len(b.history) == 25 and b.finished >= b.started
    assert b.latest["step"] == 25 and b.latest_snapshot == 5  # snapshots at steps 0, 5, ..., 25
    snap = manager.get(short).attention_snapshot()
    assert snap.step == 25 and "blocks.0.attn.hook_pattern" in snap.patterns
    assert len(manager.get(short).attention_snapshots()) == 6
    assert load_checkpoint(b.checkpoint).step == 25


def test_concurrency_limit_and_queue_positions(manager, task):
    ids = [manager.submit(mcfg(task), task, tcfg(100_000)) for _ in range(4)]
    states = [manager.get(i).snapshot() for i in ids]
    assert [s.state for s in states] == ["running", "running", "queued", "queued"]
    assert [s.queue_position for s in states] == [None, None, 1, 2]
    assert manager.stop(ids[2]) is True  # a queued job is dropped without running
    third = manager.get(ids[2]).snapshot()
    assert third.state == "stopped" and third.started is None and "before it started" in third.message
    assert manager.get(ids[3]).snapshot().queue_position == 1
    manager.stop(ids[0])
    wait_for(lambda: manager.get(ids[3]).snapshot().state == "running")
    running = [j for j in manager.jobs() if j.snapshot().state == "running"]
    assert len(running) == 2  # never more than max_concurrent
    for i in ids:
        manager.stop(i)
    assert manager.wait_all(30)
    assert {j.snapshot().state for j in manager.jobs()} == {"stopped"}


def test_failing_jobs_report_errors_and_others_go_on(manager, task):
    bad_spec = manager.submit(mcfg(task), {"name": "no-such-task"}, tcfg(5))
    exploding = manager.submit(mcfg(task), ExplodingTask(task), tcfg(5))
    good = manager.submit(mcfg(task), task, tcfg(10))
    assert manager.wait_all(60)
    s1, s2, s3 = (manager.get(i).snapshot() for i in (bad_spec, exploding, good))
    assert s1.state == "failed" and "unknown task 'no-such-task'" in s1.error
    assert s2.state == "failed" and s2.error == "RuntimeError: the data loader exploded"
    assert "Traceback" in manager.get(exploding).traceback
    assert s3.state == "done" and s3.error is None and s3.step == 10


def test_diverged_job_is_failed_with_message(manager, task, monkeypatch):
    import tfviz.train.loop as loop
    monkeypatch.setattr(loop, "token_loss", lambda *a: torch.tensor(float("inf"), requires_grad=True))
    job = manager.submit(mcfg(task), task, tcfg(5))
    assert manager.get(job).wait(30)
    s = manager.get(job).snapshot()
    assert s.state == "failed" and "loss became inf" in s.error


def test_lookup_owners_and_snapshots(manager, task):
    a = manager.submit(mcfg(task), task, tcfg(3), owner="alice")
    b = manager.submit(mcfg(task).to_dict(), task.spec(), tcfg(3).to_dict(), owner="bob")
    assert [j.id for j in manager.jobs(owner="alice")] == [a]
    assert {j.id for j in manager.jobs()} == {a, b}
    with pytest.raises(KeyError, match="no job with id 'nope'"):
        manager.get("nope")
    assert manager.wait_all(30)
    snap = manager.snapshot(b)
    assert snap.state == "done" and snap.owner == "bob" and snap.to_dict()["state"] == "done"
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.state = "running"
    snap.history.clear()  # a copy: the job's own history is untouched
    assert len(manager.snapshot(b).history) == 3
    assert manager.stop(b) is False  # already ended
    manager.remove(b)
    assert [j.id for j in manager.jobs()] == [a]


def test_resume_job_from_checkpoint(manager, task, tmp_path):
    first = manager.submit(mcfg(task), task, tcfg(6), checkpoint=tmp_path / "r")
    assert manager.get(first).wait(30)
    second = manager.submit(None, task, tcfg(10), checkpoint=tmp_path / "r", resume=tmp_path / "r")
    assert manager.get(second).wait(30)
    s = manager.snapshot(second)
    assert s.state == "done" and [h["step"] for h in s.history] == list(range(1, 11))
    assert load_checkpoint(tmp_path / "r").step == 10


def test_manager_validates_and_caps_threads():
    with pytest.raises(ValueError, match="max_concurrent"):
        JobManager(max_concurrent=0)
    JobManager(torch_threads=1)
    assert torch.get_num_threads() == 1


# ------------------------------------------------------------------ issue 34: one manager
def test_the_library_manager_is_the_run_manager_over_an_embedded_store(task):
    """``JobManager`` is ``RunManager`` (one queue, one limit, one fair share, one restart): its runs
    are records in a SQLite file of a temporary folder of its own, removed with the manager; a
    run given no checkpoint saves into that folder."""
    import gc
    import weakref

    from tfviz.runs import RunManager
    from tfviz.runs.executor import InProcessExecutor
    from tfviz.runs.store import SqliteRunStore

    jobs = JobManager(torch_threads=1)
    assert isinstance(jobs, RunManager) and isinstance(jobs.store, SqliteRunStore)
    assert isinstance(jobs.executor, InProcessExecutor)
    folder = jobs.store.path.parent
    job = jobs.get(jobs.submit(mcfg(task), task, tcfg(4)))
    assert job.wait(30) and job.snapshot().state == "done"
    path = job.snapshot().checkpoint
    assert path and Path(path).parent == folder / "checkpoints" and load_checkpoint(path).step == 4
    assert jobs.store.get(job.id)["state"] == "done"  # the record the app's pages would read
    gone = weakref.ref(jobs)
    del jobs, job
    gc.collect()
    assert gone() is None and not folder.exists()


def test_live_snapshots_and_stop_at_the_next_step(task):
    """What a record cannot hold stays in memory: the attention snapshots as they are recorded
    (before any checkpoint exists), and a Stop acted on at the next step (not the next heartbeat)."""
    jobs = JobManager(torch_threads=1)
    try:
        job = jobs.get(jobs.submit(mcfg(task), task, tcfg(1_000_000, snapshot_every=2)))
        wait_for(lambda: len(job.attention_snapshots()) >= 3)
        assert job.snapshot().state == "running" and job.snapshot().checkpoint is None  # nothing saved yet
        assert [s.step for s in job.attention_snapshots()[:3]] == [0, 2, 4]
        assert jobs.stop(job.id) is True
        assert job.wait(30)
        s = job.snapshot()
        assert s.state == "stopped" and load_checkpoint(s.checkpoint).train_state.step == s.step
        assert len(job.attention_snapshots()) == len(load_checkpoint(s.checkpoint).snapshots)
    finally:
        jobs.shutdown(30)


def test_a_manager_on_the_same_folder_resumes_what_the_last_one_left(task, tmp_path):
    """Restart, the app's code: a manager whose threads end mid-run leaves the run queued with its
    checkpoint; a new manager on the same folder (another program start) trains it on from there
    to exactly its number of steps."""
    spec = task.spec()
    first = JobManager(torch_threads=1, folder=tmp_path)
    run = first.submit(mcfg(task), spec, tcfg(400, checkpoint_every=20))
    wait_for(lambda: first.get(run).snapshot().step >= 40)
    first.executor.shutdown(30)  # the program ends: its running run is paused and queued again
    left = first.get(run).snapshot()
    assert left.state == "queued" and "paused" in left.message and load_checkpoint(left.checkpoint).step >= 40
    second = JobManager(torch_threads=1, folder=tmp_path)
    try:
        job = second.get(run)
        assert job.wait(120)
        s = job.snapshot()
        assert s.state == "done" and s.step == 400 and [h["step"] for h in s.history] == list(range(1, 401))
        assert second.store.get(run)["attempts"] == 2
    finally:
        second.shutdown(30)


def test_a_job_still_reads_as_before(manager, task):
    """``Job`` (now ``RunJob``) keeps the attributes the threads' job had: state, step, history,
    error, message, checkpoint, result, traceback."""
    job = manager.get(manager.submit(mcfg(task), task, tcfg(3)))
    assert job.wait(30)
    s = job.snapshot()
    assert (job.state, job.step, job.history, job.error, job.message, job.checkpoint) == \
        (s.state, s.step, s.history, s.error, s.message, s.checkpoint)
    assert job.result.status == "done" and job.result.step == 3 and job.traceback is None
