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
    computed once; ``memory_is_pad`` is the source padding those keys need."""

    self_attn: list[LayerKV]
    cross_attn: list[LayerKV] | None = None
    memory_is_pad: torch.Tensor | None = None
    memory: torch.Tensor | None = field(default=None, repr=False)

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
