"""Every page with a recurrent model picked (a user's trained RNN / LSTM / GRU is in the sidebar's
list like any checkpoint): no page shows a traceback, and the pages that draw attention, masks,
positions or the KV cache say in one sentence what the model lacks (``families.lacks``)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from apptest_helpers import APP, problems
from streamlit.testing.v1 import AppTest

from ui.navigation import PAGES

WHY = Path(__file__).resolve().parents[1] / "checkpoints" / "why"
NEEDS = {"attention": "has no self-attention", "masks": "has no self-attention",
         "generate": "has no self-attention", "positional": "has no positional encoding"}


@pytest.fixture(scope="module", params=["recall-lstm", "bottleneck-gru-attention"])
def recurrent(request, tmp_path_factory) -> Path:
    """A shipped recurrent checkpoint (a decoder LSTM; a GRU encoder-decoder with additive
    attention) as the only model of the app's folder."""
    folder = tmp_path_factory.mktemp("models")
    for suffix in (".safetensors", ".json"):
        src = WHY / f"{request.param}{suffix}"
        if src.exists():
            shutil.copy(src, folder / src.name)
    return folder / f"{request.param}.safetensors"


@pytest.mark.parametrize("page", [Path(p.file).stem for p in PAGES])
def test_a_recurrent_model_on_every_page(recurrent, page, monkeypatch) -> None:
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(recurrent.parent))
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["model_path"] = str(recurrent)
    at.run()
    at.switch_page(f"app_pages/{page}.py").run()
    assert not problems(at), problems(at)
    if page in NEEDS:
        assert any(NEEDS[page] in i.value for i in at.info), [i.value for i in at.info]
