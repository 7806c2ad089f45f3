"""Per-layer gradient norms: how strongly each part of the network is being pushed at one step.

    group_of("stack.blocks.3.attn.W_qkv.weight")  -> "L3.attn"
    group_grad_norms(model)                        -> {"embed": 0.41, "L0.attn": 1.3, ...}

The training loop records ``group_grad_norms`` (the raw gradient, *before* clipping) on every
logged step, under ``"grad_norms"`` in that step's metrics, so it lives in the checkpoint's
history. For a group G of parameters the norm is the L2 norm of all their gradients together,

    ||g_G|| = sqrt( sum_{p in G} sum_i g_{p,i}^2 )

so the global gradient norm (``grad_norm``) is sqrt(sum_G ||g_G||^2).

Groups, named after what the parameters do (a block's norm belongs to the sublayer it feeds or
closes, in pre- and post-norm alike):

    embed      token embeddings and positional tables (learned table, T5/ALiBi bias)
    L{l}.attn  block l's self-attention (W_qkv / W_q, W_kv, W_o) and ln1
    L{l}.cross block l's cross-attention and ln_cross (encoder-decoder decoder)
    L{l}.mlp   block l's MLP and ln2
    head       the final norm and the unembedding (absent when tied: it is ``embed``)

Encoder-decoder models prefix ``enc.`` / ``dec.`` to block and table groups. Parameters of any
other model (e.g. a recurrent baseline) are grouped by their top-level module name.
"""
from __future__ import annotations

import math
import re

import torch

_BLOCK = re.compile(r"^(?:(stack|encoder|decoder)\.)?blocks\.(\d+)\.([A-Za-z_0-9]+)")
_STACK = {"stack": "", "encoder": "enc.", "decoder": "dec.", None: ""}
_SUBLAYER = {"ln1": "attn", "attn": "attn", "ln_cross": "cross", "cross_attn": "cross",
             "ln2": "mlp", "mlp": "mlp"}
SIGNIFICANT = 4  # digits kept in the history (compact JSON; far finer than any chart shows)


def group_of(name: str) -> str:
    """The group of parameter ``name`` (see the module docstring)."""
    m = _BLOCK.match(name)
    if m:
        stack, layer, part = m.groups()
        return f"{_STACK[stack]}L{layer}.{_SUBLAYER.get(part, part)}"
    first, _, rest = name.partition(".")
    if first == "embed":
        return "embed"
    if first == "unembed":
        return "head"
    if first in ("stack", "encoder", "decoder"):
        if rest.startswith("ln_final"):
            return "head" if first != "encoder" else "enc.final"
        if rest.startswith("pos"):
            return "embed" if first == "stack" else f"{_STACK[first]}embed"
    return first


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}") if math.isfinite(x) else x


def group_grad_norms(model: torch.nn.Module) -> dict[str, float]:
    """group -> L2 norm of its parameters' current gradients (parameters without a gradient
    count as zero), in the order the groups first appear in ``model.named_parameters()``;
    rounded to 4 significant digits. One host sync for the whole model."""
    names, grads = [], []
    order: dict[str, None] = {}
    for name, p in model.named_parameters():
        g = group_of(name)
        order.setdefault(g, None)
        if p.grad is not None:
            names.append(g)
            grads.append(p.grad.detach())
    if not grads:
        return {g: 0.0 for g in order}
    norms = torch.stack([n.float() for n in torch._foreach_norm(grads)]).cpu().tolist()
    sums = dict.fromkeys(order, 0.0)
    for g, n in zip(names, norms):
        sums[g] += n * n
    return {g: _round(math.sqrt(s)) for g, s in sums.items()}


def layer_of(group: str) -> int | None:
    """The block index of a group ("L3.mlp" -> 3, "dec.L0.attn" -> 0), None for embed/head/..."""
    m = re.search(r"(?:^|\.)L(\d+)\.", group)
    return int(m.group(1)) if m else None


__all__ = ["SIGNIFICANT", "group_grad_norms", "group_of", "layer_of"]
