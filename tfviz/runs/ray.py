"""Runs on a Ray cluster (``TFVIZ_RAY_ADDRESS``): the run store lives in the cluster, runs train in
Ray tasks, checkpoints go to the folder every node shares (``TFVIZ_CHECKPOINT_DIR``).

    store, executor = connect("auto", open_folder=from_pretrained)   # one pair per process
    runs = RunManager(store, executor, max_concurrent=executor.capacity(), ...)

Each piece is one of ``tfviz.runs``' own interfaces over Ray, so the pages, ``RunManager`` and
the worker's ``run_one`` are the same code as on one machine:

* ``StoreActor``: a named, detached actor ("tfviz-runs" in namespace "tfviz") that holds the
  ordinary ``SqliteRunStore`` on the local disk of the Ray head node (``TFVIZ_RAY_STORE_DIR``,
  default ``~/.local/share/tfviz/ray``): the same transactions (a run and its quota reservation
  inserted at once), the same fair queue, the teacher's move-to-front. Every app server finds it
  by name (``get_if_exists``), so two servers pointed at the cluster show the same runs. Only this
  actor opens the file, on its own node's disk: SQLite never runs over a network filesystem (the
  actor refuses a store folder on one).
* ``RayRunStore``: the ``RunStore`` protocol in an app server or a Ray task: every call is one
  round trip to the actor (its exceptions, e.g. ``QuotaError``, come back as themselves).
* ``RayExecutor``: the ``Executor`` protocol. ``submit(run_id)`` asks the actor to make sure a Ray
  task will claim the run. The actor, not the app server, submits the tasks: a task belongs to
  the process that submitted it, and a detached actor outlives every app server, so a run
  survives the server that started it (``kill -9`` included). Each task asks Ray for
  ``num_cpus=1`` and ``num_gpus=1`` when the cluster has GPUs; Ray decides where and when it runs.
  The store decides only *which* run a task that Ray started takes next (its fair queue: claim),
  so the class's fairness rules hold on a cluster too.

A task is a worker: it claims runs (``store.claim``) and trains them with
``tfviz.runs.worker.run_one`` until nothing is left to claim. ``run_one`` saves resumable
checkpoints (every ``TFVIZ_CHECKPOINT_SECONDS``, on Stop, at the end) and renews the run's lease
every second, reading Stop and the fair queue's "pause" from the store's answer. A task whose
process or node died stops renewing; the actor's keeper (every ``KEEP_S``) puts such runs back in
the queue (``requeue_dead``) and submits tasks for queued runs that have none, and the run resumes
from its latest complete checkpoint (they are written atomically: a file on disk is complete).

Ray is imported only here, and only when a cluster is asked for: one machine needs none of it.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from .. import paths

NAMESPACE = "tfviz"
ACTOR = "tfviz-runs"
WARM_MAX = 8  # worker processes warmed when the store starts (at most one per slot)
CONNECT_TIMEOUT_S = 5.0  # an app server gives up on an unreachable cluster after this
KEEP_S = 2.0  # how often the actor re-queues runs of dead workers and tops up the tasks
# The RunStore methods the actor serves (nothing else of the store object is reachable).
STORE_METHODS = frozenset({
    "insert", "get", "list", "queue_order", "claim", "renew", "progress", "finish", "requeue",
    "request_stop", "move_to_front", "set_slots", "slots", "reserve", "release", "reserved",
    "remove", "requeue_dead", "prepare_hints", "hint_prepare", "reservations", "notices", "activity"})
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "glusterfs",
                       "lustre", "ceph", "fuse.ceph", "beegfs", "gpfs", "fuse.s3fs", "fuse.gcsfuse",
                       "fuse.juicefs", "afs", "davfs")


def network_filesystem(path: str | os.PathLike, mounts: str | None = None) -> str | None:
    """The type of the network filesystem ``path`` is on (``mounts``: the text of
    ``/proc/mounts``, read when not given), None for a local disk (or where mounts cannot be
    read). SQLite's locks are not reliable over the network."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind if kind in NETWORK_FILESYSTEMS else None


def _ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - the message is the point
        raise RuntimeError("TFVIZ_RAY_ADDRESS is set but Ray is not installed: pip install "
                           "'ray==2.60.0' (docs/deploy.md), or unset TFVIZ_RAY_ADDRESS to train on "
                           "this machine") from e
    return ray


_REMOTES: dict = {}


def _remote(fn_or_class):
    """``ray.remote(x)``, made once per process (each call would export it again)."""
    if fn_or_class not in _REMOTES:
        _REMOTES[fn_or_class] = _ray().remote(fn_or_class)
    return _REMOTES[fn_or_class]


def _settings_env() -> dict[str, str]:
    """What the actor and its tasks must see as this server sees it: every TFVIZ_ setting (the
    checkpoint folder, quota, lease and checkpoint intervals, ...) and the code's folder."""
    env = {k: v for k, v in os.environ.items()
           if k.startswith("TFVIZ_") and k not in ("TFVIZ_RAY_ADDRESS", "TFVIZ_TEACHER_KEY")}  # no secret
    env["PYTHONPATH"] = os.pathsep.join([str(paths.REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def capacity(gpus: float, cpus: float) -> int:
    """Runs the cluster can train at once: its GPUs (``gpus`` per run) or, without, its CPUs
    (``cpus`` per run), as Ray counts them now (the store's slot count on a cluster; the actor
    sets it again as nodes join or leave)."""
    total = _ray().cluster_resources()
    if gpus:
        return max(1, int(total.get("GPU", 0) // gpus))
    return max(1, int(total.get("CPU", 1) // cpus))


# -------------------------------------------------------------------------------- in the cluster
class StoreActor:
    """The run store of the cluster (made a Ray actor by ``store_actor``): a ``SqliteRunStore`` on
    this node's local disk, and the owner of the training tasks."""

    def __init__(self, open_folder: Callable[[Any], Any] | None = None, gpus: float = 0.0,
                 cpus: float = 1.0):
        from .store import SqliteRunStore

        folder = paths.ray_store_dir()
        kind = network_filesystem(folder)
        if kind:
            raise RuntimeError(f"the run store's folder {folder} is on a network filesystem ({kind}); "
                               "SQLite must sit on the head node's own disk (TFVIZ_RAY_STORE_DIR)")
        self.store = SqliteRunStore(folder / "runs.sqlite")
        self.open_folder, self.gpus, self.cpus = open_folder, float(gpus), float(cpus)
        self._tasks: list = []  # ObjectRefs of this actor's worker tasks not known to have ended
        self._lock = threading.Lock()
        self._keeper = threading.Thread(target=self._keep, daemon=True, name="tfviz-ray-keeper")
        self._keeper.start()
        # A warm pool, as on one machine: a worker process that has imported torch and built an
        # AdamW once (seconds) is kept by Ray and reused for the next task of this actor, so a
        # Start reaches its first step without that wait.
        n = min(WARM_MAX, capacity(self.gpus, self.cpus))
        self._warm = [_remote(_warm_task).options(num_cpus=self.cpus, num_gpus=self.gpus).remote()
                      for _ in range(n)]

    def call(self, method: str, args: tuple, kwargs: dict) -> tuple[bool, Any]:
        """One RunStore call -> (True, result) or (False, the exception it raised)."""
        if method not in STORE_METHODS:
            return False, AttributeError(f"the run store has no method {method!r}")
        try:
            return True, getattr(self.store, method)(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the caller re-raises it as itself
            return False, e

    def info(self) -> dict[str, Any]:
        return {"lease_s": self.store.lease_s, "node": socket.gethostname(), "pid": os.getpid(),
                "gpus": self.gpus, "cpus": self.cpus, "store": str(self.store.path)}

    def warm_pids(self, timeout: float | None = None) -> list[int]:
        """The processes the warm pool prepared (once they are ready)."""
        return _ray().get(self._warm, timeout=timeout)

    def alive(self) -> int:
        """This actor's worker tasks not yet ended (queued in Ray or training)."""
        with self._lock:
            return len(self._live())

    def top_up(self, open_folder: Callable[[Any], Any] | None = None) -> int:
        """Submit as many worker tasks as queued runs can start now (slots free, counting the
        tasks already waiting for Ray). -> tasks submitted. ``open_folder``: how tasks read a
        model folder to fine-tune (the app server passes ``tfviz.interop.from_pretrained``;
        remembered for the keeper's top-ups)."""
        with self._lock:
            if open_folder is not None:
                self.open_folder = open_folder
            slots = capacity(self.gpus, self.cpus)  # the cluster now: nodes come and go
            if slots != self.store.slots():
                self.store.set_slots(slots)
            live = self._live()
            runs = self.store.list(active_only=True)
            queued = sum(r["state"] == "queued" for r in runs)
            running = sum(r["state"] == "running" for r in runs)
            free = max(0, self.store.slots() - running)
            waiting = max(0, len(live) - running)  # tasks not (yet) training a run
            n = max(0, min(queued, free) - waiting)
            task = _remote(_worker_task).options(
                num_cpus=self.cpus, num_gpus=self.gpus, max_retries=3, name="tfviz-worker")
            self._tasks = live + [task.remote(self.open_folder) for _ in range(n)]
            return n

    def _live(self) -> list:  # call with _lock held
        if not self._tasks:
            return []
        ray = _ray()
        done, live = ray.wait(self._tasks, num_returns=len(self._tasks), timeout=0, fetch_local=False)
        return live

    def _keep(self) -> None:
        while True:
            time.sleep(KEEP_S)
            try:
                self.store.requeue_dead()
                self.top_up()
            except Exception:  # noqa: BLE001 - a busy database: next time
                pass


def _warm_task() -> int:
    from .worker import warm_up

    warm_up()
    return os.getpid()


def _worker_task(open_folder=None) -> int:
    """One Ray task = one training worker: claim runs and train them until none is left. -> runs
    trained."""
    ray = _ray()
    from .worker import run_one, warm_up

    store = RayRunStore(ray.get_actor(ACTOR, namespace=NAMESPACE))
    node = ray.get_runtime_context().get_node_id()[:8]
    worker = f"ray:{node}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    warmed, n = False, 0
    while True:
        rec = store.claim(worker)
        if rec is None:
            return n
        if not warmed:
            warm_up()
            warmed = True
        run_one(store, worker, rec, open_folder)
        n += 1


# -------------------------------------------------------------------------------- in an app server
class RayRunStore:
    """The ``RunStore`` protocol, every call forwarded to the cluster's ``StoreActor``."""

    def __init__(self, actor):
        self._actor = actor
        self._ray = _ray()
        self.info = self._ray.get(actor.info.remote())
        self.lease_s = self.info["lease_s"]
        self.path = None  # no file on this machine

    def _call(self, method: str, *args, **kwargs):
        ok, value = self._ray.get(self._actor.call.remote(method, args, kwargs))
        if not ok:
            raise value
        return value

    def insert(self, runs, *, per_owner=None, quota=None, what="this training's checkpoint"):
        return self._call("insert", runs, per_owner=per_owner, quota=quota, what=what)

    def get(self, run_id):
        return self._call("get", run_id)

    def list(self, owner=None, active_only=False):
        return self._call("list", owner=owner, active_only=active_only)

    def queue_order(self):
        return self._call("queue_order")

    def claim(self, worker, run_id=None):
        return self._call("claim", worker, run_id)

    def renew(self, run_id, worker, attempt=None):
        return self._call("renew", run_id, worker, attempt)

    def progress(self, run_id, worker, **fields):
        return self._call("progress", run_id, worker, **fields)

    def finish(self, run_id, worker, state, **fields):
        return self._call("finish", run_id, worker, state, **fields)

    def requeue(self, run_id, worker, **fields):
        return self._call("requeue", run_id, worker, **fields)

    def request_stop(self, run_id):
        return self._call("request_stop", run_id)

    def move_to_front(self, run_id):
        return self._call("move_to_front", run_id)

    def set_slots(self, n):
        return self._call("set_slots", n)

    def slots(self):
        return self._call("slots")

    def reserve(self, key, need, quota, what, path=None):
        return self._call("reserve", key, need, quota, what, path)

    def release(self, key):
        return self._call("release", key)

    def reserved(self):
        return self._call("reserved")

    def reservations(self):
        return self._call("reservations")

    def activity(self):
        return self._call("activity")

    def notices(self):
        return self._call("notices")

    def remove(self, run_id):
        return self._call("remove", run_id)

    def requeue_dead(self):
        return self._call("requeue_dead")

    def prepare_hints(self):
        return self._call("prepare_hints")

    def hint_prepare(self, spec, keep=16):
        return self._call("hint_prepare", spec, keep)


class RayExecutor:
    """The ``Executor`` protocol on the cluster: the actor submits and owns the tasks."""

    def __init__(self, actor, open_folder: Callable[[Any], Any] | None = None):
        self._actor, self._ray, self.open_folder = actor, _ray(), open_folder
        info = self._ray.get(actor.info.remote())
        self.gpus, self.cpus = info["gpus"], info["cpus"]

    def capacity(self) -> int:
        return capacity(self.gpus, self.cpus)

    def submit(self, run_id: str) -> None:
        self._ray.get(self._actor.top_up.remote(self.open_folder))

    def cancel(self, run_id: str) -> None:
        pass  # the store holds the stop; the run's task reads it with its next lease renewal

    def alive(self) -> list[str]:
        return [str(i) for i in range(self._ray.get(self._actor.alive.remote()))]

    def shutdown(self, timeout: float = 30.0) -> None:
        """Nothing stops: the cluster's runs outlive this app server (that is the point)."""


def store_actor(gpus: float | None = None, cpus: float = 1.0):
    """The cluster's one ``StoreActor``, created by the first app server that asks (on the head
    node, restarted by Ray if its process dies: the SQLite file keeps every record), found by
    name by every later one. ``gpus`` per run: default 1 when the cluster has GPUs, else 0."""
    ray = _ray()
    if gpus is None:
        gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    return _remote(StoreActor).options(
        name=ACTOR, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=-1, max_concurrency=16,
        resources={"node:__internal_head__": 0.001},  # its store file stays on the head's disk
        runtime_env={"env_vars": _settings_env()},  # inherited by the tasks it submits
    ).remote(None, gpus, cpus)


def _check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """RuntimeError unless something accepts a connection at ``address`` ("host:port"; "auto"
    and "ray://..." are left to Ray)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as e:
        raise RuntimeError(f"no Ray cluster answers at {address!r} (TFVIZ_RAY_ADDRESS): {e}. Start its "
                           "head (docs/deploy.md), or unset TFVIZ_RAY_ADDRESS to train on this machine"
                           ) from None


_CONNECTED: dict[str, tuple] = {}
_CONNECT_LOCK = threading.Lock()


def connect(address: str, *, open_folder: Callable[[Any], Any] | None = None
            ) -> tuple[RayRunStore, RayExecutor]:
    """Join the cluster at ``address`` ("auto", or the head's "host:port") as a driver, and get
    its run store and executor (one pair per process and address). RuntimeError at once when
    nothing answers at ``address`` (``ray.init`` itself would wait for minutes)."""
    _check_reachable(address)
    ray = _ray()
    with _CONNECT_LOCK:
        if address not in _CONNECTED or not ray.is_initialized():
            if not ray.is_initialized():
                ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                         configure_logging=False)
            actor = store_actor()
            _CONNECTED[address] = (RayRunStore(actor), RayExecutor(actor))
        store, executor = _CONNECTED[address]
        if open_folder is not None:
            executor.open_folder = open_folder
        return store, executor


# -------------------------------------------------------------------------------- a cluster on one machine
class LocalCluster:
    """A Ray head on this machine's loopback in its own temp folder, as a school's head node would
    be (tests and ``scripts/cluster_sim.py``): ``with LocalCluster(num_cpus=2) as address: ...``.
    Stopped by ending this instance's processes only (never ``ray stop``, which ends every Ray
    instance on the machine)."""

    def __init__(self, num_cpus: int = 2, env: dict[str, str] | None = None, timeout_s: float = 120):
        import shutil
        import sys
        import tempfile

        self.num_cpus, self.timeout_s = num_cpus, timeout_s
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
        self.ray_bin = str(Path(sys.executable).parent / "ray")
        if not Path(self.ray_bin).exists():
            self.ray_bin = shutil.which("ray") or self.ray_bin
        self.temp = Path(tempfile.mkdtemp(prefix="tfr"))  # short: Ray's socket paths are bounded
        self.port = 0
        self.address = ""

    def __enter__(self) -> str:
        import subprocess

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [self.ray_bin, "start", "--head", f"--port={self.port}", f"--num-cpus={self.num_cpus}",
               "--include-dashboard=false", "--node-ip-address=127.0.0.1",
               f"--temp-dir={self.temp / 'ray'}", "--disable-usage-stats"]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=self.timeout_s, env=self.env)
        except BaseException:
            self.stop()
            raise
        self.address = f"127.0.0.1:{self.port}"
        return self.address

    def __exit__(self, *exc) -> None:
        self.stop()

    def pids(self) -> list[int]:
        """This instance's processes (their command lines name its temp folder) and all their
        descendants (the workers do not name it)."""
        marker = str(self.temp / "ray")
        children: dict[int, list[int]] = {}
        roots = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
            if marker in cmd:
                roots.append(int(entry.name))
        out, todo = set(), list(roots)
        while todo:
            pid = todo.pop()
            if pid not in out and pid != os.getpid():
                out.add(pid)
                todo += children.get(pid, [])
        return sorted(out)

    def stop(self) -> None:
        import shutil
        import signal

        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        shutil.rmtree(self.temp, ignore_errors=True)


__all__ = ["ACTOR", "NAMESPACE", "LocalCluster", "capacity", "RayExecutor", "RayRunStore", "StoreActor",
           "connect", "network_filesystem", "store_actor"]
