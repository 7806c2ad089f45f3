"""Sliding-window attention that really costs O(n·w), not O(n²).

A window applied as a mask over the full [q_pos, k_pos] scores still computes all n² of them. Here
the queries are cut into chunks of C = max(w, 16) positions; chunk c (positions cC … cC+C-1) can
only see the key block of K positions starting at cC - w:

    causal:         query i sees keys j with 0 <= i - j <= w   ->  K = C + w   (2w for C = w)
    bidirectional:  query i sees keys j with |i - j| <= w      ->  K = C + 2w  (3w for C = w)

so one ``scaled_dot_product_attention`` call over [batch·chunk, head, C, d_head] queries and
[batch·chunk, kv_head, K, d_head] keys computes n·K scores: linear in n for a fixed w. Within a
block, query a (position cC + a) and key b (position cC - w + b) are i - j = a + w - b apart, the
same for every chunk, so the interior chunks share ONE [C, K] bool mask and the CPU flash kernel
runs. Chunks whose key block sticks out of [0, n) (the first; the last one or two), and every chunk
when there is padding or a score bias, get a per-chunk mask: still O(n·K) memory.

Supported: causal and bidirectional, GQA/MQA (``enable_gqa``), an additive score bias (ALiBi, T5:
the banded slice of a [head, q_pos, k_pos] tensor is gathered, or a function of (q_pos, k_pos) is
evaluated per chunk), key padding (a padding query still sees itself, as in ``MaskSpec.build``), any
n (padded internally to a multiple of C). RoPE is applied to q and k before this is called.
Not here: global tokens (``n_global > 0``) and the KV-cache decode step (T queries against S >> T
cached keys): ``use_banded`` says no, and the caller keeps the masked SDPA path, which is already
O(S) per decoded token. On CUDA, ``banded_attention`` uses FlexAttention (``tfviz.model.flex``):
the same band, as a fused kernel, forward and backward.

For display: ``banded_pattern`` returns the softmax pattern in band storage [batch, head, q_pos,
2w+1] (entry t is key j = i - w + t; the causal half t > w is zero) and ``expand_banded`` spreads it
back over [batch, head, q_pos, k_pos].
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from . import flex
from .masks import MaskSpec

MIN_CHUNK = 16  # tiny windows: fewer, larger chunks (a few more masked scores, far less overhead)
Bias = torch.Tensor | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None


def use_banded(spec: MaskSpec, q_len: int, k_len: int, force: bool = False) -> bool:
    """Whether the banded kernel applies: a sliding window, self-attention over the whole sequence
    (no decode step against a cache), no global tokens; and n > 2w unless ``force``."""
    if spec.window is None or spec.n_global or not spec.is_self or spec.q_offset or q_len != k_len:
        return False
    return force or q_len > 2 * spec.window


def banded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, causal: bool, *,
                     bias: Bias = None, score_mod: flex.ScoreMod | None = None,
                     key_is_pad: torch.Tensor | None = None, dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_head) + bias, window mask) v, computing only the band.

    q [batch, head, pos, d_head], k/v [batch, kv_head, pos, d_head] -> [batch, head, pos, d_head].
    ``bias``: [head, q_pos, k_pos] tensor or ``f(q_pos, k_pos) -> [head, len(q_pos), len(k_pos)]``;
    ``score_mod``: the same bias as a FlexAttention score_mod (what the GPU kernel uses);
    ``key_is_pad``: [batch, k_pos], True = padding.
    On CUDA without dropout (and with no bias, or with ``score_mod``) FlexAttention computes it
    (``tfviz.model.flex``) when the head size fits its kernel (``flex.fits``: d_head >= 16);
    otherwise the chunked SDPA below.
    """
    if (q.is_cuda and dropout_p == 0.0 and (bias is None or score_mod is not None) and flex_available()
            and flex.fits(q, v)):
        return flex.flex_window_attention(q, k, v, window, causal, score_mod=score_mod, key_is_pad=key_is_pad)
    return chunked_attention(q, k, v, window, causal, bias=bias, key_is_pad=key_is_pad, dropout_p=dropout_p)


def chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, causal: bool, *,
                      bias: Bias = None, key_is_pad: torch.Tensor | None = None,
                      dropout_p: float = 0.0) -> torch.Tensor:
    """The band as chunks of SDPA (the module docstring), on any device; arguments as above."""
    B, H, n, d = q.shape
    Hkv = k.shape[1]
    w = min(window, n - 1)  # |i - j| <= n - 1 always holds: a wider window changes nothing
    C = max(w, MIN_CHUNK)
    K = C + w if causal else C + 2 * w
    nb = -(-n // C)
    qp = F.pad(q, (0, 0, 0, nb * C - n)) if nb * C != n else q  # [batch, head, nb*C, d_head]
    kv_pad = (0, 0, w, (nb - 1) * C + K - n - w)  # w in front; enough behind for the last block
    # One copy each into block layout; autograd then only splits/concatenates along the chunk dim.
    qb = qp.view(B, H, nb, C, d).transpose(1, 2).reshape(B, nb, H, C, d)  # [batch, chunk, head, C, d]
    kb, vb = (F.pad(t, kv_pad).unfold(2, K, C).permute(0, 2, 1, 4, 3).reshape(B, nb, Hkv, K, d)
              for t in (k, v))  # [batch, chunk, kv_head, K, d_head]: overlapping key blocks
    pads = None if key_is_pad is None else F.pad(key_is_pad, (w, kv_pad[3]), value=True).unfold(1, K, C)
    # Interior chunks c in [lo, hi) have every key inside [0, n): one shared mask serves them all.
    lo, hi = (1 if w else 0), (n + w - K) // C + 1
    shared = bias is None and pads is None and lo < hi
    groups = [g for g in ([(0, lo), (lo, hi), (hi, nb)] if shared else [(0, nb)]) if g[1] > g[0]]
    sizes = [c1 - c0 for c0, c1 in groups]
    outs = []
    for (c0, c1), qg, kg, vg in zip(groups, qb.split(sizes, 1), kb.split(sizes, 1), vb.split(sizes, 1)):
        if shared and (c0, c1) == (lo, hi):  # one [C, K] mask for every interior chunk
            mask = _block_mask(c0, c0 + 1, n, w, C, K, causal, q.device, None, None, 1, q.dtype)[0, 0]
        else:
            mask = _block_mask(c0, c1, n, w, C, K, causal, q.device, bias, pads, B, q.dtype)
        o = F.scaled_dot_product_attention(
            qg.reshape(-1, H, C, d), kg.reshape(-1, Hkv, K, d), vg.reshape(-1, Hkv, K, d),
            attn_mask=mask, dropout_p=dropout_p, enable_gqa=Hkv != H)  # [batch·chunk, head, C, d_head]
        outs.append(o.view(B, c1 - c0, H, C, d))
    out = torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]  # [batch, chunk, head, C, d_head]
    out = out.transpose(1, 2).reshape(B, H, nb * C, d)
    return out if nb * C == n else out[:, :, :n]


def _positions(c0, c1, w, C, K, device):
    c = torch.arange(c0, c1, device=device)[:, None, None]
    qpos = c * C + torch.arange(C, device=device)[None, :, None]  # [chunk, C, 1]
    kpos = c * C - w + torch.arange(K, device=device)[None, None, :]  # [chunk, 1, K]
    return qpos, kpos


def _block_mask(c0, c1, n, w, C, K, causal, device, bias, pads, B, dtype):
    """Chunks c0..c1-1: bool [batch·chunk or chunk, 1, C, K] (True = may attend), or with a bias a
    float [batch·chunk, head, C, K] mask: the bias on the band, -inf off it."""
    qpos, kpos = _positions(c0, c1, w, C, K, device)
    dist = qpos - kpos  # i - j
    ok = ((dist >= 0) & (dist <= w)) if causal else (dist.abs() <= w)
    # Keys outside [0, n) are padding; a padded query (i >= n) sees itself so no row is empty.
    ok = ok & (((kpos >= 0) & (kpos < n)) | (dist == 0))  # [chunk, C, K]
    ok = ok[None, :, None]  # [1, chunk, 1, C, K]
    if pads is not None:
        ok = ok & (~pads[:, c0:c1, None, None, :] | (dist == 0)[None, :, None])  # [batch, chunk, 1, C, K]
    if bias is None:
        return ok.expand(B, -1, -1, -1, -1).reshape(-1, 1, C, K)
    qi, kj = qpos.clamp(max=n - 1), kpos.clamp(0, n - 1)
    if callable(bias):
        b = torch.stack([bias(qi[i, :, 0], kj[i, 0]) for i in range(c1 - c0)])  # [chunk, head, C, K]
    else:
        b = bias[:, qi, kj].transpose(0, 1)  # [head, chunk, C, K] -> [chunk, head, C, K]
    m = b.to(dtype)[None].masked_fill(~ok, float("-inf"))  # [batch or 1, chunk, head, C, K]
    return m.expand(B, -1, -1, -1, -1).reshape(-1, b.shape[1], C, K)


# ------------------------------------------------------------------------------ band storage
def banded_pattern(q: torch.Tensor, k: torch.Tensor, window: int, causal: bool, *, bias: Bias = None,
                   key_is_pad: torch.Tensor | None = None) -> torch.Tensor:
    """The softmax pattern in band storage, O(n·w) memory: [batch, head, q_pos, 2w+1] where entry
    t of row i is the weight on key j = i - w + t (zero outside the window or the sequence).

    q [batch, head, pos, d_head], k [batch, kv_head, pos, d_head]; bias and padding as in
    ``banded_attention``."""
    B, H, n, d = q.shape
    group = H // k.shape[1]
    if group > 1:  # query head h reads kv head h // group
        k = k.repeat_interleave(group, dim=1)
    windows = F.pad(k, (0, 0, window, window)).unfold(2, 2 * window + 1, 1)  # [b, h, q_pos, d, 2w+1]
    scores = (q.unsqueeze(-2) @ windows).squeeze(-2) / d ** 0.5  # [batch, head, q_pos, 2w+1]
    i = torch.arange(n, device=q.device)[:, None]
    j = i - window + torch.arange(2 * window + 1, device=q.device)[None, :]  # [q_pos, 2w+1]
    ok = (j >= 0) & (j < n) & ((j <= i) if causal else True)
    if bias is not None:
        jj = j.clamp(0, n - 1)
        b = torch.stack([bias(i[r], jj[r])[:, 0] for r in range(n)], 1) if callable(bias) \
            else bias[:, i, jj]  # [head, q_pos, 2w+1]
        scores = scores + b.to(scores.dtype)
    ok = ok.expand(B, 1, n, -1)
    if key_is_pad is not None:
        padded = F.pad(key_is_pad, (window, window), value=True).unfold(1, 2 * window + 1, 1)
        ok = ok & (~padded[:, None] | (j == i))  # a padding query still sees itself
    scores = scores.masked_fill(~ok, float("-inf"))
    return torch.softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)), -1).to(q.dtype)


def expand_banded(band: torch.Tensor, window: int, causal: bool = True) -> torch.Tensor:
    """[batch, head, q_pos, 2w+1] band storage -> the full [batch, head, q_pos, k_pos] pattern
    (for display; O(n²)). ``causal`` is accepted for symmetry: the causal half is already zero."""
    *lead, n, width = band.shape
    idx = torch.arange(n, device=band.device)[:, None] + torch.arange(width, device=band.device)
    full = band.new_zeros(*lead, n, n + 2 * window)  # k_pos shifted by +w
    full.scatter_(-1, idx.expand(*lead, n, width), band)
    return full[..., window:window + n]


def flex_available() -> bool:
    """FlexAttention's fused kernel runs here (a CUDA GPU): see ``tfviz.model.flex``."""
    return flex.available()
