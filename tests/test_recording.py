"""Every recorded quantity against an independent recomputation from other recorded quantities."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from tfviz import HOOK_SHAPES, ModelConfig, Transformer, record
from tfviz.model import shape_of

V = 29


def _model(**kw):
    torch.manual_seed(0)
    base = dict(vocab_size=V, d_model=32, n_heads=4, n_layers=2, max_len=40)
    base.update(kw)
    return Transformer(ModelConfig(**base))


def _check_attention_layer(rec, prefix, n_heads, n_kv, causal, pos, T):
    """scores = q.k/sqrt(d) (+bias, masked), pattern = softmax(scores), z = pattern v, out = W_o z."""
    rot = pos == "rope" and "cross_attn" not in prefix
    q = rec[f"{prefix}.hook_rot_q" if rot else f"{prefix}.hook_q"]  # [batch, pos, head, d_head]
    k = rec[f"{prefix}.hook_rot_k" if rot else f"{prefix}.hook_k"]  # [batch, pos, kv_head, d_head]
    v = rec[f"{prefix}.hook_v"]
    scores = rec[f"{prefix}.hook_attn_scores"]  # [batch, head, q_pos, k_pos]
    pattern = rec[f"{prefix}.hook_pattern"]
    group = n_heads // n_kv
    k_full = k.repeat_interleave(group, dim=2)
    want = torch.einsum("bqhd,bkhd->bhqk", q, k_full) / math.sqrt(q.shape[-1])
    bias_name = f"{prefix}.hook_pos_bias"
    if bias_name in rec:
        want = want + rec[bias_name]
    if causal:
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        assert torch.all(scores[..., future] == float("-inf")), "masked entries must be exactly -inf"
        want = want.masked_fill(future, float("-inf"))
    torch.testing.assert_close(scores, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pattern, torch.softmax(scores, dim=-1), atol=1e-6, rtol=1e-6)
    z = torch.einsum("bhqk,bkhd->bqhd", pattern, v.repeat_interleave(group, dim=2))
    torch.testing.assert_close(rec[f"{prefix}.hook_z"], z, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos", ["none", "learned", "rope", "alibi", "t5", "sinusoidal"])
@pytest.mark.parametrize("kv", [4, 2, 1])
def test_decoder_recorded_quantities_recompute(pos, kv):
    model = _model(pos=pos, n_kv_heads=kv)
    x = torch.randint(1, V, (2, 11))
    rec = record(model, x)
    for l in range(2):
        _check_attention_layer(rec, f"blocks.{l}.attn", 4, kv, True, pos, 11)
        attn = model.stack.blocks[l].attn
        out = attn.W_o(rec[f"blocks.{l}.attn.hook_z"].flatten(2)).detach()
        torch.testing.assert_close(rec[f"blocks.{l}.attn.hook_out"], out, atol=1e-5, rtol=1e-5)
        # resid_mid = resid_pre + attn_out ; resid_post = resid_mid + mlp_out (pre-norm)
        torch.testing.assert_close(rec[f"blocks.{l}.hook_resid_mid"],
                                   rec[f"blocks.{l}.hook_resid_pre"] + rec[f"blocks.{l}.attn.hook_out"],
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rec[f"blocks.{l}.hook_resid_post"],
                                   rec[f"blocks.{l}.hook_resid_mid"] + rec[f"blocks.{l}.hook_mlp_out"],
                                   atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rec["blocks.1.hook_resid_pre"], rec["blocks.0.hook_resid_post"])
    final = model.unembed(model.stack.ln_final(rec["blocks.1.hook_resid_post"])).detach()
    torch.testing.assert_close(rec.output, final, atol=1e-5, rtol=1e-5)


def test_encoder_decoder_names_and_cross_attention():
    model = _model(arch="encoder-decoder", pos="rope", n_kv_heads=2)
    src, tgt = torch.randint(1, V, (2, 8)), torch.randint(1, V, (2, 5))
    rec = record(model, src, tgt)
    names = set(rec)
    assert "encoder.blocks.0.attn.hook_pattern" in names
    assert "decoder.blocks.1.cross_attn.hook_pattern" in names
    assert "decoder.blocks.0.hook_resid_mid_cross" in names
    assert not any(n.startswith("blocks.") for n in names)
    assert rec["decoder.blocks.0.cross_attn.hook_pattern"].shape == (2, 4, 5, 8)
    assert rec["decoder.blocks.0.cross_attn.hook_k"].shape == (2, 8, 2, 8)
    _check_attention_layer(rec, "encoder.blocks.0.attn", 4, 2, False, "rope", 8)
    _check_attention_layer(rec, "decoder.blocks.1.attn", 4, 2, True, "rope", 5)
    _check_attention_layer(rec, "decoder.blocks.1.cross_attn", 4, 2, False, "rope", 5)


@pytest.mark.parametrize("options", [
    dict(pos="rope", n_kv_heads=2),
    dict(pos="rope", n_kv_heads=2, rope_pairs="half", normalization="rmsnorm", activation="swiglu"),
    dict(arch="encoder", pos="learned", norm="post", embed_norm=True, n_token_types=2, head="mlm"),
])
def test_shapes_match_the_documented_table(options):
    model = _model(**options)
    rec = record(model, torch.randint(1, V, (3, 6)))
    dims = {"batch": 3, "pos": 6, "q_pos": 6, "k_pos": 6, "head": 4, "kv_head": model.config.n_kv_heads, "d_head": 8,
            "d_model": 32, "d_ff": model.config.d_ff, "1": 1}
    for name, t in rec.items():
        doc = shape_of(name)
        want = tuple(dims[d.strip()] for d in doc.strip("[]").split(","))
        assert tuple(t.shape) == want, name
    assert all(k for k in HOOK_SHAPES)


def test_only_requested_names_are_kept_and_hooks_are_removed():
    model = _model()
    x = torch.randint(1, V, (1, 5))
    rec = record(model, x, names=["blocks.0.attn.hook_pattern"])
    assert list(rec) == ["blocks.0.attn.hook_pattern"]
    rec = record(model, x, names=lambda n: n.endswith("hook_q"))
    assert list(rec) == ["blocks.0.attn.hook_q", "blocks.1.attn.hook_q"]
    assert not any(p.active for p in model.hook_points().values())
    assert rec["blocks.0.attn.hook_q"].device.type == "cpu" and not rec["blocks.0.attn.hook_q"].requires_grad
    with pytest.raises(ValueError, match="did you mean"):
        record(model, x, names=["blocks.0.attn.hook_patern"])
    with pytest.raises(KeyError, match="not recorded"):
        rec["blocks.0.attn.hook_k"]


def test_hooks_are_removed_when_the_forward_raises():
    model = _model()
    with pytest.raises(ValueError):
        record(model, torch.tensor([[1, V + 5]]))
    assert not any(p.active for p in model.hook_points().values())
    assert model.training  # mode restored too


def test_stack_layers():
    model = _model(n_layers=3)
    rec = record(model, torch.randint(1, V, (2, 4)), names=lambda n: n.endswith("hook_pattern"))
    assert rec.stack_layers("blocks.{l}.attn.hook_pattern").shape == (3, 2, 4, 4, 4)


@settings(max_examples=25, deadline=None)
@given(
    arch=st.sampled_from(["decoder", "encoder", "encoder-decoder"]),
    pos=st.sampled_from(["none", "sinusoidal", "learned", "rope", "alibi", "t5"]),
    heads_kv=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (6, 3), (6, 2)]),
    d_head=st.sampled_from([2, 4, 8]),
    layers=st.integers(1, 3),
    T=st.integers(1, 9),
    norm=st.sampled_from(["pre", "post"]),
    activation=st.sampled_from(["relu", "gelu", "swiglu"]),
    window=st.sampled_from([None, 1, 3]),
)
def test_random_configs_paths_agree_and_patterns_are_distributions(
        arch, pos, heads_kv, d_head, layers, T, norm, activation, window):
    h, kv = heads_kv
    cfg = ModelConfig(arch=arch, pos=pos, n_heads=h, n_kv_heads=kv, d_model=h * d_head,
                      n_layers=layers, norm=norm, activation=activation, window=window,
                      vocab_size=V, max_len=16)
    model = Transformer(cfg).eval()
    g = torch.Generator().manual_seed(T)
    ins = (torch.randint(1, V, (2, T), generator=g),)
    if arch == "encoder-decoder":
        ins = (torch.randint(1, V, (2, T + 2), generator=g),) + ins
    fast = model(*ins)
    rec = record(model, *ins, names=lambda n: n.endswith("hook_pattern"))
    torch.testing.assert_close(rec.output, fast, atol=3e-5, rtol=1e-5)
    for name, p in rec.items():
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5, rtol=0)
        assert torch.all(p >= 0)
