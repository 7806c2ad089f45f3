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
        x = self.hook_resid_mid(self._sublayer(
            x, self.ln1, lambda h: self.hook_attn_out(self.attn(h, ctx, cache=cache))))
        if self.has_cross:
            x = self.hook_resid_mid_cross(self._sublayer(
                x, self.ln_cross,
                lambda h: self.cross_attn(h, memory_ctx, memory=memory, cache=cross_cache)))
        if self.has_mlp:
            x = self._sublayer(x, self.ln2, lambda h: self.hook_mlp_out(self.mlp(h)))
        return self.hook_resid_post(x)
