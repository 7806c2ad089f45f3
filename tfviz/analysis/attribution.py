"""What each layer and each writer puts into the output: logit lens, direct logit attribution, a
head's QK and OV circuits (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits").

    logit_lens(model, tokens)                    [layer + 1, batch, pos, vocab]
    dla = direct_logit_attribution(model, tokens, good, bad, pos=-1)
    dla.parts                                    label -> [batch]; sum over parts = dla.total
    circuits(model, layer, head, token_ids)      {"qk": [n, n], "ov": [n, n]}

The logit lens (nostalgebraist 2020) reads every layer's residual stream through the model's own
final norm and unembedding (``Stack.ln_final``, the head's transform, ``Transformer.unembed``: no
second copy), as if the remaining layers were skipped. Entry 0 is the embeddings (what enters
block 0), entry l + 1 what leaves block l; the last entry is the model's output. The lens freezes
nothing: each layer's residual is normalised by its *own* scale, as the model would if it ended
there. Direct logit attribution (below) does the opposite on purpose: it freezes the final norm's
scale at its value on the *final* residual, so the parts add up. The two answer different
questions and need not agree on a layer's number.

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
    entry equals the model's logits. Nothing is frozen: every entry goes through the whole final
    norm, its own scale included (TransformerLens's ``accumulated_resid(apply_ln=True)`` reads
    the final scale instead; direct logit attribution freezes it on purpose)."""
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


def token_ids(ids, vocab: int, what: str, batch: int | None = None) -> torch.Tensor:
    """``ids`` (an int, or one per row) as a long tensor, or ValueError in one sentence."""
    if ids is None or isinstance(ids, (str, bytes, float)):
        raise ValueError(f"{what} must be a token id (an int) or one id per row, not {ids!r}")
    try:
        t = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{what} must be a token id (an int) or one id per row, not {ids!r}") from None
    if t.dtype.is_floating_point or t.dtype == torch.bool or t.dim() > 1:
        raise ValueError(f"{what} must be a token id (an int) or one id per row, not {ids!r}")
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab):
        raise ValueError(f"{what} must be a token id in [0, {vocab}): got {t.tolist()}")
    if batch is not None and t.dim() == 1 and t.shape[0] != batch:
        raise ValueError(f"{what}: one id per row means {batch} ids, not {t.shape[0]}")
    return t.long()


def positions_of(pos, length: int, batch: int) -> torch.Tensor:
    """``pos`` (an int, negative from the end, or one per row) -> [batch] long, or ValueError."""
    if pos is None or isinstance(pos, (str, float)):
        raise ValueError(f"pos must be a position (an int) or one per row, not {pos!r}")
    t = torch.as_tensor(pos)
    if t.dtype.is_floating_point or t.dim() > 1 or (t.dim() == 1 and t.shape[0] != batch):
        raise ValueError(f"pos must be a position (an int) or one per row ({batch}), not {pos!r}")
    if t.numel() and (int(t.min()) < -length or int(t.max()) >= length):
        raise ValueError(f"pos {t.tolist()} is outside the input's {length} positions")
    return t.long().expand(batch)


@torch.no_grad()
def direct_logit_attribution(model, inputs, good, bad=None, pos=-1, **forward_kwargs) -> Attribution:
    """logit[good] - logit[bad] at ``pos`` (ints or one per row) split into embeddings, each head,
    each MLP and the biases, with the final norm's scale frozen (see the module docstring).
    ``bad=None``: logit[good] itself is split (TransformerLens's attribution to one token's
    unembedding direction); the parts then add up to that logit."""
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
    p = positions_of(pos, x_all.shape[1], B).to(x_all.device)

    def at(t):  # [batch, pos, ...] -> [batch, ...] at each row's position, float32
        return t[b, p].float()

    W_U = model.unembed.weight.float()
    g_ids = token_ids(good, cfg.vocab_size, "good", B).to(W_U.device).expand(B)
    b_ids = None if bad is None else token_ids(bad, cfg.vocab_size, "bad", B).to(W_U.device).expand(B)
    direction = W_U[g_ids] if b_ids is None else W_U[g_ids] - W_U[b_ids]  # [batch, d_model]
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
        bias = bias + ub[g_ids] - (0 if b_ids is None else ub[b_ids])
    parts["biases"] = bias
    logits = at(rec.output)
    total = logits.gather(1, g_ids[:, None])[:, 0]
    if b_ids is not None:
        total = total - logits.gather(1, b_ids[:, None])[:, 0]
    return Attribution({k: v.cpu().numpy().astype(np.float64) for k, v in parts.items()},
                       total.cpu().numpy().astype(np.float64), (1 / sigma).cpu().numpy())


# ------------------------------------------------------------------------------ attribution patching
def attribution_patching(model, inputs, grid: str, metric, *, mode: str = "patch", reference=None,
                         stack: str = "", layers: Sequence[int] | None = None, reduce: str = "mean",
                         **forward_kwargs):
    """Activation patching estimated from gradients (Nanda 2023, "Attribution Patching"; Syed et
    al. 2023): for every site of ``GRIDS[grid]`` at once, from one forward and one backward pass
    on ``inputs`` (and one recorded forward on ``reference``),

        metric(inputs with site <- value) - metric(inputs)  ~=  sum_site (value - a) . dmetric/da

    a first-order Taylor expansion around the activations ``a`` of ``inputs``; ``value`` is what
    ``mode`` would put there (``interventions.MODES``: the reference's activation for "patch",
    zero, a mean). -> an ``interventions.Effect`` laid out as ``sweep``'s (values = baseline +
    estimated change; ``mode`` "attribution (patch)"), so the two can be compared site by site
    (``compare_estimate``). Exact wherever the metric is linear in the site's activation (e.g. a
    last-layer head with the final norm's scale held fixed); a guess where it is not (softmax,
    norms, a big change): check the sites that matter with real patching.
    ``reduce="none"``: per-example estimates too (``Effect.per_example``)."""
    from . import interventions as iv

    if grid not in iv.GRIDS:
        raise ValueError(f"grid {grid!r} is not one of {', '.join(iv.GRIDS)}")
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce must be 'mean' or 'none', not {reduce!r}")
    g = iv.GRIDS[grid]
    parts = g.parts or (grid,)
    inputs = _inputs(inputs)
    length = inputs[-1].shape[1]
    layers = list(range(model.config.n_layers)) if layers is None else list(layers)
    sites = {p: iv._grid_sites(model, iv.GRIDS[p], layers, length, stack) for p in parts}
    dims = {iv.GRIDS[p].dims(model, length) for p in parts}
    if len(dims) > 1:
        raise ValueError(f"the parts of {grid!r} differ in shape: with fewer key/value heads than "
                         "query heads (GQA) estimate them one by one")
    flat = [s for p in parts for row in sites[p] for s in iv._flat(row)]
    names = sorted({s.name for s in flat})
    rec = record(model, *inputs, names=names, device=None, grad=True, **forward_kwargs)
    shapes = {n: tuple(rec[n].shape) for n in names}
    values = iv._reference_values(model, flat, mode, reference, inputs, forward_kwargs, shapes)
    B = inputs[0].shape[0]
    base_value = metric(rec.output)
    want_rows = reduce == "none"
    grads = rec.grad(base_value, names, retain_graph=want_rows)
    row_grads = None
    if want_rows:
        base_rows = iv.rows_of(metric, rec.output)
        row_grads = rec.grad(base_rows.sum(), names)  # rows are independent: row b's own gradient
    with torch.no_grad():
        def products(gr):  # (value - a) * grad, per name [batch, ...] (float32 or wider)
            out = {}
            for n in names:
                a = rec[n].detach()
                v = values[n]
                delta = -a if v is None else v.to(a.dtype).expand_as(a) - a
                out[n] = (delta * gr[n]).float() if a.element_size() < 4 else delta * gr[n]
            return out
        prod = products(grads)
        est = np.array([float(prod[s.name][(slice(None), *s.index)].sum()) for s in flat])
        est_rows = None
        if want_rows:
            prod_r = products(row_grads)
            est_rows = np.stack([prod_r[s.name][(slice(None), *s.index)].reshape(B, -1).sum(1).cpu().numpy()
                                 for s in flat])  # [sites, batch]
    base = float(base_value.detach())
    shape = (len(parts), len(layers), *next(iter(dims)))

    def lay(a):
        out = a.reshape(*shape, *a.shape[1:])
        return out if g.parts else out[0]
    labels = [[iv._label_tree(sites[p][li]) for li in range(len(layers))] for p in parts]
    rows0 = None if not want_rows else base_rows.detach().cpu().numpy().astype(np.float64)
    return iv.Effect(lay(base + est), base, grid, f"attribution ({mode})", labels if g.parts else labels[0],
                     None if est_rows is None else lay(rows0[None] + est_rows), rows0, g.parts)


def compare_estimate(estimate, actual, worst: int = 5) -> dict:
    """Attribution patching against real patching, site by site (two ``Effect``s of one grid):
    {"correlation" (Pearson, of the changes), "max_abs_error", "worst": the ``worst`` sites where
    they differ most [(label, estimated change, real change)], "n"}."""
    e, a = np.asarray(estimate.change, dtype=float).ravel(), np.asarray(actual.change, dtype=float).ravel()
    if e.shape != a.shape:
        raise ValueError(f"the two sweeps differ in shape: {estimate.values.shape} vs {actual.values.shape}")
    labels = list(np.array(actual.labels, dtype=object).ravel())
    corr = float(np.corrcoef(e, a)[0, 1]) if e.size > 1 and e.std() > 0 and a.std() > 0 else float("nan")
    order = np.argsort(-np.abs(e - a))[:worst]
    return {"correlation": corr, "max_abs_error": float(np.abs(e - a).max()),
            "worst": [(str(labels[i]), float(e[i]), float(a[i])) for i in order], "n": int(e.size)}


# ------------------------------------------------------------------------------ circuits
@torch.no_grad()
def circuits(model, layer: int, head: int, token_ids: Sequence[int], stack: str = "",
             positions: Sequence[int] | None = None) -> dict:
    """A head's two circuits over a small vocabulary, on the direct path (each token's own
    embedding entering the head, through the block's first norm when it comes before attention):

        qk [n, n]  query token i, key token j: (W_Q x_i) . (W_K x_j) / sqrt(d_head)  (biases in)
        ov [n, n]  attended token j, output token t: how much the head's output, read by the
                   unembedding (with the final norm's gain; its scale and centering left out),
                   raises logit t when it attends to j alone

    ``positions``: token i sits at position ``positions[i]`` (one per token): the scheme's
    positions then enter as in the model — added vectors (learned, sinusoidal) join x_i before
    the norm, RoPE rotates q_i and k_j by their positions, ALiBi / T5 add their score bias — so a
    layer-0 head's qk equals its real scores on that sequence (tested). Without ``positions``
    they are left out (no rotation, no bias, no position vectors): the token-only circuit.

    Beyond layer 0 a head also reads what earlier layers wrote: these are its direct paths only."""
    cfg = model.config
    s = stack or ("decoder" if cfg.arch == "encoder-decoder" else "")
    st = model.stacks[s]
    if not 0 <= layer < cfg.n_layers or not 0 <= head < cfg.n_heads:
        raise ValueError(f"the model has {cfg.n_layers} layers of {cfg.n_heads} heads: "
                         f"no layer {layer}, head {head}")
    block = st.blocks[layer]
    attn = block.attn
    dev = model.embed.weight.device
    ids = torch.as_tensor(list(token_ids), dtype=torch.long, device=dev)
    x = model.embed.weight[ids] * st.embed_scale  # [n, d_model]
    pos = None
    if positions is not None:
        pos = torch.as_tensor(list(positions), dtype=torch.long, device=dev)
        if pos.shape != ids.shape:
            raise ValueError(f"positions: one per token ({len(ids)}), not {len(pos)}")
        limit = st.pos.max_positions(cfg)
        if len(pos) and (int(pos.min()) < 0 or (limit is not None and int(pos.max()) >= limit)):
            raise ValueError(f"positions must be in [0, {limit}) for this model")
        pe = st.pos.embed(pos)
        if pe is not None:
            x = x + pe.to(x.dtype)
        if cfg.n_token_types:  # the forward's default segment (type 0)
            x = x + model.token_type_embed.weight[0]
        if st.ln_embed is not None:
            x = st.ln_embed(x)
    x = (block.ln1(x) if block.pre_norm else x).float()
    H, Hkv, d = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    kv = head // (H // Hkv)
    W, bvec = attn.W_qkv.weight.float(), attn.W_qkv.bias
    bvec = torch.zeros(W.shape[0], device=W.device) if bvec is None else bvec.float()
    qkv = x @ W.T + bvec  # [n, (H + 2 Hkv) d]
    q = qkv[:, head * d:(head + 1) * d]
    k = qkv[:, H * d + kv * d: H * d + (kv + 1) * d]
    v = qkv[:, (H + Hkv) * d + kv * d: (H + Hkv) * d + (kv + 1) * d]
    if pos is not None and st.pos.rotates:
        cos, sin = st.pos.rotary(pos)
        q = st.pos.rotate(q[None, :, None], cos, sin)[0, :, 0]  # as [batch, pos, head, d_head]
        k = st.pos.rotate(k[None, :, None], cos, sin)[0, :, 0]
    qk = q @ k.T / math.sqrt(d)
    if pos is not None and st.pos.adds_bias:
        qk = qk + st.pos.score_bias(pos, pos)[head].float()
    out = v @ attn.W_o.weight.float()[:, head * d:(head + 1) * d].T  # [n, d_model]
    norm = st.ln_final
    if hasattr(norm, "weight"):
        out = out * norm.weight.float()
    ov = out @ model.unembed.weight.float()[ids].T  # [n attended, n output]
    return {"qk": qk.cpu().numpy(), "ov": ov.cpu().numpy(), "ids": ids.cpu().tolist(),
            "positions": None if pos is None else pos.cpu().tolist()}


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


__all__ = ["Attribution", "attribution_patching", "attribution_refusal", "circuits", "compare_estimate",
           "direct_logit_attribution", "lens_top", "logit_lens", "positions_of", "readout", "residual_names",
           "token_ids", "top_tokens"]
