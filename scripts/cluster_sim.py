"""A school on one machine, measured: N app servers + a local Ray head (runs on the cluster,
``TFVIZ_RAY_ADDRESS``), S websocket sessions, each starting one run on the Train page and watching
it until it ends (docs/deploy.md, "Measured").

    .venv/bin/python scripts/cluster_sim.py --servers 2 --sessions 20 --json docs/bench/cluster_sim.json
    .venv/bin/python scripts/cluster_sim.py --servers 2 --sessions 20 --kill-server-at 40

Each session is a Streamlit session driven over its websocket (``scripts/load_test.py``'s
``_WsSession``: the server's side of every render, without a browser), sticky to server
``i % N`` as a load balancer with sticky sessions would keep it, with its own ``?sid=``. It opens
the Train page, sets Steps (``--steps``) on the default preset, presses "Start training", then
reloads the page every ``--poll`` seconds (as the page's live fragment would) until its run has
ended. ``--kill-server-at T``: ``kill -9`` of server 0 after T s; a new server takes its place
(the same settings, another port) and its sessions reconnect with the same ``?sid=``.

Measured: every page render (request -> script finished), p50 / p95 / max; each session's queue
wait (its run's ``started - created`` in the cluster's run store, read by this script as one more
Ray driver); runs lost (a session whose Start was accepted but whose run did not end "done"),
runs finished; the machine's load average every 5 s (other programs count too: say so).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from load_test import StreamlitServer, _errors_shown, _WsSession, pct  # noqa: E402


def shared_folder(root: Path) -> Path:
    """The checkpoint folder every server and node shares: the shipped models linked in (the
    sidebar's picker lists them), the sessions' runs written below it."""
    ck = root / "ck"
    ck.mkdir(parents=True)
    for f in (REPO / "checkpoints").iterdir():
        if f.is_file():
            (ck / f.name).symlink_to(f)
    return ck


class Monitor(threading.Thread):
    """The cluster's run records, read once a second (this script is one more Ray driver)."""

    def __init__(self, store):
        super().__init__(daemon=True, name="sim-monitor")
        self.store, self.records, self.stop = store, {}, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.records = {r["owner"]: r for r in self.store.list()}
            except Exception:  # noqa: BLE001 - try again next second
                pass

    def ended(self, sid: str) -> bool:
        r = self.records.get(sid)
        return r is not None and r["state"] not in ("queued", "running")


class Servers:
    """The app servers; ``url(i)``: where session i is sticky to (a restarted server replaces
    its predecessor under the same index)."""

    def __init__(self, n: int, env: dict[str, str], logs: Path):
        self.env, self.logs, self.servers = env, logs, []
        for k in range(n):
            self.servers.append(StreamlitServer(env, log=logs / f"server{k}.log").__enter__())

    def url(self, i: int) -> str:
        return self.servers[i % len(self.servers)].url

    def kill_and_replace(self, k: int) -> None:
        old = self.servers[k]
        old.proc.kill()  # kill -9: a crash, an out-of-memory kill
        old.proc.wait()
        self.servers[k] = StreamlitServer(self.env, log=self.logs / f"server{k}-restarted.log").__enter__()

    def close(self) -> None:
        for s in self.servers:
            s.__exit__()


def _no_runs(elements) -> bool:
    return any(e.WhichOneof("type") == "alert" and "No runs yet" in e.alert.body for e in elements)


def _find(elements, kind: str, label: str):
    for e in elements:
        if e.WhichOneof("type") == kind and getattr(e, kind).label == label:
            return getattr(e, kind)
    return None


async def session(i: int, sid: str, servers: Servers, monitor: Monitor, steps: int, poll: float,
                  timeout_s: float, deadline: float, out: dict) -> None:
    """One student: Train page, Start, then watch until the run ends (reconnecting with the same
    ``?sid=`` when its server goes away)."""
    import websockets
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    rec = out.setdefault(sid, {"session": i, "pages": [], "errors": [], "reconnects": 0,
                                "accepted": False, "submitted": None})
    while time.monotonic() < deadline:
        url = servers.url(i)
        try:
            async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                          subprotocols=["streamlit"], max_size=None) as ws:
                s = _WsSession(ws)
                s.query = f"sid={sid}"
                took, elements = await s.run("train", [], timeout_s)
                rec["pages"].append(took)
                if not rec["accepted"] and sid in monitor.records:
                    rec["accepted"] = True  # its Start went through before its server died
                if not rec["accepted"]:
                    box, warm = _find(elements, "number_input", "Steps"), _find(elements, "number_input", "Warmup steps")
                    start = _find(elements, "button", "Start training")
                    if box is None or warm is None or start is None:
                        rec["errors"].append("no Steps / Warmup box or Start button on the Train page")
                        return
                    rec["submitted"] = time.time()
                    took, elements = await s.run("train", [WidgetState(id=box.id, int_value=steps),
                                                           WidgetState(id=warm.id, int_value=max(1, steps // 10)),
                                                           WidgetState(id=start.id, trigger_value=True)],
                                                 timeout_s)
                    rec["pages"].append(took)
                    shown = s.problems(elements) + _errors_shown(elements)
                    if shown:
                        rec["errors"] += shown
                        return
                    rec["accepted"] = True
                while True:
                    if _no_runs(elements):  # e.g. after a reconnect to a restarted server
                        rec["errors"].append("the Train page listed no runs for this session")
                    if time.monotonic() >= deadline or monitor.ended(sid):
                        return
                    await asyncio.sleep(poll)
                    took, elements = await s.run("train", [], timeout_s)
                    rec["pages"].append(took)
                    rec["errors"] += s.problems(elements)
        except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as e:
            rec["reconnects"] += 1  # its server died: a new one takes its place, same ?sid=
            rec.setdefault("reconnect_errors", []).append(type(e).__name__)
            await asyncio.sleep(1.0)


async def simulate(servers: Servers, monitor: Monitor, sessions: int, steps: int, poll: float,
                   ramp: float, timeout_s: float, deadline_s: float, kill_at: float | None) -> dict:
    out: dict = {}
    deadline = time.monotonic() + deadline_s
    loads: list[tuple[float, float]] = []
    t0 = time.monotonic()

    async def sample_load():
        while time.monotonic() < deadline:
            loads.append((round(time.monotonic() - t0, 1), os.getloadavg()[0]))
            await asyncio.sleep(5)

    async def killer():
        await asyncio.sleep(kill_at)
        await asyncio.get_running_loop().run_in_executor(None, servers.kill_and_replace, 0)
        out["_killed_at_s"] = round(time.monotonic() - t0, 1)

    sampler = asyncio.create_task(sample_load())
    extra = [asyncio.create_task(killer())] if kill_at is not None else []
    tasks = []
    for i in range(sessions):
        tasks.append(asyncio.create_task(session(i, uuid.uuid4().hex[:12], servers, monitor, steps, poll,
                                                 timeout_s, deadline, out)))
        await asyncio.sleep(ramp)
    await asyncio.gather(*tasks, *extra)
    out["_elapsed_s"] = round(time.monotonic() - t0, 1)
    sampler.cancel()
    out["_load"] = loads
    return out


def summarise(out: dict, records: dict, args) -> dict:
    sessions = {k: v for k, v in out.items() if not k.startswith("_")}
    pages = [t for v in sessions.values() for t in v["pages"]]
    waits, per_session = [], []
    for sid, v in sorted(sessions.items(), key=lambda kv: kv[1]["session"]):
        r = records.get(sid)
        wait = None if r is None or r["started"] is None else round(r["started"] - r["created"], 1)
        took = None if r is None or r["finished"] is None else round(r["finished"] - r["created"], 1)
        if wait is not None:
            waits.append(wait)
        per_session.append({"session": v["session"], "accepted": v["accepted"],
                            "state": None if r is None else r["state"],
                            "step": None if r is None else r["step"], "queue_wait_s": wait,
                            "submit_to_end_s": took, "attempts": None if r is None else r["attempts"],
                            "renders": len(v["pages"]), "reconnects": v["reconnects"],
                            "errors": v["errors"][:3]})
    accepted = [p for p in per_session if p["accepted"]]
    loads = [x for _, x in out["_load"]]
    r2 = lambda x: round(x, 2)  # noqa: E731
    return {
        "servers": args.servers, "sessions": args.sessions, "steps_per_run": args.steps,
        "ray_cpus": args.cpus, "poll_s": args.poll, "elapsed_s": out["_elapsed_s"],
        "killed_server_0_at_s": out.get("_killed_at_s"),
        "renders": len(pages), "page_p50_s": r2(pct(pages, 50)), "page_p95_s": r2(pct(pages, 95)),
        "page_max_s": r2(max(pages)) if pages else None,
        "queue_wait_p50_s": r2(pct(waits, 50)), "queue_wait_p95_s": r2(pct(waits, 95)),
        "queue_wait_max_s": max(waits) if waits else None,
        "runs_accepted": len(accepted),
        "runs_finished": sum(p["state"] == "done" and p["step"] == args.steps for p in accepted),
        "runs_lost": sum(not (p["state"] == "done" and p["step"] == args.steps) for p in accepted),
        "sessions_refused": [p for p in per_session if not p["accepted"]],
        "errors": sum(len(v["errors"]) for v in sessions.values()),
        "reconnects": sum(v["reconnects"] for v in sessions.values()),
        "loadavg_1min": {"min": r2(min(loads)), "mean": r2(sum(loads) / len(loads)), "max": r2(max(loads)),
                         "samples": out["_load"]} if loads else None,
        "cpus": os.cpu_count(), "per_session": per_session,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--steps", type=int, default=100, help="steps of each run (the default preset's model)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs the Ray head offers (one run each)")
    ap.add_argument("--poll", type=float, default=2.0, help="seconds between a session's page reloads")
    ap.add_argument("--ramp", type=float, default=0.5, help="seconds between two sessions' arrivals")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a render is an error")
    ap.add_argument("--deadline", type=float, default=1200.0, help="seconds for the whole simulation")
    ap.add_argument("--kill-server-at", type=float, help="kill -9 server 0 after this many seconds")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (server logs, store)")
    args = ap.parse_args(argv)

    from tfviz.runs.ray import LocalCluster, connect

    root = Path(tempfile.mkdtemp(prefix="tfviz-sim-"))
    env = {"TFVIZ_CHECKPOINT_DIR": str(shared_folder(root)), "TFVIZ_RAY_STORE_DIR": str(root / "store"),
           "TFVIZ_JOBS_PER_SESSION": "2", "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    os.environ.update(env)
    with LocalCluster(num_cpus=args.cpus) as address:
        env["TFVIZ_RAY_ADDRESS"] = address
        store, executor = connect(address)  # creates the store actor with these settings
        servers = Servers(args.servers, env, root / "logs")
        monitor = Monitor(store)
        monitor.start()
        try:
            for k in range(args.servers):  # one unmeasured visit each: torch, the task, the cluster
                out_warm: dict = {}
                asyncio.run(_warm(servers.servers[k].url, args.timeout, out_warm))
            out = asyncio.run(simulate(servers, monitor, args.sessions, args.steps, args.poll,
                                       args.ramp, args.timeout, args.deadline, args.kill_server_at))
            time.sleep(1.5)
            records = {r["owner"]: r for r in store.list()}
        finally:
            monitor.stop.set()
            servers.close()
    summary = summarise(out, records, args)
    if args.keep:
        summary["server_logs"] = str(root / "logs")
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("per_session",)}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if summary["runs_lost"] == 0 and summary["runs_accepted"] == args.sessions else 1


async def _warm(url: str, timeout_s: float, out: dict) -> None:
    import websockets

    async with websockets.connect(url.replace("http", "ws", 1) + "/_stcore/stream",
                                  subprotocols=["streamlit"], max_size=None) as ws:
        s = _WsSession(ws)
        s.query = f"sid={uuid.uuid4().hex[:12]}"
        out["train_s"], _ = await s.run("train", [], timeout_s)


if __name__ == "__main__":
    sys.exit(main())
