"""DistributedDataParallel: `torchrun --nproc_per_node=2 -m tfviz train` on CPU (gloo) ends with the same
weights as one process training on the same global batch: every rank draws the same global batch
from the seeded generator and trains on its half; the loss is normalised by the global token count."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tfviz.train.checkpoint import load_checkpoint
from tfviz.cli import main

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--task", "copy", "--task-arg", "arch=decoder", "--task-arg", "n_train=300", "--task-arg", "n_val=20",
        "--task-arg", "n_test=20", "--d-model", "16", "--heads", "2", "--layers", "2", "--pos", "rope",
        "--steps", "15", "--batch-size", "8", "--lr", "3e-3", "--warmup", "2", "--threads", "1",
        "--eval-every", "0", "--snapshot-every", "0", "--eval-examples", "10", "--quiet"]


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed + gloo")
def test_two_cpu_processes_match_one(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "tfviz", "train", *ARGS, "--device", "cpu", "--out", str(tmp_path / "two")],
        capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before = torch.get_num_threads()
    try:
        assert main(["train", *ARGS, "--device", "cpu", "--out", str(tmp_path / "one")]) == 0
    finally:
        torch.set_num_threads(before)
    one, two = load_checkpoint(tmp_path / "one"), load_checkpoint(tmp_path / "two")
    assert one.step == two.step == 15
    w1, w2 = one.model.state_dict(), two.model.state_dict()
    for k in w1:
        assert torch.allclose(w1[k], w2[k], atol=1e-5, rtol=1e-4), (k, (w1[k] - w2[k]).abs().max())
    # the loss curves agree too (rank 0 logs the all-reduced global loss)
    l1 = [h["train_loss"] for h in one.history]
    l2 = [h["train_loss"] for h in two.history]
    assert l1 == pytest.approx(l2, rel=1e-4)
    assert two.history[-1]["train_loss"] < two.history[0]["train_loss"]  # and it trained
