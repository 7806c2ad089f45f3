"""Every page with a recurrent model picked (a user's trained RNN / LSTM / GRU is in the sidebar's
list like any checkpoint): no page shows a traceback, and the pages that draw attention, masks,
positions or the KV cache say in one sentence what the model lacks (``families.lacks``)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from apptest_helpers import charts, open_page, problems

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
    at = open_page(page, recurrent)  # no traceback (apptest_helpers.ok)
    if page in NEEDS:
        assert any(NEEDS[page] in i.value for i in at.info), [i.value for i in at.info]


def test_compare_an_lstm_with_a_transformer(tmp_path, monkeypatch) -> None:
    """Compare with a recurrent model: it is named as left out of the attention panels and joins
    the curves, the per-position and per-length losses and the cost table."""
    for name in ("recall-lstm", "recall-transformer"):
        for suffix in (".safetensors", ".json"):
            shutil.copy(WHY / f"{name}{suffix}", tmp_path)
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_page("compare", tmp_path / "recall-lstm.safetensors")
    models = next(m for m in at.multiselect if m.key == "cmp_models")
    models.set_value([str(tmp_path / f"{n}.safetensors") for n in ("recall-lstm", "recall-transformer")]).run()
    assert not problems(at), problems(at)
    assert any("recall-lstm" in i.value and "no self-attention" in i.value for i in at.info)
    titles = {}
    for spec in charts(at):
        titles[spec["layout"]["title"]["text"]] = {t.get("name") for t in spec["data"]}
    assert titles["Loss per position"] == {"recall-lstm", "recall-transformer"}
    assert "recall-transformer: every head" in titles and not any(t.startswith("recall-lstm:") for t in titles
                                                                   if "L0" in t or "every head" in t)
    cost = next(d.value for d in at.dataframe if "kv_bytes" in d.value.columns).set_index("model")
    assert cost.loc["recall-lstm", "heads"] == 0 and cost.loc["recall-lstm", "kv_bytes_per_token"] == 0
    at.button(key="cmp_lengths_run").click().run()
    assert not problems(at), problems(at)
    spec = charts(at)[-1]
    assert {t.get("name") for t in spec["data"]} >= {"recall-lstm", "recall-transformer"}
