"""A second app server, as far as runs go: a process that joins the test's Ray cluster as a driver
and submits or lists runs through ``tfviz.runs.ray`` (tests/test_ray_runs.py runs it).

    python tests/ray_driver.py ADDRESS submit OWNER STEPS CHECKPOINT   prints {"id": ...}, then
                                                    {"running": step} once the run trains, then waits
    python tests/ray_driver.py ADDRESS list OWNER   prints the owner's runs as JSON snapshots
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASK = {"name": "copy", "arch": "decoder", "n_symbols": 6, "min_len": 2, "max_len": 5,
        "n_train": 300, "n_val": 20, "n_test": 20}
MODEL = {"arch": "decoder", "d_model": 16, "n_heads": 2, "n_layers": 1, "pos": "rope"}


def train_config(steps: int):
    from tfviz.train import TrainConfig

    return TrainConfig(steps=steps, batch_size=8, lr=3e-3, warmup=1, log_every=1, eval_every=0,
                       eval_examples=10, snapshot_every=0, checkpoint_every=0)


def model_config():
    from tfviz.tasks import make_task
    from tfviz.train.setup import model_config_for

    return model_config_for(make_task(TASK), **MODEL)


def manager(address: str):
    from tfviz.runs.ray import connect
    from tfviz.runs.manager import RunManager

    store, executor = connect(address)
    return RunManager(store, executor, max_concurrent=executor.capacity(), per_owner=2)


def main(argv: list[str]) -> int:
    address, command, owner = argv[:3]
    runs = manager(address)
    if command == "list":
        print(json.dumps([j.snapshot().to_dict() for j in runs.jobs(owner=owner)]), flush=True)
        return 0
    steps, checkpoint = int(argv[3]), argv[4]
    run_id = runs.submit(model_config(), TASK, train_config(steps), owner=owner, checkpoint=checkpoint)
    print(json.dumps({"id": run_id}), flush=True)
    while True:
        snap = runs.get(run_id).snapshot()
        if snap.state == "running" and snap.step > 0:
            print(json.dumps({"running": snap.step}), flush=True)
            break
        time.sleep(0.1)
    time.sleep(3600)  # the test kills this "app server" now
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
