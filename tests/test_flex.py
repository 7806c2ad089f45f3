"""The GPU's FlexAttention window path (tfviz.model.flex), checked where torch allows on a CPU.

torch runs FlexAttention on a CPU forward only (no backward), eagerly as a dense reference: that
is enough to check the block mask (built from the band, never from n x n), the mask_mod (window,
key padding), the score_mod (ALiBi / T5 ``Positional.score_mod``) and GQA against the masked O(n²)
reference.
The compiled kernel, its backward and bf16 are checked on CUDA in tests/test_gpu.py.
"""
import dataclasses

import pytest
import torch
from test_banded import _cfg, qkv, reference

import tfviz
from tfviz.model import flex
from tfviz.model.positional import ALiBi, T5Bias

pytestmark = pytest.mark.skipif(not flex.importable(), reason="this torch has no FlexAttention")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n,window", [(300, 32), (256, 128), (1000, 200), (129, 500), (5, 2), (512, 1),
                                      (640, 127)])
def test_band_block_mask_equals_create_block_mask(n, window, causal):
    """Partial and full tiles, written from the band, equal what create_block_mask finds by
    evaluating the mask over all n² pairs."""
    from torch.nn.attention.flex_attention import create_block_mask

    ours = flex.band_block_mask(n, window, causal, "cpu")
    ref = create_block_mask(flex.window_mask_mod(window, causal), None, None, n, n, device="cpu")
    assert torch.equal(ours.to_dense(), ref.to_dense())
    partial, full = flex.band_blocks(n, window, causal, "cpu")

    def dense(num, idx):  # [1, 1, q_block] counts + indices -> bool [q_block, k_block]
        out = torch.zeros(num.shape[-1], idx.shape[-1], dtype=torch.bool)
        for i, c in enumerate(num[0, 0].tolist()):
            out[i, idx[0, 0, i, :c].long()] = True
        return out

    assert torch.equal(dense(ref.full_kv_num_blocks, ref.full_kv_indices), full)
    assert torch.equal(dense(ref.kv_num_blocks, ref.kv_indices), partial)
    assert flex.band_block_mask(n, window, causal, "cpu") is ours  # cached


def test_padding_makes_every_tile_partial():
    pads = torch.zeros(2, 300, dtype=torch.bool)
    bm = flex.band_block_mask(300, 32, True, "cpu", key_is_pad=pads)
    assert bm.full_kv_num_blocks.sum() == 0 and bm.kv_num_blocks.sum() > 0


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("bias", [None, "alibi", "t5"])
def test_eager_flex_forward_equals_masked_reference(causal, kv_heads, bias):
    n, window = 300, 24
    q, k, v = (t.detach() for t in qkv(2, 4, kv_heads, n, seed=5))
    pads = torch.zeros(2, n, dtype=torch.bool)
    pads[1, :7] = True  # left padding
    pads[0, 100:130:4] = True  # holes
    scheme = None
    if bias == "alibi":
        scheme = ALiBi(_cfg()).to(torch.float64)
    elif bias == "t5":
        scheme = T5Bias(_cfg(), causal=causal).to(torch.float64)
    score_mod = None if scheme is None else scheme.score_mod()
    bias_fn = None if scheme is None else scheme.score_bias
    for kp in (None, pads):
        with torch.no_grad():
            out = flex.flex_window_attention(q, k, v, window, causal, score_mod=score_mod, key_is_pad=kp,
                                             compiled=False)
            want = reference(q, k, v, window, causal, bias=bias_fn, key_is_pad=kp)[0]
        torch.testing.assert_close(out, want, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_score_mod_is_score_bias_elementwise(causal):
    """The kernel's score_mod adds exactly the score_bias entry, also from a KV-cache offset."""
    for scheme in (ALiBi(_cfg()), T5Bias(_cfg(), causal=causal)):
        pos = torch.arange(40)
        full = scheme.score_bias(pos, pos)  # [head, q_pos, k_pos]
        for offset in (0, 7):
            mod = scheme.score_mod(offset)
            for h, i, j in [(0, 0, 0), (3, 32, 0), (1, 5, 17), (2, 20, 19)]:
                got = mod(torch.tensor(0.0), torch.tensor(0), torch.tensor(h), torch.tensor(i), torch.tensor(j))
                assert got.item() == pytest.approx(full[h, i + offset, j].item(), abs=1e-7)


def test_compile_key_tells_apart_whatever_dynamo_guards_on():
    """``flex.mod_key``: the compiled kernel is called outside the raised recompile limit only for a
    call it has seen; the key must differ wherever dynamo would recompile (another mod, another
    closed-over window / causal / bucket count, another tensor shape), or past torch's default
    limit of 8 dynamo silently runs the dense n × n fallback."""
    cfg = tfviz.ModelConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=1, max_len=64, pos="alibi")
    alibi, alibi2 = ALiBi(cfg).score_mod(), ALiBi(cfg).score_mod()
    t5c = T5Bias(dataclasses.replace(cfg, pos="t5"), causal=True).score_mod()
    t5b = T5Bias(dataclasses.replace(cfg, pos="t5"), causal=False).score_mod()
    assert flex.mod_key(alibi) == flex.mod_key(alibi2)  # same code, same slopes shape: one compile
    assert len({flex.mod_key(m) for m in (None, alibi, t5c, t5b)}) == 4
    assert flex.mod_key(alibi) != flex.mod_key(ALiBi(cfg).score_mod(q_offset=3))
    masks = [flex.window_mask_mod(w, c) for w in (8, 16) for c in (True, False)]
    assert len({flex.mod_key(m) for m in masks}) == 4
    pads = torch.zeros(2, 10, dtype=torch.bool)
    assert flex.mod_key(flex.window_mask_mod(8, True, pads)) != flex.mod_key(flex.window_mask_mod(8, True))
    assert flex.mod_key(flex.window_mask_mod(8, True, pads)) == flex.mod_key(flex.window_mask_mod(8, True, pads.clone()))
    assert flex.mod_key(flex.window_mask_mod(8, True, pads)) != flex.mod_key(
        flex.window_mask_mod(8, True, torch.zeros(2, 12, dtype=torch.bool)))


def test_head_sizes_under_the_kernels_smallest_take_the_chunked_band():
    """FlexAttention's compiled kernel refuses d_head < 16 (torch 2.11, seen on an H200): such a
    model's window runs the chunked band (``banded.banded_attention`` asks ``flex.fits``)."""
    small, big = torch.zeros(1, 4, 10, 8), torch.zeros(1, 4, 10, flex.MIN_D_HEAD)
    assert not flex.fits(small, small) and not flex.fits(big, small) and flex.fits(big, big)
