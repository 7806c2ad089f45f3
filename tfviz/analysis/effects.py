"""Pattern vs effect: where a head looks, and what the task's own metric does without it.

    probe = coref_probe(examples)                # or induction_repeat_probe(ids), lm_probe(tokens)
    df = head_effects(model, probe)              # one row per head: pattern weight, metrics off
    sets = set_effects(model, probe, {"L1H1": parse_heads(model, "L1H1"), ...})

A ``Probe`` is what a task measures: its inputs, its metrics (the first is the headline: the
pronoun task's probability of the right referent, the induction task's loss on the repeat, a
language model's loss), and where the pattern *should* look if the head did the job the pattern
suggests (the referent's mentions from the pronoun; the token after the earlier occurrence). The
two columns side by side are the lesson "attention is not explanation", measured: a head can put
all its weight on the referent and change nothing when switched off.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ..model.hooks import layer_template
from ..recording import record
from ..tasks.base import collate
from ..tasks.induction import copy_positions
from .heads import BOS_ID, N_SPECIAL
from .heads.scores import antecedent_scores, pattern_scores
from .interventions import Metric, Progress, Site, effect, head, logit_diff, loss, pairwise, prob, top1

PATTERN = layer_template("attn.hook_pattern")


@dataclass
class Probe:
    """``inputs`` for the model; ``metrics`` name -> f(logits) (the first is the headline);
    ``higher`` whether more of the headline is better; ``pattern`` f(patterns [layer, batch, head,
    q, k] numpy) -> name -> [layer, head]: how much a head looks where a head doing the task's job
    would (the first is the headline; None: the task names no such place)."""
    kind: str
    inputs: tuple
    metrics: dict[str, Metric]
    higher: bool
    pattern: Callable[[np.ndarray], dict[str, np.ndarray]] | None = None
    forward_kwargs: dict = field(default_factory=dict)

    @property
    def headline(self) -> str:
        return next(iter(self.metrics))


def coref_probe(examples: Sequence, pad_id: int = 0) -> Probe:
    """The pronoun task on ``examples`` (coref ``Example``s, decoder layout): P(referent) at the
    final pronoun, whole-vocabulary accuracy (the referent is the argmax), pairwise accuracy (the
    referent's logit above the other noun's), their logit difference; the pattern's weight from
    the final pronoun on the referent's mentions."""
    batch = collate(list(examples), pad_id)
    q = torch.tensor([e.meta["query_index"] for e in examples])
    rows = torch.arange(len(examples))
    good = batch.targets[rows, q]
    bad = torch.tensor([batch.tokens[i, e.meta["candidate_indices"][1 - e.meta["referent"]]]
                        for i, e in enumerate(examples)])
    metas = [e.meta for e in examples]
    return Probe("coref", (batch.tokens,), {
        "P(referent)": prob(good, q), "whole-vocabulary accuracy": top1(good, q),
        "pairwise accuracy": pairwise(good, bad, q), "logit difference": logit_diff(good, bad, q)},
        higher=True, pattern=lambda p: _coref_pattern(antecedent_scores(p, metas)))


def _coref_pattern(scores: dict) -> dict[str, np.ndarray]:
    return {"weight on the referent": scores["antecedent"],
            "picks the referent over the other noun": scores["antecedent_max"]}


def repeat_sequences(ids: int | Sequence[int], half: int = 40, batch: int = 32, seed: int = 0,
                     bos_id: int = BOS_ID) -> torch.Tensor:
    """[batch, 1 + 2 * half]: [BOS] r r with r ``half`` distinct random tokens (ids: a list, or a
    vocabulary size: ids N_SPECIAL..size-1)."""
    pool = list(range(N_SPECIAL, ids)) if isinstance(ids, int) else list(ids)
    if len(pool) < half:
        raise ValueError(f"{half} distinct tokens needed, the vocabulary has {len(pool)}")
    g = torch.Generator().manual_seed(seed)
    r = torch.stack([torch.tensor(pool)[torch.randperm(len(pool), generator=g)[:half]] for _ in range(batch)])
    return torch.cat([torch.full((batch, 1), bos_id), r, r], dim=1)


def induction_repeat_probe(tokens: torch.Tensor) -> Probe:
    """Induction on ``tokens`` ([BOS] r r, ``repeat_sequences``, or any sequences with repeats):
    the loss and accuracy on the repeated tokens (``copy_positions``); the pattern's weight on the
    token after the earlier occurrence (the induction score)."""
    targets = torch.full_like(tokens, -100)
    for b, row in enumerate(tokens.tolist()):
        rep, _ = copy_positions(row)
        targets[b, rep] = tokens[b, [p + 1 for p in rep]]
    mask = targets != -100

    def acc(logits):
        return (logits.argmax(-1) == targets)[mask].float().mean()
    return Probe("induction", (tokens,), {"loss on the repeat": loss(targets), "accuracy on the repeat": acc},
                 higher=False,
                 pattern=lambda p: {"induction score": pattern_scores(p, tokens.numpy())["induction"],
                                    "previous-token score": pattern_scores(p, tokens.numpy())["prev_token"]})


def lm_probe(tokens: torch.Tensor, pad_id: int | None = None) -> Probe:
    """Any text: the next-token loss over every position (``pad_id`` targets skipped). No place
    where a head 'should' look: the pattern column is left out."""
    targets = torch.full_like(tokens, -100)
    targets[:, :-1] = tokens[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return Probe("lm", (tokens,), {"loss": loss(targets)}, higher=False)


def patterns(model, probe: Probe) -> np.ndarray:
    """Every layer's attention pattern on the probe -> [layer, batch, head, q_pos, k_pos]."""
    n = model.config.n_layers
    rec = record(model, *probe.inputs, names=[PATTERN.format(l=l) for l in range(n)], **probe.forward_kwargs)
    return rec.stack_layers(PATTERN).float().numpy()


def head_effects(model, probe: Probe, *, mode: str = "zero", reference=None,
                 progress: Progress | None = None) -> pd.DataFrame:
    """One row per head: layer, head, name, the pattern's scores (``probe.pattern``: one column
    each; none when the task names no place to look), then every metric with the head switched
    off and its change from the unchanged model ("<metric>" and "Δ <metric>"). ``mode``:
    ``interventions.MODES``. ``attrs``: baseline (per metric), pattern (its column names),
    headline, higher, mode."""
    cfg = model.config
    sites = [head(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    vals = effect(model, probe.inputs, [[]] + [[s] for s in sites], probe.metrics, mode=mode,
                  reference=reference, progress=progress, **probe.forward_kwargs)
    scores = probe.pattern(patterns(model, probe)) if probe.pattern else {}
    rows = []
    for i, s in enumerate(sites):
        l, h = divmod(i, cfg.n_heads)
        row = {"layer": l, "head": h, "name": str(s), **{k: float(v[l, h]) for k, v in scores.items()}}
        for j, name in enumerate(probe.metrics):
            row[name] = vals[1 + i, j]
            row[f"Δ {name}"] = vals[1 + i, j] - vals[0, j]
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(baseline=dict(zip(probe.metrics, vals[0])), pattern=list(scores),
                    headline=probe.headline, higher=probe.higher, mode=mode)
    return df


def set_effects(model, probe: Probe, sets: Mapping[str, Sequence[Site]], *, mode: str = "zero",
                reference=None) -> pd.DataFrame:
    """One row per named set of sites switched off together (``{}``-free: "none" is added first):
    "heads", then every metric."""
    names = ["none", *sets]
    vals = effect(model, probe.inputs, [[], *sets.values()], probe.metrics, mode=mode,
                  reference=reference, **probe.forward_kwargs)
    df = pd.DataFrame(vals, columns=list(probe.metrics))
    df.insert(0, "heads off", names)
    return df


def headline_grid(df: pd.DataFrame, column: str | None = None) -> np.ndarray:
    """``head_effects``' column (default: the headline's change) as [layer, head]."""
    column = column or f"Δ {df.attrs['headline']}"
    L, H = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
    return df[column].to_numpy(dtype=float).reshape(L, H)


__all__ = ["Probe", "coref_probe", "head_effects", "headline_grid", "induction_repeat_probe",
           "lm_probe", "patterns", "repeat_sequences", "set_effects"]
