"""RoPE geometry: why a rotated q·k depends only on the offset m − n (Su et al. 2021, RoFormer).

RoPE rotates each pair of dimensions by the angle p·θ_i at position p — pair i is (x_2i, x_2i+1)
in tfviz's models and RoFormer, (x_i, x_i+d/2) in Llama's (``pairs="half"``, ``ModelConfig.rope_pairs``).
Rotations compose, so

    ⟨R(m)q, R(n)k⟩ = ⟨q, R(n − m)k⟩        (R(m)ᵀ R(n) = R(n − m))

and the score of one q/k pair placed at every (m, n) is a Toeplitz matrix: constant along each
diagonal m − n = const. ``rope_score_grid`` computes it with the model's own ``apply_rotary``.
"""
from __future__ import annotations

import math

import torch

from ..model.positional import ROTARY_PAIRS


def rope_freqs(d_head: int, base: float = 10000.0) -> torch.Tensor:
    """θ_i = base^(−2i/d_head), i = 0 .. d_head/2 − 1  -> [d_head/2] (as the model's RoPE)."""
    if d_head % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions: d_head={d_head} must be even")
    i = torch.arange(0, d_head, 2, dtype=torch.float64)
    return base ** (-i / d_head)


def rotate_at(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor,
              pairs: str = "interleaved") -> torch.Tensor:
    """One vector x [d_head] rotated to each position -> [pos, d_head] (``pairs``: the model's
    ``rope_pairs``)."""
    angles = positions.to(torch.float64)[:, None] * freqs.to(torch.float64)[None, :]  # [pos, d/2]
    xs = x.to(torch.float64).expand(1, len(positions), 1, x.shape[-1])  # [1, pos, 1, d_head]
    return ROTARY_PAIRS[pairs].rotate(xs, angles.cos(), angles.sin())[0, :, 0]


def rope_score_grid(q_vec: torch.Tensor, k_vec: torch.Tensor, freqs: torch.Tensor,
                    n: int, pairs: str = "interleaved") -> torch.Tensor:
    """grid[m, p] = R(m)q · R(p)k for m, p in 0..n-1 -> [q_pos, k_pos] float64 (unscaled, no
    1/√d_head). Toeplitz: grid[m, p] depends only on m − p."""
    pos = torch.arange(n)
    return rotate_at(q_vec, pos, freqs, pairs) @ rotate_at(k_vec, pos, freqs, pairs).T


def rope_score_by_offset(q_vec: torch.Tensor, k_vec: torch.Tensor, freqs: torch.Tensor,
                         offsets: torch.Tensor, pairs: str = "interleaved") -> torch.Tensor:
    """The same score as a function of the offset alone: q · R(−offset)k with offset = m − p
    -> [len(offsets)] (equals grid[m, m − offset] for every m)."""
    return rotate_at(k_vec, -offsets, freqs, pairs) @ q_vec.to(torch.float64)


GRID_NOTE = ("The same q placed at every position m and k at every n: the score depends only on "
             "m − n, so every diagonal is constant (q·k before the 1/√d_head).")


def rope_caption(model: str, layer: int, head: int, query: tuple[str, int], key: tuple[str, int],
                 rotated_score: float, model_score: float) -> str:
    """What the RoPE view shows for real vectors: whose q and k, and that rotating them to their
    positions reproduces the model's own recorded score (× √d_head; -inf where masked)."""
    (qt, m), (kt, n) = query, key
    masked = " (masked there: a decoder query never sees a later key)." if math.isinf(model_score) else "."
    return (f"Real vectors from {model}, layer {layer}, head {head}, before rotation (hook_q, "
            f"hook_k): q of {qt!r} (m={m}), k of {kt!r} (n={n}). Rotated to those positions their "
            f"q·k is {rotated_score:.4f}; the model's own recorded score × √d_head is "
            f"{model_score:.4f}{masked}")


__all__ = ["GRID_NOTE", "rope_caption", "rope_freqs", "rope_score_by_offset", "rope_score_grid", "rotate_at"]
