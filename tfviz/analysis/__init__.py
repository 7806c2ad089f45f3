"""Analysis of recorded activations: head scores and labels, positional geometry, cost."""
from .heads import (COLUMNS, LABELS, SCORES, SOURCES, THRESHOLDS, antecedent_scores, head_scores,
                    induction_probe, label_head, labels_markdown, pattern_scores, pronoun_probe,
                    score_model, scores_frame, scores_over_snapshots)
from .rope import rope_freqs, rope_score_by_offset, rope_score_grid

__all__ = ["COLUMNS", "LABELS", "SCORES", "SOURCES", "THRESHOLDS", "antecedent_scores",
           "head_scores", "induction_probe", "label_head", "labels_markdown", "pattern_scores",
           "pronoun_probe", "rope_freqs", "rope_score_by_offset", "rope_score_grid", "score_model",
           "scores_frame", "scores_over_snapshots"]
