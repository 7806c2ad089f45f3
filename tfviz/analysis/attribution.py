"""What each layer and each writer puts into the output: logit lens, direct logit attribution, a
head's QK and OV circuits (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits").

    logit_lens(model, tokens)                    [layer + 1, batch, pos, vocab]
    dla = direct_logit_attribution(model, tokens, good, bad, pos=-1)
    dla.parts                                    label -> [batch]; sum over parts = dla.total
    circuits(model, layer, head, token_ids)      {"qk": [n, n], "ov": [n, n]}

The logit lens (nostalgebraist 2020) reads every layer's residual stream through the model's own
final norm and unembedding (``Stack.ln_final``, the head's transform, ``Transformer.unembed``: no
second copy), as if the remaining layers were skipped. Entry 0 is the embeddings (what enters
block 0), entry l + 1 what leaves block l; the last entry is the model's output.

Direct logit attribution: in a pre-norm transformer the final residual stream is a sum,

    x = embed (+ positions) + sum_l ( sum_h z_h W_O^h + b_O + mlp_l ),

so logit[a] - logit[b] = N(x) . (W_U[a] - W_U[b]) (+ bias difference) splits into one term per
writer once the final norm's scale 1/sigma(x) is frozen at its value on this input (the norm is
not linear: with the scale frozen it is). The norm's centering is linear and is applied to each
part; its bias and the unembedding's bias are one part, "biases". The parts add up to the logit
difference exactly (up to float32 rounding). A post-norm model (a norm after every addition) or a
nonlinear output head (BERT's) has no such sum: ``direct_logit_attribution`` says so.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..model.hooks import hook_name
from ..recording import record


def _stack(model) -> tuple[str, torch.nn.Module]:
    """The stack whose residual stream reaches the output: the decoder of an encoder-decoder."""
    name = "decoder" if model.config.arch == "encoder-decoder" else ""
    return name, model.stacks[name]


def _inputs(inputs) -> tuple[torch.Tensor, ...]:
    return (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)


def readout(model, x: torch.Tensor) -> torch.Tensor:
    """The model's own path from a residual stream [..., d_model] to logits [..., vocab]: the
    output stack's final norm (an identity in post-norm models), the head's transform, the
    unembedding."""
    _, stack = _stack(model)
    h = stack.ln_final(x)
    if model.head_transform is not None:
        h = model.head_transform(h)
    return model.unembed(h)


def residual_names(model) -> list[str]:
    """The residual stream's names, embeddings first: blocks.0.hook_resid_pre, then every block's
    hook_resid_post (prefixed with the output stack)."""
    s, _ = _stack(model)
    n = model.config.n_layers
    return [hook_name(0, "hook_resid_pre", s)] + [hook_name(l, "hook_resid_post", s) for l in range(n)]


@torch.no_grad()
def logit_lens(model, inputs, positions: Sequence[int] | None = None, **forward_kwargs) -> torch.Tensor:
    """Every layer's residual stream read out as logits -> [n_layers + 1, batch, pos, vocab]
    (``positions``: only those positions, [n_layers + 1, batch, len(positions), vocab]). The last
    entry equals the model's logits."""
    names = residual_names(model)
    rec = record(model, *_inputs(inputs), names=names, device=None, **forward_kwargs)
    resid = torch.stack([rec[n] for n in names])  # [layer + 1, batch, pos, d_model]
    if positions is not None:
        resid = resid[:, :, list(positions)]
    was = model.training
    model.eval()
    try:
        return readout(model, resid)
    finally:
        model.train(was)


def lens_top(lens: torch.Tensor, k: int = 1, track: int | None = None) -> dict[str, np.ndarray]:
    """From one row of ``logit_lens`` ([layer + 1, pos, vocab]): the top-k token ids and their
    probabilities per layer and position ({"ids", "probs"}: [layer + 1, pos, k]) and, with
    ``track``, each layer's probability of that token ([layer + 1, pos])."""
    p = lens.float().softmax(-1)
    top = p.topk(k, dim=-1)
    out = {"ids": top.indices.cpu().numpy(), "probs": top.values.cpu().numpy()}
    if track is not None:
        out["track"] = p[..., track].cpu().numpy()
    return out


# ------------------------------------------------------------------------------ attribution
@dataclass
class Attribution:
    """``parts``: label -> [batch] contributions to logit[good] - logit[bad] at ``pos``;
    ``total`` [batch] the model's own logit difference; ``scale`` [batch] the final norm's frozen
    1 / sigma."""
    parts: dict[str, np.ndarray]
    total: np.ndarray
    scale: np.ndarray

    def frame(self):
        import pandas as pd
        return pd.DataFrame({"part": list(self.parts),
                             "contribution": [float(np.mean(v)) for v in self.parts.values()]})


def attribution_refusal(model) -> str | None:
    """Why direct logit attribution does not apply to ``model``, as a sentence, or None."""
    cfg = model.config
    if cfg.norm != "pre":
        return ("this model normalises after every residual addition (post-norm): its final "
                "residual stream is not a sum of what the layers wrote, so there is nothing to split")
    if model.head_transform is not None:
        return "this model's output head transforms the residual stream nonlinearly before the unembedding"
    if cfg.embed_norm:
        return "this model normalises its embeddings before the first block: they enter the sum rescaled"
    return None


@torch.no_grad()
def direct_logit_attribution(model, inputs, good, bad, pos=-1, **forward_kwargs) -> Attribution:
    """logit[good] - logit[bad] at ``pos`` (ints or one per row) split into embeddings, each head,
    each MLP and the biases, with the final norm's scale frozen (see the module docstring)."""
    why = attribution_refusal(model)
    if why:
        raise ValueError(why)
    cfg = model.config
    s, stack = _stack(model)
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_head
    points = model.hook_points()
    embeds = [n for n in (hook_name(None, "hook_embed", s), hook_name(None, "hook_token_type_embed", s),
                          hook_name(None, "hook_pos_embed", s)) if n in points]
    writers = [(l, a) for l in range(L) for a in ("attn", "cross_attn")
               if hook_name(l, f"{a}.hook_z", s) in points]
    mlps = [hook_name(l, "hook_mlp_out", s) for l in range(L) if hook_name(l, "hook_mlp_out", s) in points]
    final = hook_name(L - 1, "hook_resid_post", s)
    names = embeds + [hook_name(l, f"{a}.hook_z", s) for l, a in writers] + mlps + [final]
    inputs = _inputs(inputs)
    rec = record(model, *inputs, names=names, device=None, **forward_kwargs)
    x_all = rec[final]
    B = x_all.shape[0]
    b = torch.arange(B, device=x_all.device)
    p = torch.as_tensor(pos, device=x_all.device).expand(B)

    def at(t):  # [batch, pos, ...] -> [batch, ...] at each row's position, float32
        return t[b, p].float()

    W_U = model.unembed.weight.float()
    g_ids = torch.as_tensor(good, device=W_U.device).expand(B)
    b_ids = torch.as_tensor(bad, device=W_U.device).expand(B)
    direction = W_U[g_ids] - W_U[b_ids]  # [batch, d_model]
    norm = stack.ln_final
    x = at(x_all)
    centred = isinstance(norm, torch.nn.LayerNorm)
    if centred:
        sigma = torch.sqrt(x.var(-1, unbiased=False) + norm.eps)
    else:  # RMSNorm
        sigma = torch.sqrt(x.pow(2).mean(-1) + norm.eps)
    gain = norm.weight.float()

    def through(c):  # a part of x [batch, d_model] -> its share of the logit difference [batch]
        if centred:
            c = c - c.mean(-1, keepdim=True)
        return ((c / sigma[:, None]) * gain * direction).sum(-1)

    parts: dict[str, torch.Tensor] = {}
    labels = {"hook_embed": "embed", "hook_token_type_embed": "token types", "hook_pos_embed": "positions"}
    for n in embeds:
        parts[labels[n.split(".")[-1]]] = through(at(rec[n]))
    bias = torch.zeros(B, device=x.device)
    mods = {name: mod for name, mod in model.named_modules()}
    prefix = f"{s}." if s else "stack."
    for l, a in writers:
        z = at(rec[hook_name(l, f"{a}.hook_z", s)])  # [batch, head, d_head]
        attn = mods[f"{prefix}blocks.{l}.{a}"]
        W_O = attn.W_o.weight.float().view(cfg.d_model, H, d)  # [d_model, head, d_head]
        per_head = torch.einsum("bhd,mhd->bhm", z, W_O)  # [batch, head, d_model]
        tag = "x" if a == "cross_attn" else ""
        for h in range(H):
            parts[f"L{l}{tag}H{h}"] = through(per_head[:, h])
        if attn.W_o.bias is not None:
            bias = bias + through(attn.W_o.bias.float().expand(B, -1))
    for n in mlps:
        parts[f"L{n.split('.')[-2]} MLP"] = through(at(rec[n]))
    # the final norm's bias and the unembedding's bias: the same for every input of this pair
    if centred and norm.bias is not None:
        bias = bias + (norm.bias.float() * direction).sum(-1)
    if model.unembed.bias is not None:
        ub = model.unembed.bias.float()
        bias = bias + ub[g_ids] - ub[b_ids]
    parts["biases"] = bias
    logits = at(rec.output)
    total = logits.gather(1, g_ids[:, None])[:, 0] - logits.gather(1, b_ids[:, None])[:, 0]
    return Attribution({k: v.cpu().numpy().astype(np.float64) for k, v in parts.items()},
                       total.cpu().numpy().astype(np.float64), (1 / sigma).cpu().numpy())


# ------------------------------------------------------------------------------ circuits
@torch.no_grad()
def circuits(model, layer: int, head: int, token_ids: Sequence[int], stack: str = "") -> dict:
    """A head's two circuits over a small vocabulary, on the direct path (each token's own
    embedding entering the head, through the block's first norm when it comes before attention):

        qk [n, n]  query token i, key token j: (W_Q x_i) . (W_K x_j) / sqrt(d_head)  (biases in;
                   positions left out: no rotation, no position bias)
        ov [n, n]  attended token j, output token t: how much the head's output, read by the
                   unembedding (with the final norm's gain; its scale and centering left out),
                   raises logit t when it attends to j alone

    Beyond layer 0 a head also reads what earlier layers wrote: these are its direct paths only."""
    cfg = model.config
    s = stack or ("decoder" if cfg.arch == "encoder-decoder" else "")
    block = model.stacks[s].blocks[layer]
    attn = block.attn
    ids = torch.as_tensor(list(token_ids), dtype=torch.long, device=model.embed.weight.device)
    x = model.embed.weight[ids] * model.stacks[s].embed_scale  # [n, d_model]
    x = (block.ln1(x) if block.pre_norm else x).float()
    H, Hkv, d = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    kv = head // (H // Hkv)
    W, bvec = attn.W_qkv.weight.float(), attn.W_qkv.bias
    bvec = torch.zeros(W.shape[0], device=W.device) if bvec is None else bvec.float()
    qkv = x @ W.T + bvec  # [n, (H + 2 Hkv) d]
    q = qkv[:, head * d:(head + 1) * d]
    k = qkv[:, H * d + kv * d: H * d + (kv + 1) * d]
    v = qkv[:, (H + Hkv) * d + kv * d: (H + Hkv) * d + (kv + 1) * d]
    qk = q @ k.T / math.sqrt(d)
    out = v @ attn.W_o.weight.float()[:, head * d:(head + 1) * d].T  # [n, d_model]
    norm = model.stacks[s].ln_final
    if hasattr(norm, "weight"):
        out = out * norm.weight.float()
    ov = out @ model.unembed.weight.float()[ids].T  # [n attended, n output]
    return {"qk": qk.cpu().numpy(), "ov": ov.cpu().numpy(), "ids": ids.cpu().tolist()}


def top_tokens(model, inputs, k: int = 20, **forward_kwargs) -> list[int]:
    """The ids of the input's own tokens and the top-k predicted tokens at its last position: a
    small vocabulary for ``circuits`` on an imported model's 50,000 tokens."""
    inputs = _inputs(inputs)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(*inputs, **forward_kwargs)[0, -1]
    finally:
        model.train(was)
    own = list(dict.fromkeys(inputs[-1][0].tolist()))
    top = [i for i in logits.topk(k).indices.tolist() if i not in own]
    return own + top[:max(0, k - len(own))] if len(own) < k else own[:k]


__all__ = ["Attribution", "attribution_refusal", "circuits", "direct_logit_attribution",
           "lens_top", "logit_lens", "readout", "residual_names", "top_tokens"]
