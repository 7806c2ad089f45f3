"""Transformer blocks: MLP and one block (encoder block, or decoder block with cross-attention).

Pre-norm (GPT-2):  x = x + Sublayer(N(x))        Post-norm (Vaswani et al.):  x = N(x + Sublayer(x))
N is the config's normalisation (``norms.NORMS``), the MLP's nonlinearity its activation
(``activations.ACTIVATIONS``).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .activations import make_activation
from .attention import AttnContext, Attention
from .cache import LayerKV
from .config import ModelConfig
from .hooks import HookPoint
from .norms import make_norm


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class MLP(nn.Module):
    """Position-wise feed-forward: W_out act(W_in x). A gated activation (SwiGLU, Shazeer 2020:
    W_out (silu(W_g x) * W_in x)) reads twice as many W_in outputs."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.act = make_activation(cfg)
        width = 2 * cfg.d_ff if self.act.gated else cfg.d_ff
        self.W_in = nn.Linear(cfg.d_model, width, bias=cfg.bias)
        self.W_out = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.hook_post = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # W_in x: [batch, pos, d_ff] (x2 when gated); act(...): [batch, pos, d_ff]
        return self.W_out(self.hook_post(self.act(self.W_in(x))))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, cross: bool = False):
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.drop = nn.Dropout(cfg.dropout)
        self.ln1 = make_norm(cfg)
        self.attn = Attention(cfg)
        self.hook_attn_out = HookPoint()  # = attn.hook_out (TransformerLens's block-level name)
        self.hook_resid_pre, self.hook_resid_mid = HookPoint(), HookPoint()
        # opt-in (TransformerLens's use_split_qkv_input): the residual stream once per head, so
        # one head's query, key or value input can be patched alone (path patching)
        self.hook_q_input, self.hook_k_input, self.hook_v_input = HookPoint(), HookPoint(), HookPoint()
        self._split_hooks = (self.hook_q_input, self.hook_k_input, self.hook_v_input)
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads
        if cross:
            self.ln_cross = make_norm(cfg)
            self.cross_attn = Attention(cfg, cross=True)
            self.hook_resid_mid_cross = HookPoint()
        if not cfg.attn_only:
            self.ln2 = make_norm(cfg)
            self.mlp = MLP(cfg)
            self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()
        self.has_cross, self.has_mlp = cross, not cfg.attn_only  # (hasattr on a Module is slow)

    def _sublayer(self, x: torch.Tensor, norm: nn.Module, f: Callable) -> torch.Tensor:
        drop = self.drop if self.drop.p and self.training else _identity  # p = 0: not even a call
        if self.pre_norm:
            return x + drop(f(norm(x)))
        return norm(x + drop(f(x)))

    def forward(self, x: torch.Tensor, ctx: AttnContext, memory: torch.Tensor | None = None,
                memory_ctx: AttnContext | None = None, cache: LayerKV | None = None,
                cross_cache: LayerKV | None = None) -> torch.Tensor:
        """x [batch, pos, d_model] -> [batch, pos, d_model]"""
        x = self.hook_resid_pre(x)
        if self._split_hooks[0].active or self._split_hooks[1].active or self._split_hooks[2].active:
            x = self.hook_resid_mid(self._split_attention(x, ctx, cache))
        else:
            x = self.hook_resid_mid(self._sublayer(
                x, self.ln1, lambda h: self.hook_attn_out(self.attn(h, ctx, cache=cache))))
        if self.has_cross:
            x = self.hook_resid_mid_cross(self._sublayer(
                x, self.ln_cross,
                lambda h: self.cross_attn(h, memory_ctx, memory=memory, cache=cross_cache)))
        if self.has_mlp:
            x = self._sublayer(x, self.ln2, lambda h: self.hook_mlp_out(self.mlp(h)))
        return self.hook_resid_post(x)

    def _split_attention(self, x: torch.Tensor, ctx: AttnContext, cache: LayerKV | None) -> torch.Tensor:
        """Self-attention reading one copy of x per head: hook_q_input [batch, pos, head, d_model],
        hook_k_input / hook_v_input [batch, pos, kv_head, d_model], each through ln1 (pre-norm)
        on its own. Unhooked, the same numbers as the fused path (to float rounding); the residual
        addition uses x itself."""
        B, T, d = x.shape

        def per_head(point, n):  # a real copy while the point is active (a hook may write into it)
            view = x[:, :, None].expand(B, T, n, d)
            return point(view.clone()) if point.active else view
        xq = per_head(self.hook_q_input, self.n_heads)
        xk, xv = per_head(self.hook_k_input, self.n_kv_heads), per_head(self.hook_v_input, self.n_kv_heads)
        if self.pre_norm:
            xq, xk, xv = self.ln1(xq), self.ln1(xk), self.ln1(xv)
        out = self.hook_attn_out(self.attn(x, ctx, cache=cache, split=(xq, xk, xv)))
        drop = self.drop if self.drop.p and self.training else _identity
        return x + drop(out) if self.pre_norm else self.ln1(x + drop(out))
