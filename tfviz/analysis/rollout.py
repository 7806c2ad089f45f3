"""Attention across layers: attention rollout and attention flow (Abnar & Zuidema, 2020,
"Quantifying Attention Flow in Transformers", https://arxiv.org/abs/2005.00928).

One layer's pattern says where a position reads *from the layer below*; after two layers a
position has already mixed its neighbours, so "which input token does this output position come
from?" needs all layers together. Both methods start from each layer's heads averaged with the
residual connection added and every row renormalised:

    Ã_l = rownorm(0.5 · mean_h A_l[h] + 0.5 · I)                       [q_pos, k_pos]

* rollout: multiply them, ``R_l = Ã_l · Ã_{l-1} ··· Ã_0`` — the share of input token k in
  position q's representation after block l if every edge mixed linearly.
* flow: the same layered graph (nodes (layer, pos), edge (l+1, q) -> (l, k) with capacity
  Ã_l[q, k]) read as a flow network: the maximum flow from output node (l+1, q) to input node
  (0, k), each output row then normalised to sum 1, exactly as the paper's code does (its
  ``compute_flows``). Max-flow here is Edmonds–Karp (shortest augmenting paths, O(V·E²)), written
  out below; it is exact on these small graphs, which is why ``attention_flow`` bounds their size.

Patterns are the recorded ``blocks.{l}.attn.hook_pattern`` ([batch, head, q_pos, k_pos] per
layer); a causal model's rollout and flow stay lower-triangular (nothing flows from the future).
"""
from __future__ import annotations

from collections import deque

import numpy as np
import torch

from ..model.hooks import layer_template
from ..recording import record

RESIDUAL = 0.5  # Abnar & Zuidema: A + I, rows renormalised = 0.5 A + 0.5 I for row-stochastic A
FLOW_MAX_POSITIONS = 40  # Edmonds-Karp in Python: flow is refused beyond this many positions
FLOW_MAX_LAYERS = 12
EPS = 1e-12  # residual capacity below this is treated as 0 (no endless tiny augmentations)


def _patterns(patterns) -> np.ndarray:
    """[layer, head, q_pos, k_pos] as float64 numpy, checked."""
    p = patterns.detach().to("cpu").double().numpy() if isinstance(patterns, torch.Tensor) \
        else np.asarray(patterns, dtype=np.float64)
    if p.ndim != 4 or p.shape[-1] != p.shape[-2]:
        raise ValueError("patterns must be [layer, head, q_pos, k_pos] self-attention of one "
                         f"sequence, got shape {tuple(p.shape)}")
    if not np.isfinite(p).all():
        raise ValueError("patterns contain NaN or infinite values")
    return p


def residual_attention(patterns, residual: float = RESIDUAL) -> np.ndarray:
    """``patterns [layer, head, q_pos, k_pos]`` -> ``Ã [layer, q_pos, k_pos]``: heads averaged,
    ``(1 - residual) · A + residual · I``, each row renormalised to sum 1 (float64)."""
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual={residual} must be in [0, 1]")
    p = _patterns(patterns)
    a = (1.0 - residual) * p.mean(axis=1) + residual * np.eye(p.shape[-1])
    sums = a.sum(axis=-1, keepdims=True)
    return np.divide(a, sums, out=np.zeros_like(a), where=sums > 0)


def attention_rollout(patterns, residual: float = RESIDUAL) -> np.ndarray:
    """``[layer, q_pos, k_pos]``: row q of layer l = how much of each input token k reaches
    position q after block l, ``Ã_l ··· Ã_0`` (rows sum to 1)."""
    a = residual_attention(patterns, residual)
    out = np.empty_like(a)
    joint = np.eye(a.shape[-1])
    for layer in range(a.shape[0]):
        joint = a[layer] @ joint
        out[layer] = joint
    return out


def max_flow(capacity, source: int, sink: int) -> float:
    """The maximum flow from ``source`` to ``sink`` in the network ``capacity [node, node]``
    (capacity[u, v] >= 0 on the edge u -> v), by Edmonds–Karp: augment along a shortest path
    (breadth-first) of the residual network until none is left."""
    cap = np.array(capacity, dtype=np.float64)  # residual capacities (a copy)
    n = cap.shape[0]
    if cap.shape != (n, n) or (cap < 0).any() or not np.isfinite(cap).all():
        raise ValueError("capacity must be a square matrix of finite, non-negative numbers")
    if source == sink:
        raise ValueError("source and sink must differ")
    # Neighbours in the residual network: forward edges and their reverses.
    linked = (cap > 0) | (cap.T > 0)
    neighbours = [np.flatnonzero(linked[u]).tolist() for u in range(n)]
    total = 0.0
    while True:
        parent = [-1] * n
        parent[source] = source
        queue = deque([source])
        while queue and parent[sink] < 0:
            u = queue.popleft()
            for v in neighbours[u]:
                if parent[v] < 0 and cap[u, v] > EPS:
                    parent[v] = u
                    queue.append(v)
        if parent[sink] < 0:
            return total
        path, v = [], sink
        while v != source:
            path.append((parent[v], v))
            v = parent[v]
        push = min(cap[u, v] for u, v in path)
        for u, v in path:
            cap[u, v] -= push
            cap[v, u] += push
        total += push


def layered_graph(a: np.ndarray) -> np.ndarray:
    """``Ã [layer, q_pos, k_pos]`` -> capacity ``[node, node]`` of the layered graph: node
    ``l * n + i`` is position i entering block l (l = 0: the input tokens; l = layer: the
    output); edge (l + 1, q) -> (l, k) has capacity Ã_l[q, k]."""
    n_layers, n, _ = a.shape
    cap = np.zeros(((n_layers + 1) * n,) * 2)
    for layer in range(n_layers):
        cap[(layer + 1) * n:(layer + 2) * n, layer * n:(layer + 1) * n] = a[layer]
    return cap


def _reachable(edge: np.ndarray, start: int) -> np.ndarray:
    """bool [node]: the nodes reachable from ``start`` along ``edge [node, node]`` (itself too)."""
    seen = np.zeros(edge.shape[0], dtype=bool)
    seen[start] = True
    frontier = seen.copy()
    while frontier.any():
        frontier = edge[frontier].any(axis=0) & ~seen
        seen |= frontier
    return seen


def attention_flow(patterns, residual: float = RESIDUAL, normalise: bool = True) -> np.ndarray:
    """``[layer, q_pos, k_pos]``: the maximum flow from position q after block l to input token k
    through the layered graph of ``residual_attention`` (rows normalised to sum 1 unless
    ``normalise=False``). At most ``FLOW_MAX_POSITIONS`` positions and ``FLOW_MAX_LAYERS``
    layers (exact max-flow is slow in pure Python; rollout has no such limit)."""
    a = residual_attention(patterns, residual)
    n_layers, n, _ = a.shape
    if n > FLOW_MAX_POSITIONS or n_layers > FLOW_MAX_LAYERS:
        raise ValueError(f"attention flow is computed for at most {FLOW_MAX_POSITIONS} positions "
                         f"and {FLOW_MAX_LAYERS} layers (got {n} and {n_layers}): use a shorter "
                         "text, or attention rollout")
    out = np.zeros_like(a)
    for layer in range(n_layers):
        # Only layers 0..layer matter for an output of block `layer`: a smaller graph, and of it
        # only the nodes on some path from the source to the sink (a causal mask prunes many).
        cap = layered_graph(a[:layer + 1])
        edge = cap > 0
        for q in range(n):
            source = (layer + 1) * n + q
            ahead = _reachable(edge, source)
            for k in range(n):
                keep = np.flatnonzero(ahead & _reachable(edge.T, k))
                if keep.size:
                    sub = cap[np.ix_(keep, keep)]
                    out[layer, q, k] = max_flow(sub, int(np.searchsorted(keep, source)),
                                                int(np.searchsorted(keep, k)))
    if normalise:
        sums = out.sum(axis=-1, keepdims=True)
        out = np.divide(out, sums, out=np.zeros_like(out), where=sums > 0)
    return out


def across_layers(model, tokens, *, stack: str = "", batch: int = 0,
                  residual: float = RESIDUAL, flow: bool = True) -> dict[str, np.ndarray]:
    """Record every layer's self-attention pattern of ``model`` on ``tokens`` (a LongTensor
    [batch, pos], or [pos]; encoder-decoder: the tuple (src, tgt) and ``stack`` "encoder" /
    "decoder") and return, for sequence ``batch``, float64 arrays [layer, q_pos, k_pos]:
    ``raw`` (heads averaged, no residual), ``residual`` (Ã), ``rollout`` and ``flow`` (None when
    ``flow=False``). For a decoder stack this follows self-attention only: what cross-attention
    brings in from the source is not part of the graph."""
    inputs = tokens if isinstance(tokens, tuple) else (tokens,)
    inputs = tuple(t[None] if t.dim() == 1 else t for t in inputs)
    template = layer_template("attn.hook_pattern", stack)
    points = model.hook_points()
    names = [template.format(l=l) for l in range(len(points)) if template.format(l=l) in points]
    if not names:
        raise ValueError(f"this model records no {template!r}"
                         + ("" if stack else " (encoder-decoder: pass stack='encoder' or 'decoder')"))
    rec = record(model, *inputs, names=names)
    p = rec.stack_layers(template)[:, batch]  # [layer, head, q_pos, k_pos]
    return {"raw": _patterns(p).mean(axis=1), "residual": residual_attention(p, residual),
            "rollout": attention_rollout(p, residual),
            "flow": attention_flow(p, residual) if flow else None}


__all__ = ["FLOW_MAX_LAYERS", "FLOW_MAX_POSITIONS", "RESIDUAL", "across_layers",
           "attention_flow", "attention_rollout", "layered_graph", "max_flow", "residual_attention"]
