"""What attention costs, on paper: FLOPs, bytes, KV-cache size. Pure functions of the shape.

Notation: n positions, w window (None = full attention), H heads, d = d_head, B batch,
b = bytes per element. The measured side is ``python -m tfviz.bench attention`` / ``kvcache``.

FLOPs count the (query, key) pairs that are actually attended, ``attended_pairs``:

    full, causal           n(n+1)/2
    full, bidirectional    n²
    window, causal         Σ_i (min(i, w) + 1) ≈ n(w+1)
    window, bidirectional  Σ_i #{j : |i-j| <= w} ≈ n(2w+1)

Each pair costs one d-long dot product q·k (2d FLOPs) and one d-long weighted sum of v (2d):

    forward   F = 4 · d · pairs · H · B
    backward  2F (dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q: four products of the same size)

so forward + backward = 3F. Softmax (O(pairs) exps) is left out: it is d times smaller.

Which pairs a kernel computes, ``computed_pairs``: a fused kernel (flash SDPA, the banded kernel)
computes only the attended pairs (a causal flash kernel skips the blocks above the diagonal); a
kernel that materialises the n×n scores (``explicit``) or is handed an n×n mask (``masked``: a
window given to SDPA as a mask) computes all n² and throws the masked ones away — a window applied
as a mask costs as much as full attention. A real fused kernel still does a constant factor more
(dense tiles; the banded kernel scores n·2w pairs to use n·(w+1)), which changes no slope: full is
O(n²), the banded window O(n·w).
"""
from __future__ import annotations

import math

from ..model.families import lacks

KERNELS = ("explicit", "fused", "masked")


def attended_pairs(n: int, w: int | None, causal: bool = True) -> int:
    """Number of (query i, key j) pairs with a nonzero attention weight."""
    if w is None or w >= n - 1:
        return n * (n + 1) // 2 if causal else n * n
    if causal:  # rows 0..w-1 see i+1 keys, the rest w+1
        return w * (w + 1) // 2 + (n - w) * (w + 1)
    # |i - j| <= w: the n(2w+1) band minus the two triangles cut off at the ends
    return n * (2 * w + 1) - w * (w + 1)


def computed_pairs(n: int, w: int | None, causal: bool = True, kernel: str = "fused") -> int:
    """(query, key) pairs a ``kernel`` computes: the attended ones for ``fused``, all n² for
    ``explicit`` and ``masked`` (the mask is applied to scores already computed)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r} is not one of {KERNELS}")
    return attended_pairs(n, w, causal) if kernel == "fused" else n * n


def attention_flops(n: int, w: int | None, heads: int, d_head: int, batch: int = 1,
                    backward: bool = False, causal: bool = True, kernel: str = "fused") -> int:
    """4·d·pairs·H·B for the forward pass, pairs = ``computed_pairs``; 3x that with the backward
    (see the module docstring)."""
    fwd = 4 * d_head * computed_pairs(n, w, causal, kernel) * heads * batch
    return 3 * fwd if backward else fwd


def attention_bytes(n: int, w: int | None, heads: int, d_head: int, batch: int = 1,
                    backward: bool = False, causal: bool = True, kernel: str = "fused",
                    dtype_bytes: int = 4) -> int:
    """Peak extra memory of one attention call, inputs q, k, v not counted.

    With E = B·H·n·d·b (one [batch, head, pos, d_head] tensor) and S = B·H·n²·b (one score matrix):

    ``explicit`` (scores and pattern materialised, any w — a window is just a mask there):
        forward 2S + n²(2 + b) (scores and pattern live together; the bool mask, its negation
        and the additive -inf mask); with the backward 3S + n²(2 + b) (the saved pattern, its
        gradient, the scores' gradient)
    ``masked`` (SDPA's fused kernel given an n×n window mask): the fused full cost + n²(2 + 2b)
        (the bool mask, its negation, and the two float tensors SDPA makes converting it)
    ``fused``, w None (flash SDPA: never more than a tile of scores): forward E (the output);
        with the backward 5E (output, dq, dk, dv, and
        about one more E of kernel workspace: measured, not derived)
    ``fused``, w set (``banded_attention``, queries in chunks of C = max(w, 16), keys in blocks
        of K = C + w causal / C + 2w bidirectional): forward (1 + 2K/C)·E (q regrouped into
        chunks, k and v copied into overlapping blocks); with the backward about 2x that
    Constant-size buffers (per-thread tiles) are left out; the dependence on n is the point.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r} is not one of {KERNELS}")
    E = batch * heads * n * d_head * dtype_bytes
    S = batch * heads * n * n * dtype_bytes
    if kernel == "explicit":
        return (3 if backward else 2) * S + n * n * (2 + dtype_bytes)
    full_fused = (5 if backward else 1) * E
    if kernel == "masked":
        return full_fused + n * n * (2 + 2 * dtype_bytes)
    if w is None:
        return full_fused
    w = min(w, n - 1)
    C = max(w, 16)  # tfviz.model.banded.MIN_CHUNK
    ratio = (C + (1 if causal else 2) * w) / C  # K / C
    return int((2 if backward else 1) * (1 + 2 * ratio) * E)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, pos: int, batch: int = 1,
                   dtype_bytes: int = 4) -> int:
    """Self-attention KV cache: 2 (k and v) · L · n_kv_heads · d_head · pos · B · b.

    Grouped-query (n_kv_heads < n_heads) and multi-query (n_kv_heads = 1) attention shrink it by
    n_heads / n_kv_heads; nothing else about the model enters."""
    return 2 * n_layers * n_kv_heads * d_head * pos * batch * dtype_bytes


def recurrent_state_bytes(n_layers: int, d_hidden: int, cell: str, batch: int = 1,
                          dtype_bytes: int = 4) -> int:
    """What a recurrent decoder carries between generation steps instead of a KV cache: each
    layer's hidden state h (and an LSTM's cell state c), L · d_hidden · (2 for an LSTM) · B · b
    bytes — the same at any length, where ``kv_cache_bytes`` grows with every position."""
    return n_layers * d_hidden * (2 if cell == "lstm" else 1) * batch * dtype_bytes


ALLOCATOR_MARGIN = 1.15  # the peak of real steps ran up to 15% over the live tensors (docstring below)


def training_bytes(n_params: int, n_layers: int, d_model: int, d_ff: int, n_heads: int,
                   vocab_size: int, batch: int, pos: int, src_pos: int = 0, cross: bool = False,
                   dtype_bytes: int = 4) -> dict[str, int]:
    """Memory one training step needs, on paper (float32, AdamW), split into its parts:

        weights      P · b                        (P parameters)
        gradients    P · b
        optimizer    3 · P · b                    (AdamW's two moments + the foreach update's
                                                   temporaries)
        activations  b · B · [ pos · L · a_dec + src_pos · L · a + pos · 6 · V ]
                     a = 20 · d_model + 2 · d_ff + H · pos   floats kept per token and layer
                                                   (norms, q/k/v, attention output, MLP hidden
                                                   before/after the activation; one row of
                                                   scores); a_dec = 1.5 a with cross-attention;
                     6 · V per token for the logits, their float copy, log-softmax and the
                                                   gradients of both

    Calibrated against the peak resident memory of real training runs on the CPU (the kernel's
    VmHWM, reset just before training, minus the resident memory then; d_model 64-512, 2-4
    layers, 30-202 positions, vocab 37-1007) the tensors alone came to 1.0-1.7x the measured
    growth, and the same run's growth varied by up to 15% between runs (the allocator's high-water
    mark), so activations get ``ALLOCATOR_MARGIN``: the estimate is 1.13-1.9x the growth, never
    below it (``tests/robustness/test_shared_server.py`` re-measures one). A GPU's fused
    kernels need less; this errs on the safe side."""
    b = dtype_bytes
    per_token = 20 * d_model + 2 * d_ff + n_heads * pos
    acts = pos * n_layers * per_token * (1.5 if cross else 1.0)
    acts += src_pos * n_layers * (20 * d_model + 2 * d_ff + n_heads * src_pos)
    acts += pos * 6 * vocab_size
    out = {"weights": n_params * b, "gradients": n_params * b, "optimizer": 3 * n_params * b,
           "activations": int(ALLOCATOR_MARGIN * b * batch * acts)}
    out["total"] = sum(out.values())
    return out


# Floats a recurrent layer keeps per token for the backward, per hidden unit (torch's CPU kernels):
# an LSTM's input and hidden gate pre-activations (4 + 4), c_t, tanh(c_t), h_t and the layer's input;
# a GRU's three gates twice, n, h; a tanh RNN's pre-activation and h. Rounded up from the peak
# resident memory of real steps (d 256, 2 layers, batch 256, 30 positions: about 20, 14 and 9).
RECURRENT_FLOATS = {"lstm": 32, "gru": 24, "rnn": 12}


def recurrent_training_bytes(config, n_params: int, batch: int, pos: int,
                             dtype_bytes: int = 4) -> dict[str, int]:
    """``training_bytes`` of a recurrent model (``tfviz.model.recurrent``), split the same way:

        activations  b · B · [ (pos + src_pos) · L · k · max(d_model, d_hidden)
                               + pos · (4 · V + 2 · src_pos · (d_attn + 1)) ]

    k = ``RECURRENT_FLOATS[cell]``; src_pos = pos for an encoder-decoder (its encoder reads the
    source), else 0; the last term only with additive attention (per decoder token, the
    [src_pos, d_attn] tanh input and output, and the scores). No attention scores otherwise.
    Checked against the peak resident memory of real steps (``tests/test_recurrent.py``)."""
    c, b = config, dtype_bytes
    src = pos if c.arch == "encoder-decoder" else 0
    acts = (pos + src) * c.n_layers * RECURRENT_FLOATS[c.cell] * max(c.d_model, c.d_hidden)
    acts += pos * 4 * c.vocab_size
    if c.attention == "additive":
        acts += pos * 2 * src * (c.d_attn + 1)
    out = {"weights": n_params * b, "gradients": n_params * b, "optimizer": 3 * n_params * b,
           "activations": int(ALLOCATOR_MARGIN * b * batch * acts)}
    out["total"] = sum(out.values())
    return out


def scaling_exponent(n_small: int, value_small: float, n_large: int, value_large: float) -> float:
    """Slope on a log-log plot: log(v2/v1) / log(n2/n1) — 1 for linear, 2 for quadratic."""
    return math.log(value_large / value_small) / math.log(n_large / n_small)


def train_flops_per_token(model, seq_len: int) -> float:
    """Training FLOPs per token of a transformer, as nanoGPT's ``estimate_mfu`` and PaLM
    (Chowdhery et al. 2022, appendix B) count them: 6·N + 12·L·H·d_head·T.

    N = parameters that multiply (every weight except position tables, and except the token
    embedding unless it doubles as the unembedding); 6 = 2 (multiply-add) × 3 (forward, and a
    backward twice as costly). 12·L·H·d_head·T: the attention scores and weighted values of a
    length-T sequence, counted in full (no causal halving), as in the reference formula. Used for
    MFU only: the same formula for tfviz and the reference it is compared with.

    A recurrent model (``tfviz.model.recurrent``): 6·N, N every weight but the token embedding (a
    cell uses each of its weights once per token), plus with additive attention
    6·T·(d_attn + d_hidden) per decoder token (a score and a weighted sum over T source states)."""
    cfg = model.config
    if lacks(model, "self_attention"):
        n = sum(p.numel() for p in model.parameters()) - model.embed.weight.numel()
        attend = 0 if lacks(model, "cross_attention") else 6.0 * seq_len * (cfg.d_attn + cfg.d_hidden)
        return 6.0 * n + attend
    skip = set()
    for name, module in model.named_modules():
        if name.endswith("pos.table"):
            skip.add(id(module.weight))
    if not cfg.tie_embeddings:
        skip.add(id(model.embed.weight))
    n = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    layers = cfg.n_layers * (3 if cfg.arch == "encoder-decoder" else 1)  # + decoder cross-attention
    return 6.0 * n + 12.0 * layers * cfg.n_heads * cfg.d_head * seq_len
