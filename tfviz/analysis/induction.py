"""Does a model copy "the token after the earlier occurrence of the current token" wherever that
occurrence is? Measured on fresh inputs: per-position loss on the repeats, and the heads'
induction score, at lengths, segment lengths and repeat counts a model may never have seen.

    tokens = recurrence_probe(ids, length=127, segment=63, repeats=2, batch=64, seed=1)
    #   [batch, 1 + length]: [BOS] + random filler in which one random segment of ``segment``
    #   tokens occurs ``repeats`` times at random offsets (segment 63, repeats 2, length 126:
    #   [BOS] r r, the probe of Olsson et al. 2022)
    pos = position_losses(model, tokens)       # per position: loss, correct, repeat/new masks
    curve = position_curve(pos)                # mean loss / accuracy on the repeats per position
    row = probe_summary(pos, induction_score(model, tokens))   # repeat/new loss, best head
    df, positions = generalisation(model, ids, conditions)   # one row (and pos) per condition

Which positions are "repeats" comes from the tokens alone (``tfviz.tasks.induction
.copy_positions``): position p (predicting p+1) is a repeat when the token after every earlier
occurrence of tokens[p] is tokens[p+1], "new" when tokens[p+1] has not been seen before.
The model is causal, so the loss at position p of a long probe is also its loss on every shorter
sequence that ends at p: one curve over positions covers every length up to the probe's.
"""
from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from ..recording import record
from ..tasks.induction import copy_positions, segments_sequence
from .heads import BOS_ID, N_SPECIAL, PATTERN, pattern_scores

CONDITION = ("length", "segment", "repeats", "segments")


def recurrence_probe(vocab: int | Sequence[int], length: int, segment: int, repeats: int = 2,
                     batch: int = 32, seed: int = 0, segments: int = 1, bos_id: int = BOS_ID,
                     distinct: bool | None = None) -> torch.Tensor:
    """[batch, 1 + length] LongTensor: [BOS], then ``length`` random tokens in which ``segments``
    segments of ``segment`` tokens each occur ``repeats`` times at random offsets (the rest is
    filler). vocab: token ids to draw from, or a vocabulary size (ids N_SPECIAL..vocab-1).
    distinct: no token drawn twice, so every repeated token is a recurrence (default: when the
    vocabulary has enough ids)."""
    ids = list(range(N_SPECIAL, vocab)) if isinstance(vocab, int) else [int(v) for v in vocab]
    if distinct is None:
        distinct = len(ids) >= length - segment * (repeats - 1) * segments
    rng = random.Random(f"recurrence:{seed}")
    rows = [[bos_id] + segments_sequence(rng, ids, length, [(segment, repeats)] * segments,
                                         distinct)[0] for _ in range(batch)]
    return torch.tensor(rows, dtype=torch.long)


@torch.no_grad()
def position_losses(model, tokens: torch.Tensor, batch_size: int = 64) -> dict[str, np.ndarray]:
    """Next-token loss and correctness at every position of ``tokens`` [batch, pos] (position p
    predicts tokens[p+1]; the last position has no target), with the repeat / new masks:
    {"loss", "correct", "repeat", "new"}, each [batch, pos - 1]."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    losses, correct = [], []
    try:
        for start in range(0, tokens.shape[0], batch_size):
            t = tokens[start:start + batch_size].to(device)
            logits = model(t).float()[:, :-1]
            target = t[:, 1:]
            losses.append(torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), target, reduction="none").cpu())
            correct.append((logits.argmax(-1) == target).cpu())
    finally:
        model.train(was)
    n = tokens.shape[1] - 1
    repeat = np.zeros((tokens.shape[0], n), dtype=bool)
    new = np.zeros_like(repeat)
    for b, row in enumerate(tokens.tolist()):
        r, w = copy_positions(row)
        repeat[b, r], new[b, w] = True, True
    return {"loss": torch.cat(losses).numpy().astype(np.float64),
            "correct": torch.cat(correct).numpy(), "repeat": repeat, "new": new}


def position_curve(pos: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per position (predicting the next token): mean loss and accuracy over the sequences in
    which it is a repeat, and the mean loss where it is new. Columns: position, n_repeat,
    loss_repeat, accuracy_repeat, n_new, loss_new (NaN where no sequence has that kind)."""
    rows = []
    for p in range(pos["loss"].shape[1]):
        r, w = pos["repeat"][:, p], pos["new"][:, p]
        rows.append({"position": p, "n_repeat": int(r.sum()),
                     "loss_repeat": float(pos["loss"][r, p].mean()) if r.any() else math.nan,
                     "accuracy_repeat": float(pos["correct"][r, p].mean()) if r.any() else math.nan,
                     "n_new": int(w.sum()),
                     "loss_new": float(pos["loss"][w, p].mean()) if w.any() else math.nan})
    return pd.DataFrame(rows)


def pool_positions(positions: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Several ``position_losses`` results as one (sequences stacked; every array cut to the
    shortest width, so position p means the same query position in all of them)."""
    width = min(p["loss"].shape[1] for p in positions)
    return {k: np.concatenate([p[k][:, :width] for p in positions]) for k in positions[0]}


def induction_score(model, tokens: torch.Tensor) -> np.ndarray:
    """Induction score [layer, head] of every head on ``tokens`` (``pattern_scores``: mean weight
    from each repeated token on the token after its earlier occurrences)."""
    names = [PATTERN.format(l=l) for l in range(model.config.n_layers)]
    device = next(model.parameters()).device
    rec = record(model, tokens.to(device), names=names)
    return pattern_scores(rec.stack_layers(PATTERN), tokens, causal=model.config.causal,
                          window=model.config.window, global_tokens=model.config.global_tokens,
                          pad_id=None)["induction"]


def probe_summary(pos: dict[str, np.ndarray], scores: np.ndarray) -> dict:
    """From ``position_losses`` and ``induction_score`` of one probe: loss_repeat,
    accuracy_repeat, loss_new (means over the positions of each kind), n_repeat, and the best
    head's induction score (max_induction, best_head "L{l}H{h}")."""
    r, w = pos["repeat"], pos["new"]
    l, h = np.unravel_index(int(np.nanargmax(scores)), scores.shape)
    return {"loss_repeat": float(pos["loss"][r].mean()),
            "accuracy_repeat": float(pos["correct"][r].mean()),
            "loss_new": float(pos["loss"][w].mean()) if w.any() else math.nan,
            "n_repeat": int(r.sum()), "max_induction": float(scores[l, h]), "best_head": f"L{l}H{h}"}


def condition_probes(vocab: int | Sequence[int], conditions: Iterable[dict], batch: int = 32,
                     seed: int = 0) -> dict[str, torch.Tensor]:
    """name -> ``recurrence_probe`` for each condition (a dict of ``name``, ``length``,
    ``segment``, ``repeats`` and optionally ``segments``), the i-th seeded by seed * 1000 + i."""
    return {c["name"]: recurrence_probe(vocab, c["length"], c["segment"], c["repeats"], batch,
                                        seed=seed * 1000 + i, segments=c.get("segments", 1))
            for i, c in enumerate(conditions)}


def generalisation(model, vocab: int | Sequence[int], conditions: Sequence[dict],
                   batch: int = 32, seed: int = 0) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Each condition on fresh sequences (``condition_probes``): a table with one row per
    condition (name, length, segment, repeats, segments, then ``probe_summary``) and
    name -> ``position_losses``."""
    rows, positions = [], {}
    probes = condition_probes(vocab, conditions, batch, seed)
    for c in conditions:
        tokens = probes[c["name"]]
        positions[c["name"]] = pos = position_losses(model, tokens)
        rows.append({"name": c["name"], **{k: c.get(k, 1) for k in CONDITION},
                     **probe_summary(pos, induction_score(model, tokens))})
    return pd.DataFrame(rows), positions


# ------------------------------------------------------------------------------ repeats inside r
def replacement_sequences(vocab: int | Sequence[int], half: int = 40, batch: int = 32,
                          seed: int = 0, bos_id: int = BOS_ID) -> torch.Tensor:
    """[batch, 1 + 2 * half]: [BOS] r r with r ``half`` tokens drawn *with replacement* (so r
    repeats tokens inside itself, as text does); vocab: ids to draw from, or a vocabulary size
    (ids N_SPECIAL..vocab-1). Seeded: the same seed gives the same sequences."""
    ids = list(range(N_SPECIAL, vocab)) if isinstance(vocab, int) else [int(v) for v in vocab]
    if len(ids) < 2:
        raise ValueError("need at least two token ids to draw from")
    g = torch.Generator().manual_seed(seed)
    r = torch.tensor(ids)[torch.randint(len(ids), (batch, half), generator=g)]
    return torch.cat([torch.full((batch, 1), bos_id), r, r], dim=1)


def repeat_floor(tokens: torch.Tensor, half: int) -> np.ndarray:
    """The loss of a perfect copier on the repeat of [BOS] r r (``tokens`` [batch, 1 + 2 *
    half]), position by position: at second-half position p (predicting tokens[p+1], p = half+1
    .. 2 half - 1) it bets on each token that followed tokens[p] in the first half, in proportion
    to how often it did (the first half's bigram counts of this sequence), so its loss there is
    -log(count(tokens[p] -> tokens[p+1]) / count(tokens[p] -> anything)): 0 where r's token is
    followed by one token only, log 2 where by two equally often, ... -> float64 [batch, half - 1].
    No copier that only knows which tokens followed which can do better; one that also knows the
    position of the repeat can (a fixed look-back of ``half``)."""
    t = tokens.tolist()
    out = np.zeros((len(t), half - 1))
    for b, row in enumerate(t):
        if len(row) != 1 + 2 * half or row[1:1 + half] != row[1 + half:]:
            raise ValueError(f"sequence {b} is not [BOS] r r with |r| = {half}")
        first = row[1:1 + half]
        pair, total = Counter(zip(first, first[1:])), Counter(first[:-1])
        for k, p in enumerate(range(half + 1, 2 * half)):
            out[b, k] = -math.log(pair[row[p], row[p + 1]] / total[row[p]])
    return out


@torch.no_grad()
def repeat_vs_floor(model, tokens: torch.Tensor, half: int) -> dict:
    """The model's loss on the repeat of [BOS] r r (``replacement_sequences``) beside
    ``repeat_floor``: {"loss", "floor"} [batch, half - 1] per position, and the means "mean_loss",
    "mean_floor" over every repeat position, "ambiguous_loss", "ambiguous_floor" over those where
    the first half gave the token more than one continuation (floor > 0; NaN where none), and
    "n_ambiguous", "chance" (log of the vocabulary size)."""
    pos = position_losses(model, tokens)
    loss = pos["loss"][:, half + 1:2 * half]
    floor = repeat_floor(tokens, half)
    amb = floor > 0
    return {"loss": loss, "floor": floor, "mean_loss": float(loss.mean()),
            "mean_floor": float(floor.mean()), "n_ambiguous": int(amb.sum()),
            "ambiguous_loss": float(loss[amb].mean()) if amb.any() else math.nan,
            "ambiguous_floor": float(floor[amb].mean()) if amb.any() else math.nan,
            "half": half, "batch": int(tokens.shape[0])}


def floor_halves(max_len: int) -> list[int]:
    """The |r| of the floor table for a model of ``max_len`` positions: a quarter, a half,
    three quarters of the longest [BOS] r r it can read, and that longest."""
    top = (max_len - 1) // 2
    return sorted({max(2, top // 4), max(2, top // 2), max(2, 3 * top // 4), top})


def floor_table(model, vocab: int | Sequence[int], halves: Sequence[int], batch: int = 32,
                seed: int = 0) -> pd.DataFrame:
    """``repeat_vs_floor`` on fresh [BOS] r r (``replacement_sequences``, the i-th |r| seeded by
    seed * 1000 + i) for each |r| in ``halves``: half, loss, floor, ambiguous_loss,
    ambiguous_floor, n_ambiguous, n (repeat positions)."""
    rows = []
    for i, half in enumerate(halves):
        r = repeat_vs_floor(model, replacement_sequences(vocab, half, batch, seed * 1000 + i), half)
        rows.append({"half": half, "loss": r["mean_loss"], "floor": r["mean_floor"],
                     "ambiguous_loss": r["ambiguous_loss"], "ambiguous_floor": r["ambiguous_floor"],
                     "n_ambiguous": r["n_ambiguous"], "n": r["loss"].size})
    return pd.DataFrame(rows)


__all__ = ["CONDITION", "floor_halves", "floor_table", "condition_probes", "generalisation", "induction_score", "pool_positions",
           "position_curve", "position_losses", "probe_summary", "recurrence_probe", "repeat_floor",
           "repeat_vs_floor", "replacement_sequences"]
