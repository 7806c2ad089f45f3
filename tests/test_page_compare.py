"""Compare page (AppTest): the shipped pre/post-norm pair side by side — every chart holds the
checkpoints' own history or a recomputation on the one input —, models that share nothing are
refused with a message, and "train a pair" trains two runs that open side by side."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import arr, chart, ok, open_page

from tfviz import load_checkpoint
from tfviz.analysis.compare import layer_grad_norms, patterns_on
from tfviz.paths import zoo_dir

TIMEOUT_S = 240


def wait_for_the_pair(at) -> None:
    """Run the page until the pair's "Compare them side by side" button shows (fragments do not
    tick in AppTest)."""
    t0 = time.perf_counter()
    while not any(b.key == "pair_open" for b in at.button):
        assert time.perf_counter() - t0 < TIMEOUT_S, "the pair did not finish in time"
        time.sleep(0.5)
        at.run()
        ok(at)


@pytest.fixture
def shipped_pair(tmp_path, monkeypatch) -> list[str]:
    """The shipped pre/post-norm pair, copied to a temp folder the app lists as 'shipped'."""
    for n in ("pre", "post"):
        shutil.copy(zoo_dir() / f"norm-{n}.safetensors", tmp_path)
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    return [str(tmp_path / f"norm-{n}.safetensors") for n in ("pre", "post")]


def test_the_shipped_norm_pair_side_by_side(shipped_pair) -> None:
    PAIR = shipped_pair
    at = open_page("compare")
    assert sorted(at.session_state["cmp_models"]) == sorted(PAIR)  # the sidebar model and its task mate
    cks = {n: load_checkpoint(p) for n, p in zip(("norm-pre", "norm-post"), PAIR)}
    assert "they share the task lm" in " ".join(c.value for c in at.caption)
    curves = chart(at, "cmp_curves")["data"]
    post = next(t for t in curves if t["name"] == "norm-post: train loss")
    np.testing.assert_allclose(arr(post["y"]), [h["train_loss"] for h in cks["norm-post"].history])
    bars = {t["name"]: arr(t["y"]) for t in chart(at, "cmp_grad_bars")["data"]}
    for n, ck in cks.items():
        np.testing.assert_allclose(bars[n], layer_grad_norms(ck.history)["norm"])
    assert bars["norm-post"][0] > 2 * bars["norm-pre"][0]  # the measured early-layer difference
    ids = [int(i) for i in at.session_state["cmp_ids"]]
    pats = patterns_on({n: ck.model for n, ck in cks.items()}, ids)
    for n in cks:
        z = arr(chart(at, f"cmp_head_{n}")["data"][0]["z"])
        np.testing.assert_allclose(z, pats[n][0, 0], atol=1e-6)
    roles, cost = (d.value for d in at.dataframe)  # page order: head roles, cost
    assert sorted(roles.columns) == ["differs", "head", "layer", "norm-post", "norm-pre"] and len(roles) == 24
    cost = cost.set_index("model")
    assert cost.loc["norm-pre", "parameters"] == sum(p.numel() for p in cks["norm-pre"].model.parameters())
    assert (cost["step_ms"] > 0).all()


def test_models_that_share_nothing_are_refused(tiny_zoo) -> None:
    at = open_page("compare", cmp_models=[str(tiny_zoo["tiny-coref"]), str(tiny_zoo["tiny-translate"])])
    assert any("share neither a task nor a tokenizer" in e.value for e in at.error)


def test_train_a_pair_and_open_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_page("compare", cmp_tab="Train a pair", pair_task="lm", pair_setting="n_layers",
                   pair_steps_lm=10)  # the Steps box is one per task (issue 30)
    at.text_input(key="pair_values_n_layers").set_value("1, 2")
    at.button(key="pair_start").click().run()
    ok(at)
    wait_for_the_pair(at)
    names = {t["name"].split(":")[0] for t in chart(at, "pair_curves")["data"]}
    assert names == {"lm-1-layer", "lm-2-layers"}
    at.button(key="pair_open").click().run()
    ok(at)
    assert at.session_state["cmp_tab"] == "Side by side"  # the pair opens in the other tab
    picked = at.session_state["cmp_models"]
    assert sorted(p.rsplit("/", 1)[-1] for p in picked) == ["lm-1-layer.safetensors", "lm-2-layers.safetensors"]
    cks = [load_checkpoint(p) for p in picked]
    assert {c.config.n_layers for c in cks} == {1, 2} and cks[0].train_config == cks[1].train_config


@pytest.mark.parametrize("values, message", [("pre, pre", "not all different"),
                                             ("pre, sideways", "not one of")])
def test_a_bad_pair_says_why(values, message, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_page("compare", pair_task="lm", pair_setting="norm")
    at.text_input(key="pair_values_norm").set_value(values)
    at.button(key="pair_start").click().run()
    assert any(message in e.value for e in at.error)


def test_two_models_of_one_name_from_two_sources_are_both_compared(shipped_pair) -> None:
    """A published (or trained) model named like a shipped one: both are compared, each named
    with its source (was: one name for both, so one was dropped and the page said 'compare 2 to
    4 models, not 1')."""
    published = Path(shipped_pair[0]).parent / "published"
    published.mkdir()
    shutil.copy(shipped_pair[1], published / "norm-pre.safetensors")  # post-norm's weights
    at = open_page("compare", cmp_models=[shipped_pair[0], str(published / "norm-pre.safetensors")])
    assert not at.error, [e.value for e in at.error]
    cost = at.dataframe[-1].value.set_index("model")
    assert list(cost.index) == ["norm-pre (shipped)", "norm-pre (published)"]
    for n in cost.index:
        chart(at, f"cmp_head_{n}")


def test_every_settings_default_values_start_on_a_default_server(tmp_path, monkeypatch) -> None:
    """The form's own defaults fit the server's per-session limit (TFVIZ_JOBS_PER_SESSION, 2 by
    default; was: attention's 'MHA, GQA, MQA', 3 runs, refused), and the form says that limit."""
    from tfviz.runs.pairs import SETTINGS

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.delenv("TFVIZ_JOBS_PER_SESSION", raising=False)
    at = open_page("compare", pair_steps_lm=10)  # one Steps box per task (issue 30)
    assert "at most 2 runs" in " ".join(c.value for c in at.caption)
    for setting in SETTINGS:
        at.session_state["pair_setting"] = setting
        at.run()
        at.button(key="pair_start").click().run()
        assert not at.error, (setting, [e.value for e in at.error])
        wait_for_the_pair(at)  # done before the next setting


def test_two_imported_folders_compare_on_their_tokenizer(tmp_path, monkeypatch) -> None:
    """Two Hugging Face folders from disk with one tokenizer (no task, no history): one input for
    both, each head what recording the model gives; the page says why there are no training curves
    and no loss per length instead of leaving those sections empty."""
    import hf_folders

    from tfviz import from_pretrained

    folders = [tmp_path / "models" / n for n in ("gpt2-a", "gpt2-b")]
    for seed, folder in enumerate(folders):
        hf_folders.build("gpt2", folder, seed=seed)
    monkeypatch.setenv("TFVIZ_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    (tmp_path / "checkpoints").mkdir()
    at = open_page("compare", cmp_models=[str(f) for f in folders])
    assert not at.error, [e.value for e in at.error]
    words = " ".join(c.value for c in at.caption) + " " + " ".join(i.value for i in at.info)
    assert "they share a tokenizer" in words
    assert "gpt2-a, gpt2-b: no training history" in words
    assert "needs a task the models share" in words
    ids = [int(i) for i in at.session_state["cmp_ids"]]
    pats = patterns_on({f.name: from_pretrained(f).model for f in folders}, ids)
    for f in folders:
        np.testing.assert_allclose(arr(chart(at, f"cmp_head_{f.name}")["data"][0]["z"]),
                                   pats[f.name][0, 0], atol=1e-6)
    assert list(at.dataframe[-1].value["model"]) == ["gpt2-a", "gpt2-b"]


def train_copy_models(tmp_path, archs: dict) -> list[str]:
    """Tiny models (2 steps) on the copy task, one per name -> arch ("encoder-decoder" with
    pre/post-norm by name, or "decoder"), saved in ``tmp_path``; their paths in that order."""
    from tfviz.tasks import make_task
    from tfviz.train import TrainConfig, model_config_for, new_model, train

    tc = TrainConfig(steps=2, batch_size=4, warmup=0, eval_every=0, eval_examples=4,
                     snapshot_every=0, checkpoint_every=0, device="cpu")
    for name, arch in archs.items():
        task = make_task({"name": "copy", "seed": 0, "arch": arch})
        cfg = model_config_for(task, arch=arch, pos="sinusoidal", n_layers=2, n_heads=2, d_model=16,
                               norm="post" if name.endswith("post") else "pre")
        train(new_model(cfg, 0), task, tc, checkpoint=tmp_path / name)
    return [str(tmp_path / f"{n}.safetensors") for n in archs]


def recorded(model, names: list[str], ids, src=None):
    """An independent recording of ``names`` on the input (the source first for encoder-decoders)."""
    import torch

    import tfviz

    xs = [torch.tensor([list(x)]) for x in ([ids] if src is None else [src, ids])]
    rec = tfviz.record(model, *xs, names=names)
    return np.stack([rec[n][0].numpy() for n in names])  # [layer, head, q_pos, k_pos]


VIEWS = {"encoder self-attention": ("encoder", "attn", "src", "src"),
         "decoder self-attention": ("decoder", "attn", "tgt", "tgt"),
         "cross-attention": ("decoder", "cross_attn", "tgt", "src")}


def test_an_encoder_decoder_pair_compares_in_every_panel(tmp_path, monkeypatch) -> None:
    """A pair on a seq2seq task (copy, reverse, sort, translate: encoder-decoders, offered by the
    form): its curves, loss per position on the task's examples and its cost are compared, and its
    encoder self-attention, decoder self-attention and cross-attention side by side — each
    heatmap and every tile of each grid what an independent recording gives on the one input,
    labelled with the source's tokens where it reads the source (was: left out of the attention
    panels, 'its encoder, decoder and cross-attention are on the Attention page')."""
    from tfviz.analysis.compare import position_frame, task_batch
    from tfviz.model.hooks import hook_name
    from tfviz.tasks import make_task
    from tfviz.viz.theme import position_labels
    from tfviz.viz.tiles import tile, tiled_axis

    paths = train_copy_models(tmp_path, {"copy-pre": "encoder-decoder", "copy-post": "encoder-decoder"})
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_page("compare", cmp_models=paths)
    assert not at.error, [e.value for e in at.error]
    cks = {n: load_checkpoint(p) for n, p in zip(("copy-pre", "copy-post"), paths)}
    ids, src = ([int(i) for i in at.session_state[k]] for k in ("cmp_ids", "cmp_src"))
    tok = cks["copy-pre"].tokenizer
    labels = {"src": tok.tokens_of(src), "tgt": tok.tokens_of(ids)}
    assert labels["src"] != labels["tgt"]  # the target starts with [BOS]: the axes tell them apart
    assert at.selectbox(key="cmp_view").options == ["encoder self-attention", "decoder self-attention",
                                                    "cross-attention (decoder → source)"]
    for view, (stack, attention, q_side, k_side) in VIEWS.items():
        at.selectbox(key="cmp_view").set_value(view).run()
        ok(at)
        for n, ck in cks.items():
            want = recorded(ck.model, [hook_name(layer, f"{attention}.hook_pattern", stack)
                                       for layer in range(2)], ids, src)
            head = next(t for t in chart(at, f"cmp_head_{n}")["data"] if t["type"] == "heatmap")
            np.testing.assert_allclose(arr(head["z"]), want[0, 0], atol=1e-6)
            assert head["x"] == position_labels(labels[k_side], "key")
            assert head["y"] == position_labels(labels[q_side], "query")
            grid = next(t for t in chart(at, f"cmp_grid_{n}")["data"] if t["type"] == "heatmap")
            np.testing.assert_allclose(arr(grid["z"]), tile(want), atol=1e-6)  # every head
            assert grid["x"] == tiled_axis(["H0", "H1"], position_labels(labels[k_side], "key"))["categories"]
        if attention == "attn":  # head roles of that stack's self-attention
            assert list(at.dataframe[0].value.columns) == ["layer", "head", "copy-pre", "copy-post", "differs"]
        else:
            assert "No head roles here: head roles are scored on self-attention" in " ".join(
                i.value for i in at.info)
    task = make_task({"name": "copy", "seed": 0})
    want = position_frame({n: ck.model for n, ck in cks.items()}, task_batch(task))
    got = {t["name"]: arr(t["y"]) for t in chart(at, "cmp_pos_loss")["data"]}
    for n in cks:
        np.testing.assert_allclose(got[n], want[want["model"] == n]["loss"], rtol=1e-5)
    cost = at.dataframe[-1].value
    assert list(cost["model"]) == list(cks) and (cost["step_ms"] > 0).all()


def test_a_decoder_beside_an_encoder_decoder_shows_the_attention_they_share(tmp_path, monkeypatch) -> None:
    """A decoder-only model and an encoder-decoder with one tokenizer: the page says that decoder
    self-attention is the one kind they share and shows it (the input from the encoder-decoder,
    so that it has a source; the decoder reads its target tokens); no choice of attention, and
    head roles say why they are not scored."""
    from tfviz.model.hooks import hook_name

    paths = train_copy_models(tmp_path, {"copy-dec": "decoder", "copy-ed": "encoder-decoder"})
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_page("compare", cmp_models=paths)
    assert not at.error, [e.value for e in at.error]
    infos = " ".join(i.value for i in at.info)
    assert ("copy-dec reads one sequence and copy-ed a source and a target: the attention they "
            "share is decoder self-attention (on the target tokens)") in infos
    assert "No head roles here: an encoder-decoder's heads are scored on the validation examples" in infos
    assert not [s for s in at.selectbox if s.key == "cmp_view"]
    ids, src = ([int(i) for i in at.session_state[k]] for k in ("cmp_ids", "cmp_src"))
    for n, p, stack, source in (("copy-dec", paths[0], "", None), ("copy-ed", paths[1], "decoder", src)):
        want = recorded(load_checkpoint(p).model, [hook_name(0, "attn.hook_pattern", stack)], ids, source)
        np.testing.assert_allclose(arr(chart(at, f"cmp_head_{n}")["data"][0]["z"]), want[0, 0], atol=1e-6)
    assert list(at.dataframe[-1].value["model"]) == ["copy-dec", "copy-ed"]


def test_a_crafted_selection_of_12_models_keeps_4_and_says_so(monkeypatch) -> None:
    """Issue 22: a crafted message selecting 12 models (the widget allows 4) gave the session a
    generic exception box (StreamlitSelectionCountExceedsMaxError). Now the page keeps the first 4
    and says why."""
    from tfviz.analysis.compare import MAX_MODELS

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(zoo_dir()))  # the shipped zoo: 16 models
    at = open_page("compare")
    models = at.multiselect(key="cmp_models")
    twelve = list(models.options)[:12]
    assert len(twelve) == 12
    models.set_value(twelve).run()
    ok(at)
    assert (f"12 models were selected; Compare shows at most {MAX_MODELS} side by side, so it keeps "
            f"the first {MAX_MODELS}.") in [w.value for w in at.warning]
    kept = at.multiselect(key="cmp_models").value  # paths; the options are their labels
    assert [Path(p).stem for p in kept] == [label.split(" (")[0] for label in twelve[:MAX_MODELS]]


def test_the_pair_trains_to_the_presets_steps_and_is_found_again(tmp_path, monkeypatch) -> None:
    """Issue 30, item 5: the pair's Steps defaulted to 100 (coref reached 0.24 / 0.14 accuracy: two
    untrained models compared); it is the task's Train preset now, following the task. Opening the
    session's URL again (a new tab) showed no pair: it finds the pair's runs, their status and the
    button that opens them."""
    from apptest_helpers import APP
    from streamlit.testing.v1 import AppTest

    from tfviz.train.presets import QUICK

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_page("compare", cmp_tab="Train a pair")
    assert at.selectbox(key="pair_task").value == "lm"
    assert at.number_input(key="pair_steps_lm").value == QUICK["lm"].train.steps
    at.selectbox(key="pair_task").select("coref").run()
    assert at.number_input(key="pair_steps_coref").value == QUICK["coref"].train.steps == 400
    at.number_input(key="pair_steps_coref").set_value(10)  # a test's pair: quick
    at.button(key="pair_start").click().run()
    ok(at)
    status = next(c.value for c in at.caption if "coref-pre-norm" in c.value)
    assert "coref-post-norm" in status

    again = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    again.query_params["sid"] = at.session_state["sid"]
    again.run()
    again.switch_page("app_pages/compare.py").run()
    ok(again)
    assert any("coref-pre-norm" in c.value and "coref-post-norm" in c.value for c in again.caption)
    wait_for_the_pair(again)
    assert {t["name"].split(":")[0] for t in chart(again, "pair_curves")["data"]} == \
           {"coref-pre-norm", "coref-post-norm"}
    again.button(key="pair_open").click().run()
    ok(again)
    assert sorted(p.rsplit("/", 1)[-1] for p in again.session_state["cmp_models"]) == \
           ["coref-post-norm.safetensors", "coref-pre-norm.safetensors"]
    assert {load_checkpoint(p).train_config.steps for p in again.session_state["cmp_models"]} == {10}
