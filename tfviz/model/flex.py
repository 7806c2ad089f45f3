"""Sliding-window attention with FlexAttention (the GPU's O(n·w) kernel).

``torch.nn.attention.flex_attention`` runs a fused Triton kernel over the 128 × 128 tiles a
``BlockMask`` lists, forward and backward. Three things make it truly O(n·w):

* **It runs compiled.** Called eagerly (or when a compile falls back) it computes a dense reference
  that materialises [batch, head, n, n] scores: the backward tried to allocate 16 GiB at
  n = 32768. ``flex_window_attention`` calls one ``torch.compile``'d ``flex_attention``; inside an
  already compiled model it calls the plain function, which the outer compile fuses.
* **The block mask is built from the band, never from n × n.** For a window w, query tile i can
  only see key tiles whose distances overlap [0, w] (causal) or [-w, w] (bidirectional); a tile
  wholly inside the band is "full" (no mask evaluated there), one on its edge is "partial".
  ``band_block_mask`` writes these lists directly (O((n/128)²) small ints), cached per
  (n, window, causal, device); ``create_block_mask`` would evaluate the mask over all n² pairs.
* **Biases are score_mod functions.** ALiBi and T5 give their bias as a ``score_mod``
  (``Positional.score_mod``, see ``tfviz.model.positional``), evaluated inside the kernel only
  where a score is computed; no [head, n, n] tensor exists.

Key padding is a ``mask_mod`` reading ``key_is_pad[b, k_pos]`` (a padding query still sees itself,
as in ``MaskSpec.build``); GQA/MQA use ``enable_gqa``. Every tensor the mods capture is on q's device.
"""
from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..device import cuda_available

BLOCK = 128  # FlexAttention's default tile: BLOCK query positions × BLOCK key positions
ScoreMod = Callable[..., torch.Tensor]  # (score, batch, head, q_idx, k_idx) -> score + bias
# Each distinct (shape, dtype, grad mode, mods) compiles once; torch's default limit (8) would make
# a sweep over n fall back to the dense eager kernel. Fail loudly rather than fall back silently.
_DYNAMO = dict(recompile_limit=256, accumulated_recompile_limit=4096, fail_on_recompile_limit_hit=True)


# Read once at import, a plain module constant: inside a compiled model dynamo folds a constant,
# while an lru_cache'd function calling importlib is "marked as skipped" and breaks the graph
# (8 graph breaks in a windowed model's compiled forward on CUDA, torch 2.11).
_IMPORTABLE = importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def importable() -> bool:
    return _IMPORTABLE


def available() -> bool:
    """FlexAttention's fused kernel runs here: a CUDA GPU and a torch that has it."""
    return _IMPORTABLE and cuda_available()


MIN_D_HEAD = 16  # the fused kernel's smallest head size (torch 2.11 on an H200: "NYI: embedding
# dimension of the query, key, and value must be at least 16"): a teaching model's d_head = 8 runs
# the chunked band instead (``banded.banded_attention``)


def fits(q: torch.Tensor, v: torch.Tensor) -> bool:
    """The fused kernel takes these shapes: head sizes of at least ``MIN_D_HEAD``."""
    return q.shape[-1] >= MIN_D_HEAD and v.shape[-1] >= MIN_D_HEAD


# ------------------------------------------------------------------------------ the mods
def window_ok(q_idx, kv_idx, window: int, causal: bool):
    """True where query q_idx may see key kv_idx: 0 <= i - j <= w (causal) or |i - j| <= w."""
    dist = q_idx - kv_idx
    return ((dist >= 0) & (dist <= window)) if causal else (dist.abs() <= window)


def window_mask_mod(window: int, causal: bool, key_is_pad: torch.Tensor | None = None):
    """mask_mod(b, h, q_idx, kv_idx) of the window; with ``key_is_pad`` [batch, k_pos] (True =
    padding; long enough for every index the kernel asks about) padding keys are hidden from
    every query but themselves."""
    if key_is_pad is None:
        def mask_mod(b, h, q_idx, kv_idx):
            return window_ok(q_idx, kv_idx, window, causal)
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return window_ok(q_idx, kv_idx, window, causal) & (~key_is_pad[b, kv_idx] | (q_idx == kv_idx))
    return mask_mod


# ------------------------------------------------------------------------------ the block mask
def band_blocks(n: int, window: int, causal: bool, device, block: int = BLOCK, padded: bool = False):
    """Which block × block tiles of the n × n scores the band touches.

    -> (partial, full), bool [q_block, k_block]. A tile is full when every (query, key) pair in it
    lies in the band and inside [0, n), so no mask need be evaluated there; partial when it holds
    some such pair but not only those. With ``padded`` (key padding to mask) nothing is full."""
    nb = -(-n // block)
    lo = torch.arange(nb, device=device) * block  # first position of each tile
    hi = torch.clamp(lo + block, max=n) - 1  # last position inside [0, n)
    q_lo, q_hi, k_lo, k_hi = lo[:, None], hi[:, None], lo[None, :], hi[None, :]
    d_min, d_max = q_lo - k_hi, q_hi - k_lo  # the range of i - j over the tile
    lo_ok, hi_ok = (0 if causal else -window), window
    some = (d_max >= lo_ok) & (d_min <= hi_ok)
    whole = (d_min >= lo_ok) & (d_max <= hi_ok) & (q_hi - q_lo == block - 1) & (k_hi - k_lo == block - 1)
    if padded:
        whole = torch.zeros_like(whole)
    return some & ~whole, whole


def _ordered(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[q_block, k_block] bool -> (count [1, 1, q_block], indices [1, 1, q_block, k_block]) int32,
    each row's listed tiles first, in increasing order."""
    count = dense.sum(-1, dtype=torch.int32)
    order = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return count[None, None], order[None, None].contiguous()


def band_block_mask(n: int, window: int, causal: bool, device, key_is_pad: torch.Tensor | None = None):
    """The ``BlockMask`` of the window over n positions, built from the band (see ``band_blocks``);
    without padding, cached per (n, window, causal, device)."""
    if key_is_pad is None:
        return _cached_block_mask(n, window, causal, torch.device(device))
    return _block_mask(n, window, causal, device, key_is_pad)


def _block_mask(n, window, causal, device, key_is_pad):
    from torch.nn.attention.flex_attention import BlockMask

    if key_is_pad is not None:  # pad to whole tiles: the kernel may ask about indices up to there
        key_is_pad = F.pad(key_is_pad.to(device), (0, -(-n // BLOCK) * BLOCK - n), value=True)
    partial, full = band_blocks(n, window, causal, device, padded=key_is_pad is not None)
    return BlockMask.from_kv_blocks(*_ordered(partial), *_ordered(full), BLOCK_SIZE=BLOCK,
                                    mask_mod=window_mask_mod(window, causal, key_is_pad),
                                    seq_lengths=(n, n))


@functools.lru_cache(maxsize=32)
def _cached_block_mask(n: int, window: int, causal: bool, device: torch.device):
    return _block_mask(n, window, causal, device, None)


# ------------------------------------------------------------------------------ attention
def mod_key(fn) -> tuple | None:
    """What dynamo guards on in a mod function, as a small hashable key: its code, and each value
    it closes over — a tensor by shape, dtype and device (dynamo lifts it as an input), a nested
    function by its own key, numbers, strings and tuples of them by value, anything else by
    identity (no reference is kept, so a cached key never holds a model alive)."""
    if fn is None:
        return None
    return (fn.__code__, tuple(_cell_key(c) for c in fn.__closure__ or ()))


def _cell_key(cell):
    try:
        x = cell.cell_contents
    except ValueError:  # an empty cell
        return None
    return _value_key(x)


def _value_key(x):
    if x is None or isinstance(x, (bool, int, float, str, torch.dtype, torch.device)):
        return x
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), x.dtype, x.device)
    if isinstance(x, tuple):
        return tuple(_value_key(y) for y in x)
    if callable(x) and hasattr(x, "__code__"):
        return mod_key(x)
    return ("id", type(x).__qualname__, id(x))


@functools.lru_cache(maxsize=1)
def compiled_flex():
    """One compiled ``flex_attention`` for the process (each new shape compiles once, ~seconds)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


_COMPILED: set[tuple] = set()  # call signatures compiled_flex has compiled (see below)
_MAX_KEYS = 4096


def flex_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, causal: bool, *,
                          score_mod: ScoreMod | None = None, key_is_pad: torch.Tensor | None = None,
                          compiled: bool = True) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_head) + bias, window mask) v with FlexAttention.

    q [batch, head, pos, d_head], k/v [batch, kv_head, pos, d_head] -> [batch, head, pos, d_head].
    ``compiled=False`` runs flex eagerly: a dense reference, for checking the mods on a CPU only."""
    from torch.nn.attention.flex_attention import flex_attention

    n, gqa = q.shape[2], k.shape[1] != q.shape[1]
    if torch.compiler.is_compiling():  # inside a compiled model: traced into its graph, fused by it
        return flex_attention(q, k, v, score_mod=score_mod,
                              block_mask=_block_mask(n, window, causal, q.device, key_is_pad),
                              enable_gqa=gqa)
    block_mask = band_block_mask(n, window, causal, q.device, key_is_pad)
    kwargs = dict(score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
    if not compiled:
        return flex_attention(q, k, v, **kwargs)
    # Everything dynamo guards on for this call (shapes, dtypes, grad, and each mod's code and the
    # plain values it closes over: window, causal, bucket counts...): a first sight runs under the
    # raised recompile limit; later calls skip the config patch (~0.1 ms). The key must be
    # complete: a recompile outside the patch counts against torch's default limit (8), and past
    # it dynamo runs the frame eagerly from then on, i.e. the dense n × n fallback (seen on CUDA:
    # a test process that had compiled ALiBi, T5 and plain variants tried to allocate 64 GiB).
    key = (q.shape, k.shape, v.shape, q.dtype, q.device, torch.is_grad_enabled(),
           q.requires_grad, k.requires_grad, v.requires_grad, window, causal,
           mod_key(score_mod), mod_key(block_mask.mask_mod), None if key_is_pad is None else key_is_pad.shape)
    if key in _COMPILED:
        return compiled_flex()(q, k, v, **kwargs)
    with torch._dynamo.config.patch(**_DYNAMO):
        out = compiled_flex()(q, k, v, **kwargs)
    if len(_COMPILED) >= _MAX_KEYS:  # bounded: forgetting a key only costs one more config patch
        _COMPILED.clear()
    _COMPILED.add(key)
    return out
