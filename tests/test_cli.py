"""``python -m tfviz``: train writes a loadable checkpoint, info prints its card, errors are clear."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tfviz.train.checkpoint import load_checkpoint
from tfviz.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--task", "copy", "--task-arg", "arch=decoder", "--task-arg", "n_train=300", "--task-arg", "n_val=20",
        "--task-arg", "n_test=20", "--task-arg", "max_len=5", "--d-model", "16", "--heads", "2",
        "--layers", "1", "--pos", "rope", "--batch-size", "8", "--lr", "3e-3", "--threads", "1",
        "--eval-every", "5", "--snapshot-every", "0", "--eval-examples", "10"]


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tfviz", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_train_then_info_as_a_module(tmp_path):
    out = tmp_path / "ck" / "tiny"
    proc = run_module("train", *TINY, "--steps", "10", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "step      5/10" in proc.stdout and "val_acc" in proc.stdout  # progress line per evaluation
    assert "done: 10 steps in" in proc.stdout and "test accuracy" in proc.stdout
    assert f"checkpoint: {out}.safetensors" in proc.stdout
    ck = load_checkpoint(out)
    assert ck.config.d_model == 16 and ck.config.pos == "rope" and ck.step == 10
    assert ck.train_config.warmup == 1 and ck.task["name"] == "copy"  # warmup = min(100, steps // 10)
    info = run_module("info", str(out) + ".safetensors")
    assert info.returncode == 0, info.stderr
    assert "decoder, 1 layers, 2 heads" in info.stdout and "name=copy" in info.stdout
    assert "step 10 of 10" in info.stdout and "test_accuracy" in info.stdout


def test_resume_extends_training(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", *TINY, "--steps", "6", "--out", str(out), "--quiet"]) == 0
    assert main(["train", "--resume", str(out), "--steps", "12"]) == 0
    printed = capsys.readouterr().out
    assert "for 12 steps from step 6" in printed and "done: 12 steps" in printed
    ck = load_checkpoint(out)
    assert ck.step == 12 and [h["step"] for h in ck.history if "val_loss" in h] == [5, 6, 10, 12]


@pytest.mark.parametrize("extra, message", [
    (["--lr", "0"], "lr=0.0 must be above 0"),
    (["--heads", "3"], "d_model=16 is not divisible by n_heads=3"),
    (["--task-arg", "colour=red"], "unknown params ['colour']"),
    (["--device", "tpu"], "device='tpu' is not one of"),
    (["--arch", "encoder"], "is meant for encoder-decoder, decoder, not 'encoder'"),
])
def test_bad_settings_exit_2_with_message(tmp_path, capsys, extra, message):
    assert main(["train", *TINY, "--steps", "5", "--out", str(tmp_path / "x"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()


def test_missing_out_and_bad_files(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--task", "copy"])
    assert e.value.code == 2 and "--out" in capsys.readouterr().err
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x80\x04garbage-pickle")
    assert main(["info", str(bad)]) == 1
    assert "never loaded" in capsys.readouterr().err


def test_tasks_lists_the_registry(capsys):
    assert main(["tasks"]) == 0
    printed = capsys.readouterr().out
    assert "coref" in printed and "induction" in printed


def test_forced_cuda_without_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU
    assert main(["train", *TINY, "--steps", "5", "--out", str(tmp_path / "x"), "--device", "cuda"]) == 2
    assert "no CUDA GPU is available" in capsys.readouterr().err


def test_export_to_a_place_no_folder_can_be_made_is_one_line(tmp_path):
    """Issue 29, defect 12: ``--out`` a dangling link, a path under a file, or under /proc printed
    a traceback (FileExistsError, NotADirectoryError, FileNotFoundError from mkdir). Now one line
    each, exit 1, nothing written; the real command, in its own process."""
    pytest.importorskip("transformers")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "a-file").write_text("x")
    ckpt = ROOT / "checkpoints" / "pos-learned.safetensors"
    for out, says in ((tmp_path / "dangling", "is a link to nothing"),
                      (tmp_path / "a-file" / "sub", "cannot make the folder .*: Not a directory"),
                      (Path("/proc/tfviz-export-test"), "cannot make the folder /proc/tfviz-export-test")):
        proc = run_module("export", str(ckpt), "--out", str(out))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert re.search(says, lines[0]), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "dangling"] and not (tmp_path / "nowhere").exists()


def test_export_that_fails_while_writing_is_one_line_and_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """Any OSError while the folder is written (here: the disk refuses the weights) is one line,
    and the folder the export made is removed again."""
    from tfviz import storage

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage, "write", full)  # the weights: the export writes its own folder
    out = tmp_path / "out"
    assert main(["export", str(ROOT / "checkpoints" / "pos-learned.safetensors"), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: cannot write the model into {out}: No space left on device", err
    assert not out.exists()
