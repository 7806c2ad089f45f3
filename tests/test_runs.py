"""Runs as records (tfviz.runs.store / runs / worker / executor): the fair queue and its one-slot
rule, the disk ledger under simultaneous submits, and restart-safety shown by SIGKILLing a real
app-server process and a real worker process (tiny models: seconds)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tfviz.tasks import make_task
from tfviz.train import TrainConfig
from tfviz.train.setup import model_config_for
from tfviz.train.budget import estimate
from tfviz.runs.manager import RunManager
from tfviz.runs.store import JobLimitError, NewRun, Quota, QuotaError, SqliteRunStore

REPO = Path(__file__).resolve().parents[1]
TASK = {"name": "copy", "arch": "decoder", "n_symbols": 6, "min_len": 2, "max_len": 5, "n_train": 200,
        "n_val": 20, "n_test": 20}
CFG = model_config_for(make_task(TASK), d_model=16, n_heads=2, n_layers=1).to_dict()


def tc(steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=8, lr=3e-3, warmup=1, log_every=1, eval_every=0,
                       eval_examples=10, snapshot_every=max(1, steps // 4), checkpoint_every=0)


def new(store, owner, run_id=None, t=None):
    run_id = run_id or f"{owner}-{t or time.monotonic_ns()}"
    store.insert([NewRun(run_id, owner, run_id, {"task": TASK}, 10)])
    return run_id


def test_fair_queue_one_slot_per_session_while_another_waits(tmp_path):
    """Two slots: A's second run starts only while nobody else waits; once B queues, A's newest
    running run is told to pause (its worker checkpoints it and queues it again), B goes first;
    the teacher's "start next" puts a run at the front."""
    store = SqliteRunStore(tmp_path / "runs.sqlite", lease_s=60)
    store.set_slots(2)
    a1, a2 = new(store, "a", "a1"), new(store, "a", "a2")
    assert store.claim("w1")["id"] == a1 and store.claim("w2")["id"] == a2  # nobody else waits
    assert store.renew(a1, "w1") is None and store.renew(a2, "w2") is None
    b1 = new(store, "b", "b1")
    assert store.claim("w3") is None  # both slots are A's
    assert store.renew(a1, "w1") is None  # the older keeps training
    assert store.renew(a2, "w2") == "pause"  # the newer gives its slot
    store.requeue(a2, "w2", step=4, checkpoint=str(tmp_path / "a2.safetensors"))
    assert store.queue_order() == [b1, a2]  # B has nothing running: B first
    assert store.claim("w2")["id"] == b1
    rec = store.get(a2)
    assert rec["state"] == "queued" and rec["resume_from"] == str(tmp_path / "a2.safetensors")
    c1, c2 = new(store, "c", "c1"), new(store, "c", "c2")
    assert store.queue_order() == [c1, a2, c2]
    store.move_to_front(c2)
    assert store.queue_order()[0] == c2
    assert store.request_stop(c1) is True and store.get(c1)["state"] == "stopped"
    assert store.request_stop(b1) is True and store.renew(b1, "w2") == "stop"
    with pytest.raises(JobLimitError, match="the limit is 1 per session"):  # c2 is still queued
        store.insert([NewRun("c3", "c", "c3", {}, 1)], per_owner=1)


def test_a_run_whose_worker_stopped_renewing_is_queued_again(tmp_path):
    store = SqliteRunStore(tmp_path / "runs.sqlite", lease_s=0.5)
    store.set_slots(1)
    run = new(store, "a")
    store.claim("dead-worker")
    store.progress(run, "dead-worker", step=7, checkpoint=str(tmp_path / "x.safetensors"))
    time.sleep(0.6)
    rec = store.claim("w2")  # the dead worker's run, back in the queue and claimed again
    assert rec["id"] == run and rec["attempts"] == 2 and rec["resume_from"] == str(tmp_path / "x.safetensors")
    assert store.renew(run, "dead-worker") == "lost"
    store.finish(run, "dead-worker", "done")  # a late word from the old worker changes nothing
    assert store.get(run)["state"] == "running"


def test_simultaneous_submits_cannot_pass_the_quota_together(tmp_path):
    """8 sessions press Start at the same moment under a quota with room for two checkpoints:
    exactly two are queued (the estimate is reserved in the transaction that queues the run); an
    upload meanwhile meets the same ledger; the bytes come back when a run ends."""
    from tfviz.model.families import config_from_dict

    store = SqliteRunStore(tmp_path / "runs.sqlite")
    need = estimate(config_from_dict(CFG), tc(5)).checkpoint
    quota = Quota(limit=lambda: int(2.5 * need), usage=lambda: 0)
    runs = RunManager(store, None, max_concurrent=1, quota=quota)
    barrier, results = threading.Barrier(8), []

    def press(i):
        barrier.wait()
        try:
            results.append(runs.submit(CFG, TASK, tc(5), owner=f"{i:012x}",
                                       checkpoint=tmp_path / f"s{i}.safetensors"))
        except QuotaError as e:
            results.append(e)

    threads = [threading.Thread(target=press, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    queued = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, QuotaError)]
    assert len(queued) == 2 and len(refused) == 6
    assert "space for uploads and trained models is full" in str(refused[0])
    assert store.reserved() == 2 * need
    with pytest.raises(QuotaError):  # an upload shares the ledger
        store.reserve("upload", need, quota, "mine.safetensors")
    runs.stop(queued[0])  # ended: its reservation is released
    assert store.reserved() == need
    store.reserve("upload", need, quota, "mine.safetensors")


def _env(tmp_path) -> dict[str, str]:
    return {**os.environ, "TFVIZ_CHECKPOINT_DIR": str(tmp_path), "TFVIZ_CHECKPOINT_SECONDS": "0.3",
            "TFVIZ_RUN_LEASE_S": "1.5", "TFVIZ_WORKER_IDLE_S": "20", "TFVIZ_MAX_JOBS": "1",
            "TFVIZ_JOBS_PER_SESSION": "3", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


# The app's own manager (ui.jobs.job_manager: the run store of TFVIZ_CHECKPOINT_DIR, worker
# processes), in a process of its own: submits what argv asks, prints the run ids, then serves.
SERVER = """
import json, sys, time
from ui.jobs import job_manager
m = job_manager()
ids = [m.submit(json.loads(sys.argv[1]), json.loads(sys.argv[2]), t, owner="0123456789ab",
                name=f"run{t['steps']}") for t in json.loads(sys.argv[3])]
print(json.dumps(ids), flush=True)
time.sleep(600)
"""


def _server(tmp_path, steps: list[int]) -> tuple[subprocess.Popen, list[str]]:
    p = subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(CFG), json.dumps(TASK),
                          json.dumps([tc(s).to_dict() for s in steps])], cwd=REPO, env=_env(tmp_path),
                         stdout=subprocess.PIPE, text=True)
    return p, json.loads(p.stdout.readline() or "[]")


def _done(store, run_id) -> bool:
    rec = store.get(run_id)
    assert rec["state"] != "failed", rec["error"]
    return rec["state"] == "done"


def _wait(predicate, timeout=240.0):
    deadline = time.monotonic() + timeout  # a deadline, not a speed assertion (a loaded 2-core CI)
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_sigkill_of_the_server_and_its_worker_then_a_restart_resumes_every_run(tmp_path):
    """kill -9 of the app-server process and of the worker training a run (everything dies, as
    in a reboot), then a new server: the finished run is listed as it was, the queued one still
    queued (then trained), the interrupted one resumes from its last checkpoint and ends with
    exactly its number of steps; no temp file is left."""
    store = SqliteRunStore(tmp_path / "runs" / "runs.sqlite")
    server, (short, long_, queued) = _server(tmp_path, [2, 800, 6])
    try:
        _wait(lambda: _done(store, short))
        before = store.get(short)
        _wait(lambda: store.get(long_)["state"] == "running" and store.get(long_)["checkpoint"] is not None
              and store.get(long_)["step"] > 0)
        worker = int(store.get(long_)["worker"].split(":")[1])
        server.kill()
        os.kill(worker, signal.SIGKILL)  # its worker too: a run interrupted mid-training
        server.wait(30)
        killed_at = store.get(long_)["step"]
        assert store.get(long_)["state"] == "running" and 0 < killed_at < 800
        assert store.get(queued)["state"] == "queued"
    finally:
        server.kill()
    server, _ = _server(tmp_path, [])  # the restart
    try:
        _wait(lambda: _done(store, queued))
        rec = store.get(long_)
        assert rec["state"] == "done" and rec["step"] == 800 and rec["attempts"] == 2
        steps = [h["step"] for h in rec["history"]]
        assert steps == sorted(steps) and steps[-1] == 800  # one curve, continued
        assert store.get(short) == before  # the finished run, as it was
        from tfviz.train.checkpoint import load_checkpoint

        assert load_checkpoint(rec["checkpoint"]).step == 800
        assert not list(Path(rec["checkpoint"]).parent.glob(".*.tmp"))
    finally:
        server.kill()
        server.wait(30)


def test_a_session_holding_two_slots_pauses_its_newest_for_a_waiting_session(tmp_path):
    """Real workers (threads here: the same ``worker.run_one``): A trains two runs on both slots;
    B submits one; A's newest is checkpointed and queued again, B's trains; stopped, A's paused
    run keeps its checkpoint to resume from."""
    from tfviz.runs.executor import ThreadExecutor

    store = SqliteRunStore(tmp_path / "runs.sqlite", lease_s=10)
    executor = ThreadExecutor(store.path, workers=2, idle_s=2.0)
    runs = RunManager(store, executor, max_concurrent=2)
    try:
        a1, a2 = (runs.submit(CFG, TASK, tc(100_000), owner="a", checkpoint=tmp_path / f"a{i}")
                  for i in (1, 2))
        _wait(lambda: store.get(a1)["state"] == store.get(a2)["state"] == "running"
              and store.get(a2)["step"] > 0)
        b1 = runs.submit(CFG, TASK, tc(100_000), owner="b", checkpoint=tmp_path / "b1")
        _wait(lambda: store.get(b1)["state"] == "running")
        rec = store.get(a2)
        assert store.get(a1)["state"] == "running" and rec["state"] == "queued"
        assert "paused to give another session's waiting run a slot" in rec["message"]
        assert rec["resume_from"] and Path(rec["resume_from"]).is_file() and rec["step"] > 0
    finally:
        runs.shutdown(60)
        executor.shutdown()
