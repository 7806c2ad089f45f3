"""Measure Compare's default "train a pair" as the app runs it: the form's default setting and
values on a task, each run the task's Train preset (its width and steps), two runs at once with
one torch thread each through one JobManager (``RunManager`` in this process), from submit to both saved. Prints wall and CPU
seconds, each run's final validation / test accuracy, and the load average before and after.

    .venv/bin/python scripts/measure_pair.py [TASK] [SETTING]     # default: lm norm
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    from tfviz.tasks import cached_task
    from tfviz.runs.jobs import JobManager
    from tfviz.runs.pairs import DEFAULT_VALUES, parse_values, preset_pair, submit_pair
    from tfviz.train.presets import QUICK

    task_name = argv[0] if argv else "lm"
    setting = argv[1] if len(argv) > 1 else "norm"
    task = cached_task({"name": task_name})
    task.examples("train")  # built before the clock starts (the app builds it while the form is read)
    runs = preset_pair(task, setting, parse_values(setting, DEFAULT_VALUES[setting]),
                       steps=QUICK[task_name].train.steps, d_model=None)
    load_before = os.getloadavg()
    jobs = JobManager(max_concurrent=2, torch_threads=1)
    with tempfile.TemporaryDirectory() as folder:
        t0, c0 = time.perf_counter(), time.process_time()
        ids = submit_pair(jobs, runs, task, owner="measure", directory=folder)
        jobs.wait_all()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    snaps = [jobs.snapshot(i) for i in ids]
    print(json.dumps({
        "task": task_name, "setting": setting, "values": DEFAULT_VALUES[setting],
        "steps": runs[0].train_config.steps, "d_model": runs[0].model_config.d_model,
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cpu_count": os.cpu_count(),
        "runs": {s.name: {"state": s.state, **{k: round(_last(s.history, k), 3)
                                               for k in ("val_accuracy", "val_loss")}} for s in snaps},
        "load_average": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
        "measured": time.strftime("%Y-%m-%d")}))
    return 0


def _last(history: list[dict], key: str) -> float:
    return next((h[key] for h in reversed(history) if h.get(key) is not None), float("nan"))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
