"""The KV cache used by ``Transformer.generate``.

It stores ``n_kv_heads`` heads per layer, so grouped- and multi-query attention really shrink it:
self-attention bytes = 2 (k and v) * n_layers * n_kv_heads * d_head * pos * batch * bytes_per_element.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerKV:
    k: torch.Tensor | None = None  # [batch, kv_head, pos, d_head]
    v: torch.Tensor | None = None  # [batch, kv_head, pos, d_head]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v

    @property
    def nbytes(self) -> int:
        return 0 if self.k is None else self.k.nbytes + self.v.nbytes


@dataclass
class KVCache:
    """Per-layer keys/values. ``cross_attn`` holds the encoder-decoder memory's keys/values,
    computed once; ``memory_is_pad`` is the source padding those keys need.

    A left-padded batch (generation from prompts of different lengths): ``key_is_pad`` [batch,
    k_pos] says which cached keys are padding (never attended to, at every later step), and
    ``lead`` [batch] how many pads open each row, so that row's tokens take positions
    0, 1, ... as if it were alone (what transformers' ``generate`` does with attention_mask)."""

    self_attn: list[LayerKV]
    cross_attn: list[LayerKV] | None = None
    memory_is_pad: torch.Tensor | None = None
    memory: torch.Tensor | None = field(default=None, repr=False)
    key_is_pad: torch.Tensor | None = None
    lead: torch.Tensor | None = None

    def add_padding(self, new_is_pad: torch.Tensor | None, batch: int, new: int, device) -> torch.Tensor | None:
        """Extend ``key_is_pad`` by ``new`` keys (``new_is_pad`` [batch, new], None = real tokens)
        -> the padding of every key so far, or None while there is none. Called once per forward,
        before the layers append their keys; the first call with padding also sets ``lead``."""
        if new_is_pad is None and self.key_is_pad is None:
            return None
        if new_is_pad is None:
            new_is_pad = torch.zeros(batch, new, dtype=torch.bool, device=device)
        if self.key_is_pad is None:
            before = torch.zeros(batch, self.length, dtype=torch.bool, device=device)
            self.key_is_pad = torch.cat([before, new_is_pad], dim=1)
            self.lead = (~self.key_is_pad).int().argmax(dim=1) if self.length == 0 else None
        else:
            self.key_is_pad = torch.cat([self.key_is_pad, new_is_pad], dim=1)
        return self.key_is_pad

    @classmethod
    def empty(cls, n_layers: int, cross: bool = False) -> "KVCache":
        return cls([LayerKV() for _ in range(n_layers)],
                   [LayerKV() for _ in range(n_layers)] if cross else None)

    @property
    def length(self) -> int:
        k = self.self_attn[0].k
        return 0 if k is None else k.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes of the self-attention cache tensors (what grows with every generated token)."""
        return sum(layer.nbytes for layer in self.self_attn)
