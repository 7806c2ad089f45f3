"""MLP activations, one class each, behind one registry (``ACTIVATIONS``, ``ModelConfig.activation``).

The MLP computes W_out act(W_in x). A *gated* activation (``gated = True``) gets 2·d_ff inputs
from W_in and returns d_ff: it splits them into a gate and a value (``blocks.MLP``).

To add one: a class here and its line in ``ACTIVATIONS``. Names follow Hugging Face's ``hidden_act``
where one exists ("gelu" is exact, "gelu_new" GPT-2's tanh approximation), so imported configs map
one to one.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ReLU(nn.Module):
    """max(0, x) (Vaswani et al. 2017)."""

    name, gated = "relu", False

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.relu(h)


class GELU(nn.Module):
    """x·Φ(x), the exact (erf) GELU (Hendrycks & Gimpel 2016; BERT)."""

    name, gated = "gelu", False

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.gelu(h)


class GELUTanh(nn.Module):
    """GPT-2's tanh approximation of GELU (Hendrycks & Gimpel 2016, eq. 3; Hugging Face's
    "gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Within 5e-4 of the exact GELU,
    but a model trained with one computes measurably different logits with the other."""

    name, gated = "gelu_new", False

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.gelu(h, approximate="tanh")


class SwiGLU(nn.Module):
    """Shazeer 2020: silu(gate) * value, where W_in x = [gate | value] (each d_ff wide).

    Llama's layout maps onto it directly: W_in = [gate_proj; up_proj] (gate first), W_out =
    down_proj, i.e. down(silu(gate(x)) * up(x))."""

    name, gated = "swiglu", True

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        gate, value = h.chunk(2, dim=-1)
        return F.silu(gate) * value


ACTIVATIONS: dict[str, type[nn.Module]] = {cls.name: cls for cls in (ReLU, GELU, GELUTanh, SwiGLU)}
"""name (``ModelConfig.activation``) -> activation class."""


def make_activation(cfg) -> nn.Module:
    return ACTIVATIONS[cfg.activation]()
