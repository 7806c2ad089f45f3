"""Normalisation layers, one class each, behind one registry (``NORMS``, ``ModelConfig.normalization``).

Every norm is built as ``cls(cfg)``, maps [..., d_model] -> [..., d_model] and ends in a hook point
``hook_normalized`` (TransformerLens's name: ``blocks.0.ln1.hook_normalized`` is the norm's output,
scale and shift applied). Where it sits (before or after each sublayer) is ``ModelConfig.norm``
("pre" | "post"), see ``blocks.py``.

To add one: a class here and its line in ``NORMS``.
"""
from __future__ import annotations

import torch
from torch import nn

from .hooks import HookPoint


class LayerNorm(nn.LayerNorm):
    """Ba et al. 2016: (x - mean(x)) / sqrt(var(x) + eps) * g + b over the last (d_model) axis."""

    name = "layernorm"

    def __init__(self, cfg):
        super().__init__(cfg.d_model, eps=cfg.layer_norm_eps)
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(super().forward(x))


class RMSNorm(nn.Module):
    """Zhang & Sennrich 2019 (Llama, Mistral, Qwen): x / sqrt(mean(x^2) + eps) * g. No mean is
    subtracted and there is no bias. Computed in float32 (as Llama's own implementation does), then
    cast back before the gain is applied."""

    name = "rmsnorm"

    def __init__(self, cfg):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(cfg.d_model))
        self.eps = cfg.layer_norm_eps
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.hook_normalized(self.weight * h.to(x.dtype))

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


NORMS: dict[str, type[nn.Module]] = {cls.name: cls for cls in (LayerNorm, RMSNorm)}
"""name (``ModelConfig.normalization``) -> norm class."""


def make_norm(cfg) -> nn.Module:
    return NORMS[cfg.normalization](cfg)
