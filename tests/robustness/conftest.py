"""Shared fixtures of the robustness tests (bad input, hostile uploads, isolation, faults).

- ``classroom``: a private TFVIZ_CHECKPOINT_DIR holding copies of two tiny models, so uploads,
  trained models and published models of these tests never show up in other tests' pickers.
- ``app(page, model=…)``: an AppTest of app.py switched to ``app_pages/<page>.py``.
Helpers (problems, messages, session_files, hostile files) live in robust_helpers.py.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from robust_helpers import problems
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


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
    def _open(page: str | None = None, model: Path | str | None = None, **state) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=90)
        if model is not None:
            at.session_state["model_path"] = str(model)
        for k, v in state.items():
            at.session_state[k] = v
        at.run()
        if page is not None:
            at.switch_page(f"app_pages/{page}.py").run()
        assert not problems(at), problems(at)
        return at

    return _open
