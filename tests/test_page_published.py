"""Issue 33 on the pages (AppTest): the Train page's replay shows the phase change a run recorded,
the Findings page the shipped 2-layer / 1-layer runs on the same axes, the Masks page the
attention-sink section — each chart holding the recorded / recomputed numbers, each sentence
the one written from them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import arr, chart, my_jobs, ok, open_page, poll, text

from tfviz.analysis import phase as ph
from tfviz.analysis import sinks
from tfviz.paths import SHIPPED
from tfviz.tasks import make_task
from tfviz.train import TrainConfig, model_config_for, new_model, train
from tfviz.train.checkpoint import load_checkpoint


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    return tmp_path


def heat(fig: dict, i: int = 0) -> np.ndarray:
    return arr([t for t in fig["data"] if t["type"] == "heatmap"][i]["z"])


def test_train_replay_shows_the_phase_change_the_run_recorded(models_dir) -> None:
    at = open_page("train")
    if at.selectbox(key="train_task").value != "induction":
        at.selectbox(key="train_task").select("induction").run()
    at.number_input(key="train_steps").set_value(20)
    at.number_input(key="train_warmup").set_value(2)
    at.button(key="train_start").click().run()
    ok(at)
    (job,) = my_jobs(at)
    poll(at, lambda a: a.success)
    phase = load_checkpoint(job.snapshot().checkpoint).phase
    steps = [r["step"] for r in phase["records"]]
    assert steps[0] == 0 and steps[-1] == 20
    fig = chart(at, "train_phase_heat")
    np.testing.assert_allclose(heat(fig), np.array([r["loss"] for r in phase["records"]]).T, rtol=1e-6)
    assert arr(fig["data"][0]["x"]).tolist() == steps
    timeline = chart(at, "train_phase_timeline")
    icl = next(t for t in timeline["data"] if t["name"].endswith("ICL score"))
    e, l = phase["probe"]["early"], phase["probe"]["late"]
    np.testing.assert_allclose(arr(icl["y"]), [r["loss"][l] - r["loss"][e] for r in phase["records"]], rtol=1e-6)
    name = job.snapshot().name
    assert ph.phase_story(phase, name)["sentence"] in text(at)


def test_findings_phase_change_holds_the_shipped_records() -> None:
    at = open_page("findings", finding="The phase change")
    two = load_checkpoint(SHIPPED / "phase-2L.safetensors").phase
    one = load_checkpoint(SHIPPED / "phase-1L.safetensors").phase
    fig = chart(at, "find_phase_heat")
    for i, p in enumerate((two, one)):
        np.testing.assert_allclose(heat(fig, i), np.array([r["loss"] for r in p["records"]]).T, rtol=1e-6)
    timeline = chart(at, "find_phase_timeline")
    names = [t["name"] for t in timeline["data"]]
    assert "2 layers: ICL score" in names and "1 layer: ICL score" in names
    words = text(at)
    for label, p in (("2 layers", two), ("1 layer", one)):
        assert ph.phase_story(p, label)["sentence"] in words
    assert "Olsson et al. 2022" in words and "2.5 to 5 billion tokens" in words


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    """A real (tiny) language model on the built-in grammar: block 16, a few dozen steps."""
    path = tmp_path_factory.mktemp("lm") / "tiny-lm"
    task = make_task({"name": "lm", "seed": 0, "block": 16, "n_sentences": 3000})
    model = new_model(model_config_for(task, arch="decoder", pos="rope", n_layers=1, n_heads=2,
                                       d_model=16), 0)
    train(model, task, TrainConfig(steps=20, batch_size=8, warmup=2, eval_every=0, snapshot_every=0,
                                   eval_examples=8, num_threads=1), checkpoint=path)
    return path.with_suffix(".safetensors")


def test_masks_page_measures_sinks_on_the_picked_language_model(tiny_lm, monkeypatch) -> None:
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tiny_lm.parent))  # the app lists it as shipped
    at = open_page("masks", model=tiny_lm)
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith("-sink_curves")]  # off until asked
    at.toggle(key="sink_live").set_value(True).run()
    ok(at)
    ck = load_checkpoint(tiny_lm)
    want = sinks.sink_report(ck.model, ck.tokenizer, ck.task)
    fig = chart(at, "sink_shares")
    z = heat(fig)
    for r in want["shares"].itertuples():
        assert z[r.layer, r.head] == pytest.approx(r.share_1, abs=1e-6)
    curves = chart(at, "sink_curves")
    assert [t["name"] for t in curves["data"]] == [sinks.condition_label(c) for c in sinks.conditions()]
    dense = want["curves"][want["curves"]["condition"] == "dense"]["loss"].to_numpy()
    np.testing.assert_allclose(arr(curves["data"][0]["customdata"]), dense, rtol=1e-5)
    words = text(at)
    assert want["story"]["sentence"].split(":", 1)[1] in words  # the numbers, whatever the label
    assert "5158.07" in words  # the paper's own number beside ours


def test_masks_page_falls_back_to_the_shipped_sink_model(tiny_zoo) -> None:
    """A model not trained on the built-in text (tiny induction): the card's sentence of the shipped
    lm-bos first, and live, lm-bos measured with a note saying so."""
    at = open_page("masks", model=tiny_zoo["tiny-induction"])
    card = load_checkpoint(SHIPPED / "lm-bos.safetensors").meta["extra"]["card"]
    assert card["finding"]["story"]["sentence"] in text(at)
    at.toggle(key="sink_live").set_value(True).run()
    ok(at)
    assert "was not trained on the built-in text" in text(at) and "lm-bos" in text(at)
    assert "lm-bos" in chart(at, "sink_curves")["layout"]["title"]["text"]


def test_a_link_opens_the_sink_section_measured_with_its_window(tiny_lm, monkeypatch) -> None:
    """The Lesson's window step goes deeper to the Masks page with ``sinks=true&sink_window=w``: the
    section opens measured with that window; a window that is not one of this model's choices
    falls back to half the training length, with a note."""
    from streamlit.testing.v1 import AppTest

    from apptest_helpers import APP

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tiny_lm.parent))

    def linked(**params) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=300)
        for k, v in {"model": f"shipped/{tiny_lm.stem}", **params}.items():
            at.query_params[k] = v
        at.switch_page("app_pages/masks.py")
        at.run()
        return ok(at)

    at = linked(sinks="true", sink_window="4")  # block 16: windows 4, 8, 15
    assert at.toggle(key="sink_live").value is True and at.select_slider(key="sink_window").value == 4
    ck = load_checkpoint(tiny_lm)
    want = sinks.sink_report(ck.model, ck.tokenizer, ck.task, window=4)
    assert want["story"]["sentence"].split(":", 1)[1] in text(at)
    at = linked(sinks="1", sink_window="5")
    assert at.select_slider(key="sink_window").value == 8
    assert any("sink_window=5" in i.value and "showing 8" in i.value for i in at.info), [i.value for i in at.info]
