"""Masks page in AppTest: the grids equal tfviz.model.masks, the patterns equal an independent
recording of the same checkpoint (with the window copied in), and "no peeking" is exactly 0."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import arr, chart, ok, open_page

import tfviz
from tfviz.train.checkpoint import load_checkpoint
from tfviz.model.masks import (causal_mask, global_tokens_mask, padding_mask, sliding_window_mask)


def page_tokens(at, ckpt) -> list[int]:
    """The tokens the page shows: the typed text wrapped like the task's examples ([BOS] … for a
    decoder, [CLS] … [SEP] for an encoder), at most 40."""
    from tfviz.analysis.explorer import layout_of, prepare_text

    like = ckpt.build_task().examples("validation")[0].tokens
    prefix, suffix = layout_of(like, ckpt.tokenizer.special_ids)
    return prepare_text(ckpt.tokenizer, at.text_area(key="mask_text").value, prefix, suffix, 40).ids


def pattern(model, tokens, layer=0, head=0, **kw) -> np.ndarray:
    rec = tfviz.record(model, torch.tensor([tokens]), names=[f"blocks.{layer}.attn.hook_pattern"], **kw)
    return rec[f"blocks.{layer}.attn.hook_pattern"][0, head].numpy()


def shown(at) -> tuple[np.ndarray, np.ndarray]:
    """(the mask grid, the masked pattern with NaN as 0) the page shows."""
    return (arr(chart(at, "mask_grid")["data"][0]["z"]),
            np.nan_to_num(arr(chart(at, "mask_pattern")["data"][0]["z"])))


def windowed(model, window, g=0):
    m = tfviz.Transformer(model.config.replace(window=window, global_tokens=g))
    m.load_state_dict(model.state_dict())
    return m


def test_causal_grid_and_pattern_are_the_models(tiny_zoo) -> None:
    at = open_page("masks", tiny_zoo["tiny-coref"])
    ok(at)
    ck = load_checkpoint(tiny_zoo["tiny-coref"])
    ids = page_tokens(at, ck)
    grid, z = shown(at)
    assert np.array_equal(grid, causal_mask(len(ids), len(ids)).numpy())
    np.testing.assert_allclose(z, pattern(ck.model, ids), atol=1e-6)
    assert at.metric[0].value == "0"


def test_overview_global_token_is_a_real_token(tiny_zoo) -> None:
    """Issue 25, item 5: the overview drew every mask on the left-padded input, so the "global +
    local" grid's global token was the first [PAD] while the caption says pads are never looked
    at. Now the three masks are drawn on the input itself (its first token is the global one) and
    the padding mask on the padded input, its pads blocked as keys."""
    at = open_page("masks", tiny_zoo["tiny-coref"], mask_global=1, mask_pads=3)
    ck = load_checkpoint(tiny_zoo["tiny-coref"])
    ids = page_tokens(at, ck)
    pad = ck.tokenizer.display(ck.config.pad_id if ck.config.pad_id is not None else ck.tokenizer.pad_id)
    over = chart(at, "mask_overview")
    labels = [str(t) for t in over["layout"]["yaxis"]["ticktext"]]
    assert not any(pad in t for t in labels), labels
    z = arr(over["data"][0]["z"])  # three tiles: causal / full, sliding window, global + local
    n = len(ids)
    glob = z[:, 2 * (n + 2):2 * (n + 2) + n]
    w = at.slider(key="mask_window").value
    expected = (global_tokens_mask(n, n, 1) | sliding_window_mask(n, n, w, True)) & causal_mask(n, n)
    np.testing.assert_array_equal(glob, expected.numpy().astype(float))
    assert glob[:, 0].all()  # every query sees the global token: the input's first, a real one
    padded = arr(chart(at, "mask_overview_pad")["data"][0]["z"])
    assert padded.shape == (n + 3, n + 3) and not padded[3:, :3].any()  # real queries never see pads
    assert "Padding (drawn on the input with pads added" in " ".join(c.value for c in at.caption)


def test_sliding_window_and_global_local(tiny_zoo) -> None:
    at = open_page("masks", tiny_zoo["tiny-coref"])
    at.selectbox(key="mask_kind").select("sliding window")
    at.slider(key="mask_window").set_value(2)
    at.selectbox(key="mask_layer").select(1)
    at.selectbox(key="mask_head").select(2).run()
    ok(at)
    ck = load_checkpoint(tiny_zoo["tiny-coref"])
    ids = page_tokens(at, ck)
    n = len(ids)
    want = sliding_window_mask(n, n, 2, causal=True).numpy()
    grid, z = shown(at)
    assert np.array_equal(grid, want)
    assert np.all(z[~want] == 0.0), "attention outside the window must be exactly 0"
    np.testing.assert_allclose(z, pattern(windowed(ck.model, 2), ids, 1, 2), atol=1e-6)
    assert at.metric[0].value == "0"
    assert any("trained without a window" in i.value for i in at.info)
    unmasked = np.nan_to_num(arr(chart(at, "mask_unmasked")["data"][0]["z"]))
    np.testing.assert_allclose(unmasked, pattern(ck.model, ids, 1, 2), atol=1e-6)

    at.selectbox(key="mask_kind").select("global + local")
    at.slider(key="mask_global").set_value(2).run()
    ok(at)
    want = (sliding_window_mask(n, n, 2, True) | (global_tokens_mask(n, n, 2) & causal_mask(n, n))).numpy()
    grid, z = shown(at)
    assert np.array_equal(grid, want)
    assert np.all(z[~want] == 0.0)
    np.testing.assert_allclose(z, pattern(windowed(ck.model, 2, 2), ids, 1, 2), atol=1e-6)


def test_padding_decoder_pads_on_the_left(tiny_zoo) -> None:
    at = open_page("masks", tiny_zoo["tiny-induction"])
    at.selectbox(key="mask_kind").select("padding")
    at.slider(key="mask_pads").set_value(4).run()
    ok(at)
    ck = load_checkpoint(tiny_zoo["tiny-induction"])
    ids = [0] * 4 + page_tokens(at, ck)
    n = len(ids)
    pads = torch.tensor([[True] * 4 + [False] * (n - 4)])
    want = (causal_mask(n, n) & padding_mask(pads)[0, 0]) | torch.eye(n, dtype=torch.bool)
    grid, z = shown(at)
    assert np.array_equal(grid, want.numpy())
    np.testing.assert_allclose(z, pattern(ck.model, ids, padding_mask=pads), atol=1e-6)
    assert np.all(z[4:, :4] == 0.0), "real tokens never look at the pads"


def test_encoder_window_is_bidirectional(tiny_zoo) -> None:
    at = open_page("masks", tiny_zoo["tiny-mlm"])
    at.selectbox(key="mask_kind").select("sliding window")
    at.slider(key="mask_window").set_value(1).run()
    ok(at)
    ck = load_checkpoint(tiny_zoo["tiny-mlm"])
    ids = page_tokens(at, ck)
    n = len(ids)
    want = sliding_window_mask(n, n, 1, causal=False).numpy()
    grid, z = shown(at)
    assert np.array_equal(grid, want)
    np.testing.assert_allclose(z, pattern(windowed(ck.model, 1), ids), atol=1e-6)
    assert np.all(z[~want] == 0.0)
    # an encoder has no causal mask: editing a token moves every position's output
    y = arr(chart(at, "mask_nopeek")["data"][0]["y"])
    assert np.all(y > 0)


def test_no_peeking_is_exactly_zero_before_the_edit(tiny_zoo) -> None:
    at = open_page("masks", tiny_zoo["tiny-coref"])
    at.slider(key="mask_edit_pos").set_value(5)
    at.selectbox(key="mask_edit_token").select(20).run()
    ok(at)
    ck = load_checkpoint(tiny_zoo["tiny-coref"])
    ids = page_tokens(at, ck)
    edited = list(ids)
    edited[5] = 20
    with torch.no_grad():
        a, b = ck.model(torch.tensor([ids])), ck.model(torch.tensor([edited]))
    want = (b - a).abs().amax(-1)[0].double().numpy()
    y = arr(chart(at, "mask_nopeek")["data"][0]["y"])
    assert np.all(y[:5] == 0.0) and y[5:].max() > 0
    np.testing.assert_allclose(y, want, atol=1e-6)
    assert [m.value for m in at.metric][1] == "0"


def test_encoder_decoder_both_stacks(tiny_zoo) -> None:
    at = open_page("masks", tiny_zoo["tiny-translate"])
    ok(at)
    for stack in ("encoder", "decoder"):
        at.radio(key="mask_stack").set_value(stack).run()
        for kind in ("padding", "global + local"):
            at.selectbox(key="mask_kind").select(kind).run()
            ok(at)
            grid, z = shown(at)
            assert np.all(z[~grid.astype(bool)] == 0.0), (stack, kind)
    y = arr(chart(at, "mask_nopeek")["data"][0]["y"])
    p = at.slider(key="mask_edit_pos").value
    assert np.all(y[:p] == 0.0) and y[p:].max() > 0


@pytest.mark.parametrize("text", [pytest.param("", id="empty"), pytest.param("   ", id="blank"),
                                  pytest.param("\x00\x07 🦓 ü\u200b" * 3, id="odd-unicode")])
def test_bad_text_gives_a_message_not_an_exception(tiny_zoo, text) -> None:
    at = open_page("masks", tiny_zoo["tiny-coref"])
    at.text_area(key="mask_text").set_value(text).run()
    ok(at)
    assert at.warning or at.get("plotly_chart")


@pytest.mark.parametrize("text", ["law", "the law"], ids=["one-word", "two-words"])
def test_one_and_two_word_texts_show_every_view(tiny_zoo, text) -> None:
    """The shortest inputs ([BOS] + one or two words) still get the grid, the pattern and the
    "no peeking" check, each the size of the input."""
    at = open_page("masks", tiny_zoo["tiny-coref"], mask_text=text)
    ok(at)
    ids = page_tokens(at, load_checkpoint(tiny_zoo["tiny-coref"]))
    assert len(ids) == 1 + len(text.split())
    grid, z = shown(at)
    assert grid.shape == z.shape == (len(ids), len(ids))
    assert len(arr(chart(at, "mask_nopeek")["data"][0]["y"])) == len(ids)


def test_text_is_fitted_to_each_model(tiny_zoo, tmp_path, monkeypatch) -> None:
    """Issue 11, before: text typed for one model carried over to another and the page stopped
    with "tokens reaches position 32, but this model has learned positions for only 16". After:
    another model starts from its own example, and any text is cut to the positions the model
    has, with a warning saying so."""
    import shutil

    from tfviz.train.checkpoint import save_checkpoint

    shutil.copy(tiny_zoo["tiny-coref"], tmp_path / "coref.safetensors")
    task = load_checkpoint(tiny_zoo["tiny-coref"]).build_task()
    torch.manual_seed(0)
    cfg = tfviz.ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=16, n_heads=2,
                            n_layers=1, max_len=16, pos="learned")
    save_checkpoint(tmp_path / "short", tfviz.Transformer(cfg), task=task)
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    long_text = " ".join(["the law and the dog"] * 7)  # 35 words
    at = open_page("masks", tmp_path / "coref.safetensors", mask_text=long_text)
    assert len(arr(chart(at, "mask_grid")["data"][0]["z"])) == 36  # [BOS] + 35
    at.sidebar.selectbox(key="model_select").select(str(tmp_path / "short.safetensors")).run()
    ok(at)
    assert not at.error
    assert at.text_area(key="mask_text").value != long_text  # the new model's own example
    at.text_area(key="mask_text").set_value(long_text).run()  # typed again: cut to fit
    ok(at)
    assert any("showing the first 16: this model has learned positions for only 16" in w.value
               for w in at.warning)
    assert not at.error and len(arr(chart(at, "mask_grid")["data"][0]["z"])) == 16
