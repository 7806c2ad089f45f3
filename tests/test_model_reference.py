"""tfviz's attention and blocks against PyTorch's own modules, with weights copied."""
import torch
from torch import nn

import tfviz
from tfviz.model.attention import AttnContext, Attention
from tfviz.model.blocks import Block
from tfviz.model.masks import MaskSpec


def _cfg(**kw):
    base = dict(arch="encoder", vocab_size=20, d_model=32, n_heads=4, n_layers=1, d_ff=64,
                pos="none", norm="post", activation="relu", dropout=0.0)
    base.update(kw)
    return tfviz.ModelConfig(**base)


def _copy_attention(ours: Attention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ours.W_qkv.weight.copy_(ref.in_proj_weight)
        ours.W_qkv.bias.copy_(ref.in_proj_bias)
        ours.W_o.weight.copy_(ref.out_proj.weight)
        ours.W_o.bias.copy_(ref.out_proj.bias)


def _block_like(cfg, ref: nn.TransformerEncoderLayer) -> Block:
    """Our Block holding ``ref``'s attention and MLP weights (its norms left as initialised)."""
    ours = Block(cfg).eval()
    _copy_attention(ours.attn, ref.self_attn)
    with torch.no_grad():
        ours.mlp.W_in.weight.copy_(ref.linear1.weight)
        ours.mlp.W_in.bias.copy_(ref.linear1.bias)
        ours.mlp.W_out.weight.copy_(ref.linear2.weight)
        ours.mlp.W_out.bias.copy_(ref.linear2.bias)
    return ours


def test_attention_equals_torch_multihead_attention():
    torch.manual_seed(0)
    cfg = _cfg()
    ref = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    ours = Attention(cfg).eval()
    _copy_attention(ours, ref)
    x = torch.randn(3, 7, 32)
    for causal in (False, True):
        for impl in ("explicit", "sdpa"):
            ours.impl = impl
            got = ours(x, AttnContext(MaskSpec(causal=causal)))
            mask = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1) if causal else None
            want, _ = ref(x, x, x, attn_mask=mask, need_weights=False)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_attention_pattern_equals_torch_weights():
    torch.manual_seed(1)
    cfg = _cfg()
    ref = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    ours = Attention(cfg).eval()
    _copy_attention(ours, ref)
    x = torch.randn(2, 5, 32)
    seen = {}
    h = ours.hook_pattern.register_forward_hook(lambda m, i, o: seen.setdefault("p", o))
    try:
        ours(x, AttnContext(MaskSpec()))
    finally:
        h.remove()
    _, w = ref(x, x, x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(seen["p"], w, atol=1e-6, rtol=0)


def test_post_norm_relu_block_equals_torch_transformer_encoder_layer():
    torch.manual_seed(2)
    cfg = _cfg()
    ref = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, activation="relu",
                                     batch_first=True, norm_first=False).eval()
    ours = _block_like(cfg, ref)
    with torch.no_grad():
        for a, b in ((ours.ln1, ref.norm1), (ours.ln2, ref.norm2)):
            a.weight.copy_(torch.rand_like(a.weight) + 0.5)
            a.bias.copy_(torch.randn_like(a.bias))
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
    x = torch.randn(4, 9, 32)
    for impl in ("explicit", "sdpa"):
        ours.attn.impl = impl
        torch.testing.assert_close(ours(x, AttnContext(MaskSpec())), ref(x), atol=1e-5, rtol=0)


def test_pre_norm_gelu_block_equals_torch_norm_first_layer():
    torch.manual_seed(3)
    cfg = _cfg(norm="pre", activation="gelu")
    ref = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, activation="gelu",
                                     batch_first=True, norm_first=True).eval()
    ours = _block_like(cfg, ref)
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(ours(x, AttnContext(MaskSpec())), ref(x), atol=1e-5, rtol=0)


def test_benchmark_reference_computes_the_same_logits():
    """The model benchmark compares tfviz against a minimal nanoGPT-style reference holding the
    same weights; both must compute the same function (small shapes here)."""
    from tfviz.bench.model import Reference, copy_weights

    torch.manual_seed(0)
    cfg = tfviz.ModelConfig(vocab_size=20, d_model=24, n_heads=3, n_layers=2, d_ff=96, max_len=16,
                            pos="learned", tie_embeddings=True, pad_id=None)
    ours = tfviz.Transformer(cfg).eval()
    ref = Reference(20, 24, 3, 2, 16).eval()
    copy_weights(ours, ref)
    x = torch.randint(0, 20, (2, 16))
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=0)
