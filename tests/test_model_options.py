"""The model options imported models need (tanh GELU, RMSNorm, embedding norm, token types, the
MLM head, half-split RoPE, untied heads), each against an independent recomputation, plus their
validation and their round trip through a checkpoint."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfviz import ModelConfig, Transformer, load_checkpoint, record, save_checkpoint
from tfviz.model.positional import ROTARY_PAIRS

V = 31


def _model(seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    base = dict(vocab_size=V, d_model=32, n_heads=4, n_layers=2, max_len=24, pad_id=None)
    base.update(kw)
    model = Transformer(ModelConfig(**base)).eval()
    with torch.no_grad():  # fresh norms are ones and zeros: give every parameter some noise
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _ids(n: int = 9, batch: int = 2, seed: int = 1) -> torch.Tensor:
    ids = torch.randint(0, V, (batch, n), generator=torch.Generator().manual_seed(seed))
    ids[:, 1] = 0  # token 0 is a real token here (pad_id=None)
    return ids


def test_gelu_new_is_the_tanh_formula():
    model = _model(activation="gelu_new")
    rec = record(model, _ids(), names=["blocks.0.ln2.hook_out", "blocks.0.mlp.hook_post"])
    h = model.stack.blocks[0].mlp.W_in(rec["blocks.0.ln2.hook_out"])
    want = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    torch.testing.assert_close(rec["blocks.0.mlp.hook_post"], want, atol=1e-6, rtol=1e-5)
    assert (want - F.gelu(h)).abs().max() > 1e-6  # and it is not the exact GELU


@pytest.mark.parametrize("normalization", ["layernorm", "rmsnorm"])
def test_norm_hooks_are_transformerlens_4s(normalization):
    """TransformerLens 4.3 (NormalizationBridge): hook_scale = sqrt(var + eps) [batch, pos, 1],
    hook_normalized = (x - mean) / scale *before* the weight and bias (RMSNorm: no mean),
    hook_out = hook_normalized * w (+ b): the norm's output. Checked against the formula in
    float64, independently of the model's code; recording changes no output."""
    model = _model(normalization=normalization)
    ln = model.stack.blocks[1].ln1
    with torch.no_grad():  # fresh norms are ones and zeros: make weight and bias matter
        ln.weight.add_(torch.randn(32, generator=torch.Generator().manual_seed(1)))
        if ln_has_bias := normalization == "layernorm":
            ln.bias.add_(torch.randn(32, generator=torch.Generator().manual_seed(2)))
    ids = _ids()
    names = [f"blocks.1.ln1.{h}" for h in ("hook_scale", "hook_normalized", "hook_out")]
    rec = record(model, ids, names=["blocks.1.hook_resid_pre", *names])
    x = rec["blocks.1.hook_resid_pre"].double()
    centred = x - x.mean(-1, keepdim=True) if ln_has_bias else x
    scale = torch.sqrt((centred ** 2).mean(-1, keepdim=True) + 1e-5)
    w = ln.weight.detach().double()
    b = ln.bias.detach().double() if ln_has_bias else 0.0
    torch.testing.assert_close(rec["blocks.1.ln1.hook_scale"].double(), scale, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(rec["blocks.1.ln1.hook_normalized"].double(), centred / scale, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rec["blocks.1.ln1.hook_out"].double(), centred / scale * w + b, atol=1e-5, rtol=1e-5)
    assert (rec["blocks.1.ln1.hook_out"] - rec["blocks.1.ln1.hook_normalized"]).abs().max() > 0.1
    with torch.no_grad():
        assert torch.equal(rec.output, model(ids))  # recording the norm's points changes nothing
    # a hook that replaces the normalized value (or the scale) makes the output follow it
    handle = ln.hook_normalized.register_forward_hook(lambda m, i, out: out * 0)
    try:
        edited = record(model, ids, names=["blocks.1.ln1.hook_out"])["blocks.1.ln1.hook_out"]
    finally:
        handle.remove()
    torch.testing.assert_close(edited.double(), (b + 0 * w).expand_as(edited).double() if ln_has_bias
                               else torch.zeros_like(edited).double())
    handle = ln.hook_scale.register_forward_hook(lambda m, i, out: out * 2)
    try:
        edited = record(model, ids, names=["blocks.1.ln1.hook_out"])["blocks.1.ln1.hook_out"]
    finally:
        handle.remove()
    torch.testing.assert_close(edited.double(), centred / (2 * scale) * w + b, atol=1e-5, rtol=1e-5)
    assert normalization == "layernorm" or not any("ln1.bias" in k for k in model.state_dict())


def test_half_split_rope_is_interleaved_rope_on_permuted_dimensions():
    """Pair i is (i, i + d/2) instead of (2i, 2i+1): the same model with W_q / W_k rows permuted
    into the interleaved order computes the same attention patterns."""
    half = _model(pos="rope", rope_pairs="half", n_kv_heads=2)
    inter = Transformer(half.config.replace(rope_pairs="interleaved")).eval()
    inter.load_state_dict(half.state_dict())
    dh, nq, nkv = half.config.d_head, 4, 2
    first, second = ROTARY_PAIRS["half"].pair_dims(dh)
    perm = torch.stack([first, second], dim=1).flatten()  # interleaved slot j <- half-split dim
    src = torch.cat([torch.cat([h * dh + perm for h in range(n)]) + off  # the q rows, then the k rows
                     for n, off in ((nq, 0), (nkv, nq * dh))])
    with torch.no_grad():
        for b_half, b_inter in zip(half.stack.blocks, inter.stack.blocks):
            b_inter.attn.W_qkv.weight[: len(src)] = b_half.attn.W_qkv.weight[src]
            b_inter.attn.W_qkv.bias[: len(src)] = b_half.attn.W_qkv.bias[src]
    ids = _ids()
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(2)]
    a, b = record(half, ids, names=names), record(inter, ids, names=names)
    for n in names:
        torch.testing.assert_close(a[n], b[n], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(a.output, b.output, atol=1e-5, rtol=1e-5)
    unpermuted = Transformer(inter.config).eval()
    unpermuted.load_state_dict(half.state_dict())  # same weights, the other pairing: other numbers
    assert (unpermuted(ids) - half(ids)).abs().max() > 1e-3


def test_token_types_default_to_zero_and_are_added_before_positions():
    model = _model(arch="encoder", norm="post", embed_norm=True, n_token_types=2)
    ids = _ids()
    zeros, ones = torch.zeros_like(ids), torch.ones_like(ids)
    torch.testing.assert_close(model(ids), model(ids, token_types=zeros))
    assert not torch.allclose(model(ids), model(ids, token_types=ones))
    rec = record(model, ids, token_types=ones,
                 names=["hook_embed", "hook_token_type_embed", "hook_pos_embed", "ln_embed.hook_out",
                        "blocks.0.hook_resid_pre"])
    x = rec["hook_embed"] + model.token_type_embed.weight[1].detach() + rec["hook_pos_embed"]
    torch.testing.assert_close(rec["ln_embed.hook_out"], model.stack.ln_embed(x), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(rec["blocks.0.hook_resid_pre"], rec["ln_embed.hook_out"])
    with pytest.raises(ValueError, match="token_types must be in"):
        model(ids, token_types=ones * 2)
    with pytest.raises(ValueError, match="shaped like the tokens"):
        model(ids, token_types=ones[:, :3])
    with pytest.raises(ValueError, match="no token types"):
        _model()(ids, token_types=zeros)


def test_mlm_head_is_dense_activation_norm_then_unembedding_with_bias():
    model = _model(arch="encoder", norm="post", head="mlm", tie_embeddings=True)
    rec = record(model, _ids(), names=["blocks.1.hook_resid_post", "head_transform.ln.hook_out"])
    t = model.head_transform
    h = F.gelu(t.dense(rec["blocks.1.hook_resid_post"]))
    h = F.layer_norm(h, (32,), t.ln.weight, t.ln.bias, 1e-5)
    torch.testing.assert_close(rec["head_transform.ln.hook_out"], h, atol=1e-6, rtol=1e-5)
    want = h @ model.embed.weight.detach().T + model.unembed.bias.detach()
    torch.testing.assert_close(rec.output, want, atol=1e-5, rtol=1e-5)
    assert model.unembed.weight is model.embed.weight


def test_block_level_aliases_are_the_same_tensors():
    model = _model()
    rec = record(model, _ids())
    torch.testing.assert_close(rec["blocks.0.hook_attn_out"], rec["blocks.0.attn.hook_out"], atol=0, rtol=0)
    torch.testing.assert_close(rec["ln_final.hook_out"],
                               model.stack.ln_final(rec["blocks.1.hook_resid_post"]), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("bad, match", [
    (dict(rope_pairs="half"), "only applies to a rotating scheme"),
    (dict(rope_pairs="sideways", pos="rope"), "rope_pairs='sideways' is not one of"),
    (dict(head="mlm", activation="swiglu"), "gated activation"),
    (dict(arch="encoder-decoder", n_token_types=2), "single-stack"),
    (dict(normalization="batchnorm"), "'layernorm', 'rmsnorm'"),
    (dict(activation="gelu_tanh"), "'gelu_new'"),
    (dict(embed_norm=1), "embed_norm=1 must be True or False"),
    (dict(n_token_types=-1), "n_token_types=-1 must be at least 0"),
])
def test_bad_options_fail_loudly(bad, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**bad)


def test_options_round_trip_through_a_checkpoint(tmp_path):
    for kw in (dict(arch="encoder", norm="post", embed_norm=True, n_token_types=2, head="mlm",
                    tie_embeddings=True, activation="gelu_new"),
               dict(pos="rope", rope_pairs="half", rope_base=500.0, normalization="rmsnorm",
                    activation="swiglu", bias=False, n_kv_heads=2)):
        model = _model(**kw)
        path = save_checkpoint(tmp_path / "m", model)
        ck = load_checkpoint(path)
        assert ck.config == model.config
        torch.testing.assert_close(ck.model(_ids()), model(_ids()), atol=0, rtol=0)


def test_from_state_dict_takes_the_tensors_without_copying():
    for kw in (dict(pos="rope", rope_pairs="half"), dict(pos="alibi"), dict(tie_embeddings=True)):
        model = _model(**kw)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        again = Transformer.from_state_dict(model.config, state).eval()
        torch.testing.assert_close(again(_ids()), model(_ids()), atol=0, rtol=0)
        assert again.embed.weight.data_ptr() == state["embed.weight"].data_ptr()
        assert all(p.requires_grad for p in again.parameters())
        if model.config.tie_embeddings:
            assert again.unembed.weight is again.embed.weight
    with pytest.raises(RuntimeError, match="Missing key"):
        Transformer.from_state_dict(model.config, {"embed.weight": state["embed.weight"]})
