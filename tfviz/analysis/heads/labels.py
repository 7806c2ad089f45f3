"""Automatic head labels: a threshold and a rule per score, and the labelled table.

    df = head_scores(P, tokens)        # one row per (layer, head): every score, "label", "labels"

A head gets the first label whose rule fires (``RULES``, most specific first); the cut-offs are
``THRESHOLDS`` and where each comes from is ``SOURCES``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .scores import PATTERN, SCORES, antecedent_scores, pattern_scores

COLUMNS = ("layer", "head") + SCORES + ("label", "labels")
"""The columns of ``head_scores`` / ``score_model`` (``scores_over_snapshots`` adds "step" first).
Scores that could not be computed are NaN; "label" is one word, "labels" every rule that fired."""

THRESHOLDS: dict[str, float] = {
    "antecedent_max": 0.9,   # antecedent: argmax over the candidates on the referent in > 90% ...
    "antecedent": 0.2,       # ... and at least this mean weight on the referent's mentions
    "attribute": 0.5,        # attribute: more than half the pronoun's weight on the deciding word
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
                  "at least 0.2 mean weight on the referent's mentions. A pattern, not a cause: "
                  "whether the answer depends on the head is measured by switching it off "
                  "(Attention explorer → Effects; the Findings page measures it for the shipped "
                  "pronoun model).",
    "entropy_norm": "Diffuse: no rule fired and normalised entropy ≥ 0.8 (1 = uniform over the "
                    "visible keys); 0.8: ours.",
    "attribute": "Ours: a coreference model has to read the word that decides the referent (the "
                 "predicate or part after the pronoun: 'too laggy', 'its crust'); a head whose mean "
                 "weight from the final pronoun on that word, over the task's examples, is above "
                 "0.5 reads it. In 'its application should be just' that word is 'application'.",
}

# label -> (rule, description), in priority order: the first rule that fires is the label.
RULES: dict[str, tuple[Any, str]] = {
    "antecedent": (lambda s, t: s["antecedent_max"] > t["antecedent_max"]
                   and s["antecedent"] > t["antecedent"],
                   "from the pronoun, attends to the noun it refers to"),
    "attribute": (lambda s, t: s["attribute"] > t["attribute"],
                  "from the pronoun, reads the word that decides what it refers to (the predicate "
                  "or part after it)"),
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


def labels_markdown() -> str:
    """What each label means, then where each rule and cut-off comes from (a markdown list)."""
    return ("\n".join(f"- **{k}**: {v}" for k, v in LABELS.items()) + "\n\n"
            + "\n".join(f"- *{k}*: {v}" for k, v in SOURCES.items()))


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
