"""Head scores and automatic labels, computed from attention patterns and tokens.

    P = rec.stack_layers("blocks.{l}.attn.hook_pattern")   # [layer, batch, head, q_pos, k_pos]
    df = head_scores(P, tokens)                            # one row per (layer, head), + "label"
    df = score_model(model, task)                          # records suitable probes, same table

    scores.py   the scores (formulas in its docstring): pattern_scores, antecedent_scores,
                pronoun_probe
    labels.py   thresholds, rules and sources; label_head, scores_frame, head_scores,
                scores_over_snapshots
    probes.py   induction_probe and score_model (the only part that runs a model)
"""
from .labels import (COLUMNS, LABELS, RULES, SOURCES, THRESHOLDS, head_scores, label_head,
                     labels_markdown, scores_frame, scores_over_snapshots)
from .probes import BOS_ID, N_SPECIAL, induction_probe, score_model
from .scores import (ANTECEDENT_SCORES, ELSEWHERE, PATTERN, PATTERN_SCORES, SCORES,
                     antecedent_scores, pattern_scores, pronoun_probe)

__all__ = ["ANTECEDENT_SCORES", "BOS_ID", "COLUMNS", "ELSEWHERE", "LABELS", "N_SPECIAL", "PATTERN",
           "PATTERN_SCORES", "RULES", "SCORES", "SOURCES", "THRESHOLDS", "antecedent_scores",
           "head_scores", "induction_probe", "label_head", "labels_markdown", "pattern_scores",
           "pronoun_probe", "score_model", "scores_frame", "scores_over_snapshots"]
