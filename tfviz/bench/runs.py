"""python -m tfviz.bench runs — what a run costs through the run store (``tfviz.runs.manager``:
a record, a worker process) against calling ``train()`` directly, and what a restart costs.

For each quick (CPU) preset of the Train page (``--tasks``; ``--steps`` caps its steps):
  direct    ``train()`` in this process, the task's examples built beforehand (and a 2-step run
            of the preset first): wall time from building the model to the result;
  runs      the same run submitted to a ``RunManager`` with one warm worker that has generated the
            task's examples (what the Train page's hint does while the student reads the form;
            here a 2-step run of the preset first makes sure of it):
            wall time from ``submit`` to the record saying "done", and to its first loss point;
  ratio     runs / direct (target <= 1.1);
  jobs      the same run through the library's ``tfviz.JobManager`` (issue 34: the same
            ``RunManager`` over an embedded store, trained by a thread of this process):
            wall time from ``submit`` to "done", and jobs / direct (before issue 34 the library's
            manager was a thread around ``train()``: ratio 1 by construction, so a ratio within the
            load's noise of 1 is "no behaviour change").
Then ``restart``: an app-server process (``ui.jobs.job_manager``) trains a long run, is killed
with its worker (``kill -9`` both, as a crash or reboot would), and a new server process starts:
seconds from the new server's start to the run's first new step, and whether it ends at exactly
its number of steps.

The machine's load average is written beside the figures: on a shared machine they are upper
bounds, and a wall-clock ratio between two runs minutes apart carries the load's noise (the
same direct run repeated varied by 30% at load 8-12 here). ``--out FILE`` writes the table (default: print only).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import paths


def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _preset(name: str, steps: int | None):
    from ..tasks import cached_task
    from ..train.presets import QUICK, build_configs

    pre = QUICK[name]
    spec = {"name": pre.task, **pre.task_params}
    task = cached_task(spec)
    train = pre.train.to_dict()
    if steps:
        train.update(steps=min(steps, train["steps"]), warmup=min(train["warmup"], max(0, min(steps, train["steps"]) - 1)))
        train["eval_every"] = max(1, min(train["eval_every"], train["steps"] // 4 or 1))
    train["snapshot_every"] = max(1, train["steps"] // 20)  # as the Train page sets it
    mc, tc = build_configs(task, pre.model, train)
    return spec, task, mc, tc


def direct(name: str, steps: int | None, folder: Path) -> float:
    from ..train import new_model, train

    _, task, mc, tc = _preset(name, steps)
    for split in ("train", "validation", "test"):
        task.examples(split)
    # the same 2-step run first as on the runs path: first-use costs paid on both sides alike
    train(new_model(mc, tc.seed), task, tc.replace(steps=2, warmup=1, eval_every=1, snapshot_every=1),
          checkpoint=folder / f"warm-direct-{name}")
    t0 = time.perf_counter()
    train(new_model(mc, tc.seed), task, tc, checkpoint=folder / f"direct-{name}")
    return time.perf_counter() - t0


def through_runs(manager, name: str, steps: int | None, folder: Path) -> tuple[float, float]:
    spec, task, mc, tc = _preset(name, steps)
    manager.prepare(spec)  # as the Train page does while the student reads the form
    warm = manager.get(manager.submit(mc, spec, tc.replace(steps=2, warmup=1, eval_every=1, snapshot_every=1),
                                      owner="0123456789ab", checkpoint=folder / f"warm-{name}"))
    warm.wait()  # the worker has this task's examples now (what the hint achieves given time)
    t0 = time.perf_counter()
    job = manager.get(manager.submit(mc, spec, tc, owner="0123456789ab",
                                     checkpoint=folder / f"runs-{name}", name=name))
    first = None
    while True:
        s = job.snapshot()
        if first is None and s.history:
            first = time.perf_counter() - t0
        if not s.active:
            break
        time.sleep(0.01)
    if s.state != "done":
        raise RuntimeError(f"{name}: {s.state}: {s.error or s.message}")
    return time.perf_counter() - t0, first if first is not None else float("nan")


SERVER = """
import json, sys, time
from ui.jobs import job_manager
m = job_manager()
print(json.dumps([m.submit(json.loads(a), "copy", json.loads(b), owner="0123456789ab", name="long")
                  for a, b in [sys.argv[1:3]] if a != "-"]), flush=True)
time.sleep(3600)
"""


def restart(folder: Path) -> dict:
    """Kill -9 an app server and its worker mid-run; seconds from a new server's start until the
    run trains again (its step passes the last checkpoint's)."""
    from ..tasks import make_task
    from ..train import TrainConfig
    from ..train.setup import model_config_for
    from ..runs.store import SqliteRunStore

    env = {**os.environ, "TFVIZ_CHECKPOINT_DIR": str(folder), "TFVIZ_MAX_JOBS": "1",
           "TFVIZ_RUN_LEASE_S": "15", "TFVIZ_CHECKPOINT_SECONDS": "10", "PYTHONPATH": str(paths.REPO), "OMP_NUM_THREADS": "1"}
    mc = model_config_for(make_task("copy"), d_model=32, n_heads=2, n_layers=2)
    tc = TrainConfig(steps=3000, batch_size=16, warmup=10, eval_every=1000, snapshot_every=300,
                     checkpoint_every=0)

    def server(*args):
        return subprocess.Popen([sys.executable, "-c", SERVER, *args], cwd=paths.REPO, env=env,
                                stdout=subprocess.PIPE, text=True)

    store = SqliteRunStore(folder / "runs" / "runs.sqlite")
    first = server(json.dumps(mc.to_dict()), json.dumps(tc.to_dict()))
    (run,) = json.loads(first.stdout.readline())
    while not (store.get(run)["checkpoint"] and Path(store.get(run)["checkpoint"]).is_file()):
        time.sleep(0.05)
    time.sleep(2)
    worker = int(store.get(run)["worker"].split(":")[1])
    first.kill()
    os.kill(worker, signal.SIGKILL)
    first.wait()
    killed_at = store.get(run)["step"]
    from ..train.checkpoint import read_metadata

    saved = json.loads(json.dumps(read_metadata(store.get(run)["checkpoint"])["train_state"]))["step"]
    t0 = time.perf_counter()
    second = server("-", "-")
    second.stdout.readline()
    try:
        while not (store.get(run)["state"] == "running" and store.get(run)["attempts"] == 2
                   and store.get(run)["step"] > saved):
            time.sleep(0.05)
        continues = time.perf_counter() - t0
        while store.get(run)["state"] in ("queued", "running"):
            time.sleep(0.2)
        rec = store.get(run)
    finally:
        second.kill()
        second.wait()
    return dict(killed_at=killed_at, checkpoint_step=saved, continues_s=continues, state=rec["state"],
                final_step=rec["step"], total_steps=rec["total_steps"],
                lease_s=float(env["TFVIZ_RUN_LEASE_S"]))


def main(argv: list[str] | None = None) -> int:
    from ..runs.executor import LocalProcessExecutor
    from ..runs.jobs import JobManager
    from ..train.presets import QUICK
    from ..runs.manager import RunManager
    from ..runs.store import SqliteRunStore

    ap = argparse.ArgumentParser(prog="python -m tfviz.bench runs", description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="*", default=list(QUICK), help="quick presets to run (default: all)")
    ap.add_argument("--steps", type=int, default=None, help="cap each preset's steps")
    ap.add_argument("--no-restart", action="store_true", help="skip the restart measurement")
    ap.add_argument("--out", help="write the table to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from ..runs.worker import warm_up

    torch.set_num_threads(1)
    warm_up()  # what the warm worker has paid already: AdamW's first construction
    lines = [f"# python -m tfviz.bench runs {' '.join(argv or [])}".rstrip(),
             f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
             f"load average at start {_load()} (a shared machine: the figures are upper bounds)",
             f"{'preset':10} {'steps':>6} {'direct s':>9} {'runs s':>8} {'ratio':>6} {'first loss s':>13} "
             f"{'jobs s':>7} {'ratio':>6}  load"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = SqliteRunStore(folder / "runs" / "runs.sqlite")
        executor = LocalProcessExecutor(store.path, workers=1, warm=1,
                                        env={**os.environ, "TFVIZ_CHECKPOINT_DIR": str(folder)})
        executor.start()
        manager = RunManager(store, executor, max_concurrent=1, torch_threads=1)
        jobs = JobManager(max_concurrent=1, torch_threads=1)
        totals = []
        try:
            for name in args.tasks:
                d = direct(name, args.steps, folder)
                r, first = through_runs(manager, name, args.steps, folder)
                j, _ = through_runs(jobs, name, args.steps, folder)
                steps = _preset(name, args.steps)[3].steps
                line = (f"{name:10} {steps:>6} {d:>9.2f} {r:>8.2f} {r / d:>6.2f} {first:>13.2f} "
                        f"{j:>7.2f} {j / d:>6.2f}  {_load()}")
                lines.append(line)
                print(line, flush=True)
                totals.append((d, r, j))
        finally:
            executor.shutdown()
            jobs.shutdown()
        if totals:
            ratios = sorted(r / d for d, r, _ in totals)
            in_proc = sorted(j / d for d, _, j in totals)
            sd, sr, sj = (sum(t[i] for t in totals) for i in range(3))
            line = (f"all presets: direct {sd:.1f} s, runs {sr:.1f} s, ratio of the sums {sr / sd:.2f}, median "
                    f"ratio {ratios[len(ratios) // 2]:.2f}; jobs (in-process) {sj:.1f} s, ratio of the sums "
                    f"{sj / sd:.2f}, median ratio {in_proc[len(in_proc) // 2]:.2f} (one preset's ratio swings "
                    "with the load: see above)")
            lines.append(line)
            print(line, flush=True)
        if not args.no_restart:
            with tempfile.TemporaryDirectory() as tmp2:
                res = restart(Path(tmp2))
            line = (f"restart: killed (server + worker, kill -9) at step {res['killed_at']}, last checkpoint "
                    f"step {res['checkpoint_step']}; a new server's run trains again after "
                    f"{res['continues_s']:.1f} s (a worker of this machine that is gone frees its run at once; "
                    f"one elsewhere when its {res['lease_s']:g} s lease runs out); it ended {res['state']} at step "
                    f"{res['final_step']} of {res['total_steps']}  load {_load()}")
            lines.append(line)
            print(line, flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
