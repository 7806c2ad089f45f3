"""The bottleneck, measured: an encoder-decoder without attention must squeeze the whole source into
its final state; with attention the decoder reads every source state again at each step.

    accuracy_by_length(model, task, lengths)     exact-match and token accuracy on fresh sources
                                                 of each length (copy / reverse / sort)
    cross_attention(model, src, tgt)             every cross-attention pattern of one example,
                                                 [head, q_pos, k_pos] per name, any family
    alignment_share(pattern, pairs)              share of target positions whose strongest source
                                                 position is the aligned one
    reverse_alignment(src_len)                   the (decoder position, source position) pairs of
                                                 the reverse task

Accuracy is teacher-forced, as the tasks' ``evaluate``: the decoder reads the true previous
tokens, and an example counts as right when every target token (and the final [EOS]) is the
model's top prediction.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ..model.families import lacks
from ..recording import record
from ..tasks import make_task
from ..tasks.common import ExampleSet, token_evaluate


def fresh_at_length(task, length: int, n: int, seed: int):
    """The task's generator (copy / reverse / sort, either arch) with every source ``length``
    symbols long, drawn with ``seed``, minus any source the training split holds -> an
    ``ExampleSet`` of those fresh examples (at most ``n``; fewer where the length allows fewer
    distinct sources, none where training saw them all)."""
    n_sym = int(task.params["n_symbols"])
    possible = n_sym ** length
    seen = {ex.meta["source"] for ex in task.examples("train")}  # "3 0 2": the source's symbols
    seen_here = sum(len(s.split()) == length for s in seen)
    want = min(n, max(possible - seen_here, 0))
    if possible < 3 or not want:
        return ExampleSet(task.tokenizer, [], f"{task.name} (length {length})")
    # every source of this length not trained on, drawn in all three splits of a task whose
    # train and validation splits hold one source each (the smallest a task has)
    spec = {**task.spec(), "seed": seed, "min_len": length, "max_len": length,
            "n_train": 1, "n_val": 1, "n_test": min(possible - 2, want + seen_here)}
    built = make_task(spec)
    keep = [ex for split in ("test", "validation", "train") for ex in built.examples(split)
            if ex.meta["source"] not in seen][:n]
    return ExampleSet(task.tokenizer, keep, f"{task.name} (length {length})")


def accuracy_by_length(model, task, lengths: Sequence[int], n: int = 256, seed: int = 3000
                       ) -> pd.DataFrame:
    """Per source length: exact-match accuracy (every target token and [EOS] right, teacher-
    forced), token accuracy and loss on up to ``n`` fresh sources never in the training split.
    Columns: length, accuracy, token_accuracy, loss, n, trained (within the task's lengths)."""
    lo, hi = int(task.params["min_len"]), int(task.params["max_len"])
    rows = []
    for L in lengths:
        fresh = fresh_at_length(task, int(L), n, seed + int(L))
        count = len(fresh.examples("test"))
        if not count:
            continue
        exact = fresh.evaluate(model, "test", max_examples=count)["accuracy"]
        tok = token_evaluate(fresh, model, "test", count, 64)
        rows.append({"length": int(L), "accuracy": float(exact), "token_accuracy": tok["accuracy"],
                     "loss": tok["loss"], "n": count, "trained": lo <= L <= hi})
    return pd.DataFrame(rows)


def cross_attention(model, src: Sequence[int], tgt: Sequence[int]) -> dict[str, np.ndarray]:
    """One example's cross-attention: hook name -> [head, q_pos, k_pos] (a transformer: each
    decoder layer's ``decoder.blocks.{l}.cross_attn.hook_pattern``; a recurrent model with additive
    attention: ``decoder.cross_attn.hook_pattern``, one head). ValueError, with the reason, for a
    model that has none (``lacks(model, "cross_attention")``)."""
    why = lacks(model, "cross_attention")
    if why:
        raise ValueError(why)
    names = [n for n in model.hook_points() if n.endswith("cross_attn.hook_pattern")]
    device = next(model.parameters()).device
    rec = record(model, torch.tensor([list(src)], device=device),
                 torch.tensor([list(tgt)], device=device), names=names)
    return {name: rec[name][0].float().numpy() for name in names}


def reverse_alignment(src_len: int, reads: str = "output") -> list[tuple[int, int]]:
    """(decoder position i, source position) pairs of the reverse task. ``reads="output"``: the
    source token position i must produce (target token i = source token src_len - 1 - i; the
    final position, predicting [EOS], has none). ``reads="input"``: the source token position i
    reads as its input (decoder token i is target token i - 1 = source token src_len - i; position
    0 reads [BOS], which has none)."""
    if reads == "output":
        return [(i, src_len - 1 - i) for i in range(src_len)]
    if reads == "input":
        return [(i, src_len - i) for i in range(1, src_len + 1)]
    raise ValueError(f"reads must be 'output' or 'input', not {reads!r}")


def alignment_share(pattern, pairs: Sequence[tuple[int, int]]) -> float:
    """Share of (query, key) pairs whose query's largest weight in ``pattern`` [q_pos, k_pos] is
    on that key."""
    p = np.asarray(pattern)
    return float(np.mean([int(p[q].argmax()) == k for q, k in pairs])) if len(pairs) else float("nan")
