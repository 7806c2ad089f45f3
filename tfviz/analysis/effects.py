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
from ..tasks.induction import copy_positions
from .heads import BOS_ID, N_SPECIAL
from .heads.scores import antecedent_scores, pattern_scores
from .interventions import (MAX_ROWS, Metric, Progress, Site, _effect, effect, head, logit_diff, loss, pairwise,
                            per_row, prob, sweep, top1)
from .spread import spread_columns

PATTERN = layer_template("attn.hook_pattern")
PRONOUN_TASKS = ("coref", "agreement")  # tasks whose examples name two candidate nouns and a referent


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
    """The pronoun task on ``examples`` (coref ``Example``s, decoder layout, or anything with
    ``tokens`` and a coref ``meta``): P(referent) at the final pronoun, whole-vocabulary accuracy
    (the referent is the argmax), pairwise accuracy (the referent's logit above the other noun's),
    their logit difference; the pattern's weight from the final pronoun on the referent's
    mentions, and how often it picks them over the other noun's."""
    rows = [list(e.tokens) for e in examples]
    metas = [dict(e.meta) for e in examples]
    if any(m.get("referent") is None or "query_index" not in m for m in metas):
        raise ValueError("every sentence needs a known referent (a task example, not typed text)")
    n = max(map(len, rows))
    tokens = torch.tensor([r + [pad_id] * (n - len(r)) for r in rows])
    q = torch.tensor([m["query_index"] for m in metas])
    idx = torch.arange(len(rows))
    good, bad = candidate_answers(tokens, metas)
    return Probe("coref", (tokens,), {
        "P(referent)": prob(good, q), "whole-vocabulary accuracy": top1(good, q),
        "pairwise accuracy": pairwise(good, bad, q), "logit difference": logit_diff(good, bad, q)},
        higher=True, pattern=lambda p: _coref_pattern(antecedent_scores(p, metas)))


def candidate_answers(tokens: torch.Tensor, metas: Sequence[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """The token each sentence should be answered with and the other candidate's, [batch] each:
    ``meta["answer_ids"]`` where the task names them (the agreement task answers a noun's singular
    form), else the candidate nouns' own tokens in the sentence (coref)."""
    idx = torch.arange(len(metas))

    def pick(which):
        if all("answer_ids" in m for m in metas):
            return torch.tensor([m["answer_ids"][which(m)] for m in metas])
        return tokens[idx, torch.tensor([m["candidate_indices"][which(m)] for m in metas])]
    return pick(lambda m: m["referent"]), pick(lambda m: 1 - m["referent"])


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

    def acc_rows(logits):  # [batch]: each row's share of its repeated tokens predicted
        hit = ((logits.argmax(-1) == targets) & mask).float().sum(1)
        return hit / mask.sum(1).clamp(min=1)

    def acc_all(logits):
        return (logits.argmax(-1) == targets)[mask].float().mean()
    acc = per_row(acc_rows)
    acc._reduce = acc_all  # every repeated token alike (the rows' mean when rows repeat as many)

    def pattern(p):  # both scores from one pass over the patterns
        scores = pattern_scores(p, tokens.numpy())
        return {"induction score": scores["induction"], "previous-token score": scores["prev_token"]}
    return Probe("induction", (tokens,), {"loss on the repeat": loss(targets), "accuracy on the repeat": acc},
                 higher=False, pattern=pattern)


def lm_probe(tokens: torch.Tensor, pad_id: int | None = None) -> Probe:
    """Any text: the next-token loss over every position (``pad_id`` targets skipped). No place
    where a head 'should' look: the pattern column is left out."""
    targets = torch.full_like(tokens, -100)
    targets[:, :-1] = tokens[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return Probe("lm", (tokens,), {"loss": loss(targets)}, higher=False)


def answer_probe(model, inputs, positions: Sequence[int]) -> Probe:
    """Any model and input: the log-probability of the model's own answer (its unchanged argmax)
    at ``positions``, e.g. an encoder's [MASK]s or a decoder's last position."""
    inputs = tuple(inputs)
    with torch.no_grad():
        was = model.training
        model.eval()
        try:
            logits = model(*inputs)
        finally:
            model.train(was)
    pos = torch.tensor(list(positions))
    answer = logits[:, pos].argmax(-1)  # [batch, n]

    def logp(lg):  # [batch]: the mean over the chosen positions
        return lg[:, pos].float().log_softmax(-1).gather(-1, answer[..., None])[..., 0].mean(-1)
    return Probe("answer", inputs, {"log P(the model's answer)": per_row(logp)}, higher=True)


def input_probe(model, task_name: str | None, ids: Sequence[int], meta: dict | None = None,
                src: Sequence[int] | None = None, mask_id: int | None = None) -> Probe:
    """The probe for one input on the pages: a coref example (its referent known) -> the pronoun
    task's metrics; an induction model -> the loss on the input's repeats (when it has any); an
    encoder -> its own answers at the [MASK]s (else everywhere); a coref sentence typed in -> its
    answer at the last position; anything else (language models, imported ones) -> the
    next-token loss (an encoder-decoder's on the target)."""
    t = torch.tensor([list(ids)])
    inputs = (t,) if src is None else (torch.tensor([list(src)]), t)
    meta = meta or {}
    if task_name in PRONOUN_TASKS and meta.get("referent") is not None and src is None:
        return coref_probe([_Row(list(ids), meta)])
    if task_name == "induction" and src is None and copy_positions(list(ids))[0]:
        return induction_repeat_probe(t)
    if model.config.arch == "encoder":
        masks = [i for i, x in enumerate(ids) if x == mask_id]
        return answer_probe(model, inputs, masks or range(len(ids)))
    if task_name in PRONOUN_TASKS:
        return answer_probe(model, inputs, [len(ids) - 1])
    probe = lm_probe(t)
    return Probe("lm", inputs, probe.metrics, higher=False)


@dataclass
class _Row:
    tokens: list
    meta: dict


def patterns(model, probe: Probe) -> np.ndarray:
    """Every layer's attention pattern on the probe -> [layer, batch, head, q_pos, k_pos]."""
    n = model.config.n_layers
    rec = record(model, *probe.inputs, names=[PATTERN.format(l=l) for l in range(n)], **probe.forward_kwargs)
    return rec.stack_layers(PATTERN).float().numpy()


def head_effects(model, probe: Probe, *, mode: str = "zero", reference=None, stack: str = "",
                 attention: str = "attn", progress: Progress | None = None, spread: bool = False
                 ) -> pd.DataFrame:
    """One row per head: layer, head, name, the pattern's scores (``probe.pattern``: one column
    each; none when the task names no place to look), then every metric with the head switched
    off and its change from the unchanged model ("<metric>" and "Δ <metric>"). ``mode``:
    ``interventions.MODES``; ``stack`` / ``attention``: an encoder-decoder's "encoder" /
    "decoder" and "attn" / "cross_attn". ``attrs``: baseline (per metric), pattern (its column
    names), headline, higher, mode.

    ``spread``: every change also with its spread over the probe's examples (paired, per example:
    ``tfviz.analysis.spread``): columns "Δ <metric> se", "Δ <metric> lo", "Δ <metric> hi" (the 95%
    percentile bootstrap interval) and "Δ <metric> clear" (the interval excludes no change); attrs
    ``n`` (examples) and ``spread`` (the unchanged run's mean, se, lo, hi per metric)."""
    cfg = model.config
    sites = [head(l, h, stack, attention) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    vals, rows = _effect(model, probe.inputs, [[]] + [[s] for s in sites], probe.metrics, mode, reference,
                         progress, MAX_ROWS, spread, probe.forward_kwargs)
    scores = probe.pattern(patterns(model, probe)) if probe.pattern and not stack else {}
    table = []
    for i, s in enumerate(sites):
        l, h = divmod(i, cfg.n_heads)
        row = {"layer": l, "head": h, "name": f"L{l}H{h}", **{k: float(v[l, h]) for k, v in scores.items()}}
        for j, name in enumerate(probe.metrics):
            row[name] = vals[1 + i, j]
            row[f"Δ {name}"] = vals[1 + i, j] - vals[0, j]
        table.append(row)
    df = pd.DataFrame(table)
    df.attrs.update(baseline=dict(zip(probe.metrics, vals[0])), pattern=list(scores),
                    headline=probe.headline, higher=probe.higher, mode=mode)
    if spread:
        cols = spread_columns(rows[1:], rows[0], list(probe.metrics))
        df.attrs.update(n=int(rows.shape[-1]), spread=cols.pop("base"))
        for c, v in cols.items():
            df[c] = v
    return df


def set_effects(model, probe: Probe, sets: Mapping[str, Sequence[Site]], *, mode: str = "zero",
                reference=None, spread: bool = False) -> pd.DataFrame:
    """One row per named set of sites switched off together (``{}``-free: "none" is added first):
    "heads", then every metric. ``spread``: the change's interval too, per metric ("Δ <metric>
    lo" / "hi" / "se" / "clear", as ``head_effects``; attrs ``n``)."""
    names = ["none", *sets]
    vals, rows = _effect(model, probe.inputs, [[], *sets.values()], probe.metrics, mode, reference, None,
                         MAX_ROWS, spread, probe.forward_kwargs)
    df = pd.DataFrame(vals, columns=list(probe.metrics))
    df.insert(0, "heads off", names)
    if spread:
        cols = spread_columns(rows, rows[0], list(probe.metrics))
        df.attrs.update(n=int(rows.shape[-1]), spread=cols.pop("base"))
        for c, v in cols.items():
            df[c] = v
    return df


def patching(model, clean: Sequence[int], corrupt: Sequence[int], pos: int = -1,
             progress: Progress | None = None, good: int | None = None,
             bad: int | None = None) -> dict:
    """Activation patching between two inputs of one length that differ in a word or two (a
    one-stack model): the metric is logit[a] - logit[b] at ``pos``, a = ``good`` (default: the
    clean run's answer), b = ``bad`` (default: the corrupted run's answer, its second choice when
    both agree; a pronoun sentence's page passes the other candidate noun). Every layer's residual stream
    at every position, and every head's output, taken from the clean run into the corrupted one
    (how much of the clean answer each restores) -> {"resid" [layer, pos], "heads" [layer,
    head], "clean", "corrupt" (the metric on each), "good", "bad" (token ids), "pos"}."""
    if model.config.arch == "encoder-decoder":
        raise ValueError("patching here takes one-stack models (decoder or encoder)")
    if len(clean) != len(corrupt):
        raise ValueError(f"the two inputs must have the same number of tokens ({len(clean)} vs "
                         f"{len(corrupt)}): replace a word by one that is a single token")
    a, b = torch.tensor([list(clean)]), torch.tensor([list(corrupt)])
    with torch.no_grad():
        was = model.training
        model.eval()
        try:
            la, lb = model(a)[0, pos], model(b)[0, pos]
        finally:
            model.train(was)
    good = int(la.argmax()) if good is None else int(good)
    if bad is None:
        ranked = lb.argsort(descending=True).tolist()
        bad = ranked[0] if ranked[0] != good else ranked[1]
    bad = int(bad)
    if good == bad:
        raise ValueError("the answer and its contrast are the same token: pick another contrast")
    vocab = la.shape[-1]
    if not (0 <= good < vocab and 0 <= bad < vocab):
        raise ValueError(f"token ids must lie in 0..{vocab - 1}")
    metric = logit_diff(good, bad, pos)
    n = model.config.n_layers
    steps = [0]

    def tick(frac, msg):  # two sweeps: report them as one bar
        if progress is not None:
            progress(min(1.0, (steps[0] + frac) / 2), msg)
    resid = sweep(model, b, "resid_pre", metric, mode="patch", reference=a, progress=tick)
    steps[0] = 1
    heads = sweep(model, b, "head", metric, mode="patch", reference=a, progress=tick)
    return {"resid": resid.values, "heads": heads.values, "corrupt": resid.baseline,
            "clean": float(metric(_logits(model, a))), "good": good, "bad": bad, "pos": pos,
            "layers": n}


def _logits(model, x):
    with torch.no_grad():
        return model(x)


def head_sentence(df: pd.DataFrame, layer: int, head: int, metric: str | None = None) -> str:
    """What switching head (``layer``, ``head``) off did, in words, from ``head_effects``' table:
    ``metric`` (default: the headline; the page passes the one its reader chose) before and after,
    the pattern's scores, and the head whose removal changes that metric most (the one that
    matters, whatever its pattern)."""
    name, m = f"L{layer}H{head}", metric or df.attrs["headline"]
    if m not in df.attrs["baseline"]:
        raise ValueError(f"{m!r} is not one of the table's metrics: {', '.join(df.attrs['baseline'])}")
    base = df.attrs["baseline"][m]
    row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
    out = [f"Switching **{name}** off ({df.attrs['mode']}) changes {m} from {base:.5g} to "
           f"{row[m]:.5g} ({row[f'Δ {m}']:+.3g})."]
    if df.attrs.get("pattern"):
        out.append("Its pattern: " + ", ".join(f"{c} {row[c]:.2f}" for c in df.attrs["pattern"]) + ".")
    worst = df.loc[(df[f"Δ {m}"] * (1 if higher_is_better(df, m) else -1)).idxmin()]
    if worst["name"] != name:
        out.append(f"The head whose removal hurts most is **{worst['name']}** ({worst[f'Δ {m}']:+.3g})"
                   + (f", with {df.attrs['pattern'][0]} {worst[df.attrs['pattern'][0]]:.2f}."
                      if df.attrs.get("pattern") else "."))
    else:
        out.append("No other head's removal hurts more.")
    return " ".join(out)


def answer_position(ids: Sequence[int], meta: dict | None = None, arch: str = "decoder",
                    mask_id: int | None = None) -> int:
    """Where one input's answer is read: a task example's query (``meta["query_index"]``), an
    encoder's first [MASK], else the last position."""
    q = (meta or {}).get("query_index")
    if isinstance(q, int) and 0 <= q < len(ids):
        return q
    if arch == "encoder" and mask_id is not None and mask_id in ids:
        return list(ids).index(mask_id)
    return len(ids) - 1


def top_answers(model, inputs, pos: int, variants: Sequence[Sequence[Site]], *,
                mode: str = "zero", reference=None, **forward_kwargs) -> list[tuple[int, float]]:
    """What the model answers at ``pos`` of one input (batch 1) with each variant's sites
    replaced (``[]``: unchanged) -> [(top token id, its probability)] per variant."""
    inputs = tuple(inputs)
    if inputs[-1].shape[0] != 1:
        raise ValueError("top_answers reads one input (batch 1)")
    metrics = {"id": lambda lg: lg[0, pos].float().argmax(),
               "p": lambda lg: lg[0, pos].float().softmax(-1).max()}
    vals = effect(model, inputs, list(variants), metrics, mode=mode, reference=reference,
                  **forward_kwargs)
    return [(int(round(i)), float(p)) for i, p in vals]


def off_line(name: str, before: tuple[str, float], after: tuple[str, float],
             average: dict | None = None) -> str:
    """One line: what one input's answer becomes with ``name`` switched off (``before`` /
    ``after``: (token, probability)) and, when ``average`` is given ({"metric", "data", "base",
    "off", "higher"}), what the held-out average does, both in the same line, saying when they
    disagree (the answer stays but the average falls by more than 2 points, or the answer changes
    while the average barely moves)."""
    same = before[0] == after[0]
    out = (f"With **{name}** off the model answers **{after[0]}** ({after[1]:.4g}) on this input"
           + (f" — unchanged (**{before[0]}**, {before[1]:.4g}, with every head on)" if same
              else f" instead of **{before[0]}** ({before[1]:.4g})"))
    if average is None:
        return out + "."
    d = average["off"] - average["base"]
    worse = -d if average.get("higher", True) else d
    out += (f"; over {average['data']} {average['metric']} goes from {average['base']:.3g} to "
            f"{average['off']:.3g}")
    if same and worse > 0.02:
        out += " — this input and the average disagree: the head matters on average, not here"
    elif not same and abs(d) <= 0.02:
        out += " — this input and the average disagree: the answer changes here, the average barely moves"
    return out + "."


def higher_is_better(df: pd.DataFrame, metric: str) -> bool:
    """Whether more of ``metric`` (a column of ``head_effects``) is better: the probe says so for
    its headline; of the others, losses are better low, everything else (probabilities,
    accuracies, logit differences) high."""
    return bool(df.attrs["higher"]) if metric == df.attrs["headline"] else "loss" not in metric


def headline_grid(df: pd.DataFrame, column: str | None = None) -> np.ndarray:
    """``head_effects``' column (default: the headline's change) as [layer, head]."""
    column = column or f"Δ {df.attrs['headline']}"
    L, H = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
    return df[column].to_numpy(dtype=float).reshape(L, H)


__all__ = ["Probe", "answer_position", "answer_probe", "candidate_answers", "off_line", "top_answers", "coref_probe", "head_sentence", "higher_is_better", "input_probe", "patching", "head_effects", "headline_grid", "induction_repeat_probe",
           "lm_probe", "patterns", "repeat_sequences", "set_effects"]
