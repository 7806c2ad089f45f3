"""Plotly figure builders: pure functions, arrays and labels in, ``go.Figure`` (or HTML) out.

They never import torch or streamlit and never see a model: callers pass the recorded tensors
(as numpy arrays) and token strings, exactly like bertviz's views. One module per kind of figure
(what it shows), every public builder exported here: import them as ``from tfviz.viz import …``.

    attention      one head, all heads tiled, cross-attention alignment, pronoun probe
    lines          bertviz-style lines between query and key tokens
    step_through   softmax(q·k/√d + bias, mask)·V for one query, on the recorded numbers
    generation     each new token's attention while generating; generated text; KV cache growth
    masks          mask grids; the "no peeking" logit-change bars
    positional     positional tables, waves, similarity, extrapolation curves
    rope, bias     RoPE rotation and frequencies; ALiBi / T5 score biases
    tokens         token spans, embedding similarity and nearest neighbours
    embeddings     word vectors: 2-D projection, one-hot vs learned cosines, analogy bars
    order          bag of words, residual-stream changes when words are rearranged
    training       loss curves (one run, or several on the same axes), per-layer gradient norms,
                   the replay of heads learning
    compare        models side by side: loss / accuracy per position, head-role differences
    scores         per-head scores and paired measured numbers as bars
    induction      loss / accuracy on repeated tokens, position by position (2 layers vs 1)
    phase          the induction phase change over training: loss[token index x step], the
                   in-context-learning score and every head's scores on one time axis
    sinks          attention sinks: each head's share on the first tokens; loss per position
                   under dense / window / window + first tokens / recomputation (StreamingLLM)
    effects        does a head matter: switching heads off, pattern vs effect, patching per
                   position, logit lens, direct logit attribution, QK / OV circuits
    circuits       effects with their intervals, attribution vs real patching, path patching and
                   composition over the heads, singular values, what one head writes per position
    layers         attention across layers: raw per layer, rollout, flow (Abnar & Zuidema)
    cost           measured vs analytic time / memory, KV cache, generation speed
    theme, tiles, data   the one shared look, tiled heatmaps, figure -> DataFrame (CSV download)
    export         figures -> one self-contained HTML file (plotly.js inlined: offline, interactive)
"""
from .attention import (cross_attention_alignment, head_heatmap, heads_grid, pattern_frame,
                        pronoun_probe, pronoun_probe_frame)
from .bias import alibi_bias, t5_bias, t5_buckets
from .compare import head_role_grid, position_curves
from .cost import (analytic_figure, compact, cost_figure, kv_cache_figure, memory_figure,
                   speed_figure, time_figure)
from .data import cosine_similarity, figure_data
from .circuits import effect_intervals, estimate_vs_real, head_value_heatmap, head_writes, singular_values
from .effects import (attribution_bars, circuit_heatmap, effect_heatmap, logit_lens_heatmap, pattern_and_effect,
                      pattern_vs_effect, position_effect_heatmap)
from .export import Slide, figure_html, figure_title, slides_html
from .embeddings import analogy_bars, embedding_map, one_hot_vs_learned
from .generation import (generated_tokens_html, generation_attention, generation_frame,
                         kv_cache_growth, next_token_bars)
from .induction import repeat_by_position, repeat_floor_curves
from .layers import across_layers_grid, inputs_bar
from .lines import line_view
from .masks import logit_change_bars, mask_frame, mask_grid, masks_side_by_side
from .order import bag_of_words_bars, order_bars, order_positions
from .phase import phase_heatmaps, phase_timeline
from .positional import (default_dims, extrapolation_curves, pe_matrix, pe_waves,
                         position_similarity, similarity_by_distance, similarity_vs_distance)
from .rope import rope_frequencies, rope_pair_scores, rope_relative_scores, rope_rotation_animation
from .scores import head_score_bars, paired_bars
from .sinks import sink_share_heatmap, streaming_curves
from .step_through import step_through_figure, step_through_output, step_through_table
from .theme import ATTENTION_SCALE, DIVERGING_SCALE, HEAD_COLOURS, MAGNITUDE_SCALE, TEMPLATE, apply_theme
from .tokens import nearest_neighbours_frame, similarity_heatmap, token_pieces, token_spans_html
from .training import (compare_curves, grad_norm_heatmap, layer_grad_norm_bars, loss_curves,
                       snapshot_player)

__all__ = [
    "ATTENTION_SCALE", "DIVERGING_SCALE", "HEAD_COLOURS", "MAGNITUDE_SCALE", "Slide", "TEMPLATE",
    "figure_html", "figure_title", "slides_html",
    "across_layers_grid", "alibi_bias", "analogy_bars", "analytic_figure", "bag_of_words_bars",
    "apply_theme", "attribution_bars", "circuit_heatmap", "compact", "compare_curves", "cost_figure", "cosine_similarity",
    "cross_attention_alignment", "default_dims", "effect_heatmap", "effect_intervals", "embedding_map",
    "estimate_vs_real", "head_value_heatmap", "head_writes", "singular_values",
    "extrapolation_curves", "figure_data", "generated_tokens_html", "generation_attention",
    "generation_frame", "grad_norm_heatmap", "head_heatmap", "head_role_grid", "head_score_bars",
    "heads_grid", "inputs_bar", "kv_cache_figure",
    "kv_cache_growth", "next_token_bars", "layer_grad_norm_bars", "line_view", "logit_change_bars", "logit_lens_heatmap", "pattern_and_effect",
    "loss_curves",
    "mask_frame", "mask_grid",
    "masks_side_by_side", "memory_figure", "nearest_neighbours_frame", "one_hot_vs_learned",
    "order_bars", "order_positions", "paired_bars", "pattern_frame", "pattern_vs_effect",
    "pe_matrix", "pe_waves", "phase_heatmaps", "phase_timeline", "position_curves",
    "position_effect_heatmap", "position_similarity",
    "pronoun_probe",
    "pronoun_probe_frame",
    "repeat_by_position", "repeat_floor_curves",
    "rope_frequencies", "rope_pair_scores", "rope_relative_scores", "rope_rotation_animation",
    "similarity_by_distance", "similarity_heatmap", "similarity_vs_distance", "sink_share_heatmap",
    "snapshot_player",
    "speed_figure", "step_through_figure", "step_through_output", "step_through_table", "t5_bias",
    "streaming_curves", "t5_buckets", "time_figure", "token_pieces", "token_spans_html",
]
