"""Head scores and automatic labels, computed from attention patterns and labels — never a model.

    P = rec.stack_layers("blocks.{l}.attn.hook_pattern")   # [layer, batch, head, q_pos, k_pos]
    df = head_scores(P, tokens)                            # one row per (layer, head), + "label"
    df = score_model(model, task)                          # records suitable probes, same table

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

Mask-aware: padding queries are ignored, and so is any query that may see only one key (causal
position 0 sees only itself, so its weight of 1 on key 0 would say nothing about the head).
"Visible" keys come from the same mask the model uses (causal / window / global tokens, padding
keys hidden), or from ``visible`` if given. A score with no qualifying query is NaN (e.g.
``induction`` without tokens, or on text with no repeated token). For prev_token_top, argmax
ties go to the lowest key; the antecedent argmaxes count ties as misses.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..model.hooks import layer_template
from ..model.masks import MaskSpec
from ..recording import Recording, record
from ..tasks.base import collate
from ..tokenize import SPECIAL_TOKENS

PATTERN = layer_template("attn.hook_pattern")
BOS_ID = SPECIAL_TOKENS.index("[BOS]")  # 2 in every tfviz tokenizer
N_SPECIAL = len(SPECIAL_TOKENS)  # ids 0..6 are [PAD] [UNK] [BOS] [EOS] [MASK] [SEP] [CLS]

PATTERN_SCORES = ("prev_token", "prev_token_top", "first_token", "self_token", "local",
                  "induction", "duplicate_token", "entropy", "entropy_norm")
ANTECEDENT_SCORES = ("antecedent", "antecedent_other", "antecedent_max", "antecedent_top")
SCORES = PATTERN_SCORES + ANTECEDENT_SCORES
COLUMNS = ("layer", "head") + SCORES + ("label", "labels")
"""The columns of ``head_scores`` / ``score_model`` (``scores_over_snapshots`` adds "step" first).
Scores that could not be computed are NaN; "label" is one word, "labels" every rule that fired."""

THRESHOLDS: dict[str, float] = {
    "antecedent_max": 0.9,   # antecedent: argmax over the candidates on the referent in > 90% ...
    "antecedent": 0.2,       # ... and at least this mean weight on the referent's mentions
    "induction": 0.4,
    "duplicate_token": 0.4,
    "prev_token_top": 0.4,
    "self_token": 0.5,
    "first_token": 0.5,
    "local": 0.8,
    "entropy_norm": 0.8,     # diffuse: no rule fired and attention spread at least this evenly
}
"""Cut-offs for ``label_head`` (a score must be *greater*, except entropy_norm: at least)."""

SOURCES: dict[str, str] = {
    "induction": "Olsson et al. 2022, 'In-context learning and induction heads': on a random "
                 "sequence repeated, an induction head attends from each repeated token to the "
                 "token after its earlier occurrence; heads are ranked by that mean weight (as "
                 "TransformerLens's induction score). The 0.4 cut-off is ours (tfviz issue 'Head "
                 "analysis').",
    "prev_token_top": "TransformerLens head detector ('previous_token_head'): how much attention "
                      "lands on the expected pattern. We count a head as previous-token when its "
                      "top weight is on i-1 at more than 40% of positions (0.4: ours).",
    "duplicate_token": "TransformerLens head detector ('duplicate_token_head'); Wang et al. 2022 "
                       "(IOI circuit) name such heads. 0.4: ours, as for induction.",
    "first_token": "Xiao et al. 2023, 'Efficient streaming language models with attention "
                   "sinks': many heads park weight on the first token. A sink when > 0.5 of the "
                   "weight goes to position 0 ([BOS] in our tasks); 0.5: ours.",
    "self_token": "Attention to the query's own position; 0.5: ours.",
    "local": "Local (sliding-window-like) heads: > 0.8 of the weight within local_k positions; "
             "0.8: ours.",
    "antecedent": "Coreference heads (Clark et al. 2019, 'What does BERT look at?', find heads "
                  "whose top attention from a pronoun/mention is its antecedent). Ours: argmax "
                  "over the candidate mentions on the referent in > 90% of coref examples, with "
                  "at least 0.2 mean weight on the referent's mentions.",
    "entropy_norm": "Diffuse: no rule fired and normalised entropy ≥ 0.8 (1 = uniform over the "
                    "visible keys); 0.8: ours.",
}

# label -> (rule, description), in priority order: the first rule that fires is the label.
RULES: dict[str, tuple[Any, str]] = {
    "antecedent": (lambda s, t: s["antecedent_max"] > t["antecedent_max"]
                   and s["antecedent"] > t["antecedent"],
                   "from the pronoun, attends to the noun it refers to"),
    "induction": (lambda s, t: s["induction"] > t["induction"],
                  "attends to the token after an earlier copy of the current token"),
    "duplicate-token": (lambda s, t: s["duplicate_token"] > t["duplicate_token"],
                        "attends to earlier copies of the current token"),
    "previous-token": (lambda s, t: s["prev_token_top"] > t["prev_token_top"],
                       "attends mostly to the token just before"),
    "self": (lambda s, t: s["self_token"] > t["self_token"], "attends mostly to itself"),
    "sink": (lambda s, t: s["first_token"] > t["first_token"],
             "parks its attention on the first token ([BOS])"),
    "local": (lambda s, t: s["local"] > t["local"], "attends within a few positions"),
}
LABELS: dict[str, str] = {name: desc for name, (_, desc) in RULES.items()} | {
    "diffuse": "spreads its attention almost evenly",
    "mixed": "no single pattern explains it",
}


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
        pad_id = SPECIAL_TOKENS[pad_id]  # token strings (e.g. a snapshot's): "[PAD]"
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
    candidate's mentions. Examples with ``referent`` None (ambiguous) are skipped."""
    p = _as_patterns(patterns, template)
    L, b, H, _, nk = p.shape
    if len(metas) != b:
        raise ValueError(f"got {len(metas)} metas for a batch of {b}")
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
    if not rows:
        return {k: np.full((L, H), np.nan) for k in ANTECEDENT_SCORES}
    return {k: np.mean([r[n] for r in rows], axis=0) for n, k in enumerate(ANTECEDENT_SCORES)}


# ---------------------------------------------------------------------------- labels, tables
def label_head(scores: Mapping[str, float],
               thresholds: Mapping[str, float] | None = None) -> tuple[str, list[str]]:
    """(label, every rule that fired) for one head's scores. Rules are tried in ``RULES`` order
    (most specific first); none fired -> "diffuse" if entropy_norm ≥ its threshold, else "mixed".
    NaN scores never fire."""
    t = {**THRESHOLDS, **(thresholds or {})}
    s = {k: scores.get(k, math.nan) for k in SCORES}
    fired = [name for name, (rule, _) in RULES.items() if rule(s, t)]
    if fired:
        return fired[0], fired
    return ("diffuse" if s["entropy_norm"] >= t["entropy_norm"] else "mixed"), []


def scores_frame(scores: Mapping[str, np.ndarray],
                 thresholds: Mapping[str, float] | None = None) -> pd.DataFrame:
    """{score: [layer, head]} -> the table: one row per (layer, head), ``COLUMNS``, labelled.
    Missing scores are NaN."""
    shape = next(iter(scores.values())).shape
    layer, head = np.indices(shape)
    df = pd.DataFrame({"layer": layer.ravel(), "head": head.ravel()})
    for k in SCORES:
        df[k] = np.asarray(scores[k], dtype=np.float64).ravel() if k in scores else np.nan
    labelled = [label_head(row, thresholds) for row in df[list(SCORES)].to_dict("records")]
    df["label"] = [lab for lab, _ in labelled]
    df["labels"] = ["+".join(f) or lab for lab, f in labelled]
    return df


def head_scores(patterns, tokens=None, metas: Sequence[Mapping] | None = None, *,
                thresholds: Mapping[str, float] | None = None, query: str = "query_index",
                **mask) -> pd.DataFrame:
    """One row per (layer, head): every score in ``SCORES`` plus "label" / "labels".

    patterns / tokens / mask keywords (visible, causal, window, global_tokens, pad_id,
    padding_mask, local_k, template): as ``pattern_scores``. metas: the examples' ``meta``; when
    they carry coref "candidate_mentions" the antecedent scores are filled in (else NaN)."""
    scores = pattern_scores(patterns, tokens, **mask)
    if metas is not None and any("candidate_mentions" in m for m in metas):
        scores |= antecedent_scores(patterns, metas, query=query,
                                    template=mask.get("template", PATTERN))
    return scores_frame(scores, thresholds)


def scores_over_snapshots(snapshots: Sequence, steps: Sequence[int] | None = None, tokens=None,
                          meta: Mapping | None = None, *,
                          thresholds: Mapping[str, float] | None = None, query: str = "query_index",
                          template: str = PATTERN, **mask) -> pd.DataFrame:
    """Scores of every head at every training snapshot of one probe input, for plotting heads
    specialising: columns "step" then ``COLUMNS``.

    snapshots: arrays [layer, head, q_pos, k_pos] (all the same shape), or
               ``tfviz.train.AttentionSnapshot``s (their step, tokens and ``layers(template)``).
    steps:     one per snapshot (default: the snapshots' ``step``, else 0, 1, ...).
    tokens:    the probe's ids or token strings (default: the snapshots' ``tokens``).
    meta:      the probe example's meta; a coref meta adds the antecedent scores.
    """
    if not len(snapshots):
        raise ValueError("no snapshots")
    arrays = [np.asarray(s.layers(template) if hasattr(s, "layers") else s, dtype=np.float64)
              for s in snapshots]
    if steps is None:
        steps = [getattr(s, "step", n) for n, s in enumerate(snapshots)]
    if tokens is None:
        tokens = getattr(snapshots[0], "tokens", None)
    if len(steps) != len(arrays):
        raise ValueError(f"got {len(steps)} steps for {len(arrays)} snapshots")
    if len({a.shape for a in arrays}) > 1 or arrays[0].ndim != 4:
        raise ValueError("snapshots must all be [layer, head, q_pos, k_pos] of one shape")
    S, (L, H, Q, K) = len(arrays), arrays[0].shape
    flat = np.stack(arrays).reshape(S * L, 1, H, Q, K)  # snapshots x layers as "layers"
    scores = pattern_scores(flat, tokens, **mask)
    if meta is not None and "candidate_mentions" in meta:
        scores |= antecedent_scores(flat, [meta], query=query)
    df = scores_frame({k: v.reshape(S, L * H) for k, v in scores.items()}, thresholds)
    df.insert(0, "step", np.asarray(steps)[df.pop("layer").to_numpy()])
    df.insert(1, "layer", df["head"] // H)
    df["head"] = df["head"] % H
    return df


def pronoun_probe(pattern, query_index: int,
                  candidates: Mapping[str, Sequence[int]]) -> pd.DataFrame:
    """Which head sends the pronoun's attention where: pattern [layer, head, q_pos, k_pos] (or
    [layer, 1, head, q_pos, k_pos]); one row per (layer, head) with the weight from
    ``query_index`` on each candidate (summed over its positions, e.g. every mention of "law"),
    "elsewhere" (the rest) and "winner" (the candidate with the most weight).

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
    df["winner"] = df[names].idxmax(axis=1)
    return df


# ---------------------------------------------------------------------------- probes, models
def induction_probe(vocab: int | Sequence[int], half: int = 16, batch: int = 8, seed: int = 0,
                    bos_id: int = BOS_ID, distinct: bool | None = None) -> torch.Tensor:
    """[BOS] r1..rn r1..rn (n = ``half``) for ``batch`` random sequences -> LongTensor
    [batch, 1 + 2*half], for any decoder (Olsson et al. 2022's repeated random tokens).

    vocab: the token ids to draw from, or a vocabulary size (then ids N_SPECIAL..vocab-1, skipping
    the special tokens). distinct: no repeats within a half (default: when vocab allows)."""
    ids = list(range(N_SPECIAL, vocab)) if isinstance(vocab, int) else [int(v) for v in vocab]
    if len(ids) < 2 or half < 1:
        raise ValueError(f"need half >= 1 and at least 2 token ids to draw from, got {len(ids)}")
    distinct = len(ids) >= half if distinct is None else distinct
    if distinct and len(ids) < half:
        raise ValueError(f"cannot draw {half} distinct tokens from {len(ids)} ids")
    g = torch.Generator().manual_seed(seed)
    pool = torch.tensor(ids)
    if distinct:
        rows = torch.stack([torch.randperm(len(ids), generator=g)[:half] for _ in range(batch)])
    else:
        rows = torch.randint(len(ids), (batch, half), generator=g)
    r = pool[rows]
    return torch.cat([torch.full((batch, 1), bos_id), r, r], dim=1)


def score_model(model, task=None, *, half: int = 16, batch: int = 8, seed: int = 0,
                n_examples: int = 64, split: str = "validation", local_k: int = 3,
                bos_id: int = BOS_ID,
                thresholds: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Record a decoder or encoder model's patterns on probe inputs and score every head.

    - induction probe (``induction_probe``, decoders): induction and duplicate_token; all the
      other pattern scores too when no task is given;
    - the task's first ``n_examples`` examples of ``split`` (if a task is given): previous-token,
      first-token, self, local and entropy on the text the model was trained on, and for coref
      the antecedent scores.
    ``df.attrs["inputs"]`` says which input each score came from. Encoder-decoder models: score
    ``rec.stack_layers("decoder.blocks.{l}.attn.hook_pattern")`` with ``head_scores``."""
    cfg = model.config
    if cfg.arch == "encoder-decoder":
        raise ValueError("score_model scores single-stack models; for an encoder-decoder pass "
                         "rec.stack_layers('decoder.blocks.{l}.attn.hook_pattern') to head_scores")
    if task is not None and getattr(task, "arch", cfg.arch) != cfg.arch:
        raise ValueError(f"the task is laid out for {task.arch} models, the model is {cfg.arch}")
    names = [PATTERN.format(l=layer) for layer in range(cfg.n_layers)]
    device = next(model.parameters()).device
    mask = dict(causal=cfg.causal, window=cfg.window, global_tokens=cfg.global_tokens,
                pad_id=cfg.pad_id, local_k=local_k)
    scores: dict[str, np.ndarray] = {}
    inputs: dict[str, str] = {}

    if cfg.causal or task is None:
        n_vocab = cfg.vocab_size if task is None else min(cfg.vocab_size, task.tokenizer.vocab_size)
        half = max(1, min(half, (cfg.max_len - 1) // 2))
        probe = induction_probe(n_vocab, half, batch, seed, bos_id)
        rec = record(model, probe.to(device), names=names)
        scores |= pattern_scores(rec.stack_layers(PATTERN), probe, **mask)
        what = f"induction probe: {batch} x [BOS] + {half} random tokens, repeated"
        inputs |= dict.fromkeys(scores, what)
    if task is not None:
        examples = task.examples(split)[:n_examples]
        b = collate(examples, task.tokenizer.pad_id)
        if b.src is not None:
            raise ValueError(f"task {task.name!r} has a source sequence; score_model needs a "
                             "decoder- or encoder-only task")
        rec = record(model, b.tokens.to(device), names=names)
        p = rec.stack_layers(PATTERN)
        found = pattern_scores(p, b.tokens, **mask)
        keep = [k for k in PATTERN_SCORES
                if not (k in ("induction", "duplicate_token") and k in scores)]
        if any("candidate_mentions" in e.meta for e in examples):
            found |= antecedent_scores(p, [e.meta for e in examples])
            keep += list(ANTECEDENT_SCORES)
        scores |= {k: found[k] for k in keep}
        inputs |= dict.fromkeys(keep, f"{len(examples)} {task.name} {split} examples")
    df = scores_frame(scores, thresholds)
    df.attrs["inputs"] = inputs
    return df


__all__ = ["ANTECEDENT_SCORES", "COLUMNS", "LABELS", "PATTERN_SCORES", "RULES", "SCORES",
           "SOURCES", "THRESHOLDS", "antecedent_scores", "head_scores", "induction_probe",
           "label_head", "pattern_scores", "pronoun_probe", "score_model", "scores_frame",
           "scores_over_snapshots"]
