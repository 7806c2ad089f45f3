"""Positional page in AppTest: every chart equals tfviz's own tables or an independent recording of
the same checkpoint; the scheme comparison equals extrapolation_table; bad input gives messages."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import arr, chart, ok, open_page

import tfviz
from tfviz.analysis.positional import (comparable, extrapolation_table, not_possible, packed_batch,
                                       scheme_tables, train_length)
from tfviz.analysis.rope import rope_score_grid
from tfviz.train.checkpoint import load_checkpoint, read_metadata, save_checkpoint
from tfviz.tasks import make_task
from tfviz.viz.tiles import tile


def test_sinusoidal_matrix_equals_the_models_table(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-translate"], pos_section="Sinusoidal")
    ok(at)
    at.slider(key="pos_sin_d").set_value(48)
    at.slider(key="pos_sin_n").set_value(100).run()
    ok(at)
    cfg = tfviz.ModelConfig(pos="sinusoidal", d_model=48, n_heads=4, max_len=100)
    want = tfviz.positional_tables(tfviz.Transformer(cfg))["sinusoidal"].numpy()
    np.testing.assert_allclose(arr(chart(at, "pos_sin_matrix")["data"][0]["z"]), want, atol=1e-6)
    waves = chart(at, "pos_sin_waves")["data"]
    assert [t["name"] for t in waves] == [f"dim {d}" for d in at.multiselect(key="pos_sin_dims").value]
    np.testing.assert_allclose(arr(waves[0]["y"]), want[:, 0], atol=1e-6)
    assert any("adds exactly this table" in s.value for s in at.success)  # translate is sinusoidal


def test_learned_table_and_its_similarity(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-induction"])
    ok(at)
    assert at.radio(key="pos_section").value == "Learned"  # the model's own scheme first
    table = load_checkpoint(tiny_zoo["tiny-induction"]).model.stack.pos.table.weight.detach().numpy()
    np.testing.assert_allclose(arr(chart(at, "pos_learned_matrix")["data"][0]["z"]), table, atol=1e-6)
    u = table / np.linalg.norm(table, axis=1, keepdims=True)
    np.testing.assert_allclose(arr(chart(at, "pos_learned_sim")["data"][0]["z"]), u @ u.T, atol=1e-5)


def test_rope_uses_real_q_and_k(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-coref"])
    ok(at)
    assert at.radio(key="pos_section").value == "RoPE"
    at.selectbox(key="pos_rope_layer").select(1)
    at.selectbox(key="pos_rope_head").select(3)
    at.slider(key="pos_rope_m").set_value(9)
    at.slider(key="pos_rope_kpos").set_value(4)
    at.slider(key="pos_rope_pair").set_value(2).run()
    ok(at)
    ck = load_checkpoint(tiny_zoo["tiny-coref"])
    ids = ck.tokenizer.encode(at.text_area(key="pos_rope_text").value).ids
    toks = torch.tensor([[ck.tokenizer.bos_id] + ids[:47]])
    names = ["blocks.1.attn.hook_q", "blocks.1.attn.hook_k", "blocks.1.attn.hook_attn_scores"]
    rec = tfviz.record(ck.model, toks, names=names)
    q, k = rec[names[0]][0, 9, 3].double(), rec[names[1]][0, 4, 3].double()
    freqs = tfviz.positional_tables(ck.model)["rope_freqs"].double()
    grid = rope_score_grid(q, k, freqs, 48).numpy()
    z = arr(chart(at, "pos_rope_grid")["data"][0]["z"])
    np.testing.assert_allclose(z, grid, atol=1e-9)
    # the grid is the model's own score: grid[m, n] = score · √d_head
    assert math.isclose(z[9, 4], float(rec[names[2]][0, 3, 9, 4]) * math.sqrt(ck.config.d_head),
                        rel_tol=1e-4, abs_tol=1e-5)
    anim = chart(at, "pos_rope_anim")
    assert len(anim["frames"]) == 48
    q_pair = q[4:6].numpy()
    tip = anim["frames"][0]["data"][0]  # q at m = 0 is the unrotated pair
    np.testing.assert_allclose(arr(tip["x"])[1], q_pair[0], atol=1e-6)
    np.testing.assert_allclose(arr(tip["y"])[1], q_pair[1], atol=1e-6)
    # issue 25, item 4: the rotation chart opens on the slider's m and says the same q·k as the
    # caption and the grid (it said "m = 0, q·k = 0.211" beside m = 14, q·k = −0.9137)
    title = anim["layout"]["title"]["text"]
    assert "m = 9 ·" in title and f"q·k = {z[9, 4]:.4f}" in title, title
    assert anim["layout"]["sliders"][0]["active"] == 9
    shown = arr(anim["data"][1]["x"])[1], arr(anim["data"][1]["y"])[1]  # q's arrow tip at m = 9
    frame9 = next(f for f in anim["frames"] if f["name"] == "9")["data"][0]
    np.testing.assert_allclose(shown, (arr(frame9["x"])[1], arr(frame9["y"])[1]), atol=1e-9)
    caption = next(c.value for c in at.caption if "Rotated to those positions" in c.value)
    assert f"q·k is {z[9, 4]:.4f}" in caption


def test_a_reload_keeps_the_picked_model(tiny_zoo) -> None:
    """Issue 25, item 8: reloading a page reset the picked model to the page's default. The pick
    is kept in the URL (``?model=…``, beside ``?sid=…``; a name, never a server path) and a fresh
    session opened on that URL (a reload) shows it; the picker's own default is not written."""
    from streamlit.testing.v1 import AppTest

    from apptest_helpers import APP, TIMEOUT_S

    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    at.switch_page("app_pages/positional.py").run()
    ok(at)
    assert "model" not in at.query_params  # nobody picked a model yet
    at.sidebar.selectbox(key="model_select").select(str(tiny_zoo["tiny-induction"])).run()
    ok(at)
    named = at.query_params["model"]
    assert named.endswith("/tiny-induction") and str(tiny_zoo["tiny-induction"].parent) not in named
    reload = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    reload.query_params.update(sid=at.session_state["sid"], model=named)
    reload.run()
    reload.switch_page("app_pages/positional.py").run()
    ok(reload)
    assert reload.session_state["model_path"] == str(tiny_zoo["tiny-induction"])
    assert reload.radio(key="pos_section").value == "Learned"  # its own scheme, not the default's
    assert reload.query_params["model"] == named


def test_picking_a_model_opens_its_own_scheme(tiny_zoo) -> None:
    """Issue 11, before: with the Positional page open on RoPE, picking a learned-positions model
    left the page on RoPE with demo vectors. After: another model opens on its own scheme."""
    at = open_page("positional", tiny_zoo["tiny-coref"])
    assert at.radio(key="pos_section").value == "RoPE"
    at.sidebar.selectbox(key="model_select").select(str(tiny_zoo["tiny-induction"])).run()
    ok(at)
    assert at.radio(key="pos_section").value == "Learned" and chart(at, "pos_learned_matrix")
    at.sidebar.selectbox(key="model_select").select(str(tiny_zoo["tiny-mlm"])).run()
    assert at.radio(key="pos_section").value == "ALiBi" and chart(at, "pos_alibi")
    at.switch_page("app_pages/masks.py").run()  # the pick holds on every page (it fell back to
    ok(at)                                       # the first model on the next page)
    assert at.session_state["model_path"] == str(tiny_zoo["tiny-mlm"])


def test_rope_demo_when_the_model_has_no_rope(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-induction"], pos_section="RoPE")
    ok(at)
    assert any("DEMO vectors" in i.value for i in at.info)
    assert "DEMO" in chart(at, "pos_rope_grid")["layout"]["title"]["text"]


def test_alibi_bias_of_an_alibi_model(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-mlm"])
    ok(at)
    assert at.radio(key="pos_section").value == "ALiBi"
    at.slider(key="pos_bias_n").set_value(12).run()
    ok(at)
    t = tfviz.positional_tables(load_checkpoint(tiny_zoo["tiny-mlm"]).model, 12)
    bias = t["alibi_bias"].numpy()  # [head, q, k]
    fig = chart(at, "pos_alibi")
    np.testing.assert_allclose(arr(fig["data"][0]["customdata"]), tile(bias[None]), atol=1e-6)
    # Issue 11, before: one colour scale for all heads, so the gentle heads (slope 1/16, 1/256…)
    # looked blank. After: each head coloured on its own scale, the exact bias in the hover.
    scaled = bias / np.abs(bias).max(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(arr(fig["data"][0]["z"]), tile(scaled[None]), atol=1e-6)
    assert all(np.abs(scaled[h]).max() == 1 for h in range(len(bias)))  # every head in full colour
    assert not at.info  # real, not a formula stand-in


def test_t5_buckets_formula_for_a_non_t5_model(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-coref"], pos_section="T5")
    ok(at)
    want = scheme_tables("t5", n_heads=4, n=16, causal=True)["t5_buckets"].numpy()
    cfg = load_checkpoint(tiny_zoo["tiny-coref"]).config.replace(pos="t5")
    assert np.array_equal(want, tfviz.positional_tables(tfviz.Transformer(cfg), 16)["t5_buckets"].numpy())
    np.testing.assert_array_equal(arr(chart(at, "pos_t5_buckets")["data"][0]["z"]), want)
    assert any("does not use" in i.value for i in at.info)


def test_encoder_decoder_stacks_and_missing_tables(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-translate"], pos_section="Learned")
    ok(at)
    assert any("no learned position table" in i.value for i in at.info)
    for section in ("RoPE", "ALiBi", "T5", "Sinusoidal"):
        at.radio(key="pos_section").set_value(section)
        at.radio(key="pos_stack").set_value("decoder").run()
        ok(at)


def test_empty_rope_text_warns(tiny_zoo) -> None:
    at = open_page("positional", tiny_zoo["tiny-coref"], pos_section="RoPE")
    at.text_area(key="pos_rope_text").set_value("").run()
    ok(at)
    assert any("empty" in w.value for w in at.warning)


# ------------------------------------------------------------------------ comparing schemes
@pytest.fixture(scope="module")
def family(tmp_path_factory) -> Path:
    """Induction checkpoints with three schemes, carded as the positional family (untrained:
    real models, real losses, no training time). The learned one has max_len 40."""
    folder = tmp_path_factory.mktemp("family")
    task = make_task("induction", n_train=64, n_val=32, n_test=32)
    for pos, max_len in (("learned", 40), ("rope", 128), ("alibi", 128)):
        torch.manual_seed(0)
        cfg = tfviz.ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=16, n_heads=2,
                                n_layers=1, max_len=max_len, pos=pos)
        save_checkpoint(folder / f"ind-{pos}", tfviz.Transformer(cfg), task=task,
                        extra={"family": "positional"})
    return folder


def test_extrapolation_table_marks_learned_beyond_max_len(family) -> None:
    cks = [(p.stem, load_checkpoint(p)) for p in sorted(family.glob("*.safetensors"))]
    L = train_length(cks[0][1].build_task())
    df = extrapolation_table(cks, [L, 2 * L])
    assert list(df.columns) == ["model", "scheme", "length", "loss", "tokens", "note", "accuracy"]
    learned = df[df.scheme == "learned"]
    note = learned.loc[learned.length == 2 * L, "note"].item()
    assert note == not_possible(dict(cks)["ind-learned"].config) and "learned positions for only 40" in note
    assert np.isnan(learned.loc[learned.length == 2 * L, "loss"].item())
    assert np.isfinite(df[df.scheme != "learned"].loss).all()
    # the loss is the model's own cross-entropy on the packed task targets
    tokens, targets = packed_batch(cks[1][1].build_task(), L)
    with torch.no_grad():
        logits = cks[1][1].model(tokens)
    keep = targets != -100
    want = torch.nn.functional.cross_entropy(logits[keep], targets[keep]).item()
    got = df[(df.model == cks[1][0]) & (df.length == L)].loss.item()
    assert math.isclose(got, want, rel_tol=1e-5)
    with pytest.raises(ValueError):
        extrapolation_table(cks, [])


def test_compare_page_with_the_family(family, monkeypatch) -> None:
    """The Compare page opens on the sidebar model's positional family; its loss-vs-length chart
    is extrapolation_table's numbers; learned positions say why they stop."""
    from tfviz.analysis.positional import compare_lengths

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(family))
    at = open_page("compare", family / "ind-rope.safetensors")
    ok(at)
    picked = at.session_state["cmp_models"]
    assert [Path(p).stem for p in picked] == ["ind-learned", "ind-rope", "ind-alibi"]
    at.select_slider(key="cmp_factor").set_value(2).run()
    at.button(key="cmp_lengths_run").click().run()
    ok(at)
    assert any("not possible" in w.value for w in at.warning)
    cks = [(Path(p).stem, load_checkpoint(p)) for p in picked]
    L = train_length(cks[0][1].build_task())
    df = extrapolation_table(cks, compare_lengths(L, 2), n_tokens=2048)
    traces = chart(at, "cmp_lengths")["data"]
    rope = next(t for t in traces if t["name"].endswith("rope"))
    np.testing.assert_allclose(arr(rope["y"]), df[df.scheme == "rope"].sort_values("length").loss,
                               rtol=1e-5)


def test_compare_without_family_offers_same_task_models(tiny_zoo) -> None:
    cards = {p: read_metadata(p) for p in map(str, tiny_zoo.values())}
    options, is_family = comparable(cards, str(tiny_zoo["tiny-coref"]))
    assert not is_family and options == [str(tiny_zoo["tiny-coref"])]
    at = open_page("compare", tiny_zoo["tiny-coref"])  # no other coref model: nothing picked
    ok(at)
    assert at.session_state["cmp_models"] == []
    assert any("Pick two to four models" in i.value for i in at.info)
