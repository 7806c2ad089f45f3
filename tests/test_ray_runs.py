"""Runs on a Ray cluster (tfviz.runs.ray, TFVIZ_RAY_ADDRESS): a local Ray head started by the
test on this machine's loopback, joined by this process and by other processes as app servers
(tests/ray_driver.py). A run trains through Ray and finishes; two app servers see the same runs;
a run survives the app server that started it (kill -9) and the Ray worker that trained it.

Skipped, with the reason, where Ray is not installed (it is in requirements-dev.txt)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_driver import MODEL, TASK, model_config, train_config

try:
    import ray
except ImportError:  # the cluster tests skip, with this reason; one machine's test still runs
    ray = None

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("ray_driver.py")
DEADLINE_S = 180  # generous: a Ray worker imports torch first, on a busy 2-core machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Ray head on 127.0.0.1 (2 CPUs, no dashboard) in its own temp folder
    (``ray_runs.LocalCluster``), and this process joined to it as a driver; the run store's file
    and the checkpoints in temp folders."""
    if ray is None:
        pytest.skip("Ray is not installed (pip install -r requirements-dev.txt)")
    from tfviz.runs.ray import LocalCluster

    temp = tmp_path_factory.mktemp("ray-runs")
    env = {"TFVIZ_CHECKPOINT_DIR": str(temp / "ck"), "TFVIZ_RAY_STORE_DIR": str(temp / "store"),
           "TFVIZ_RUN_LEASE_S": "2", "TFVIZ_CHECKPOINT_SECONDS": "0.3", "RAY_USAGE_STATS_ENABLED": "0",
           "OMP_NUM_THREADS": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    head = LocalCluster(num_cpus=2)
    if not Path(head.ray_bin).exists():
        pytest.skip("the `ray` command is not installed beside this Python")
    try:
        with head as address:
            ray.init(address=address, namespace="tfviz", log_to_driver=False, configure_logging=False)
            try:
                yield address, temp
            finally:
                ray.shutdown()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def runs(cluster):
    from tfviz.runs.ray import connect
    from tfviz.runs.manager import RunManager

    store, executor = connect(cluster[0])
    return RunManager(store, executor, max_concurrent=executor.capacity(), per_owner=2)


def wait_for(predicate, timeout=DEADLINE_S, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not reached within {timeout} s")


def _driver(address: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(DRIVER), address, *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ)


def _line(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, f"the driver process ended (exit {proc.wait()}) without answering"
    return json.loads(line)


def test_one_machine_never_imports_ray():
    """Without TFVIZ_RAY_ADDRESS nothing imports Ray: the runs, the store, the quota (ui.jobs imports
    tfviz.runs.ray only inside its Ray branch)."""
    code = ("import sys, tfviz, tfviz.runs.manager, tfviz.runs.store, tfviz.runs.ray, tfviz.classroom.disk\n"
            "from tfviz.runs.store import open_store\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    env = {k: v for k, v in os.environ.items() if k != "TFVIZ_RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_unreachable_cluster_is_a_clear_error_at_once():
    import socket

    from tfviz.runs.ray import connect

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="no Ray cluster answers at '127.0.0.1:"):
        connect(f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 60  # not ray.init's minutes of retrying


def test_the_cluster_store_is_never_put_on_a_network_filesystem():
    from tfviz.runs.ray import network_filesystem

    mounts = ("files:/srv/tfviz /srv/tfviz nfs4 rw,relatime 0 0\n/dev/sda1 / ext4 rw 0 0\n"
              "tmpfs /srv/tfviz/scratch tmpfs rw 0 0\n")
    assert network_filesystem("/srv/tfviz/checkpoints/runs", mounts) == "nfs4"
    assert network_filesystem("/srv/tfviz", mounts) == "nfs4"
    assert network_filesystem("/srv/tfviz/scratch/store", mounts) is None  # the deepest mount wins
    assert network_filesystem("/srv/tfvizzz", mounts) is None
    assert network_filesystem("/home/teacher/.local/share/tfviz/ray", mounts) is None


def test_the_store_lives_in_one_detached_actor_on_the_head_node(runs, cluster):
    from tfviz.runs.ray import ACTOR, NAMESPACE

    info = runs.store.info
    assert info["store"].startswith(str(cluster[1] / "store"))  # TFVIZ_RAY_STORE_DIR, not the shared folder
    assert runs.executor.capacity() == 2  # 2 CPUs, one per run, no GPU in this cluster
    assert ray.get_actor(ACTOR, namespace=NAMESPACE) is not None


def test_a_run_trains_through_ray_and_finishes(runs, cluster):
    from tfviz.train.checkpoint import load_checkpoint

    path = cluster[1] / "ck" / "user" / "alice.safetensors"
    run_id = runs.submit(model_config(), TASK, train_config(30), owner="alice", checkpoint=path)
    job = runs.get(run_id)
    assert job.wait(DEADLINE_S), job.snapshot()
    snap = job.snapshot()
    assert (snap.state, snap.step, snap.error) == ("done", 30, None), snap.message
    assert snap.history[-1]["step"] == 30 and snap.checkpoint == str(path)
    ck = load_checkpoint(path)  # written by the Ray worker into the shared folder
    assert ck.step == 30 and ck.model.config.d_model == MODEL["d_model"]


def test_two_app_servers_show_the_same_runs_to_the_same_session(runs, cluster):
    address, temp = cluster
    run_id = runs.submit(model_config(), TASK, train_config(20), owner="bob",
                         checkpoint=temp / "ck" / "bob.safetensors")
    other = _driver(address, "list", "bob")  # another app server process
    seen = _line(other)
    assert other.wait(60) == 0
    assert [s["id"] for s in seen] == [run_id]
    assert seen[0]["name"] == runs.get(run_id).snapshot().name
    assert runs.get(run_id).wait(DEADLINE_S)
    assert [j.id for j in runs.jobs(owner="bob")] == [run_id]


def test_a_run_survives_the_app_server_that_started_it(runs, cluster):
    address, temp = cluster
    steps = 600
    server = _driver(address, "submit", "carol", str(steps), str(temp / "ck" / "carol.safetensors"))
    try:
        run_id = _line(server)["id"]
        _line(server)  # {"running": step}: it trains
    finally:
        server.kill()  # kill -9 of the app server that started it
        server.wait(10)
    job = runs.get(run_id)
    at_kill = job.snapshot()
    assert at_kill.state == "running" and at_kill.step < steps, "finished before its server died"
    assert job.wait(DEADLINE_S), job.snapshot()
    snap = job.snapshot()
    assert (snap.state, snap.step, snap.owner) == ("done", steps, "carol"), snap.message


def test_a_killed_ray_worker_resumes_from_its_last_checkpoint(runs, cluster):
    from tfviz.train.checkpoint import load_checkpoint

    steps, path = 800, cluster[1] / "ck" / "dave.safetensors"
    run_id = runs.submit(model_config(), TASK, train_config(steps), owner="dave", checkpoint=path)
    rec = wait_for(lambda: (lambda r: r if r["checkpoint"] and r["step"] >= 20 else None)(runs.store.get(run_id)),
                   what="a first periodic checkpoint")
    worker_pid = int(rec["worker"].split(":")[3])
    saved_step = load_checkpoint(rec["checkpoint"]).step  # its attempt's own file (issue 29), published at the end
    os.kill(worker_pid, signal.SIGKILL)  # the Ray worker process training it
    job = runs.get(run_id)
    assert job.wait(DEADLINE_S), job.snapshot()
    rec = runs.store.get(run_id)
    assert (rec["state"], rec["step"]) == ("done", steps), rec["message"]
    assert rec["attempts"] >= 2 and 0 < saved_step < steps
    assert load_checkpoint(path).step == steps
    assert [h["step"] for h in rec["history"]] == sorted({h["step"] for h in rec["history"]})


def test_limits_quota_front_and_stop_hold_on_the_cluster(runs, cluster):
    from tfviz.train.checkpoint import load_checkpoint
    from tfviz.runs.manager import RunManager
    from tfviz.runs.store import JobLimitError, Quota, QuotaError

    ck = cluster[1] / "ck"
    ids = [runs.submit(model_config(), TASK, train_config(100_000), owner="erin",
                       checkpoint=ck / f"erin{i}.safetensors") for i in range(2)]
    with pytest.raises(JobLimitError, match="the limit is 2 per session") as e:
        runs.submit(model_config(), TASK, train_config(10), owner="erin", checkpoint=ck / "erin2.safetensors")
    assert "Traceback" not in str(e.value)  # the store's own message, not Ray's wrapping
    tight = RunManager(runs.store, runs.executor, max_concurrent=2, quota=Quota(lambda: 1, lambda: 0))
    with pytest.raises(QuotaError, match="is full"):
        tight.submit(model_config(), TASK, train_config(10), owner="frank", checkpoint=ck / "frank.safetensors")
    assert runs.jobs(owner="frank") == []  # refused in the transaction that would have queued it
    for run_id in ids:
        wait_for(lambda: runs.get(run_id).snapshot().step > 0, what=f"{run_id} training")
    # both slots taken: two more sessions wait; the teacher moves the later one to the front.
    # (The fair queue may pause one of erin's two runs meanwhile to start a waiting session's:
    # then the front one starts first.)
    gina, hank = [runs.submit(model_config(), TASK, train_config(100_000), owner=o,
                              checkpoint=ck / f"{o}.safetensors") for o in ("gina", "hank")]
    runs.move_to_front(hank)
    gina_ran = runs.get(gina).snapshot().state == "running"  # read in this order: hank starts
    order = runs.store.queue_order()                         # before gina, and once started it
    hank_ran = runs.get(hank).snapshot().state == "running"  # stays running until stopped
    assert order[0] == hank if hank in order else hank_ran, order
    assert not (gina_ran and hank in order), order
    for run_id in (gina, hank, *ids):
        assert runs.stop(run_id)
    for run_id in (gina, hank):
        assert runs.get(run_id).wait(DEADLINE_S)
    for run_id in ids:
        job = runs.get(run_id)
        assert job.wait(DEADLINE_S)
        snap = job.snapshot()
        assert snap.state == "stopped" and 0 < snap.step < 100_000, snap.message
        assert load_checkpoint(snap.checkpoint).step == snap.step  # saved on Stop, resumable


def test_the_cluster_store_answers_every_method_of_the_run_store():
    """RayRunStore forwards each RunStore method the app and the workers call (a method the
    local store gains must be added here too, or the page fails only on a cluster)."""
    import inspect

    from tfviz.runs.ray import STORE_METHODS, RayRunStore
    from tfviz.runs.store import RunStore, SqliteRunStore

    protocol = {n for n, f in vars(RunStore).items() if inspect.isfunction(f) and not n.startswith("_")}
    public = {n for n, f in inspect.getmembers(SqliteRunStore, inspect.isfunction)
              if not n.startswith("_") and n != "close"}
    assert protocol and protocol <= public
    assert public <= STORE_METHODS, f"not forwarded to the cluster's store: {sorted(public - STORE_METHODS)}"
    for name in protocol:  # the same parameters as the protocol says
        ours, theirs = inspect.signature(getattr(RayRunStore, name)), inspect.signature(getattr(RunStore, name))
        assert list(ours.parameters) == list(theirs.parameters), name


def test_the_train_page_trains_on_the_cluster(runs, cluster, monkeypatch):
    """TFVIZ_RAY_ADDRESS set: the Train page's Start goes to the cluster (ui.jobs' Ray branch), the
    page follows the run from the cluster's store, and the run is in the same store every other
    app server reads."""
    from apptest_helpers import messages, open_page, poll

    monkeypatch.setenv("TFVIZ_RAY_ADDRESS", cluster[0])
    at = open_page("train")
    at.number_input(key="train_steps").set_value(20)
    at.number_input(key="train_warmup").set_value(2)
    at.button(key="train_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    sid = at.session_state["sid"]
    [rec] = runs.store.list(owner=sid)  # the cluster's store, as this test's own driver reads it
    assert rec["total_steps"] == 20
    poll(at, lambda at: "Saved as" in messages(at), timeout=DEADLINE_S)
    rec = runs.store.get(rec["id"])
    assert (rec["state"], rec["step"]) == ("done", 20)
    assert Path(rec["checkpoint"]).is_relative_to(cluster[1] / "ck")  # the shared folder
