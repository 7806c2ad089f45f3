"""Normalisation layers, one class each, behind one registry (``NORMS``, ``ModelConfig.normalization``).

Every norm is built as ``cls(cfg)`` and maps [..., d_model] -> [..., d_model]. Where it sits (before
or after each sublayer) is ``ModelConfig.norm`` ("pre" | "post"), see ``blocks.py``.

To add one (e.g. RMSNorm, Zhang & Sennrich 2019: x / sqrt(mean(x²) + eps) * g): a class here and
its line in ``NORMS``.
"""
from __future__ import annotations

from torch import nn


class LayerNorm(nn.LayerNorm):
    """Ba et al. 2016: (x - mean(x)) / sqrt(var(x) + eps) * g + b over the last (d_model) axis."""

    name = "layernorm"

    def __init__(self, cfg):
        super().__init__(cfg.d_model, eps=cfg.layer_norm_eps)


NORMS: dict[str, type[nn.Module]] = {cls.name: cls for cls in (LayerNorm,)}
"""name (``ModelConfig.normalization``) -> norm class."""


def make_norm(cfg) -> nn.Module:
    return NORMS[cfg.normalization](cfg)
