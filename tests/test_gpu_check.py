"""scripts/gpu_check.sh: without a CUDA GPU it says so and stops (exit 2) before running anything;
its parts and outputs are what docs/gpu.md (the README's GPU section until issue 41) documents."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_without_cuda_it_stops_with_a_message():
    proc = subprocess.run(["bash", str(SCRIPT), "tests"], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert proc.returncode == 2
    assert "no CUDA GPU visible" in proc.stderr


def test_parts_and_outputs_are_documented():
    text, readme = SCRIPT.read_text(), (ROOT / "docs" / "gpu.md").read_text()  # moved from the README (issue 41)
    for part in ("tests", "bench", "presets", "ddp"):
        assert f"{part})" in text  # a case branch
    for out in ("docs/bench/attention_cuda", "docs/bench/model_cuda.txt", "docs/bench/presets_cuda.txt"):
        assert out in text
    assert "scripts/gpu_check.sh" in readme and "torchrun --standalone --nproc_per_node=N" in readme
    assert '--ignore=tests/e2e' in text and '-m gpu' in text
