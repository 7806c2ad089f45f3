"""Masks for the Masks page: the exact mask a model applies, a copy of a model with another window,
and the "no peeking" test of a causal decoder.

Every mask here is built by ``tfviz.model.masks.MaskSpec.build`` — the function the model itself
calls in its forward — so the grid a student sees is the mask the recorded pattern went through.

Padding layout: a causal stack is padded on the LEFT (as for batched generation; on the right the
causal mask alone already hides pads from every real token, and the model skips the padding mask
there), a bidirectional stack on the RIGHT. With that layout the model always applies the padding
mask, so ``effective_mask`` is exactly its mask.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.masks import MaskSpec
from ..model.transformer import Transformer

KINDS = ("causal / full", "padding", "sliding window", "global + local")


@dataclass(frozen=True)
class MaskChoice:
    kind: str = "causal / full"
    window: int = 2
    n_global: int = 1
    n_pad: int = 2

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"mask kind {self.kind!r} is not one of {KINDS}")
        if self.window < 1 or self.n_global < 0 or self.n_pad < 0:
            raise ValueError("window must be >= 1, global tokens and pads >= 0")

    @property
    def applied_window(self) -> int | None:
        """The window this kind applies (None: no window)."""
        return self.window if self.kind in ("sliding window", "global + local") else None

    @property
    def applied_global(self) -> int:
        return self.n_global if self.kind == "global + local" else 0


def describe(causal: bool) -> str:
    """What each kind of mask lets a query see, in words (for the overview's caption)."""
    return ("Sliding window: query i sees keys j with " + ("0 ≤ i − j ≤ w" if causal else "|i − j| ≤ w")
            + ". Global + local: the first g tokens see and are seen by all"
            + (" (still causally)" if causal else "") + ". Padding (drawn on the input with pads "
            + "added; the other three on the input as it is): no real token looks at a pad — a "
            + "pad's own row still sees itself, so no row is all blocked; "
            + ("a decoder is padded on the left (on the right its causal mask already hides them)."
               if causal else "padded on the right."))


def pad_token(config, tokenizer) -> int:
    """The id the padded input shows at its pads: the model's pad id, else the tokenizer's pad
    token, else — a tokenizer without one, like GPT-2's or Llama's — its eos (or unk, bos) token,
    as Hugging Face pads such models. The padding mask, not the id, hides them."""
    for i in (config.pad_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.bos_id):
        if i is not None:
            return int(i)
    return 0


def replacement_choices(vocab_size: int, ids, limit: int = 1000) -> list[int]:
    """The token ids a page offers to put in place of another: the whole vocabulary when it has
    at most ``limit`` tokens, else ids 0..limit-1 and the text's own tokens (a 50,257-token
    vocabulary is no list to scroll; BPE's low ids are its bytes and most frequent merges)."""
    if vocab_size <= limit:
        return list(range(vocab_size))
    return sorted(set(range(limit)) | {int(i) for i in ids if 0 <= int(i) < vocab_size})


def pad_layout(ids: list[int], n_pad: int, causal: bool,
               pad_id: int = 0) -> tuple[list[int], list[bool]]:
    """``ids`` with ``n_pad`` pad tokens on the left (causal) or right (bidirectional)
    -> (ids, is_pad)."""
    pads = [pad_id] * n_pad
    if causal:
        return pads + list(ids), [True] * n_pad + [False] * len(ids)
    return list(ids) + pads, [False] * len(ids) + [True] * n_pad


def effective_mask(choice: MaskChoice, n: int, causal: bool,
                   is_pad: list[bool] | None = None) -> torch.Tensor:
    """The bool mask [q_pos, k_pos] (True = may attend) the model applies for ``choice`` on a
    sequence of ``n`` positions, from ``MaskSpec.build``."""
    window, n_global, pads = choice.applied_window, choice.applied_global, None
    if choice.kind == "padding" and is_pad is not None and any(is_pad):
        pads = torch.tensor([is_pad], dtype=torch.bool)
    m = MaskSpec(causal=causal, window=window, n_global=n_global, key_is_pad=pads).build(n, n)
    if m is None:
        m = torch.ones(n, n, dtype=torch.bool)
    return m.reshape(-1, n, n)[0]


def all_masks(n: int, causal: bool, window: int, n_global: int,
              is_pad: list[bool] | None = None) -> dict[str, torch.Tensor]:
    """Every kind side by side for one length: name -> bool [q_pos, k_pos]."""
    return {kind: effective_mask(MaskChoice(kind, window, n_global), n, causal, is_pad)
            for kind in KINDS}


def windowed_model(model: Transformer, window: int | None, global_tokens: int = 0) -> Transformer:
    """A copy of ``model`` with another attention window (and global tokens), same weights: the
    mask is applied to a model that was trained without it. Window must be >= 1."""
    cfg = model.config
    g = min(global_tokens, cfg.max_len) if window is not None else 0
    copy = Transformer(cfg.replace(window=window, global_tokens=g))
    copy.load_state_dict(model.state_dict())
    return copy.eval()


def blocked_mass(pattern, mask) -> float:
    """Largest attention weight on a blocked (q, k) pair: exactly 0 when the mask was applied.
    ``pattern`` [..., q_pos, k_pos], ``mask`` bool [q_pos, k_pos]."""
    p = np.asarray(pattern, dtype=float)
    blocked = ~np.asarray(mask, dtype=bool)
    vals = p[..., blocked]
    return float(np.abs(vals).max()) if vals.size else 0.0


def logit_change(before: torch.Tensor, after: torch.Tensor) -> np.ndarray:
    """Max |Δ logit| per position between two forwards' logits [batch, pos, vocab] -> [pos]."""
    if before.shape != after.shape:
        raise ValueError(f"logits of different shapes {tuple(before.shape)} / {tuple(after.shape)}")
    return (after.double() - before.double()).abs().amax(dim=-1)[0].numpy()


def edit_token(ids: list[int], pos: int, new_id: int) -> list[int]:
    if not 0 <= pos < len(ids):
        raise ValueError(f"position {pos} is outside the {len(ids)} tokens")
    out = list(ids)
    out[pos] = int(new_id)
    return out


__all__ = ["KINDS", "MaskChoice", "all_masks", "blocked_mass", "describe", "edit_token", "effective_mask",
           "logit_change", "pad_layout", "windowed_model"]
