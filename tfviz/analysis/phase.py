"""The induction phase change, recorded while a model trains (Olsson et al. 2022, "In-context
learning and induction heads", arXiv 2209.11895, Argument 1: in-context learning appears abruptly,
in the same window of training in which induction heads form, and never in one-layer models).

At step 0 and at every logged step of an induction run the training loop (``tfviz.train.loop``)
hands the model to a :class:`PhaseProbe`, which measures it on one fixed batch of fresh repeated
sequences (random symbols of the task, drawn by their own seed: never a training example)

    tokens = [BOS] r r                 r: ``half`` distinct random symbols
    loss[p]          mean next-token loss at token index p (predicting token p + 1) over the batch
    induction[l, h]  each head's induction (prefix-matching) score: its weight from each token of
                     the second r on the token after that token's first occurrence
    prev_token[l, h] each head's weight on the previous token
    icl = loss[late] - loss[early]     the in-context-learning score; Olsson et al.: "the loss of
                     the 500th token in the context minus the average loss of the 50th token" of a
                     512-token context. Here early, late = 50/512 and 500/512 of the probe's
                     predicted positions (6 and 62 of 64): negative = later tokens are predicted
                     better because the context is used.

The records live in the checkpoint (metadata ``phase``: ``{"probe": {...}, "records": [{"step",
"loss", "induction", "prev_token"}, ...]}``, thinned to ``MAX_RECORDS``), so a finished run's
replay and the Findings page show what was measured while it trained. ``phase_story`` reads the
records: when the ICL score fell (the window where it covered 10% -> 90% of its total change),
when the best induction head formed (the same window for its score), and whether the two overlap.

    probe = PhaseProbe.for_task(task, model.config)   # None for a task without repeats
    rec = probe.measure(model, step)                  # {"step", "loss", "induction", "prev_token"}
    frames = phase_frames(phase)                       # heatmap, curves per step, head scores
    story = phase_story(phase)                         # numbers + the sentence
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..recording import record
from .heads import PATTERN, pattern_scores
from .induction import recurrence_probe

PROBE_SEED = 2209       # the probe's own seed: the same sequences for every run of one vocabulary
PROBE_BATCH = 32        # sequences in the probe (fewer when the patterns would pass PROBE_BYTES)
PROBE_MAX_TOKENS = 129  # [BOS] + 2 x 64 at most: the measurement stays cheap beside a training step
PROBE_BYTES = 64 * 2**20  # the recorded patterns of one measurement, at most
MAX_RECORDS = 400       # kept in a checkpoint (first and last always)
OLSSON = (50, 500, 512)  # early index, late index, context length of the paper's ICL score
FORMED = 0.4            # an induction head: score above this (the cut-off of heads/labels.py)
CHANGE = (0.1, 0.9)     # a curve's "window": from 10% to 90% of its total change
MIN_CHANGE = {"icl": 0.1, "score": 0.1}  # less change than this (nats / score): no window
PAPER = ("Olsson et al. 2022 (arXiv 2209.11895, Argument 1, Figures 3 and 5): in attention-only "
         "and larger language models trained on text, in-context learning (loss at token 500 minus "
         "loss at token 50) develops abruptly in a narrow window early in training (roughly 2.5 to 5 "
         "billion tokens), from under 0.15 nats to about 0.4 nats, and stays there; induction heads "
         "(prefix-matching score) form in exactly that window, some reaching about 0.8-0.9; "
         "one-layer models show neither.")


def icl_indices(n_predicted: int) -> tuple[int, int]:
    """(early, late) token indices of the ICL score for ``n_predicted`` positions: 50/512 and
    500/512 of them, as Olsson et al.'s 50th and 500th of 512 (at least 1 apart, inside)."""
    early_at, late_at, context = OLSSON
    early = max(1, round(early_at * n_predicted / context))
    late = min(n_predicted - 1, max(early + 1, round(late_at * n_predicted / context)))
    return early, late


def applies(task, model) -> bool:
    """Whether a training run records the phase change: an induction task (any params) and a
    causal self-attention model whose heads can be scored."""
    cfg = getattr(model, "config", None)
    return (getattr(task, "name", None) == "induction" and getattr(cfg, "arch", None) == "decoder"
            and any(n.endswith("attn.hook_pattern") for n in model.hook_points()))


class PhaseProbe:
    """The fixed fresh sequences and what is measured on them at each logged step."""

    def __init__(self, tokens: torch.Tensor, n_layers: int, n_heads: int, seed: int = PROBE_SEED):
        if tokens.dim() != 2 or tokens.shape[1] < 5:
            raise ValueError("the phase probe needs [batch, pos] tokens with pos >= 5")
        self.tokens = tokens
        self.n_layers, self.n_heads, self.seed = n_layers, n_heads, seed
        self.early, self.late = icl_indices(tokens.shape[1] - 1)

    @classmethod
    def for_task(cls, task, config, seed: int = PROBE_SEED, batch: int = PROBE_BATCH) -> "PhaseProbe | None":
        """[BOS] r r as long as the task's longest training sequence allows (at most the model's
        positions and ``PROBE_MAX_TOKENS``), r drawn from the task's own symbols (its non-special
        ids). None when no r of 2 tokens fits."""
        tok = task.tokenizer
        longest = max(len(e.tokens) for e in task.examples("train")[:256])
        length = min(longest, PROBE_MAX_TOKENS, config.max_positions or PROBE_MAX_TOKENS)
        half = (length - 1) // 2
        special = set(tok.special_ids)
        symbols = [i for i in range(min(tok.vocab_size, config.vocab_size)) if i not in special]
        if half < 2 or len(symbols) < 2 or tok.bos_id is None:
            return None
        per_seq = 4 * config.n_layers * config.n_heads * (2 * half + 1) ** 2  # float32 patterns
        batch = max(1, min(batch, PROBE_BYTES // per_seq))
        tokens = recurrence_probe(symbols, 2 * half, half, repeats=2, batch=batch, seed=seed,
                                  bos_id=tok.bos_id)
        return cls(tokens, config.n_layers, config.n_heads, seed)

    def describe(self) -> dict:
        b, n = self.tokens.shape
        return {"sequences": int(b), "tokens": int(n), "half": int((n - 1) // 2), "seed": self.seed,
                "early": self.early, "late": self.late,
                "layout": "[BOS] r r (r: distinct random symbols of the task)"}

    @torch.no_grad()
    def measure(self, model, step: int) -> dict:
        """One record: {"step", "loss" [pos - 1], "induction" [layer][head], "prev_token"
        [layer][head]} of ``model`` on the probe (one forward, patterns recorded)."""
        device = next(model.parameters()).device
        tokens = self.tokens.to(device)
        names = [PATTERN.format(l=l) for l in range(self.n_layers)]
        rec = record(model, tokens, names=names)
        logits = rec.output.float()[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), self.tokens[:, 1:],
                                                 reduction="none").mean(0)
        cfg = model.config
        scores = pattern_scores(rec.stack_layers(PATTERN), self.tokens, causal=cfg.causal,
                                window=cfg.window, global_tokens=cfg.global_tokens, pad_id=None)
        return {"step": int(step), "loss": _rounded(loss.double().numpy()),
                "induction": _rounded(scores["induction"]), "prev_token": _rounded(scores["prev_token"])}


def _rounded(a: np.ndarray) -> list:
    """Six significant digits (what a chart needs; keeps a checkpoint small); NaN -> None."""
    return [_rounded(x) for x in a] if np.ndim(a) else (None if not math.isfinite(a) else float(f"{a:.6g}"))


def new_phase(probe: PhaseProbe) -> dict:
    return {"probe": probe.describe(), "records": []}


def add_record(phase: dict, rec: dict) -> None:
    """Append ``rec`` (replacing one of the same step, e.g. after a resume); while more than
    ``2 * MAX_RECORDS`` are held, every other one goes (the last kept): memory stays bounded."""
    records = phase["records"]
    if records and records[-1]["step"] == rec["step"]:
        records[-1] = rec
    else:
        records.append(rec)
    while len(records) > 2 * MAX_RECORDS:
        records[:] = records[::-2][::-1]


def thin(phase: dict | None, max_records: int = MAX_RECORDS) -> dict | None:
    """At most ``max_records`` records, evenly spaced, the first and the last kept."""
    if not phase:
        return phase
    records = phase["records"]
    if len(records) <= max_records:
        return phase
    idx = sorted({round(i * (len(records) - 1) / (max_records - 1)) for i in range(max_records)})
    return {**phase, "records": [records[i] for i in idx]}


def check_phase(phase, n_layers: int, n_heads: int) -> dict:
    """``phase`` as read from a checkpoint, checked: ValueError for anything malformed."""
    if not isinstance(phase, Mapping) or not isinstance(phase.get("records"), list) \
            or not isinstance(phase.get("probe"), Mapping):
        raise ValueError("phase must be an object with a probe and a list of records")
    probe = phase["probe"]
    n = probe.get("tokens")
    if not isinstance(n, int) or not 5 <= n <= PROBE_MAX_TOKENS:
        raise ValueError(f"phase probe: tokens must be a whole number in 5..{PROBE_MAX_TOKENS}")
    for k in ("early", "late"):
        if not isinstance(probe.get(k), int) or not 0 <= probe[k] < n - 1:
            raise ValueError(f"phase probe: {k} must be a token index below {n - 1}")
    if len(phase["records"]) > 2 * MAX_RECORDS:
        raise ValueError(f"phase: at most {2 * MAX_RECORDS} records")
    last = -1
    for i, r in enumerate(phase["records"]):
        ok = (isinstance(r, Mapping) and isinstance(r.get("step"), int) and r["step"] > last
              and _numbers(r.get("loss"), (n - 1,))
              and all(_numbers(r.get(k), (n_layers, n_heads)) for k in ("induction", "prev_token")))
        if not ok:
            raise ValueError(f"phase record {i}: needs an increasing step, loss [{n - 1}], induction "
                             f"and prev_token [{n_layers}][{n_heads}]")
        last = r["step"]
    return dict(phase)


def _numbers(x, shape: tuple[int, ...]) -> bool:
    if not shape:
        return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))
    return isinstance(x, list) and len(x) == shape[0] and all(_numbers(v, shape[1:]) for v in x)


# ------------------------------------------------------------------------------------- reading
def _array(records: Sequence[dict], key: str) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in np.ravel(np.array(r[key], dtype=object))]
                     for r in records], dtype=np.float64)


def phase_frames(phase: dict) -> dict[str, pd.DataFrame]:
    """The records as frames:
    "loss": step x token index (the heatmap, mean next-token loss);
    "curves": one row per step: icl (loss[late] - loss[early]), loss_early, loss_late, loss_first
              (mean over the first r), loss_second (over the second r, from its 2nd token on),
              max_induction, max_prev_token, best_induction (the head);
    "heads": long form, one row per (step, head): layer, head, name "L{l}H{h}", induction, prev_token."""
    records, probe = phase["records"], phase["probe"]
    steps = np.array([r["step"] for r in records], dtype=int)
    loss = _array(records, "loss")  # [step, index]
    half = int(probe.get("half", (probe["tokens"] - 1) // 2))
    ind = np.array([np.array(r["induction"], dtype=np.float64) for r in records])  # [step, l, h]
    prev = np.array([np.array(r["prev_token"], dtype=np.float64) for r in records])
    _, L, H = ind.shape
    early, late = probe["early"], probe["late"]
    flat = ind.reshape(len(records), -1)
    best = np.nanargmax(np.where(np.isnan(flat), -np.inf, flat), axis=1)
    curves = pd.DataFrame({
        "step": steps, "icl": loss[:, late] - loss[:, early], "loss_early": loss[:, early],
        "loss_late": loss[:, late], "loss_first": np.nanmean(loss[:, :half], axis=1),
        "loss_second": np.nanmean(loss[:, half + 1:], axis=1),
        "max_induction": np.nanmax(flat, axis=1), "max_prev_token": np.nanmax(prev.reshape(len(records), -1), axis=1),
        "best_induction": [f"L{b // H}H{b % H}" for b in best]})
    heads = pd.DataFrame([{"step": int(s), "layer": l, "head": h, "name": f"L{l}H{h}",
                           "induction": ind[i, l, h], "prev_token": prev[i, l, h]}
                          for i, s in enumerate(steps) for l in range(L) for h in range(H)])
    heat = pd.DataFrame(loss, index=pd.Index(steps, name="step"),
                        columns=pd.Index(range(loss.shape[1]), name="token index"))
    return {"loss": heat, "curves": curves, "heads": heads}


def change_window(steps: Sequence[int], values: Sequence[float], min_change: float = 0.0
                  ) -> tuple[int, int] | None:
    """The steps at which ``values`` first covered 10% and 90% of their change from the first
    value to the last; None when they changed by ``min_change`` or less."""
    v = np.asarray(values, dtype=np.float64)
    a, b = v[0], v[-1]
    if not (math.isfinite(a) and math.isfinite(b)) or abs(b - a) <= min_change:
        return None
    frac = (v - a) / (b - a)
    lo = int(np.argmax(frac >= CHANGE[0]))
    hi = int(np.argmax(frac >= CHANGE[1]))
    return int(steps[lo]), int(steps[max(hi, lo)])


def phase_story(phase: dict, label: str = "this model") -> dict:
    """What the records show, as numbers and one sentence: the ICL score at the start and the
    end, its change window; the best induction head's score and its window; whether a head formed
    (score > FORMED), whether the windows overlap. The numbers come from the records alone."""
    f = phase_frames(phase)
    c = f["curves"]
    steps = c["step"].to_numpy()
    icl = c["icl"].to_numpy()
    heads = f["heads"]
    last = heads[heads["step"] == steps[-1]].sort_values("induction", ascending=False).iloc[0]
    best = heads[heads["name"] == last["name"]].sort_values("step")
    prev_last = heads[heads["step"] == steps[-1]].sort_values("prev_token", ascending=False).iloc[0]
    best_prev = heads[heads["name"] == prev_last["name"]].sort_values("step")
    icl_window = change_window(steps, icl, MIN_CHANGE["icl"])
    ind_window = change_window(steps, best["induction"].to_numpy(), MIN_CHANGE["score"])
    prev_window = change_window(steps, best_prev["prev_token"].to_numpy(), MIN_CHANGE["score"])
    formed = bool(last["induction"] > FORMED)
    at = next((int(s) for s, v in zip(best["step"], best["induction"]) if v > FORMED), None)
    out = {"label": label, "steps": int(steps[-1]), "icl_start": float(icl[0]), "icl_end": float(icl[-1]),
           "icl_min": float(np.nanmin(icl)), "icl_window": icl_window, "best_head": str(last["name"]),
           "induction_start": float(best["induction"].iloc[0]), "induction_end": float(last["induction"]),
           "induction_window": ind_window, "formed": formed, "formed_at": at,
           "prev_head": str(prev_last["name"]), "prev_end": float(prev_last["prev_token"]),
           "prev_window": prev_window, "early": int(phase["probe"]["early"]),
           "late": int(phase["probe"]["late"])}
    out["overlap"] = bool(icl_window and ind_window
                          and icl_window[0] <= ind_window[1] and ind_window[0] <= icl_window[1])
    out["sentence"] = _sentence(out)
    return out


def _sentence(s: dict) -> str:
    icl = (f"{s['label']}: the in-context-learning score (loss at token {s['late']} minus loss at "
           f"token {s['early']} of the repeated sequences) went from {s['icl_start']:+.2f} to "
           f"{s['icl_end']:+.2f} nats")
    icl += (f", most of it (10% -> 90%) between steps {s['icl_window'][0]} and {s['icl_window'][1]}"
            if s["icl_window"] else f" (less than {MIN_CHANGE['icl']} nats of change)")
    head = (f"its strongest induction head, {s['best_head']}, went from {s['induction_start']:.2f} "
            f"to {s['induction_end']:.2f}")
    head += (f", 10% -> 90% between steps {s['induction_window'][0]} and {s['induction_window'][1]}"
             if s["induction_window"] else "")
    head += (f", above {FORMED} from step {s['formed_at']}" if s["formed"]
             else f", never above {FORMED}")
    if not s["icl_window"] or not s["induction_window"]:
        verdict = ("nothing changed abruptly: no in-context learning to time" if not s["icl_window"]
                   else "the heads' induction scores barely moved")
    elif s["overlap"]:
        verdict = "the two windows overlap: in-context learning and the induction head appeared together"
    else:
        verdict = "the two windows do not overlap: here they did not appear together"
    if not s["formed"]:
        verdict += " (no head passed the induction cut-off)"
    return f"{icl}; {head} — {verdict}."


__all__ = ["FORMED", "MAX_RECORDS", "OLSSON", "PAPER", "PROBE_SEED", "PhaseProbe", "add_record",
           "applies", "change_window", "check_phase", "icl_indices", "new_phase", "phase_frames",
           "phase_story", "thin"]
