"""Issue 40, item 2 (S5-5): the run store heals from any of its files.

``runs.sqlite-wal`` deleted while a run trained made every new connection fail ("disk I/O
error", SQLITE_IOERR_SHORT_READ): the Train page was an exception box for every session, still
after a server restart, until every worker was stopped by hand (the workers' open connections
kept the deleted file). Now a connection whose ``-wal`` / ``-shm`` is gone or another file, and a
new connection that meets that error, set the store aside and make it anew — from the main file
when SQLite reads it whole (its records as of its last checkpoint: queued runs kept), plus the
checkpoints — and every connection, the workers' included, moves to the new file.

Real SQLite, a real worker process holding its connection (claim, then progress writes until
told to stop), real file damage; the server's store and a restarted server's store asked
after it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfviz.runs.store import NewRun, SqliteRunStore

REPO = Path(__file__).resolve().parents[2]

WORKER = """
import os, sys, time
sys.path.insert(0, {repo!r})
from tfviz.runs.store import SqliteRunStore, worker_id
s = SqliteRunStore({db!r}, rebuild_from=[])
w = worker_id()
r = s.claim(w)
print('claimed', r and r['id'], flush=True)
i = 0
while not os.path.exists({stop!r}) and i < 2000:
    try:
        print('progress', i, s.progress(r['id'], w, attempt=r.get('attempt'), step=i), flush=True)
    except Exception as e:
        print('worker error', type(e).__name__, str(e)[:200], flush=True)
    i += 1
    time.sleep(0.05)
"""


def damage(side: Path, how: str) -> None:
    if how == "delete":
        side.unlink()
    elif how == "truncate":
        with open(side, "r+b") as f:
            f.truncate(0)
    else:
        with open(side, "r+b") as f:
            f.write(os.urandom(4096))


def wait_for(log: Path, text: str, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if log.exists() and text in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in {log.read_text() if log.exists() else 'no log'}")


@pytest.mark.parametrize("side, how", [("-wal", "delete"), ("-shm", "delete"), ("-wal", "truncate"),
                                       ("-shm", "garbage")])
def test_a_damaged_side_file_heals_without_an_error_to_anyone(tmp_path, side, how):
    db, stop, log = tmp_path / "runs.sqlite", tmp_path / "stop", tmp_path / "worker.log"
    server = SqliteRunStore(db, rebuild_from=[])
    server.set_slots(2)
    server.insert([NewRun(id="r1", owner="a", name="r1", spec={}, total_steps=100)])
    server.insert([NewRun(id="q1", owner="a", name="q1", spec={}, total_steps=100)])
    for _ in range(150):  # writes enough for SQLite to checkpoint the WAL into the main file
        server.set_slots(2)
    script = WORKER.format(repo=str(REPO), db=str(db), stop=str(stop))
    with open(log, "w") as out:
        worker = subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(log, "progress 3 True")  # the worker's connection is open and writing
        damage(db.with_name(db.name + side), how)
        seen = []
        for i in range(3):
            for label, store in (("server", server), ("restarted", SqliteRunStore(db, rebuild_from=[]))):
                seen.append({r["id"] for r in store.list()})  # never raises
                store.insert([NewRun(id=f"n{i}{label}", owner="b", name="n", spec={}, total_steps=10)])
            time.sleep(0.2)
        assert all("q1" in ids for ids in seen), seen  # the queued run outlived the damage
        assert {"n2server", "n2restarted"} <= {r["id"] for r in SqliteRunStore(db, rebuild_from=[]).list()}
        before = log.read_text().count("progress")
        wait_for(log, f"progress {before + 3}")  # the worker goes on after the heal, its writes answered
    finally:
        stop.touch()
        worker.wait(timeout=120)
    text = log.read_text()
    assert "worker error" not in text, text[-2000:]
    if how == "delete":  # the store was set aside (kept for a look) and made anew
        assert list(tmp_path.glob("runs.sqlite.damaged-*")), sorted(os.listdir(tmp_path))
        notes = " ".join(SqliteRunStore(db, rebuild_from=[]).notices())
        assert (f"its runs.sqlite{side} file was deleted or replaced while it was open" in notes
                or "disk I/O error" in notes), notes  # found by an open connection, or a new one
        assert "its records as of its last save were kept" in notes, notes


HOLDER = """
import os, sys, time
sys.path.insert(0, {repo!r})
from tfviz.runs.store import SqliteRunStore
s = SqliteRunStore({db!r}, rebuild_from=[])
i = 0
while not os.path.exists({stop!r}) and i < 4000:
    try:
        s.set_slots(1)
        print('wrote', i, flush=True)
    except Exception as e:
        print('holder error', type(e).__name__, str(e)[:200], flush=True)
    i += 1
    time.sleep(0.05)
"""


def test_the_train_page_shows_no_exception_after_the_wal_is_deleted(classroom, tmp_path):
    """S5-5 through the app: another process (a worker) keeps the store open and writing, its
    -wal is deleted; the Train page, rerun and opened in a new session, renders without an
    exception box (was: "disk I/O error" for every session)."""
    from apptest_helpers import open_page, problems

    from tfviz import paths

    at = open_page("train")
    db = paths.runs_db()
    assert db.exists()
    stop, log = tmp_path / "stop", tmp_path / "holder.log"
    with open(log, "w") as out:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO), db=str(db), stop=str(stop))],
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(log, "wrote 3")
        db.with_name(db.name + "-wal").unlink()
        at.run()
        assert not problems(at), problems(at)
        again = open_page("train")
        assert not problems(again), problems(again)
        before = log.read_text().count("wrote")
        wait_for(log, f"wrote {before + 2}")
    finally:
        stop.touch()
        holder.wait(timeout=120)
    assert "holder error" not in log.read_text(), log.read_text()[-2000:]
