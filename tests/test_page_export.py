"""Export as a Hugging Face folder from the app (issue 30, item 4), in AppTest: the sidebar's
panel on a model's page and the Train page's panel for a finished run, the Train form's
"Architecture shape" (GPT-2- / Llama-shaped) that makes a run exportable, and the folder the app
writes into models/: listed by the picker on the next render, opened with its task back. What a
written folder computes is held to transformers in tests/test_export_folder.py."""
from __future__ import annotations

import pytest
from apptest_helpers import messages, my_jobs, ok, open_page, poll

import tfviz
from tfviz.interop import from_pretrained
from tfviz.train.presets import QUICK

EXPANDER = "Export as a Hugging Face folder"


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    """An empty models/ (TFVIZ_MODELS_DIR), a Hugging Face cache of nothing, no teacher key."""
    models = tmp_path / "models"
    monkeypatch.setenv("TFVIZ_MODELS_DIR", str(models))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("TFVIZ_TEACHER_KEY", raising=False)
    return models


def _panel(where):
    found = [e for e in where.expander if e.label == EXPANDER]
    assert len(found) == 1, [e.label for e in where.expander]
    return found[0]


def _downloads(at) -> list[str]:
    return [d.proto.label for d in at.get("download_button")]


def _picker(at):
    return at.sidebar.selectbox(key="model_select")


def test_sidebar_export_saves_a_folder_listed_at_once_with_its_task(tiny_zoo, models_dir):
    """The Attention explorer's sidebar, with the induction model (attention-only, learned
    positions: a GPT-2 with MLPs of zeros): download offered, Save writes models/<name>, the
    picker lists it on the very next render, and opened from there it has its task back."""
    at = open_page("attention", tiny_zoo["tiny-induction"])
    panel = _panel(at.sidebar)
    assert "Written as **GPT-2** (`GPT2LMHeadModel`)" in " ".join(c.value for c in panel.caption)
    assert "Download the folder (zip)" in _downloads(at)
    assert not any("(local" in o for o in _picker(at).options)
    at.sidebar.button(key="sidebar_export_save").click().run()
    ok(at)
    folder = models_dir / "tiny-induction"
    assert (folder / "config.json").is_file() and (folder / "tfviz_task.json").is_file()
    assert "Saved as **models/tiny-induction**" in messages(at)
    assert not list(models_dir.glob(".*"))  # no temp folder left
    options = _picker(at).options  # the same run that wrote it: listed already
    assert any(o.startswith("tiny-induction (local · GPT-2 · ") for o in options), options
    at.sidebar.button(key="sidebar_export_open").click().run()
    ok(at)
    assert _picker(at).value == str(folder)
    from ui.models import ModelRef, load_model
    lm = load_model(ModelRef("x", str(folder), "local"))
    assert lm.task_name == "induction" and lm.config.attn_only
    assert "Task example" in at.radio(key="att_source").options  # its examples are back
    # a local folder is one already: no second export of it
    assert "a Hugging Face folder already" in " ".join(c.value for c in _panel(at.sidebar).caption)
    # saving again under the same name is refused by name, nothing overwritten
    at.session_state["model_path"] = str(tiny_zoo["tiny-induction"])
    at.run()
    at.sidebar.button(key="sidebar_export_save").click().run()
    assert "Not saved: models/tiny-induction already exists" in messages(at)


def test_sidebar_says_why_a_model_does_not_export(tiny_zoo, models_dir):
    at = open_page("attention", tiny_zoo["tiny-coref"])  # RoPE + LayerNorm + GELU: no family
    panel = _panel(at.sidebar)
    said = " ".join(c.value for c in panel.caption)
    assert "Not exportable: this model cannot be written as GPT-2: pos='rope'" in said
    assert "Llama-family: normalization='layernorm'" in said
    assert "Architecture shape" in " ".join(c.value for c in panel.caption)
    assert not _downloads(at) or "Download the folder (zip)" not in _downloads(at)


def test_on_a_class_server_only_the_teacher_saves_into_models(tiny_zoo, models_dir, monkeypatch):
    monkeypatch.setenv("TFVIZ_TEACHER_KEY", "a-long-enough-teacher-key")
    at = open_page("attention", tiny_zoo["tiny-induction"])
    assert "Download the folder (zip)" in _downloads(at)
    assert not [b for b in at.sidebar.button if b.key == "sidebar_export_save"]
    assert "that is the teacher's" in " ".join(c.value for c in _panel(at.sidebar).caption)
    at.session_state["teacher"] = True
    at.run()
    assert [b for b in at.sidebar.button if b.key == "sidebar_export_save"]


# ------------------------------------------------------------------------------ the Train page
@pytest.fixture
def train_dirs(models_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    return models_dir


def _open_train(task: str):
    at = open_page("train")
    if at.selectbox(key="train_task").value != task:
        at.selectbox(key="train_task").select(task).run()
    return ok(at)


def _caption(at) -> str:
    return " ".join(c.value for c in at.caption)


def test_the_shape_choice_sets_the_form_and_says_what_it_changed(train_dirs):
    at = _open_train("coref")
    shape = at.selectbox(key="train_shape")
    assert shape.value == "tfviz (any setting)"  # the preset stays what it is by default
    assert shape.options == ["tfviz (any setting)", "GPT-2-shaped", "Llama-shaped", "BERT-shaped"]
    assert at.selectbox(key="train_pos").value == "rope"
    shape.select("GPT-2-shaped").run()
    ok(at)
    assert at.selectbox(key="train_pos").value == "learned"
    said = _caption(at)
    assert "Changed in the form: Positions rope → learned" in said
    assert "activation gelu → gelu_new" in said and "tied embeddings off → on" in said
    for key, value in (("d_model", 64), ("n_layers", 2), ("n_heads", 4)):  # the preset's, kept
        assert at.number_input(key=f"train_{key}").value == value
    at.selectbox(key="train_shape").select("Llama-shaped").run()
    assert at.selectbox(key="train_pos").value == "rope"
    said = _caption(at)
    assert "normalization layernorm → rmsnorm" in said and "activation gelu → swiglu" in said
    assert "biases on → off" in said and "RoPE pairs interleaved → half" in said
    at.selectbox(key="train_shape").select("tfviz (any setting)").run()
    assert at.selectbox(key="train_pos").value == "rope"
    # a preset applied under a shape gets the shape again; a task no shape fits resets it
    at.selectbox(key="train_shape").select("GPT-2-shaped").run()
    at.selectbox(key="train_task").select("lm").run()
    assert at.selectbox(key="train_shape").value == "GPT-2-shaped"
    assert at.selectbox(key="train_pos").value == "learned" and QUICK["lm"].model["pos"] == "rope"
    at.selectbox(key="train_task").select("mlm").run()
    assert at.selectbox(key="train_shape").options == ["tfviz (any setting)", "BERT-shaped"]
    assert at.selectbox(key="train_shape").value == "tfviz (any setting)"
    # the form shows what trains: a field set against the shape is refused by name at Start
    at.selectbox(key="train_task").select("coref").run()
    at.selectbox(key="train_shape").select("GPT-2-shaped").run()
    at.selectbox(key="train_pos").select("rope")
    at.button(key="train_start").click().run()
    assert "Not started: GPT-2-shaped needs Positions = learned (the form has rope)" in messages(at)
    assert not my_jobs(at)


def test_a_gpt2_shaped_run_exports_from_the_train_page(train_dirs):
    """The coref preset, GPT-2-shaped, trained a few steps: its model is the GPT-2 the caption
    promised; its finished run offers the export, and the folder saved into models/ reopens with
    its task and the run's numbers."""
    at = _open_train("coref")
    at.selectbox(key="train_shape").select("GPT-2-shaped").run()
    at.number_input(key="train_steps").set_value(6)
    at.number_input(key="train_warmup").set_value(1)
    at.text_input(key="train_name").input("coref-gpt2")
    at.button(key="train_start").click().run()
    ok(at)
    (job,) = my_jobs(at)
    cfg = job.spec["model_config"]
    assert (cfg.pos, cfg.normalization, cfg.activation, cfg.bias, cfg.tie_embeddings) == (
        "learned", "layernorm", "gelu_new", True, True)
    poll(at, lambda a: a.success, timeout=300)
    snap = job.snapshot()
    assert snap.state == "done", snap.error
    panel = _panel(at)
    assert "Written as **GPT-2**" in " ".join(c.value for c in panel.caption)
    assert "Download the folder (zip)" in _downloads(at)
    at.button(key="train_export_save").click().run()
    ok(at)
    folder = train_dirs / "coref-gpt2"
    assert "Saved as **models/coref-gpt2**" in messages(at)
    back, ck = from_pretrained(folder), tfviz.load_checkpoint(snap.checkpoint)
    assert back.task == ck.task and back.task["name"] == "coref"
    e = back.shared_task().examples("validation")[0]
    import torch
    x = torch.tensor([e.tokens])
    with torch.no_grad():
        torch.testing.assert_close(back.model(x), ck.model.eval()(x), atol=1e-5, rtol=1e-5)
