"""Kill busy training workers again and again, and count what the class sees (issue 29, defect 5).

    .venv/bin/python scripts/kill_workers.py --minutes 4 --every 20

An app-server process (``ui.jobs.job_manager``: the run store of a temp checkpoint folder, its
supervised worker processes; ``TFVIZ_MAX_JOBS=2``, the default 15 s lease) queues ``--runs`` long
runs of two students. Every ``--every`` seconds one busy worker (the oldest running run's) gets
``kill -9``. Once a second the store is sampled: a sample is *starved* when runs are queued while
fewer than 2 train. At the end every run is stopped and checked: none lost (all still listed),
none duplicated (each run's curve has increasing steps; at most one worker holds it).

Printed: samples, starved samples, the longest stretch without both slots training after each
kill (from the kill until two runs train again), runs lost, runs whose steps went backwards, and
the machine's load average (a shared machine: the figures are upper bounds).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SERVER = """
import json, sys, time
from ui.jobs import job_manager
m = job_manager()
ids = [m.submit(json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), owner=o,
                name=f"run{i}", client=o) for i, o in enumerate(json.loads(sys.argv[4]))]
print(json.dumps(ids), flush=True)
time.sleep(10**6)
"""


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=4.0)
    ap.add_argument("--every", type=float, default=20.0, help="seconds between kills")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from tfviz.tasks import make_task
    from tfviz.train import TrainConfig
    from tfviz.train.setup import model_config_for
    from tfviz.runs.store import SqliteRunStore

    task = {"name": "copy", "arch": "decoder", "n_symbols": 6, "min_len": 2, "max_len": 5, "n_train": 200,
            "n_val": 20, "n_test": 20}
    cfg = model_config_for(make_task(task), d_model=16, n_heads=2, n_layers=1).to_dict()
    tc = TrainConfig(steps=10**6, batch_size=8, warmup=1, log_every=10, eval_every=0, eval_examples=10,
                     snapshot_every=0, checkpoint_every=0)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # (exiting workers still write)
        folder = Path(tmp)
        env = {**os.environ, "TFVIZ_CHECKPOINT_DIR": str(folder), "TFVIZ_MAX_JOBS": "2",
               "TFVIZ_JOBS_PER_SESSION": str(args.runs), "TFVIZ_CHECKPOINT_SECONDS": "5",
               "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        owners = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"] * (args.runs // 2) + ["aaaaaaaaaaaa"] * (args.runs % 2)
        server = subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(cfg), json.dumps(task),
                                   json.dumps(tc.to_dict()), json.dumps(owners)], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, text=True)
        store = SqliteRunStore(folder / "runs" / "runs.sqlite")
        ids = json.loads(server.stdout.readline())
        samples = starved = kills = 0
        outages: list[float] = []
        pending_kill = None
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, load {_load()}",
              flush=True)
        try:
            while sum(r["state"] == "running" and r["step"] > 0 for r in store.list(active_only=True)) < 2:
                time.sleep(0.2)
            t0 = last_kill = time.monotonic()
            while time.monotonic() - t0 < args.minutes * 60:
                runs = store.list(active_only=True)
                training = [r for r in runs if r["state"] == "running"]
                queued = [r for r in runs if r["state"] == "queued"]
                samples += 1
                if queued and len(training) < 2:
                    starved += 1
                if pending_kill is not None and len(training) == 2 and all(
                        r["worker"] != pending_kill[1] for r in training):
                    outages.append(time.monotonic() - pending_kill[0])
                    pending_kill = None
                if time.monotonic() - last_kill >= args.every and len(training) == 2 and pending_kill is None:
                    victim = rng.choice(training)
                    try:
                        os.kill(int(victim["worker"].split(":")[1]), signal.SIGKILL)
                        kills += 1
                        pending_kill = (time.monotonic(), victim["worker"])
                    except ProcessLookupError:
                        pass
                    last_kill = time.monotonic()
                time.sleep(1.0)
        finally:
            for r in store.list(active_only=True):
                store.request_stop(r["id"])
            deadline = time.monotonic() + 120
            while store.list(active_only=True) and time.monotonic() < deadline:
                time.sleep(0.5)
            server.kill()
            server.wait(30)
        final = {r["id"]: r for r in store.list()}
        lost = [i for i in ids if i not in final]
        backwards = [i for i, r in final.items()
                     if [h["step"] for h in r["history"]] != sorted(h["step"] for h in r["history"])]
        print(f"{kills} kills over {args.minutes:g} min (one every {args.every:g} s), {samples} one-second "
              f"samples: {starved} with runs queued and fewer than 2 training; both slots training again "
              f"after each kill: max {max(outages, default=float('nan')):.1f} s, median "
              f"{sorted(outages)[len(outages) // 2] if outages else float('nan'):.1f} s (lease 15 s); "
              f"runs lost {len(lost)}, runs whose steps went backwards {len(backwards)}; attempts "
              f"{sorted(r['attempts'] for r in final.values())}; load {_load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
