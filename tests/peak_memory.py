"""How much a real training run's resident memory grows, measured in another process by the
kernel: the memory estimate's independent check (tests/robustness/test_shared_server.py,
tests/test_recurrent.py).

The peak (VmHWM) is reset through /proc/self/clear_refs just before training, so what came
before (importing torch, building the task) cannot hide the step's own peak, as it did when the
tests read ru_maxrss, which cannot be reset."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_MEASURE = r"""
import json, sys, torch
import torch._dynamo, torch.optim  # what the first optimiser step imports: a server has them already
torch.set_num_threads(1)
from tfviz.model.families import config_from_dict
from tfviz.tasks import make_task
from tfviz.train import TrainConfig, train
from tfviz.train.setup import new_model
cfg, tc = config_from_dict(json.loads(sys.argv[1])), TrainConfig.from_dict(json.loads(sys.argv[2]))
model = new_model(cfg, 0)
task = make_task(json.loads(sys.argv[3]))
def status(key):  # bytes, from the kernel's own accounting of this process
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))
before = status("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # the peak restarts from the memory in use now
train(model, task, tc)
print(status("VmHWM:") - before)
"""


def training_growth(model_config, train_config, task_spec: dict) -> int:
    """Bytes the peak resident memory of ``train(model, make_task(task_spec), train_config)``
    rose above the memory in use just before it, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(model_config.to_dict()),
                          json.dumps(train_config.to_dict()), json.dumps(task_spec)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])
