"""Generate page (AppTest) and its UI-free helper tfviz.generation: the page's charts hold the
attention the model really computed (checked against an independent full ``tfviz.record``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import charts, heatmap_z, ok, open_page

import tfviz
from tfviz.train.checkpoint import load_checkpoint
from tfviz.analysis.cost import kv_cache_bytes
from tfviz.generation import default_inputs, encode_text, generate_with_attention, pattern_names
from tfviz.viz import generated_tokens_html, kv_cache_growth


def model_key(at) -> str:
    """The boxes' keys name the model by a digest of its path, never the path (issue 40, S5-8)."""
    import hashlib

    return hashlib.sha256(at.session_state["model_path"].encode()).hexdigest()[:12]


def prompt_box(at):
    return at.text_input(key=f"gen_prompt:{model_key(at)}")


def src_box(at):
    return at.text_area(key=f"gen_src:{model_key(at)}")


def page_generation(at, ckpt, src: bool = False):
    """Recompute, independently of the page, what it should have generated (greedy)."""
    tok = ckpt.tokenizer
    prompt = encode_text(tok, prompt_box(at).value, "prompt", bos=True)
    src_ids = encode_text(tok, src_box(at).value, "src") if src else None
    n = at.slider(key="gen_n").value
    out = ckpt.model.generate(torch.tensor([prompt]), n, eos_id=tok.eos_id,
                              src=None if src_ids is None else torch.tensor([src_ids]))
    return prompt, src_ids, out[0].tolist()


# ------------------------------------------------------------------------------ the helper
@pytest.mark.parametrize("name", ["tiny-coref", "tiny-induction", "tiny-translate"])
def test_generation_matches_generate_and_full_record(tiny_zoo, name) -> None:
    ckpt = load_checkpoint(tiny_zoo[name])
    model, tok = ckpt.model.eval(), ckpt.tokenizer
    prompt_text, src_text = default_inputs(ckpt.build_task(), tok)
    prompt = encode_text(tok, prompt_text, "prompt", bos=True)
    src = None if src_text is None else encode_text(tok, src_text, "src")
    src_t = None if src is None else torch.tensor([src])
    gen = generate_with_attention(model, prompt, 8, src=src)
    assert gen.ids == model.generate(torch.tensor([prompt]), 8, src=src_t)[0].tolist()
    # sampling: same seed, same generator use -> same tokens as model.generate
    g2 = generate_with_attention(model, prompt, 8, temperature=1.0, top_k=4, seed=5, src=src)
    ref = model.generate(torch.tensor([prompt]), 8, src=src_t, temperature=1.0, top_k=4,
                         generator=torch.Generator().manual_seed(5))
    assert g2.ids == ref[0].tolist()
    for t, q in enumerate(gen.q_positions):  # step t's row == last row of a full record on ids[:q+1]
        rec = tfviz.record(model, *([] if src_t is None else [src_t]), torch.tensor([gen.ids[:q + 1]]),
                           names=pattern_names(model))
        for nm in pattern_names(model):
            np.testing.assert_allclose(gen.patterns[t][nm], rec[nm][0, :, -1].numpy(), atol=1e-5)
    c = model.config
    assert gen.cache_nbytes == [kv_cache_bytes(c.n_layers, c.n_kv_heads, c.d_head, q + 1) for q in gen.q_positions]


def test_generation_bad_requests(tiny_zoo) -> None:
    mlm = load_checkpoint(tiny_zoo["tiny-mlm"]).model
    with pytest.raises(ValueError, match="encoder cannot generate"):
        generate_with_attention(mlm, [2, 7], 3)
    ind = load_checkpoint(tiny_zoo["tiny-induction"]).model
    with pytest.raises(ValueError, match="learned positions"):
        generate_with_attention(ind, list(range(7, 57)) * 2, 40)
    with pytest.raises(ValueError, match="temperature"):
        generate_with_attention(ind, [2, 7], 3, temperature=-1)
    with pytest.raises(ValueError, match="empty"):
        generate_with_attention(ind, [], 3)
    tr = load_checkpoint(tiny_zoo["tiny-translate"]).model
    with pytest.raises(ValueError, match="needs a source"):
        generate_with_attention(tr, [2], 3)


def test_extra_figures() -> None:
    html = generated_tokens_html(["a", "<b>", "c"], 1, [0.5, 1.0])
    assert "&lt;b&gt;" in html and "p = 1.000" in html
    fig = kv_cache_growth([3, 4], [96, 128], [96, 128])
    assert list(fig.data[0].y) == [96, 128]
    with pytest.raises(ValueError):
        generated_tokens_html(["a"], 0, [])


# ------------------------------------------------------------------------------ the page
def test_decoder_page_shows_true_attention(tiny_zoo) -> None:
    at = open_page("generate", tiny_zoo["tiny-coref"])
    ckpt = load_checkpoint(tiny_zoo["tiny-coref"])
    prompt, _, ids = page_generation(at, ckpt)
    figs = charts(at)
    assert len(figs) == 2
    # the full sequence, recorded in one forward, independently of the page
    rec = tfviz.record(ckpt.model, torch.tensor([ids[:-1]]), names=pattern_names(ckpt.model))
    for layer, head in ((0, "average"), (1, 2)):
        at.selectbox(key="gen_layer").select(layer)
        at.selectbox(key="gen_head").select(head).run()
        assert not at.exception
        z = heatmap_z(charts(at)[0])
        pat = rec[f"blocks.{layer}.attn.hook_pattern"][0].numpy()  # [head, q_pos, k_pos]
        pat = pat.mean(0) if head == "average" else pat[head]
        assert z.shape == (len(ids) - len(prompt), len(ids) - 1)
        for t in range(z.shape[0]):
            q = len(prompt) - 1 + t
            np.testing.assert_allclose(z[t, :q + 1], pat[q, :q + 1], atol=1e-5)
            assert np.isnan(z[t, q + 1:]).all()
    cache = charts(at)[1]  # measured bytes == 2 * layers * kv_heads * d_head * pos * 4
    cfg = ckpt.config
    assert cache["data"][0]["y"] == [2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * x * 4
                                     for x in cache["data"][0]["x"]]
    assert cache["data"][0]["x"][0] == len(prompt)
    assert "KV cache now" in [m.label for m in at.metric]


def test_sampling_controls(tiny_zoo) -> None:
    at = open_page("generate", tiny_zoo["tiny-induction"])
    ckpt = load_checkpoint(tiny_zoo["tiny-induction"])
    at.slider(key="gen_temp").set_value(1.0)
    at.number_input(key="gen_top_k").set_value(3)
    at.number_input(key="gen_seed").set_value(7)
    at.slider(key="gen_n").set_value(5)
    at.run()
    assert not at.exception
    prompt = encode_text(ckpt.tokenizer, prompt_box(at).value, "prompt", bos=True)
    ref = ckpt.model.generate(torch.tensor([prompt]), 5, temperature=1.0, top_k=3,
                              generator=torch.Generator().manual_seed(7), eos_id=ckpt.tokenizer.eos_id)
    y = charts(at)[0]["data"][0]["y"]  # "step t · query 'x' (pos p) → 'next'"
    nxt = [label.rsplit("→ '", 1)[1][:-1] for label in y]
    assert nxt == ckpt.tokenizer.tokens_of(ref[0, len(prompt):].tolist())
    at.button(key="gen_resample").click().run()  # "New sample": the next seed
    assert at.number_input(key="gen_seed").value == 8 and not at.exception


def test_encoder_decoder_page_self_and_cross(tiny_zoo) -> None:
    at = open_page("generate", tiny_zoo["tiny-translate"])
    ckpt = load_checkpoint(tiny_zoo["tiny-translate"])
    assert src_box(at).value  # the task's example sentence
    prompt, src, ids = page_generation(at, ckpt, src=True)
    rec = tfviz.record(ckpt.model, torch.tensor([src]), torch.tensor([ids[:-1]]),
                       names=pattern_names(ckpt.model))
    z = heatmap_z(charts(at)[0])
    self_pat = rec["decoder.blocks.0.attn.hook_pattern"][0].numpy().mean(0)
    for t in range(z.shape[0]):
        q = len(prompt) - 1 + t
        np.testing.assert_allclose(z[t, :q + 1], self_pat[q, :q + 1], atol=1e-5)
    at.radio(key="gen_kind").set_value("cross")
    at.selectbox(key="gen_head").select(1).run()
    assert not at.exception
    fig = charts(at)[0]
    cross = rec["decoder.blocks.0.cross_attn.hook_pattern"][0, 1].numpy()  # [tgt_pos, src_pos]
    np.testing.assert_allclose(heatmap_z(fig), cross[len(prompt) - 1:len(ids) - 1], atol=1e-5)
    assert len(fig["data"][0]["x"]) == len(src)
    # no source text: a message, not an exception
    src_box(at).input("")
    at.run()
    assert not at.exception
    assert any("source text is empty" in w.value for w in at.warning)


def test_encoder_says_why_not(tiny_zoo) -> None:
    at = open_page("generate", tiny_zoo["tiny-mlm"])
    assert any("encoder, so it cannot generate" in w.value for w in at.warning)
    assert not at.get("plotly_chart")


def test_bad_prompts(tiny_zoo) -> None:
    at = open_page("generate", tiny_zoo["tiny-induction"])  # learned positions, max_len 128
    prompt_box(at).input("   ")
    at.run()
    assert not at.exception and any("prompt is empty" in w.value for w in at.warning)
    prompt_box(at).input(" ".join(["a b c d e f g h i j"] * 12))  # 120 tokens
    at.slider(key="gen_n").set_value(40)
    at.run()
    assert not at.exception and any("learned positions" in w.value for w in at.warning)
    prompt_box(at).input("a b zzz_not_a_symbol c")
    at.slider(key="gen_n").set_value(4)
    at.run()
    assert not at.exception and any("[UNK]" in w.value for w in at.warning)


def test_generate_opens_on_a_model_that_writes_and_says_why_another_does_not(tiny_zoo, tmp_path,
                                                                             monkeypatch):
    """Issue 11, before: Generate opened on the first model listed, the coref model, which babbles
    ("database dog rabbit rabbit…") with no word of why. After: until the student picks a model,
    Generate opens on the shipped language model (lm); a model trained on a classification-style
    task (one answer token per example) says so plainly."""
    import shutil

    from tfviz.tasks import make_task

    shutil.copy(tiny_zoo["tiny-coref"], tmp_path / "coref.safetensors")  # listed first
    task = make_task("lm")
    torch.manual_seed(0)
    cfg = tfviz.ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=16, n_heads=2,
                            n_layers=1, max_len=64)
    from tfviz.train.checkpoint import save_checkpoint
    save_checkpoint(tmp_path / "lm", tfviz.Transformer(cfg), task=task)
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    at = open_page("generate")
    assert at.session_state["model_path"] == str(tmp_path / "lm.safetensors")
    assert not any("classification" in i.value for i in at.info)
    at.switch_page("app_pages/attention.py").run()  # another page keeps the same model
    assert at.session_state["model_path"] == str(tmp_path / "lm.safetensors")
    at = open_page("generate", tmp_path / "coref.safetensors")  # picked: kept, and explained
    ok(at)
    assert at.session_state["model_path"] == str(tmp_path / "coref.safetensors")
    note = " ".join(i.value for i in at.info)
    assert "**coref** task" in note and "classification" in note and "**lm**" in note
