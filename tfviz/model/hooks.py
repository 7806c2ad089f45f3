"""HookPoint: an identity module that marks a tensor worth recording, and the names of hook points.

Its public name (e.g. ``blocks.0.attn.hook_pattern``) comes from the model tree and is assigned by
``Transformer``; ``tfviz.record`` gives the points it is asked for a ``sink`` (see ``HookPoint``)
and takes it away afterwards. A point being recorded is *active*: attention checks this to switch
from the fused SDPA kernel to the explicit path that materialises scores and pattern.

Names are built in one place, ``hook_name`` (and read back by ``parse_hook_name``):

    hook_name(0, "attn.hook_pattern")                     'blocks.0.attn.hook_pattern'
    hook_name(1, "cross_attn.hook_pattern", "decoder")    'decoder.blocks.1.cross_attn.hook_pattern'
    hook_name(None, "hook_embed", "encoder")              'encoder.hook_embed'
    layer_template("attn.hook_pattern")                   'blocks.{l}.attn.hook_pattern'
    stack_layers(recorded, layer_template(...))           [layer, ...] stacked over layers
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

STACKS = ("encoder", "decoder")  # the stacks of an encoder-decoder; "" names a single stack
ATTENTIONS = ("attn", "cross_attn")  # self-attention, and the decoder's cross-attention

# One documented shape per recorded name (the suffix after the last "blocks.{l}." or prefix).
HOOK_SHAPES: dict[str, str] = {
    "hook_embed": "[batch, pos, d_model]  token embeddings (x sqrt(d_model) for sinusoidal)",
    "hook_token_type_embed": "[batch, pos, d_model]  token-type (segment) embeddings added (BERT)",
    "hook_pos_embed": "[batch, pos, d_model]  additive positional vectors actually used",
    "hook_resid_pre": "[batch, pos, d_model]  residual stream entering the block",
    "hook_resid_mid": "[batch, pos, d_model]  after self-attention",
    "hook_resid_mid_cross": "[batch, pos, d_model]  after cross-attention (encoder-decoder decoder)",
    "hook_resid_post": "[batch, pos, d_model]  leaving the block",
    "hook_attn_out": "[batch, pos, d_model]  = attn.hook_out (TransformerLens's block-level name)",
    "hook_mlp_out": "[batch, pos, d_model]  MLP output (before dropout)",
    "mlp.hook_post": "[batch, pos, d_ff]  the MLP's activation output (SwiGLU: silu(gate) * up)",
    "attn.hook_q": "[batch, pos, head, d_head]  queries",
    "attn.hook_k": "[batch, pos, kv_head, d_head]  keys (new positions only with a KV cache)",
    "attn.hook_v": "[batch, pos, kv_head, d_head]  values",
    "attn.hook_rot_q": "[batch, pos, head, d_head]  RoPE-rotated queries (RoPE only)",
    "attn.hook_rot_k": "[batch, pos, kv_head, d_head]  RoPE-rotated keys (RoPE only)",
    "attn.hook_pos_bias": "[head, q_pos, k_pos]  ALiBi / T5 score bias (those schemes only)",
    "attn.hook_attn_scores": "[batch, head, q_pos, k_pos]  q.k/sqrt(d_head) + bias, masked = -inf",
    "attn.hook_pattern": "[batch, head, q_pos, k_pos]  softmax of the scores (before dropout)",
    "attn.hook_z": "[batch, pos, head, d_head]  pattern-weighted values, per head",
    "attn.hook_out": "[batch, pos, d_model]  attention output after W_o",
    # Opt-in points (``OPT_IN``): TransformerLens's use_attn_result / use_split_qkv_input. They
    # cost a d_model vector per head and position, so they are computed only while recorded or hooked.
    "attn.hook_result": "[batch, pos, head, d_model]  each head's output z_h W_O^h (no bias; summed + b_O = hook_out)",
    "hook_q_input": "[batch, pos, head, d_model]  the residual stream each query head reads (before ln1)",
    "hook_k_input": "[batch, pos, kv_head, d_model]  the residual stream each key head reads (before ln1)",
    "hook_v_input": "[batch, pos, kv_head, d_model]  the residual stream each value head reads (before ln1)",
    # recurrent models (tfviz.model.recurrent): per layer; their encoder-decoder's additive
    # attention is ``decoder.cross_attn.hook_attn_scores / hook_pattern`` (shapes as above, head = 1)
    # and ``hook_context``: one per model, so no layer in the name
    "hook_hidden": "[batch, pos, d_hidden]  a recurrent layer's hidden state h_t after reading token t",
    "hook_cell": "[batch, pos, d_hidden]  an LSTM layer's memory cell c_t after reading token t (LSTM only)",
    "attn.hook_context": "[batch, pos, d_hidden]  additive attention's context c_i = sum_j a_ij h_j (per decoder position)",
}

OPT_IN = ("attn.hook_result", "hook_q_input", "hook_k_input", "hook_v_input")
"""Points recorded only when named in a list (``record(names=[...])``) or with ``opt_in=True``, as
TransformerLens creates them only with ``use_attn_result`` / ``use_split_qkv_input``: while one
is active its layer computes per-head copies ([batch, pos, head, d_model]); otherwise nothing."""


_OPT_IN_SUFFIXES = tuple(h if h.startswith("attn.") else "." + h for h in OPT_IN)  # "attn.hook_result": also "cross_attn.hook_result"


def opt_in(name: str) -> bool:
    """Whether ``name`` is an opt-in point (``OPT_IN``): a suffix test, no parsing (``record``
    asks it of every point on every call)."""
    return name.endswith(_OPT_IN_SUFFIXES) or name in OPT_IN


NORM_HOOKS = {"ln_embed": "the embeddings' norm (BERT)", "ln1": "the norm before (pre) / after (post) attention",
              "ln_cross": "the cross-attention's norm", "ln2": "the MLP's norm",
              "ln_final": "the final norm (pre-norm models)", "head_transform.ln": "the mlm head's norm (BERT)"}
"""Where norms sit; each has TransformerLens 4's three points (``tfviz.model.norms``)."""
for _norm, _what in NORM_HOOKS.items():
    HOOK_SHAPES[f"{_norm}.hook_scale"] = f"[batch, pos, 1]  {_what}: sqrt(var + eps) (RMSNorm: sqrt(mean(x^2) + eps))"
    HOOK_SHAPES[f"{_norm}.hook_normalized"] = (f"[batch, pos, d_model]  {_what}: (x - mean) / scale (RMSNorm: "
                                               "x / scale), before its weight and bias")
    HOOK_SHAPES[f"{_norm}.hook_out"] = f"[batch, pos, d_model]  {_what}: its output, normalized * weight + bias"


def hook_name(layer: int | str | None, hook: str, stack: str = "") -> str:
    """The public name of a hook point: ``hook`` ("attn.hook_q", "hook_resid_post", ...) in block
    ``layer`` (an int, "{l}" for a per-layer template, or None for a stack-level point such as
    "hook_embed") of ``stack`` ("" for a single-stack model, "encoder" / "decoder")."""
    base = hook if layer is None else f"blocks.{layer}.{hook}"
    return f"{stack}.{base}" if stack else base


def layer_template(hook: str, stack: str = "") -> str:
    """A per-layer name with ``{l}`` for the layer: ``layer_template("attn.hook_pattern")``."""
    return hook_name("{l}", hook, stack)


@dataclass(frozen=True)
class HookName:
    stack: str          # "" | "encoder" | "decoder"
    layer: int | None   # None for stack-level points (hook_embed, hook_pos_embed)
    hook: str           # e.g. "attn.hook_pattern", "cross_attn.hook_z", "hook_resid_post"

    @property
    def attention(self) -> str | None:
        """"attn" / "cross_attn" for attention points, else None."""
        head = self.hook.split(".")[0]
        return head if head in ATTENTIONS else None

    @property
    def template(self) -> str:
        """The same name with ``{l}`` for the layer (itself for stack-level points)."""
        return hook_name(None if self.layer is None else "{l}", self.hook, self.stack)


_NAME = re.compile(r"^(?:(?P<stack>encoder|decoder)\.)?(?:blocks\.(?P<layer>\d+)\.)?(?P<hook>.+)$")


def parse_hook_name(name: str) -> HookName:
    """The inverse of ``hook_name``: 'decoder.blocks.1.cross_attn.hook_z' -> (decoder, 1, cross_attn.hook_z)."""
    m = _NAME.match(name)
    if m is None or not m["hook"].split(".")[-1].startswith("hook_"):
        raise ValueError(f"{name!r} is not a hook point name")
    return HookName(m["stack"] or "", None if m["layer"] is None else int(m["layer"]), m["hook"])


def stack_layers(tensors: Mapping, template: str):
    """Stack a per-layer name over layers 0, 1, ... (while present) -> [layer, ...]: torch tensors
    with ``torch.stack``, anything else as numpy arrays. KeyError when layer 0 is missing. A name
    without ``{l}`` (a point that is not per layer, e.g. a recurrent encoder-decoder's
    ``decoder.cross_attn.hook_pattern``) stacks to a layer axis of 1."""
    out, layer = [], 0
    if "{l}" not in template:
        out = [tensors[template]] if template in tensors else []
    while "{l}" in template and template.format(l=layer) in tensors:
        out.append(tensors[template.format(l=layer)])
        layer += 1
    if not out:
        raise KeyError(f"nothing matches {template!r}")
    return torch.stack(out) if isinstance(out[0], torch.Tensor) else np.stack(out)


def shape_of(name: str) -> str:
    """The documented shape of a recorded name, e.g. shape_of('blocks.0.attn.hook_q')."""
    try:
        key = parse_hook_name(name).hook.replace("cross_attn.", "attn.")
    except ValueError:
        raise KeyError(name) from None
    if key not in HOOK_SHAPES:
        raise KeyError(name)
    return HOOK_SHAPES[key].split("  ")[0]


class HookPoint(nn.Module):
    """Identity. While ``sink`` is a dict (``tfviz.record`` sets it, then clears it), the forward
    also stores ``sink[name] = x.detach()``: no copy, no host sync, and no forward-hook machinery
    (a module with hooks takes nn.Module's slow call path, which a GPU forward bound by Python
    overhead feels). Ordinary forward hooks work too and also make the point active."""

    def __init__(self) -> None:
        super().__init__()
        self.name: str | None = None
        self.sink: dict[str, torch.Tensor] | None = None
        self.keep_graph = False  # record(grad=True): store x itself, in the autograd graph

    @property
    def active(self) -> bool:
        return self.sink is not None or bool(self._forward_hooks)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # Without forward hooks, skip nn.Module's call machinery (a dozen points per layer; on a
        # GPU a small model's forward is bound by exactly this Python overhead).
        if not self._forward_hooks and not self._forward_pre_hooks:
            return self.forward(x)
        return super().__call__(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sink is not None:  # (no_grad: x carries no graph, so no detach call to pay for)
            self.sink[self.name] = x if self.keep_graph or not x.requires_grad else x.detach()
        return x


def name_hook_points(root: nn.Module, strip: str = "stack.") -> dict[str, HookPoint]:
    """Give every HookPoint under ``root`` its public name: its module path, with a single-stack
    model's internal ``stack.`` prefix dropped (``stack.blocks.0.attn.hook_q`` ->
    ``blocks.0.attn.hook_q``). -> public name -> point (what ``hook_points()`` returns)."""
    points: dict[str, HookPoint] = {}
    for name, module in root.named_modules():
        if isinstance(module, HookPoint):
            public = name.removeprefix(strip)
            module.name = public
            points[public] = module
    return points

