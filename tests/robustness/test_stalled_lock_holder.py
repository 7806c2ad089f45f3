"""Issue 40, item 3 (S5-7): a worker frozen (SIGSTOP) while it holds the run store's write lock.

Every Start was refused for as long as it stayed frozen, "locked by another program" — the other
program being tfviz's own worker. Now the refusal names it, and the supervisor ends it (a stopped
process can be killed; SQLite's lock goes with it): its run goes back to the queue (it resumes from
its last checkpoint) and Starts succeed again.

Real SQLite, a real process that claims a run as a worker does and then holds ``BEGIN IMMEDIATE``
(its command line a worker's: ``... -m tfviz worker --db DB``), a real SIGSTOP.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfviz.runs.executor import LocalProcessExecutor
from tfviz.runs.store import NewRun, SqliteRunStore, StoreUnavailable, lock_holders

REPO = Path(__file__).resolve().parents[2]

HOLDER = """
import sqlite3, sys, time
sys.path.insert(0, {repo!r})
from tfviz.runs.store import SqliteRunStore, worker_id
db = sys.argv[sys.argv.index('--db') + 1]
s = SqliteRunStore(db, rebuild_from=[])
r = s.claim(worker_id())
c = sqlite3.connect(db, isolation_level=None)
c.execute('BEGIN IMMEDIATE')
c.execute("INSERT OR REPLACE INTO settings VALUES ('held', '1')")
print('holding', r['id'], flush=True)
time.sleep(3600)
"""

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")


def frozen_holder(tmp_path: Path, db: Path) -> subprocess.Popen:
    log = tmp_path / "holder.log"
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO)), "-m", "tfviz", "worker",
                              "--db", str(db)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    end = time.monotonic() + 120
    while "holding" not in log.read_text():
        assert p.poll() is None and time.monotonic() < end, log.read_text()
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGSTOP)
    return p


def new_store(db: Path) -> SqliteRunStore:
    store = SqliteRunStore(db, busy_s=1.0, rebuild_from=[])
    store.set_slots(1)
    return store


def test_a_frozen_worker_holding_the_lock_is_named_then_ended_and_starts_succeed(tmp_path):
    db = tmp_path / "runs.sqlite"
    store = new_store(db)
    store.insert([NewRun(id="r1", owner="a", name="r1", spec={}, total_steps=100)])
    holder = frozen_holder(tmp_path, db)
    try:
        assert lock_holders(db) == [holder.pid]
        with pytest.raises(StoreUnavailable, match=rf"locked by tfviz's own worker \(process {holder.pid}\), "
                                                   r"which is stopped \(frozen\)"):
            store.insert([NewRun(id="r2", owner="b", name="r2", spec={}, total_steps=10)])
        assert LocalProcessExecutor(db, workers=0, warm=0).fence() == [holder.pid]
        holder.wait(timeout=60)
        assert holder.returncode == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    store.insert([NewRun(id="r2", owner="b", name="r2", spec={}, total_steps=10)])  # a Start succeeds
    states = {r["id"]: r["state"] for r in store.list()}
    assert states == {"r1": "queued", "r2": "queued"}, states  # r1 back in the queue to resume
    assert "held" not in {r["key"] for r in store._read().execute("SELECT key FROM settings")}  # rolled back


def test_fence_leaves_a_running_worker_and_other_programs_alone(tmp_path):
    """Only a *stopped* tfviz worker of this store is ended: the same holder running, or a stopped
    process that is not a worker, is not."""
    db = tmp_path / "runs.sqlite"
    store = new_store(db)
    store.insert([NewRun(id="r1", owner="a", name="r1", spec={}, total_steps=100)])
    holder = frozen_holder(tmp_path, db)
    try:
        os.kill(holder.pid, signal.SIGCONT)  # running: a worker inside its transaction
        time.sleep(0.2)
        assert LocalProcessExecutor(db, workers=0, warm=0).fence() == []
        assert LocalProcessExecutor(tmp_path / "other.sqlite", workers=0, warm=0).fence() == []
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


def test_the_supervisor_ends_the_frozen_holder_and_a_start_then_succeeds(tmp_path):
    """The app's manager (supervising, as the server's is): a Start refused while the frozen
    worker holds the lock succeeds within the supervisor's next ticks (measured: printed)."""
    from tfviz.runs.manager import RunManager

    db = tmp_path / "runs.sqlite"
    store = new_store(db)
    store.insert([NewRun(id="r1", owner="a", name="r1", spec={}, total_steps=100)])
    holder = frozen_holder(tmp_path, db)
    t0 = time.monotonic()
    manager = RunManager(store, LocalProcessExecutor(db, workers=0, warm=0), supervise=True)
    try:
        refusals = []
        while True:
            try:
                store.insert([NewRun(id="r2", owner="b", name="r2", spec={}, total_steps=10)])
                break
            except StoreUnavailable as e:
                refusals.append(str(e))
                assert time.monotonic() - t0 < 120, ("the frozen worker was never ended", refusals[-3:])
        # a Start while it is frozen names it (one as it is being ended may not find it any more)
        assert not refusals or "tfviz's own worker" in refusals[0], refusals
        print(f"a Start succeeded {time.monotonic() - t0:.1f} s after the worker froze (busy_s 1)")
        holder.wait(timeout=60)
        assert holder.returncode == -signal.SIGKILL
        end = time.monotonic() + 60  # the next read after the worker's end puts its run back
        while {r["id"]: r["state"] for r in store.list()}["r1"] != "queued":
            assert time.monotonic() < end, store.list()
            time.sleep(0.3)
    finally:
        manager.close()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
