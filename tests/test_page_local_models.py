"""Every page on models opened from local Hugging Face folders (issue 12 item 4), in AppTest.

Tiny random GPT-2, BERT and Llama folders (tests/hf_folders.py: save_pretrained + a tokenizer.json
whose specials are away from ids 0-6) under a temp TFVIZ_MODELS_DIR, plus a folder that cannot
open (pickle-only weights). The picker lists them as *local*, with family and size, and the bad
one with its reason; every page runs on each model without an exception and without an error box
(a view that does not apply says so plainly); what the pages show is checked against
``tfviz.from_pretrained`` + ``tfviz.record`` computed here, independently of the app.
"""
from __future__ import annotations

import math
import os
import random
import re

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

import hf_folders  # noqa: E402
import tfviz  # noqa: E402
from apptest_helpers import arr, chart, messages, ok, open_page, rerun, text  # noqa: E402

KINDS = ("gpt2", "bert", "llama")
PAGES = ("home", "attention", "positional", "compare", "masks", "generate", "tokens", "cost", "findings", "train")
TABS = ("Heatmap", "All heads", "Lines", "Step-through", "Head roles", "Pronoun probe")
SENTENCE = "the cat sat on the mat and the dog sat on the log"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    models = root / "models"
    out = {kind: models / kind for kind in KINDS}
    for i, (kind, folder) in enumerate(out.items()):
        hf_folders.build(kind, folder, seed=i)
    bad = models / "pickled"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "gpt2"}')
    (bad / "pytorch_model.bin").write_bytes(b"not opened")
    env = {"TFVIZ_MODELS_DIR": str(models), "HF_HUB_CACHE": str(root / "hub"),
           "TFVIZ_CHECKPOINT_DIR": str(root / "checkpoints")}
    (root / "checkpoints").mkdir()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield out
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def models(folders):
    return {kind: tfviz.from_pretrained(folder) for kind, folder in folders.items()}


def no_errors(at) -> None:
    ok(at)
    assert not at.error, [e.value for e in at.error]


def test_picker_lists_local_folders_and_why_one_cannot_open(folders, models):
    at = open_page("attention", folders["gpt2"])
    no_errors(at)
    box = next(s for s in at.sidebar.selectbox if s.label == "Model")
    labels = {o for o in box.options}
    for kind, label in (("gpt2", "GPT-2"), ("bert", "BERT"), ("llama", "Llama-family")):
        assert any(o.startswith(f"{kind} (local · {label} · ") and "params" in o for o in labels), labels
        # issue 25, item 8: the picker said 134k / 92k (weight bytes / 4) where the card and
        # `python -m tfviz info` say 133,568 / 90,665: one count, the loaded model's
        n = sum(p.numel() for p in models[kind].model.parameters())
        assert f"{n:,} parameters" in models[kind].card()
        assert any(o.startswith(f"{kind} (local · ") and f" · {n:,} params, " in o for o in labels), labels
    assert not any("pickled" in o for o in labels)  # not selectable ...
    bad = next(e for e in at.sidebar.expander if "cannot open" in e.label)
    assert "pickled" in bad.markdown[0].value and "pickle" in bad.markdown[0].value  # ... but listed
    # the heatmap is the model's own pattern on the ids shown (recorded here independently)
    ck = models["gpt2"]
    ids = ck.tokenizer.encode("the cat sat on the mat .", template=True).ids
    rec = tfviz.record(ck.model, torch.tensor([ids]), names=["blocks.0.attn.hook_pattern"])
    np.testing.assert_allclose(arr(chart(at, "att_heatmap")["data"][0]["z"]),
                               rec["blocks.0.attn.hook_pattern"][0, 0].numpy(), atol=1e-6)


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_page_runs_on_every_family(folders, kind, page):
    at = open_page(page, folders[kind])
    no_errors(at)
    if page == "generate" and kind == "bert":
        assert "is an encoder, so it cannot generate" in messages(at)
    assert "[UNK]" not in messages(at) or kind != "gpt2"  # byte-level BPE: nothing is unknown


@pytest.mark.parametrize("kind", KINDS)
def test_every_attention_view(folders, models, kind):
    at = open_page("attention", folders[kind], att_text=SENTENCE)
    for tab in TABS:
        rerun(at, att_tab=tab)
        no_errors(at)
    ids = models[kind].tokenizer.encode(SENTENCE, template=True).ids
    rerun(at, att_tab="Head roles")
    assert f"your text ({len(ids)} tokens)" in text(at)  # no task: scored on the user's sentence
    assert at.dataframe[0].value.shape[0] == models[kind].config.n_layers * models[kind].config.n_heads
    rerun(at, att_tab="Pronoun probe")
    assert "coreference models" in messages(at)
    rerun(at, att_tab="Step-through", att_layer=1, att_head=2)
    assert at.success, "the step-through's softmax(q·K)·V must equal the recorded output"


def test_positional_learned_table_of_gpt2(folders, models):
    at = open_page("positional", folders["gpt2"])
    no_errors(at)
    wpe = models["gpt2"].model.pos.table.weight if hasattr(models["gpt2"].model, "pos") else None
    table = tfviz.positional_tables(models["gpt2"].model)["learned"].numpy()
    np.testing.assert_allclose(arr(chart(at, "pos_learned_matrix")["data"][0]["z"]), table, atol=1e-6)
    assert wpe is None or wpe.shape[0] == table.shape[0]


def test_positional_learned_and_token_types_of_bert(folders, models):
    at = open_page("positional", folders["bert"])
    no_errors(at)
    types = models["bert"].model.token_type_embed.weight.detach().numpy()
    np.testing.assert_allclose(arr(chart(at, "pos_token_types")["data"][0]["z"]), types, atol=1e-6)
    assert "type 1 for the second" in text(at)


def test_positional_rope_of_llama_uses_half_split_pairs(folders):
    at = open_page("positional", folders["llama"], pos_rope_text=SENTENCE)
    no_errors(at)
    assert "half-split pairs (i, i + d/2)" in text(at)
    for m, n in ((5, 2), (8, 8), (3, 0)):
        rerun(at, pos_rope_m=m, pos_rope_kpos=n)
        cap = next(c.value for c in at.caption if "Rotated to those positions" in c.value)
        rotated, model = (float(x) for x in re.findall(r"is (-?\d+\.\d+|-?inf)", cap)[:2])
        assert math.isclose(rotated, model, abs_tol=1e-3), cap  # the page's rotation = the model's


@pytest.mark.parametrize("kind", KINDS)
def test_every_mask(folders, kind):
    at = open_page("masks", folders[kind], mask_text=SENTENCE)
    for mask in ("causal / full", "padding", "sliding window", "global + local"):
        rerun(at, mask_kind=mask)
        no_errors(at)


def test_generate_with_the_kv_cache(folders, models):
    at = open_page("generate", folders["gpt2"])
    no_errors(at)
    assert "[UNK]" not in messages(at)
    ck = models["gpt2"]
    from tfviz.generation import NO_TASK_PROMPT
    prompt = [ck.tokenizer.bos_id] + ck.tokenizer.encode(NO_TASK_PROMPT).ids
    want = ck.model.generate(torch.tensor([prompt]), 16, temperature=0.0)[0].tolist() \
        if hasattr(ck.model, "generate") else None
    html = at.get("html")[0].proto.body
    if want is not None:
        for t in ck.tokenizer.tokens_of(want[len(prompt):][:4]):
            assert t.strip() == "" or t.strip() in html


def test_tokens_page_shows_readable_bpe(folders, models):
    at = open_page("tokens", folders["gpt2"])
    no_errors(at)
    shown = " ".join(str(d.value.to_dict()) for d in at.dataframe)
    assert "Ġ" not in shown


def test_fine_tune_a_local_decoder_on_the_train_page(folders):
    words = " ".join(hf_folders.CORPUS[:4]).split()
    rng = random.Random(0)
    own = " ".join(rng.choice(words) for _ in range(300))
    at = open_page("train")
    assert [e for e in at.expander if "Fine-tune a local model" in e.label]
    at.selectbox(key="ft_model").set_value(str(folders["gpt2"].resolve()))
    at.text_area(key="ft_text").set_value(own)
    at.number_input(key="ft_block").set_value(16)
    at.number_input(key="ft_steps").set_value(6)
    at.number_input(key="ft_lr").set_value(3e-3)
    at.button(key="ft_start").click().run()
    no_errors(at)
    from ui.jobs import job_manager
    job = next(j for j in job_manager().jobs() if j.name.startswith("gpt2-finetuned"))
    assert job.wait(300)
    snap = job.snapshot()
    assert snap.state == "done", snap.error
    at.run()
    at.button(key="train_open").click().run()
    no_errors(at)
    assert at.title[0].value == "Attention explorer"
    ck = tfviz.load_checkpoint(snap.checkpoint)
    assert ck.task["tokenizer"] == "given" and ck.tokenizer.vocab_size == ck.config.vocab_size


def test_loading_a_local_folder_shows_its_progress(folders, tmp_path, monkeypatch):
    """The first load of a folder draws a bar that follows ``from_pretrained``'s progress (what
    is being read) to 1.0 and is removed once the model is there; a second load is the cache's."""
    import shutil

    import streamlit as st

    from ui import models as ui_models
    folder = tmp_path / "fresh-llama"  # a path no earlier test loaded: not in the model cache
    shutil.copytree(folders["llama"], folder)
    seen: list = []

    class Bar:
        def progress(self, fraction, text=""):
            seen.append((fraction, text))

        def empty(self):
            seen.append("emptied")

    def progress(fraction, text=""):
        seen.append((fraction, text))
        return Bar()
    monkeypatch.setattr(st, "progress", progress)
    ref = ui_models.ModelRef("fresh-llama (local · Llama-family)", str(folder), "local")
    loaded = ui_models.load_model(ref)
    assert seen[-1] == "emptied"
    fractions = [f for f, _ in seen[:-1]]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions) and len(fractions) > 5
    assert any("reading model.layers.0." in text for _, text in seen[:-1]), seen
    assert all(text.startswith("Loading fresh-llama") for _, text in seen[:-1])
    assert loaded.ckpt.meta["extra"]["imported"]["family"] == "llama"
    seen.clear()
    assert ui_models.load_model(ref).ckpt is loaded.ckpt and not seen  # cached: no bar
