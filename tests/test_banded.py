"""Banded sliding-window attention equals the masked O(n²) reference: outputs and gradients, float64."""
import math
from unittest import mock

import pytest
import torch

import tfviz
from tfviz.model import banded
from tfviz.model.banded import banded_attention, banded_pattern, expand_banded, use_banded
from tfviz.model.masks import MaskSpec
from tfviz.model.positional import ALiBi, T5Bias

F64 = torch.float64


def reference(q, k, v, window, causal, bias=None, key_is_pad=None):
    """Masked explicit attention over the full [q_pos, k_pos] scores -> (output, pattern)."""
    n, group = q.shape[2], q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        pos = torch.arange(n, device=q.device)
        scores = scores + (bias(pos, pos) if callable(bias) else bias)
    mask = MaskSpec(causal=causal, window=window, key_is_pad=key_is_pad).build(n, n, q.device)
    pattern = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return pattern @ v, pattern


def qkv(batch, heads, kv_heads, n, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, h, n, d, generator=g, dtype=F64, requires_grad=True)
            for h in (heads, kv_heads, kv_heads)]


def assert_same(fast, ref, inputs):
    out_f, out_r = fast(), ref()
    torch.testing.assert_close(out_f, out_r, atol=1e-10, rtol=1e-10)
    g = torch.randn_like(out_r)
    for a, b in zip(torch.autograd.grad(out_f, inputs, g), torch.autograd.grad(out_r, inputs, g)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def _cfg(**kw):
    return tfviz.ModelConfig(**{**dict(vocab_size=50, d_model=32, n_heads=4, n_layers=1, max_len=256), **kw})


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])  # MHA, GQA, MQA
@pytest.mark.parametrize("n,window", [(64, 16), (77, 16), (50, 20), (40, 3), (9, 3), (12, 40), (1, 5)])
def test_banded_equals_masked_reference(causal, kv_heads, n, window):
    q, k, v = qkv(2, 4, kv_heads, n)
    assert_same(lambda: banded_attention(q, k, v, window, causal),
                lambda: reference(q, k, v, window, causal)[0], [q, k, v])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", ["tensor", "alibi", "t5"])
def test_banded_with_score_bias(causal, kind):
    n, window, heads = 70, 16, 4
    q, k, v = qkv(2, heads, 2, n, seed=1)
    pos = torch.arange(n)
    if kind == "tensor":  # any [head, q_pos, k_pos] bias, with its gradient
        bias = torch.randn(heads, n, n, dtype=F64, requires_grad=True)
        inputs, fn = [q, k, v, bias], bias
    else:  # a function of (q_pos, k_pos): only the band is ever evaluated
        pos_scheme = ALiBi(_cfg()) if kind == "alibi" else T5Bias(_cfg(), causal=causal)
        pos_scheme = pos_scheme.to(F64)
        fn = pos_scheme.score_bias
        inputs = [q, k, v] + list(pos_scheme.parameters())
        # the tensor form of the same bias must agree too
        assert_same(lambda: banded_attention(q, k, v, window, causal, bias=fn(pos, pos)),
                    lambda: reference(q, k, v, window, causal, bias=fn)[0], inputs)
    assert_same(lambda: banded_attention(q, k, v, window, causal, bias=fn),
                lambda: reference(q, k, v, window, causal, bias=fn)[0], inputs)


@pytest.mark.parametrize("causal", [True, False])
def test_banded_with_padding_and_bias(causal):
    n, window = 45, 8
    q, k, v = qkv(3, 4, 1, n, seed=2)
    pads = torch.zeros(3, n, dtype=torch.bool)
    pads[0, :5] = True  # left padding
    pads[1, -9:] = True  # right padding
    pads[2, 10:30:3] = True  # holes
    bias = torch.randn(4, n, n, dtype=F64)
    assert_same(lambda: banded_attention(q, k, v, window, causal, key_is_pad=pads, bias=bias),
                lambda: reference(q, k, v, window, causal, bias=bias, key_is_pad=pads)[0], [q, k, v])
    assert_same(lambda: banded_attention(q, k, v, window, causal, key_is_pad=pads),
                lambda: reference(q, k, v, window, causal, key_is_pad=pads)[0], [q, k, v])


@pytest.mark.parametrize("causal", [True, False])
def test_banded_pattern_expands_to_the_full_pattern(causal):
    n, window = 37, 5
    q, k, _ = qkv(2, 4, 2, n, seed=3)
    pads = torch.zeros(2, n, dtype=torch.bool)
    pads[1, :4] = True
    bias = torch.randn(4, n, n, dtype=F64)
    band = banded_pattern(q, k, window, causal, bias=bias, key_is_pad=pads)
    assert band.shape == (2, 4, n, 2 * window + 1)
    full = expand_banded(band, window, causal)
    torch.testing.assert_close(full, reference(q, k, k, window, causal, bias, pads)[1])


@pytest.mark.parametrize("arch,pos", [("decoder", "rope"), ("decoder", "alibi"), ("encoder", "t5"),
                                      ("encoder", "learned")])
def test_windowed_model_fast_path_equals_recorded_explicit_path(arch, pos):
    torch.manual_seed(0)
    cfg = _cfg(arch=arch, pos=pos, n_kv_heads=2, window=6, n_layers=2, pad_id=0)
    model = tfviz.Transformer(cfg).to(F64)
    tokens = torch.randint(1, 50, (2, 40))
    tokens[1, :3] = 0  # left padding: the fast path gets key_is_pad
    with mock.patch("tfviz.model.attention.banded_attention", wraps=banded_attention) as spy:
        fast = model(tokens)
    assert spy.call_count == cfg.n_layers  # n = 40 > 2w: the banded kernel ran in every layer
    grads_fast = torch.autograd.grad(fast.sum(), list(model.parameters()), allow_unused=True)
    model.set_attention_impl("explicit")
    slow = model(tokens)
    grads_slow = torch.autograd.grad(slow.sum(), list(model.parameters()), allow_unused=True)
    # The model's explicit path takes its softmax in float32 (scores.float()), even for float64
    # weights: hence float32-level tolerances here, and 1e-10 for the kernel-level tests above.
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=1e-5)
    for a, b in zip(grads_fast, grads_slow):
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    # Recording goes through the explicit path; the band of q, k gives back the same pattern.
    model.set_attention_impl("auto")
    rot = "hook_rot_" if pos == "rope" else "hook_"
    names = [f"blocks.0.attn.{rot}q", f"blocks.0.attn.{rot}k", "blocks.0.attn.hook_pattern"]
    if pos in ("alibi", "t5"):
        names.append("blocks.0.attn.hook_pos_bias")
    rec = tfviz.record(model, tokens, names=names)
    q, k = rec[names[0]].transpose(1, 2), rec[names[1]].transpose(1, 2)
    bias = rec["blocks.0.attn.hook_pos_bias"] if pos in ("alibi", "t5") else None
    pads = tokens == 0
    band = banded_pattern(q, k, cfg.window, cfg.causal, bias=bias, key_is_pad=pads)
    torch.testing.assert_close(expand_banded(band, cfg.window, cfg.causal), rec["blocks.0.attn.hook_pattern"],
                               atol=1e-6, rtol=1e-5)


def test_impl_forces_a_path():
    torch.manual_seed(2)
    model = tfviz.Transformer(_cfg(pos="rope", window=8, n_layers=1)).to(F64)
    short, long = torch.randint(1, 50, (1, 12)), torch.randint(1, 50, (1, 40))
    expected = {("auto", short): 0, ("auto", long): 1, ("sdpa", long): 0, ("banded", short): 1,
                ("explicit", long): 0}
    for (impl, tokens), calls in expected.items():
        model.set_attention_impl(impl)
        with mock.patch("tfviz.model.attention.banded_attention", wraps=banded_attention) as spy:
            out = model(tokens)
        assert spy.call_count == calls, (impl, tokens.shape)
        model.set_attention_impl("explicit")
        torch.testing.assert_close(out, model(tokens), atol=1e-6, rtol=1e-5)


def test_windowed_decoder_generates_the_same_with_and_without_cache():
    torch.manual_seed(1)
    model = tfviz.Transformer(_cfg(pos="rope", window=4, n_kv_heads=1, pad_id=None)).to(F64)
    prompt = torch.randint(0, 50, (2, 20))
    cached = model.generate(prompt, 12, use_cache=True)  # prefill banded, then masked decode steps
    assert torch.equal(cached, model.generate(prompt, 12, use_cache=False))


def test_dispatch_rules():
    win = MaskSpec(causal=True, window=8)
    assert use_banded(win, 17, 17) and not use_banded(win, 16, 16)
    assert use_banded(win, 16, 16, force=True)
    assert not use_banded(MaskSpec(causal=True), 100, 100, force=True)  # no window
    assert not use_banded(MaskSpec(causal=True, window=8, n_global=2), 100, 100)  # global tokens
    assert not use_banded(MaskSpec(causal=True, window=8, q_offset=99), 1, 100)  # decode step
    assert not use_banded(MaskSpec(window=8, is_self=False), 100, 100)
    assert "banded" in tfviz.model.attention.IMPLS
