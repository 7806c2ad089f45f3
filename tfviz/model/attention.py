"""Multi-head attention with n_kv_heads (MHA / GQA / MQA), self or cross.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_head) + bias, masked) V        (Vaswani et al. 2017)

Two paths compute the same numbers:
  * explicit: scores and pattern are materialised, so they can be recorded. Used whenever one of
    this layer's score-side hook points is active (or ``impl == "explicit"``).
  * fast: ``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient kernels).
    Plain causal attention is passed as ``is_causal=True`` with no mask tensor, so the flash
    kernel runs. A sliding window longer than ~2w goes to ``banded.banded_attention``, which
    computes only the band: O(n·w) time and memory instead of O(n²).
Query head h reads key/value head h // (n_heads // n_kv_heads).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .banded import banded_attention, use_banded
from .cache import LayerKV
from .config import ModelConfig
from .hooks import HookPoint
from .masks import MaskSpec
from .positional import apply_rotary

IMPLS = ("auto", "explicit", "sdpa", "banded")  # "banded": the window kernel even for short n


@dataclass
class AttnContext:
    """What every layer of a stack shares in one forward: computed once, reused by each layer.

    The positional score bias (ALiBi, T5) is kept as functions: ``bias_fn(q_pos, k_pos)`` ->
    [head, q_pos, k_pos] and the scheme's ``score_mod``. The banded window kernel asks for the
    band only (on the GPU, FlexAttention evaluates ``score_mod`` per computed score), so
    a long windowed sequence never materialises an n x n bias; the other paths ask for the full
    [head, q_pos, k_pos] tensor once (``bias``).
    """

    mask: MaskSpec
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin [pos, d_head/2]
    bias_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    q_pos: torch.Tensor | None = None  # absolute positions of the queries [q_pos]
    k_pos: torch.Tensor | None = None  # ... and of the keys [k_pos]
    rotate: Callable = apply_rotary  # the scheme's way of applying (cos, sin) to q and k
    score_mod: Callable | None = None  # the same bias as a FlexAttention score_mod (ALiBi, T5)
    _memo: dict = field(default_factory=dict, repr=False)

    @property
    def bias(self) -> torch.Tensor | None:
        """[head, q_pos, k_pos], built on first use and shared by every layer."""
        if self.bias_fn is None:
            return None
        if "bias" not in self._memo:
            self._memo["bias"] = self.bias_fn(self.q_pos, self.k_pos)
        return self._memo["bias"]

    def bool_mask(self, q_len: int, k_len: int, device) -> torch.Tensor | None:
        """True = may attend; built once per forward, shared by every layer."""
        key = ("bool", q_len, k_len)
        if key not in self._memo:
            self._memo[key] = self.mask.build(q_len, k_len, device)
        return self._memo[key]

    def additive(self, q_len: int, k_len: int, device, dtype) -> torch.Tensor | None:
        """bias + (-inf where masked): one tensor added to the scores, or None if neither exists."""
        key = ("add", q_len, k_len, dtype)
        if key not in self._memo:
            mask = self.bool_mask(q_len, k_len, device)
            add = None if self.bias is None else self.bias.to(dtype)
            if mask is not None:
                zero = torch.zeros((), dtype=dtype, device=device) if add is None else add
                add = zero.masked_fill(~mask, float("-inf"))
            self._memo[key] = add
        return self._memo[key]


def _softmax_dtype(scores: torch.Tensor) -> torch.dtype:
    """Half-precision scores are normalised in float32; float32/float64 keep their precision."""
    return torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, cross: bool = False):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
        self.cross = cross
        self.dropout = cfg.dropout
        self.impl = "auto"
        d, hq, hkv = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
        if cross:  # queries from the decoder, keys and values from the encoder's memory
            self.W_q = nn.Linear(d, hq, bias=cfg.bias)
            self.W_kv = nn.Linear(d, 2 * hkv, bias=cfg.bias)
        else:  # one fused projection, like nn.MultiheadAttention's in_proj
            self.W_qkv = nn.Linear(d, hq + 2 * hkv, bias=cfg.bias)
        self.W_o = nn.Linear(hq, d, bias=cfg.bias)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        for hook in () if cross else cfg.scheme.attention_hooks():  # rotated q/k, score bias
            self.add_module(hook, HookPoint())
        self.hook_attn_scores, self.hook_pattern = HookPoint(), HookPoint()
        self.hook_z, self.hook_out = HookPoint(), HookPoint()
        self.hook_result = HookPoint()  # opt-in: per-head outputs, computed only while active
        # The points that need the explicit path when recorded (a plain tuple: not submodules twice)
        self._score_hooks = tuple(getattr(self, n) for n in ("hook_attn_scores", "hook_pattern", "hook_pos_bias")
                                  if hasattr(self, n))

    # ---------------------------------------------------------------------------------------
    def _project(self, x: torch.Tensor, memory: torch.Tensor | None, split=None):
        B, T, _ = x.shape
        hq, hkv = self.n_heads * self.d_head, self.n_kv_heads * self.d_head
        if split is not None:  # per-head inputs (Block's hook_q/k/v_input): each head its own x
            return self._project_split(*split)
        if self.cross:
            q = self.W_q(x)
            k, v = (None, None) if memory is None else self.W_kv(memory).split([hkv, hkv], dim=-1)
        else:
            q, k, v = self.W_qkv(x).split([hq, hkv, hkv], dim=-1)
        q = q.view(B, T, self.n_heads, self.d_head)  # [batch, pos, head, d_head]
        if k is not None:
            k = k.view(B, k.shape[1], self.n_kv_heads, self.d_head)  # [batch, pos, kv_head, d_head]
            v = v.view(B, v.shape[1], self.n_kv_heads, self.d_head)
        return q, k, v

    def _project_split(self, xq: torch.Tensor, xk: torch.Tensor, xv: torch.Tensor):
        """xq [batch, pos, head, d_model], xk / xv [batch, pos, kv_head, d_model] (already through
        the norm) -> q [batch, pos, head, d_head], k, v [batch, pos, kv_head, d_head]: head h's
        rows of W_qkv applied to head h's own input (TransformerLens's use_split_qkv_input)."""
        H, Hkv, d = self.n_heads, self.n_kv_heads, self.d_head
        W, b = self.W_qkv.weight, self.W_qkv.bias  # [(H + 2 Hkv) d_head, d_model]
        Wq, Wk, Wv = W.split([H * d, Hkv * d, Hkv * d], dim=0)
        bq, bk, bv = (None, None, None) if b is None else b.split([H * d, Hkv * d, Hkv * d])

        def proj(x, w, bias, n):
            out = torch.einsum("bphm,hdm->bphd", x, w.view(n, d, -1))
            return out if bias is None else out + bias.view(n, d)
        return proj(xq, Wq, bq, H), proj(xk, Wk, bk, Hkv), proj(xv, Wv, bv, Hkv)

    def _wants_explicit(self) -> bool:
        if self.impl == "explicit":
            return True
        return self.impl == "auto" and any(h.active for h in self._score_hooks)

    def forward(self, x: torch.Tensor, ctx: AttnContext, memory: torch.Tensor | None = None,
                cache: LayerKV | None = None, split=None) -> torch.Tensor:
        """x [batch, pos, d_model] -> [batch, pos, d_model]. ``memory`` for cross-attention;
        ``split``: (q, k, v) inputs per head, [batch, pos, head | kv_head, d_model] (x unused)."""
        B, T = (x.shape[0], x.shape[1]) if split is None else split[0].shape[:2]
        q, k, v = self._project(x, memory, split)
        q = self.hook_q(q)
        if k is not None:
            k, v = self.hook_k(k), self.hook_v(v)
        if ctx.rotary is not None:
            cos, sin = ctx.rotary
            q = self.hook_rot_q(ctx.rotate(q, cos, sin))
            k = self.hook_rot_k(ctx.rotate(k, cos, sin))
        q = q.transpose(1, 2)  # [batch, head, q_pos, d_head]
        if k is not None:
            k, v = k.transpose(1, 2), v.transpose(1, 2)  # [batch, kv_head, k_pos, d_head]
        if cache is not None:
            if self.cross:  # the memory's keys/values are computed once, then reused
                if k is not None:
                    cache.k, cache.v = k, v
                k, v = cache.k, cache.v
            else:
                k, v = cache.append(k, v)
        if self._wants_explicit():
            z = self._explicit(q, k, v, ctx)
        elif self.impl != "sdpa" and use_banded(ctx.mask, q.shape[2], k.shape[2], self.impl == "banded"):
            z = banded_attention(q, k, v, ctx.mask.window, ctx.mask.causal, bias=ctx.bias_fn,
                                 score_mod=ctx.score_mod, key_is_pad=ctx.mask.key_is_pad,
                                 dropout_p=self.dropout if self.training else 0.0)
        else:
            z = self._sdpa(q, k, v, ctx)
        z = self.hook_z(z.transpose(1, 2))  # [batch, pos, head, d_head]
        if self.hook_result.active:  # opt-in: each head's own write into the residual stream
            return self.hook_out(self._by_head(z))
        return self.hook_out(self.W_o(z.reshape(B, T, self.n_heads * self.d_head)))

    def _by_head(self, z: torch.Tensor) -> torch.Tensor:
        """z [batch, pos, head, d_head] -> result_h = z_h W_O^h [batch, pos, head, d_model]
        (``hook_result``, TransformerLens's use_attn_result), then sum_h result_h + b_O: W_o split
        by head, so a hook on one head's result changes only that head's share."""
        W_O = self.W_o.weight.view(-1, self.n_heads, self.d_head)  # [d_model, head, d_head]
        result = self.hook_result(torch.einsum("bphd,mhd->bphm", z, W_O))
        out = result.sum(2)
        return out if self.W_o.bias is None else out + self.W_o.bias

    # ---------------------------------------------------------------------------------------
    def _explicit(self, q, k, v, ctx: AttnContext) -> torch.Tensor:
        B, H, T, d = q.shape
        S, Hkv = k.shape[2], k.shape[1]
        # Query head h reads kv head h // group. Heads kv*group .. kv*group + group-1 are stacked
        # along the query axis, so each kv head's keys are read once (no repeat_interleave copy).
        qg = q.reshape(B, Hkv, (H // Hkv) * T, d)
        scores = (qg @ k.transpose(-2, -1)).view(B, H, T, S) / math.sqrt(self.d_head)  # [batch, head, q_pos, k_pos]
        if ctx.bias_fn is not None:
            self.hook_pos_bias(ctx.bias)
        add = ctx.additive(q.shape[2], k.shape[2], q.device, scores.dtype)  # bias, -inf if masked
        if add is not None:
            scores = scores + add
        scores = self.hook_attn_scores(scores)
        pattern = self.hook_pattern(torch.softmax(scores, dim=-1, dtype=_softmax_dtype(scores)).to(q.dtype))
        if self.training and self.dropout:
            pattern = F.dropout(pattern, self.dropout)
        return (pattern.reshape(B, Hkv, -1, S) @ v).view(B, H, T, d)  # [batch, head, q_pos, d_head]

    def _sdpa(self, q, k, v, ctx: AttnContext) -> torch.Tensor:
        T, S = q.shape[2], k.shape[2]
        attn_mask, is_causal = None, False
        if ctx.mask.is_plain_causal and ctx.bias_fn is None and T == S and ctx.mask.q_offset == 0:
            is_causal = True
        elif ctx.bias_fn is not None:
            attn_mask = ctx.additive(T, S, q.device, q.dtype)
        elif not (ctx.mask.is_plain_causal and T == 1):  # one new token may see every cached key
            attn_mask = ctx.bool_mask(T, S, q.device)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )
