"""Cache algebra: the residual stream as a sum of what each part wrote, and the norm applied to the
parts as direct logit attribution does (TransformerLens's ``decompose_resid``,
``stack_head_results``, ``get_full_resid_decomposition``, ``apply_ln_to_stack``,
``logit_attrs``).

    d = decompose_resid(model, tokens)              # the final residual stream, layer=None
    d.parts                                         # [component, batch, pos, d_model]
    d.labels                                        # "embed", "positions", "L0H0", ..., "L0 attn bias", "L0 MLP", ...
    d.parts.sum(0) == d.resid                       # (float rounding) — tested
    normed = apply_ln_to_stack(model, d.parts, d.resid)           # centred, / the frozen scale
    logit_attrs(model, normed, good, bad)           # [component, batch, pos]: DLA at every position

In a pre-norm transformer (Elhage et al. 2021) the residual stream entering block l is

    x_l = embed (+ token types) (+ positions) + sum_{l' < l} ( sum_h z_h W_O^h + b_O + mlp_l' )

each head's term is ``attn.hook_result`` (z_h W_O^h, TransformerLens's use_attn_result), recorded
on request. A post-norm model (a norm after every addition) or one that normalises its
embeddings has no such sum: ``decompose_resid`` refuses it with the reason.

Conventions, said once: ``apply_ln_to_stack`` follows TransformerLens — it centres each part (a
LayerNorm's mean subtraction is linear) and divides by the scale the norm computed on the *whole*
residual (frozen: the same for every part), and applies neither the norm's weight nor its bias
(TransformerLens folds the weight into W_U; ``logit_attrs`` multiplies it in here). The parts
through ``apply_ln_to_stack`` sum to the norm's ``hook_normalized``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.hooks import hook_name
from ..recording import record
from .attribution import _inputs, _stack, attribution_refusal, token_ids


@dataclass
class Decomposition:
    """``parts`` [component, batch, pos, d_model] with ``labels``; ``resid`` [batch, pos, d_model],
    the residual stream they add up to (``name``: where it was recorded)."""
    parts: torch.Tensor
    labels: list[str]
    resid: torch.Tensor
    name: str

    def select(self, prefix: str = "", heads_only: bool = False) -> "Decomposition":
        """Only the components whose label starts with ``prefix`` (or only the heads)."""
        keep = [i for i, lab in enumerate(self.labels) if lab.startswith(prefix)
                and (not heads_only or _is_head(lab))]
        return Decomposition(self.parts[keep], [self.labels[i] for i in keep], self.resid, self.name)


def _is_head(label: str) -> bool:
    return label.startswith("L") and "H" in label and " " not in label


def decompose_resid(model, inputs, layer: int | None = None, *, per_head: bool = True,
                    **forward_kwargs) -> Decomposition:
    """The residual stream entering block ``layer`` (None: leaving the last block, what the final
    norm reads) split into what wrote it: embeddings ("embed", "token types", "positions"), every
    earlier head ("L{l}H{h}", its ``hook_result``; cross-attention "L{l}xH{h}") and each layer's
    output bias ("L{l} attn bias"), or whole layers ("L{l} attn", ``per_head=False``), and each
    MLP ("L{l} MLP"). -> ``Decomposition`` (float32 or the model's wider dtype)."""
    why = attribution_refusal(model)
    if why:
        raise ValueError(f"no residual decomposition: {why}")
    cfg = model.config
    L = cfg.n_layers
    if layer is not None and not 0 <= layer <= L:
        raise ValueError(f"layer must be in 0..{L} (or None for the final residual), not {layer!r}")
    upto = L if layer is None else layer
    s, stack = _stack(model)
    points = model.hook_points()
    embeds = [n for n in (hook_name(None, "hook_embed", s), hook_name(None, "hook_token_type_embed", s),
                          hook_name(None, "hook_pos_embed", s)) if n in points]
    attns = [(l, a) for l in range(upto) for a in ("attn", "cross_attn") if hook_name(l, f"{a}.hook_z", s) in points]
    writer = "hook_result" if per_head else "hook_out"
    mlps = [l for l in range(upto) if hook_name(l, "hook_mlp_out", s) in points]
    target = hook_name(L - 1, "hook_resid_post", s) if layer is None else hook_name(layer, "hook_resid_pre", s)
    names = embeds + [hook_name(l, f"{a}.{writer}", s) for l, a in attns] + \
        [hook_name(l, "hook_mlp_out", s) for l in mlps] + [target]
    rec = record(model, *_inputs(inputs), names=names, device=None, **forward_kwargs)
    resid = rec[target]
    dtype = torch.promote_types(resid.dtype, torch.float32)
    parts, labels = [], []
    names_of = {"hook_embed": "embed", "hook_token_type_embed": "token types", "hook_pos_embed": "positions"}
    for n in embeds:
        parts.append(rec[n].to(dtype))
        labels.append(names_of[n.split(".")[-1]])
    mods = dict(model.named_modules())
    prefix = f"{s}." if s else "stack."
    for l in range(upto):  # layer by layer: its heads (and bias), its cross-attention's, its MLP
        for a in ("attn", "cross_attn"):
            if (l, a) not in attns:
                continue
            tag = "x" if a == "cross_attn" else ""
            bias = mods[f"{prefix}blocks.{l}.{a}"].W_o.bias
            t = rec[hook_name(l, f"{a}.{writer}", s)].to(dtype)
            if per_head:  # [batch, pos, head, d_model]
                for h in range(t.shape[2]):
                    parts.append(t[:, :, h])
                    labels.append(f"L{l}{tag}H{h}")
                if bias is not None:
                    parts.append(bias.detach().to(dtype).expand_as(t[:, :, 0]))
                    labels.append(f"L{l}{tag} attn bias")
            else:  # hook_out includes the bias
                parts.append(t)
                labels.append(f"L{l} {'cross-attn' if tag else 'attn'}")
        if l in mlps:
            parts.append(rec[hook_name(l, "hook_mlp_out", s)].to(dtype))
            labels.append(f"L{l} MLP")
    return Decomposition(torch.stack(parts), labels, resid.to(dtype), target)


def stack_head_results(model, inputs, layer: int | None = None, **forward_kwargs) -> tuple[torch.Tensor, list[str]]:
    """Every head's output before block ``layer`` (None: all of them) ->
    ([layer * head, batch, pos, d_model], labels), as TransformerLens's ``stack_head_results``
    (no biases, no embeddings)."""
    d = decompose_resid(model, inputs, layer, **forward_kwargs).select(heads_only=True)
    return d.parts, d.labels


def _norm_at(model, layer: int | None, mlp_input: bool = False):
    _, stack = _stack(model)
    if layer is None or layer == model.config.n_layers:
        return stack.ln_final
    block = stack.blocks[layer]
    return block.ln2 if mlp_input else block.ln1


def apply_ln_to_stack(model, parts: torch.Tensor, resid: torch.Tensor, layer: int | None = None,
                      mlp_input: bool = False) -> torch.Tensor:
    """Each part [component, ..., d_model] centred (LayerNorm; RMSNorm does not centre) and
    divided by the scale the norm computes on ``resid`` [..., d_model] (the whole residual stream:
    frozen, shared by every part) -> the same shape. The norm: the final one (``layer`` None or
    n_layers), else block ``layer``'s ln1 (``mlp_input``: ln2). No weight, no bias, as
    TransformerLens's ``apply_ln_to_stack``. The result sums over parts to the norm's
    ``hook_normalized`` of ``resid``."""
    norm = _norm_at(model, layer, mlp_input)
    if not hasattr(norm, "eps"):
        raise ValueError("this model has no norm there (post-norm models end each block with one)")
    x = resid.to(parts.dtype)
    if isinstance(norm, torch.nn.LayerNorm):
        scale = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps)
        parts = parts - parts.mean(-1, keepdim=True)
    else:  # RMSNorm
        scale = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps)
    return parts / scale


def logit_attrs(model, normed: torch.Tensor, good, bad=None) -> torch.Tensor:
    """Parts after ``apply_ln_to_stack`` (the final norm) [component, batch, pos, d_model] read
    along logit[good] - logit[bad] (``bad`` None: logit[good] alone) through the final norm's weight
    and the unembedding -> [component, batch, pos]: direct logit attribution at every position
    (biases not included: the norm's bias and the unembedding's are the same for every part)."""
    _, stack = _stack(model)
    W_U = model.unembed.weight.detach().to(normed.dtype)  # [vocab, d_model]
    vocab = W_U.shape[0]
    g = token_ids(good, vocab, "good")
    direction = W_U[g] if bad is None else W_U[g] - W_U[token_ids(bad, vocab, "bad")]
    gain = getattr(stack.ln_final, "weight", None)
    if gain is not None:
        direction = direction * gain.detach().to(normed.dtype)
    if direction.dim() == 1:
        return normed @ direction
    if direction.shape[0] != normed.shape[1]:
        raise ValueError(f"one token per row means {normed.shape[1]} ids, not {direction.shape[0]}")
    return torch.einsum("cbpd,bd->cbp", normed, direction)


@torch.no_grad()
def head_writes(model, inputs, layer: int, head: int, row: int = 0, **forward_kwargs) -> dict:
    """What head (``layer``, ``head``) writes at every position of one input (``row`` of the batch),
    read as direct logit attribution (the final norm's scale frozen, as DLA does) toward the
    model's own answer there over its runner-up -> {"dla" [pos], "norm" [pos] (of its
    ``hook_result``), "answer", "runner_up" (token ids [pos])}. Equals
    ``direct_logit_attribution(..., answer[p], runner_up[p], pos=p).parts["L{layer}H{head}"]``."""
    why = attribution_refusal(model)
    if why:
        raise ValueError(f"no direct effect to read: {why}")
    cfg = model.config
    if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
        raise ValueError(f"the model has {cfg.n_layers} layers of {cfg.n_heads} heads: no L{layer}H{head}")
    s, _ = _stack(model)
    final = hook_name(cfg.n_layers - 1, "hook_resid_post", s)
    result = hook_name(layer, "attn.hook_result", s)
    rec = record(model, *_inputs(inputs), names=[result, final], device=None, **forward_kwargs)
    logits = rec.output[row].float()  # [pos, vocab]
    top = logits.topk(2, dim=-1).indices  # [pos, 2]
    r = rec[result][row, :, head].float()  # [pos, d_model]
    normed = apply_ln_to_stack(model, r[None], rec[final][row].float())  # [1, pos, d_model]
    W_U = model.unembed.weight.detach().float()
    direction = W_U[top[:, 0]] - W_U[top[:, 1]]  # [pos, d_model]
    gain = getattr(_stack(model)[1].ln_final, "weight", None)
    if gain is not None:
        direction = direction * gain.detach().float()
    dla = (normed[0] * direction).sum(-1)
    return {"dla": dla.cpu().numpy().astype(np.float64), "norm": r.norm(dim=-1).cpu().numpy().astype(np.float64),
            "answer": top[:, 0].tolist(), "runner_up": top[:, 1].tolist()}


def decomposition_frame(d: Decomposition, attrs: torch.Tensor, batch: int = 0, pos: int = -1):
    """A table of one position's parts: label, its logit attribution, its norm."""
    import pandas as pd
    return pd.DataFrame({"part": d.labels,
                         "logit attribution": attrs[:, batch, pos].detach().cpu().numpy().astype(np.float64),
                         "norm": d.parts[:, batch, pos].norm(dim=-1).detach().cpu().numpy().astype(np.float64)})


__all__ = ["Decomposition", "apply_ln_to_stack", "decompose_resid", "decomposition_frame", "head_writes",
           "logit_attrs", "stack_head_results"]
