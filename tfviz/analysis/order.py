"""Word order, measured: what a bag of words and a transformer without positions can and cannot see.

* A bag of words counts tokens: "the dog chases the cat ." and "the cat chases the dog ." get one
  and the same vector.
* Self-attention itself is a weighted *sum* over keys, so without positional information a
  bidirectional transformer (an encoder, ``pos="none"``, no window) is permutation-equivariant:
  permute the input tokens and every layer's residual stream is permuted the same way, nothing
  else changes. Each token's representation depends on its own token and the *bag* of tokens.
* A causal model without positions is not equivariant: the mask is itself an order. After one
  layer, position i depends on its token and the bag of tokens 0..i — equal for the two sentences
  above exactly at the first "the" and the final "."; a second layer reads those already
  different neighbours, so only the first "the" stays equal (``structural_classes`` works out
  which positions are forced equal at each layer, and the measured differences agree).
* With positions (learned, sinusoidal, RoPE, ALiBi, T5) or a sliding window, positions differ.

``order_differences`` records the residual stream of both sequences and returns, per layer, the
largest difference after undoing the permutation (float rounding only, for an equivariant model).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ..model.hooks import hook_name
from ..recording import record


def bag_of_words(sequences: Sequence[Sequence[str]]) -> tuple[list[str], np.ndarray]:
    """Count vectors: ``sequences`` (lists of tokens) -> (vocabulary in first-seen order,
    counts [len(sequences), len(vocabulary)]). Order is thrown away by construction."""
    vocab: list[str] = []
    for seq in sequences:
        vocab += [t for t in dict.fromkeys(seq) if t not in vocab]
    index = {t: i for i, t in enumerate(vocab)}
    counts = np.zeros((len(sequences), len(vocab)))
    for row, seq in enumerate(sequences):
        for t, c in Counter(seq).items():
            counts[row, index[t]] = c
    return vocab, counts


def matching_permutation(a: Sequence, b: Sequence) -> np.ndarray:
    """``perm`` with ``b[j] == a[perm[j]]`` for every j; equal tokens are matched in order of
    appearance. ValueError when ``b`` is not a rearrangement of ``a``."""
    a, b = _keys(a), _keys(b)
    if Counter(a) != Counter(b):
        raise ValueError("the second sequence must contain exactly the tokens of the first, "
                         "in another order")
    where: dict = {}
    for i, t in enumerate(a):
        where.setdefault(t, []).append(i)
    return np.array([where[t].pop(0) for t in b], dtype=np.int64)


def _keys(seq) -> list:
    return [t.item() if isinstance(t, (torch.Tensor, np.generic)) else t for t in seq]


def position_free(config) -> bool:
    """Whether attention in this model sees no positions at all: its positional scheme neither
    adds vectors, rotates q/k nor biases scores, and there is no sliding window."""
    s = config.scheme
    return not (s.embeds or s.rotates or s.adds_bias) and config.window is None


def structural_classes(sequences: Sequence[Sequence], n_layers: int, causal: bool) -> list[np.ndarray]:
    """What a model without positions *cannot* tell apart, layer by layer: a class id per
    (sequence, position) for each stage [embeddings, after layer 0, ...] -> one array
    [stage, pos] per sequence. Two positions with equal class ids are forced to have equal
    representations by construction (same function of the same inputs); different ids generally
    differ. Stage 0: the token. Stage l + 1: (own class, bag of the classes it attends to at
    stage l) — every position (bidirectional) or the prefix up to itself (causal). It is the
    Weisfeiler–Lehman colour refinement on the attention graph. Ids are shared across sequences."""
    intern: dict = {}

    def cid(key) -> int:
        return intern.setdefault(key, len(intern))

    seqs = [_keys(s) for s in sequences]
    classes = [[[cid(("token", t)) for t in s]] for s in seqs]
    for _ in range(n_layers):
        for s, cl in zip(seqs, classes):
            prev = cl[-1]
            seen = [prev[:i + 1] if causal else prev for i in range(len(prev))]
            cl.append([cid((prev[i], tuple(sorted(Counter(v).items())))) for i, v in enumerate(seen)])
    return [np.array(cl) for cl in classes]


def forced_equal(a: Sequence, b: Sequence, perm: np.ndarray, n_layers: int,
                 causal: bool) -> np.ndarray:
    """bool [stage, pos]: whether position j of ``b`` and position ``perm[j]`` of ``a`` are in the
    same ``structural_classes`` class at each stage (embeddings, after layer 0, ...)."""
    ca, cb = structural_classes([a, b], n_layers, causal)
    return cb == ca[:, perm]


def order_differences(model, tokens_a, tokens_b) -> tuple[pd.DataFrame, np.ndarray]:
    """Run ``model`` on two token sequences that are rearrangements of each other (LongTensors
    [pos]; a single-stack model) and compare their residual streams layer by layer.

    Returns (table, per_position): one table row per recorded stage — "embeddings"
    (``hook_embed`` + ``hook_pos_embed`` = ``blocks.0.hook_resid_pre``), then
    ``blocks.{l}.hook_resid_post`` — with columns stage, hook, matched (max |h_b[j] - h_a[perm[j]]|
    over positions and dims: after undoing the permutation), unmatched (max |h_b[j] - h_a[j]|:
    position by position), scale (max |h| in either sequence), relative (matched / scale);
    ``per_position [stage, pos]``: the matched difference at each position of b.
    The table's ``attrs`` say whether the model is causal and position-free, and ``forced_equal``
    ([stage][pos] of b, ``structural_classes``): where a model without positions must give equal
    representations (all of them for a bidirectional model; for a causal one a shrinking set:
    after layer 0 the positions with the same token and the same bag of prefix tokens)."""
    cfg = model.config
    if cfg.arch == "encoder-decoder":
        raise ValueError("order_differences compares one stack: use a decoder or an encoder")
    a = torch.as_tensor(tokens_a).reshape(-1).long()
    b = torch.as_tensor(tokens_b).reshape(-1).long()
    perm = matching_permutation(a.tolist(), b.tolist())
    names = [hook_name(0, "hook_resid_pre")] + [hook_name(l, "hook_resid_post")
                                                for l in range(cfg.n_layers)]
    rec = record(model, torch.stack([a, b]), names=names)
    rows, per_position = [], []
    for stage, name in zip(["embeddings"] + [f"after layer {l}" for l in range(cfg.n_layers)], names):
        h = rec[name].double()  # [batch=2, pos, d_model]
        ha, hb = h[0], h[1]
        diff = (hb - ha[torch.as_tensor(perm)]).abs().amax(dim=-1)  # [pos]
        scale = float(h.abs().max())
        matched = float(diff.max())
        rows.append({"stage": stage, "hook": name, "matched": matched,
                     "unmatched": float((hb - ha).abs().max()), "scale": scale,
                     "relative": matched / scale if scale else 0.0})
        per_position.append(diff.numpy())
    table = pd.DataFrame(rows)
    table.attrs.update(causal=cfg.causal, position_free=position_free(cfg), pos=cfg.pos,
                       permutation=perm.tolist(),
                       forced_equal=forced_equal(a.tolist(), b.tolist(), perm, cfg.n_layers,
                                                 cfg.causal).tolist())
    return table, np.stack(per_position)


def without_causal_mask(model):
    """A copy of a one-stack decoder with the same weights run bidirectionally (``arch="encoder"``:
    no causal mask, every word sees every word). On a model without positions it is attention
    alone: ``order_differences`` finds the same vector for a word wherever it stands, at every
    layer (float rounding), while the decoder itself tells rearrangements apart through its mask."""
    import dataclasses

    from ..model.transformer import Transformer

    cfg = model.config
    if cfg.arch != "decoder":
        raise ValueError("without_causal_mask takes a one-stack decoder")
    copy = Transformer(dataclasses.replace(cfg, arch="encoder"))
    copy.load_state_dict(model.state_dict())
    return copy.eval()


def explain(table: pd.DataFrame) -> str:
    """One plain sentence on what ``order_differences`` should show for this kind of model."""
    attrs = table.attrs
    if not attrs.get("position_free"):
        return (f"This model knows positions (pos={attrs.get('pos')!r}): the same token in "
                "another place gets another representation, so the matched differences are large.")
    if attrs.get("causal"):
        return ("No positions, but a causal mask: each position sees the bag of what comes before "
                "it, so the mask alone carries order. After one layer, representations agree (to "
                "float rounding) where the token and the bag of its prefix agree; deeper layers "
                "read those differing neighbours, so fewer positions agree.")
    return ("No positions and bidirectional attention: the model is permutation-equivariant. "
            "After undoing the permutation every layer's residual stream is the same up to "
            "float rounding: it cannot tell the two orders apart.")


__all__ = ["bag_of_words", "explain", "matching_permutation", "order_differences", "without_causal_mask",
           "forced_equal", "position_free", "structural_classes"]
