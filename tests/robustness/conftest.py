"""Shared fixtures of the robustness tests (bad input, hostile uploads, isolation, faults).

- ``classroom``: a private TFVIZ_CHECKPOINT_DIR holding copies of two tiny models, so uploads,
  trained models and published models of these tests never show up in other tests' pickers.
- ``app(page, model=…)``: ``apptest_helpers.open_page`` (app.py switched to ``app_pages/<page>.py``).
- ``train``: the Train page on the copy task; every job of the session stopped afterwards.
Helpers (problems, messages, session_files, hostile files) live in robust_helpers.py.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from apptest_helpers import open_page, stop_all


@pytest.fixture
def classroom(tiny_zoo, tmp_path, monkeypatch) -> dict[str, Path]:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    out = {}
    for name in ("tiny-coref", "tiny-induction"):
        out[name] = Path(shutil.copy(tiny_zoo[name], folder / f"{name}.safetensors"))
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(folder))
    monkeypatch.delenv("TFVIZ_TEACHER_KEY", raising=False)
    out["dir"] = folder
    return out


@pytest.fixture
def app():
    """``apptest_helpers.open_page``: one way to open a page in every test."""
    return open_page


@pytest.fixture
def train(app, classroom):
    """The Train page on the copy task; every job of the session stopped afterwards."""
    at = app("train")
    if at.selectbox(key="train_task").value != "copy":
        at.selectbox(key="train_task").select("copy").run()
    yield at
    stop_all(at)
