"""Additive attention (Bahdanau, Cho & Bengio 2015, "Neural machine translation by jointly learning
to align and translate", eq. 5-6 and appendix A.1.2): the attention that came before the
transformer's scaled dot product. A recurrent decoder scores every source state h_j with its own
previous state s_{i-1} through a one-hidden-layer network:

    e_ij = v · tanh(W_q s_{i-1} + W_k h_j)          (scores;   source padding -> -inf)
    a_ij = softmax_j(e_ij)                          (weights:  the alignment)
    c_i  = Σ_j a_ij h_j                             (context)

One "head". Recorded as a recurrent encoder-decoder's ``decoder.cross_attn.hook_attn_scores`` /
``hook_pattern`` [batch, head=1, q_pos, k_pos] (the shape of a transformer's cross-attention) and
``hook_context`` [batch, pos, d_hidden], once the decoder has run every position
(``tfviz.model.recurrent``).
"""
from __future__ import annotations

import torch
from torch import nn

from .hooks import HookPoint


class AdditiveAttention(nn.Module):
    def __init__(self, d_query: int, d_key: int, d_attn: int):
        super().__init__()
        self.W_q = nn.Linear(d_query, d_attn, bias=False)
        self.W_k = nn.Linear(d_key, d_attn)
        self.v = nn.Linear(d_attn, 1, bias=False)
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_context = HookPoint()

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """W_k h_j for every source position, once per source: [batch, k_pos, d_attn]."""
        return self.W_k(memory)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor,
                memory_is_pad: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoder step: query s_{i-1} [batch, d_query] -> (e [batch, k_pos], a [batch, k_pos],
        c [batch, d_key])."""
        e = self.v(torch.tanh(self.W_q(query)[:, None] + keys)).squeeze(-1)  # [batch, k_pos]
        if memory_is_pad is not None:
            e = e.masked_fill(memory_is_pad, float("-inf"))
        a = torch.softmax(e, dim=-1)
        c = torch.bmm(a[:, None], memory)[:, 0]  # Σ_j a_ij h_j  [batch, d_key]
        return e, a, c

    def record(self, scores: torch.Tensor, pattern: torch.Tensor, context: torch.Tensor) -> None:
        """Every step's scores / weights [batch, q_pos, k_pos] and context [batch, q_pos, d_key]
        to the hook points (a head axis of 1 added, as for a transformer's cross-attention)."""
        self.hook_attn_scores(scores[:, None])
        self.hook_pattern(pattern[:, None])
        self.hook_context(context)
