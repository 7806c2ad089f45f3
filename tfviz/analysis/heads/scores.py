"""Head scores from attention patterns and tokens — never a model.

Every score is a mean over query positions (and examples) of how much of a head's attention lands
on an expected set of keys, in the spirit of TransformerLens's head detector and Olsson et al.
2022. For a query i of sequence b, with A[i, j] its attention on key j:

    prev_token       mean A[i, i-1]                          over queries with a visible i-1
    prev_token_top   share of those queries whose argmax_j A[i, j] is i-1
    first_token      mean A[i, 0]  (the attention sink; with [BOS] at 0 it is weight on [BOS])
    self_token       mean A[i, i]
    local            mean Σ_{|i-j| ≤ k} A[i, j]              (k = ``local_k``, default 3)
    induction        mean Σ_{j<i, t_j = t_i} A[i, j+1]       the token *after* an earlier
                     occurrence of t_i; on [BOS] r1..rn r1..rn this is Olsson et al.'s score
                     (second-half queries, offset -(n-1)); over queries that have such a j
    duplicate_token  mean Σ_{j<i, t_j = t_i} A[i, j]         earlier occurrences of the same token
    entropy          mean -Σ_j A[i, j] ln A[i, j]  in nats
    entropy_norm     mean of entropy / ln(number of keys query i may see): 1 = uniform over them
    antecedent       (coref) weight from meta["query_index"] on every mention of the referent noun
    antecedent_other the same for the other candidate noun
    antecedent_max   share of examples whose largest weight among all candidate mentions is on a
                     mention of the referent (strictly: a tie with the other noun is a miss)
    antecedent_top   share of examples whose overall argmax key is a mention of the referent
                     (strictly larger than every other key's weight)
    attribute        (coref) weight from meta["query_index"] on meta["attribute_index"]: the word
                     after the pronoun that decides the referent ("too laggy", "its crust")

Mask-aware: padding queries are ignored, and so is any query that may see only one key (causal
position 0 sees only itself, so its weight of 1 on key 0 would say nothing about the head).
"Visible" keys come from the same mask the model uses (causal / window / global tokens, padding
keys hidden), or from ``visible`` if given. A score with no qualifying query is NaN (e.g.
``induction`` without tokens, or on text with no repeated token). For prev_token_top, argmax
ties go to the lowest key; the antecedent argmaxes count ties as misses.

To add a score: compute it in ``pattern_scores`` (or a function like ``antecedent_scores``) and
name it in ``PATTERN_SCORES``; give it a threshold and a rule in ``labels.py`` if it labels heads.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ...model.hooks import layer_template
from ...model.masks import MaskSpec
from ...recording import Recording
from ...tokenize import SPECIAL_TOKENS

PATTERN = layer_template("attn.hook_pattern")
PATTERN_SCORES = ("prev_token", "prev_token_top", "first_token", "self_token", "local",
                  "induction", "duplicate_token", "entropy", "entropy_norm")
ANTECEDENT_SCORES = ("antecedent", "antecedent_other", "antecedent_max", "antecedent_top",
                     "attribute")
SCORES = PATTERN_SCORES + ANTECEDENT_SCORES
ELSEWHERE = 0.9  # pronoun_probe: with this much of the weight off the candidates, none "wins"


# ---------------------------------------------------------------------------- inputs
def _as_patterns(patterns, template: str = PATTERN) -> np.ndarray:
    """Recording / tensor / array -> float64 [layer, batch, head, q_pos, k_pos].
    A 4-D input is one sequence, [layer, head, q_pos, k_pos] (as in training snapshots)."""
    if isinstance(patterns, Recording):
        patterns = patterns.stack_layers(template)
    if isinstance(patterns, torch.Tensor):
        patterns = patterns.detach().to("cpu", torch.float64).numpy()
    p = np.asarray(patterns, dtype=np.float64)
    if p.ndim == 4:
        p = p[:, None]
    if p.ndim != 5:
        raise ValueError(f"patterns must be [layer, batch, head, q_pos, k_pos] (or [layer, head, "
                         f"q_pos, k_pos] for one sequence), got shape {p.shape}")
    return p


def _as_tokens(tokens, batch: int, n: int) -> np.ndarray | None:
    """ids or token strings -> array [batch, pos]; a single sequence is broadcast over the batch."""
    if tokens is None:
        return None
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    t = np.asarray(tokens)
    if t.ndim == 1:
        t = np.broadcast_to(t, (batch, t.shape[0]))
    if t.shape != (batch, n):
        raise ValueError(f"tokens must be [batch={batch}, pos={n}] like the patterns, "
                         f"got {t.shape}")
    return t


def _pads(tokens: np.ndarray | None, pad_id, padding_mask, batch: int, n: int) -> np.ndarray:
    """[batch, pos] True = padding."""
    if padding_mask is not None:
        m = padding_mask.cpu().numpy() if isinstance(padding_mask, torch.Tensor) else padding_mask
        return np.broadcast_to(np.asarray(m, dtype=bool), (batch, n))
    if tokens is None or pad_id is None:
        return np.zeros((batch, n), dtype=bool)
    if tokens.dtype.kind in "USO" and not isinstance(pad_id, str):
        pad_id = SPECIAL_TOKENS[pad_id]  # token strings of a tfviz-trained task (a snapshot's): "[PAD]"
    return np.asarray(tokens == pad_id, dtype=bool)


def _visible(pads: np.ndarray, n: int, causal: bool, window, global_tokens: int) -> np.ndarray:
    """[batch, q_pos, k_pos] True = the model lets query i see key j (its own mask, pads hidden)."""
    spec = MaskSpec(causal=causal, window=window, n_global=global_tokens)
    m = spec.build(n, n)
    m = np.ones((n, n), dtype=bool) if m is None else m.numpy()
    return m[None] & ~pads[:, None, :]


def _mean(values: np.ndarray, where: np.ndarray) -> np.ndarray:
    """values [layer, batch, head, q_pos], where [batch, q_pos] -> mean over the chosen (batch, q)
    -> [layer, head]; NaN where none is chosen."""
    w = where[None, :, None, :].astype(np.float64)
    count = w.sum(axis=(1, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (values * w).sum(axis=(1, 3)) / count, np.nan)


def _on(p: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Weight each query puts on a key set: p [l, b, h, q, k], target [b, q, k] -> [l, b, h, q]."""
    return np.einsum("lbhqk,bqk->lbhq", p, target.astype(np.float64))


# ---------------------------------------------------------------------------- scores
def pattern_scores(patterns, tokens=None, *, visible=None, causal: bool = True,
                   window: int | None = None, global_tokens: int = 0, pad_id: int | str | None = 0,
                   padding_mask=None, local_k: int = 3,
                   template: str = PATTERN) -> dict[str, np.ndarray]:
    """The pattern scores (``PATTERN_SCORES``), each an array [layer, head].

    patterns: [layer, batch, head, q_pos, k_pos] (tensor, array or a Recording), or
              [layer, head, q_pos, k_pos] for one sequence.
    tokens:   [batch, pos] ids or token strings (needed for induction / duplicate_token and to
              find padding, ``tokens == pad_id``; "[PAD]" for strings); or ``padding_mask``.
    visible:  bool [q_pos, k_pos] or [batch, q_pos, k_pos], overriding the mask built from
              ``causal`` / ``window`` / ``global_tokens`` (as in ModelConfig).
    """
    p = _as_patterns(patterns, template)
    _, b, _, nq, nk = p.shape
    if nq != nk:
        raise ValueError(f"self-attention patterns need q_pos == k_pos, got {nq} and {nk}")
    tok = _as_tokens(tokens, b, nq)
    pads = _pads(tok, pad_id, padding_mask, b, nq)
    if visible is None:
        vis = _visible(pads, nq, causal, window, global_tokens)
    else:
        vis = np.broadcast_to(np.asarray(visible, dtype=bool), (b, nq, nk)) & ~pads[:, None, :]
    n_vis = vis.sum(-1)  # [batch, q_pos]
    queries = ~pads & (n_vis >= 2)
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]

    def on(target):  # target [q, k] or [b, q, k]
        return np.broadcast_to(target, vis.shape) & vis

    prev, first, self_ = on(j == i - 1), on(j == 0), on(j == i)
    has_prev = queries & prev.any(-1)
    top = np.where(vis[None, :, None], p, -1.0).argmax(-1)  # [l, b, h, q]
    out = {
        "prev_token": _mean(_on(p, prev), has_prev),
        "prev_token_top": _mean((top == np.arange(nq) - 1).astype(np.float64), has_prev),
        "first_token": _mean(_on(p, first), queries & first.any(-1)),
        "self_token": _mean(_on(p, self_), queries & self_.any(-1)),
        "local": _mean(_on(p, on(np.abs(i - j) <= local_k)), queries),
    }
    if tok is None:
        out["induction"] = out["duplicate_token"] = np.full((p.shape[0], p.shape[2]), np.nan)
    else:
        earlier = (tok[:, :, None] == tok[:, None, :]) & (j < i)[None] & ~pads[:, None, :]
        after = np.zeros_like(earlier)
        after[:, :, 1:] = earlier[:, :, :-1]  # key j+1 for every earlier occurrence j
        dup, ind = earlier & vis, after & vis
        out["induction"] = _mean(_on(p, ind), queries & ind.any(-1))
        out["duplicate_token"] = _mean(_on(p, dup), queries & dup.any(-1))
    pv = np.where(vis[None, :, None], p, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(pv > 0, pv * np.log(pv), 0.0).sum(-1)  # [l, b, h, q], nats
        norm = ent / np.log(np.maximum(n_vis, 2))[None, :, None, :]
    out["entropy"] = _mean(ent, queries)
    out["entropy_norm"] = _mean(norm, queries)
    return {k: out[k] for k in PATTERN_SCORES}


def antecedent_scores(patterns, metas: Sequence[Mapping], *, query: str = "query_index",
                      template: str = PATTERN) -> dict[str, np.ndarray]:
    """Coreference scores (``ANTECEDENT_SCORES``), each [layer, head], from coref ``Example.meta``
    dicts aligned with the batch: the attention row of ``meta[query]`` over
    ``meta["candidate_mentions"][referent]`` (all mentions of the referent noun) vs the other
    candidate's mentions, and its weight on ``meta["attribute_index"]`` (the deciding word).
    Examples with ``referent`` None (ambiguous) are skipped; ``attribute`` is the mean over the
    examples that have an attribute_index (NaN when none has)."""
    p = _as_patterns(patterns, template)
    L, b, H, _, nk = p.shape
    if len(metas) != b:
        raise ValueError(f"got {len(metas)} metas for a batch of {b}")
    clues = [p[:, e, :, m[query], m["attribute_index"]] for e, m in enumerate(metas)
             if isinstance(m.get("attribute_index"), int) and m.get(query) is not None]
    attribute = np.mean(clues, axis=0) if clues else np.full((L, H), np.nan)
    rows = []
    for e, meta in enumerate(metas):
        if meta.get("referent") is None:
            continue
        mentions = [list(m) for m in meta["candidate_mentions"]]
        true, other = mentions[meta["referent"]], mentions[1 - meta["referent"]]
        q = meta[query]
        if max(true + other + [q]) >= nk:
            raise ValueError(f"example {e}: index past the pattern's {nk} positions")
        a = p[:, e, :, q, :]  # [layer, head, k_pos]
        best = a[..., true].max(-1)
        rest = np.delete(a, true, axis=-1).max(-1)  # every key that is not a referent mention
        rows.append((a[..., true].sum(-1), a[..., other].sum(-1),
                     (best > a[..., other].max(-1)).astype(np.float64),
                     (best > rest).astype(np.float64)))
    out = {k: np.full((L, H), np.nan) for k in ANTECEDENT_SCORES} if not rows else \
        {k: np.mean([r[n] for r in rows], axis=0) for n, k in enumerate(ANTECEDENT_SCORES[:4])}
    return out | {"attribute": attribute}


def pronoun_probe(pattern, query_index: int,
                  candidates: Mapping[str, Sequence[int]]) -> pd.DataFrame:
    """Which head sends the pronoun's attention where: pattern [layer, head, q_pos, k_pos] (or
    [layer, 1, head, q_pos, k_pos]); one row per (layer, head) with the weight from
    ``query_index`` on each candidate (summed over its positions, e.g. every mention of "law"),
    "elsewhere" (the rest) and "winner": the candidate with the most weight, or "elsewhere" when
    at least ``ELSEWHERE`` (90%) of the weight lands on other tokens (no candidate wins then).

        pronoun_probe(P, q, {"law": [2, 14], "application": [5, 17]})
    """
    p = _as_patterns(pattern)
    if p.shape[1] != 1:
        raise ValueError("pronoun_probe takes one sequence: [layer, head, q_pos, k_pos]")
    a = p[:, 0, :, query_index, :]  # [layer, head, k_pos]
    reserved = {"layer", "head", "elsewhere", "winner"}
    if reserved & set(candidates) or not candidates:
        raise ValueError(f"candidate names must be given and not be one of {sorted(reserved)}")
    L, H, _ = a.shape
    layer, head = np.indices((L, H))
    df = pd.DataFrame({"layer": layer.ravel(), "head": head.ravel()})
    for name, pos in candidates.items():
        df[name] = a[..., list(pos)].sum(-1).ravel()
    names = list(candidates)
    df["elsewhere"] = 1.0 - df[names].sum(axis=1)
    df["winner"] = df[names].idxmax(axis=1).where(df["elsewhere"] < ELSEWHERE, "elsewhere")
    return df
