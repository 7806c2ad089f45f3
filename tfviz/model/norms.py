"""Normalisation layers, one class each, behind one registry (``NORMS``, ``ModelConfig.normalization``).

Every norm is built as ``cls(cfg)``, maps [..., d_model] -> [..., d_model] and has TransformerLens
4's hook points (its ``NormalizationBridge``; TransformerLens 4.3 is the version tfviz follows):

    hook_scale       [batch, pos, 1]        sqrt(var(x) + eps)   (RMSNorm: sqrt(mean(x^2) + eps))
    hook_normalized  [batch, pos, d_model]  (x - mean(x)) / scale (RMSNorm: x / scale), *before*
                                            the weight and bias
    hook_out         [batch, pos, d_model]  normalized * weight + bias: what the next layer reads

(TransformerLens 3's ``HookedTransformer`` recorded the weighted output as ``hook_normalized``;
that quantity is ``hook_out`` here.) The output is always the fused kernel's (``F.layer_norm``,
or RMSNorm as Llama computes it), so recording changes no number downstream; the scale and the
normalized value are computed beside it only while recorded, and a forward hook that replaces
either one makes the output follow it. Where a norm sits (before or after each sublayer) is
``ModelConfig.norm`` ("pre" | "post"), see ``blocks.py``.

To add one: a class here and its line in ``NORMS``.
"""
from __future__ import annotations

import torch
from torch import nn

from .hooks import HookPoint


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)``, skipping the call when it is already that dtype (a recorded forward on a GPU
    is bound by such calls)."""
    return t if t.dtype == dtype else t.to(dtype)


def _hooks(norm: nn.Module) -> None:
    norm.hook_scale, norm.hook_normalized, norm.hook_out = HookPoint(), HookPoint(), HookPoint()


class LayerNorm(nn.LayerNorm):
    """Ba et al. 2016: (x - mean(x)) / sqrt(var(x) + eps) * g + b over the last (d_model) axis."""

    name = "layernorm"

    def __init__(self, cfg):
        super().__init__(cfg.d_model, eps=cfg.layer_norm_eps)
        _hooks(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.hook_scale.active or self.hook_normalized.active):
            return self.hook_out(super().forward(x))  # the fused kernel
        h = _as(x, torch.float32) if x.element_size() < 4 else x  # half up to float32; float64 stays
        if torch.is_grad_enabled() and x.requires_grad:
            # In a graph: mean and variance as differentiable ops (the fused kernel's own mean and
            # rstd carry no gradient), so a hook that replaces either value passes gradients on.
            out = super().forward(x)
            mean = h.mean(-1, keepdim=True)
            rstd = (h - mean).pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()
        else:
            # The same fused kernel, which also returns each position's mean and 1/sqrt(var + eps)
            # (float32 for half inputs): the output is the number F.layer_norm gives, and the scale
            # and the normalized value cost three small kernels beside it, not ten.
            xs, w, b = x, self.weight, self.bias
            if torch.is_autocast_enabled(x.device.type):  # autocast runs layer_norm in float32
                xs, w, b = (None if t is None else _as(t, torch.float32) for t in (x, w, b))
            out, mean, rstd = torch.native_layer_norm(xs, self.normalized_shape, w, b, self.eps)
        scale = _as(rstd.reciprocal(), x.dtype)  # [batch, pos, 1]
        hooked_scale = self.hook_scale(scale)
        centred = h - _as(mean, h.dtype)
        if hooked_scale is scale:
            normalized = _as(centred * _as(rstd, h.dtype), x.dtype)  # [batch, pos, d_model]
        else:  # a hook replaced the scale: divide by it
            normalized = _as(centred / _as(hooked_scale, h.dtype), x.dtype)
        hooked = self.hook_normalized(normalized)
        if hooked is not normalized or hooked_scale is not scale:  # a hook replaced one
            out = hooked * self.weight + self.bias
        return self.hook_out(out)


class RMSNorm(nn.Module):
    """Zhang & Sennrich 2019 (Llama, Mistral, Qwen): x / sqrt(mean(x^2) + eps) * g. No mean is
    subtracted and there is no bias. Computed in float32 (as Llama's own implementation does), then
    cast back before the gain is applied."""

    name = "rmsnorm"

    def __init__(self, cfg):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(cfg.d_model))
        self.eps = cfg.layer_norm_eps
        _hooks(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        mean_sq = h.pow(2).mean(-1, keepdim=True) + self.eps
        normalized = (h * torch.rsqrt(mean_sq)).to(x.dtype)  # [batch, pos, d_model]
        if self.hook_scale.active or self.hook_normalized.active:
            scale = mean_sq.sqrt().to(x.dtype)  # [batch, pos, 1]
            hooked_scale = self.hook_scale(scale)
            if hooked_scale is not scale:  # a hook replaced it
                normalized = (h / hooked_scale.float()).to(x.dtype)
            normalized = self.hook_normalized(normalized)
        return self.hook_out(self.weight * normalized)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


NORMS: dict[str, type[nn.Module]] = {cls.name: cls for cls in (LayerNorm, RMSNorm)}
"""name (``ModelConfig.normalization``) -> norm class."""


def make_norm(cfg) -> nn.Module:
    return NORMS[cfg.normalization](cfg)
