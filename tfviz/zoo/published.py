"""Two published results the zoo reproduces (issue 33), measured for the cards:

    sinks  attention sinks and streaming (Xiao et al. 2023, StreamingLLM): each head's share on the
           first tokens of fresh text, the loss far past the training length under dense / window /
           window + first tokens (text and cache positions) / recomputation (``analysis.sinks``)
    phase  the induction phase change (Olsson et al. 2022): the records the training loop kept at
           every logged step (``analysis.phase``), read back, and the final model re-measured on
           the same probe (it must reproduce the last record)

Each ``measure_*`` takes a loaded checkpoint and its task and returns the card's sample, metrics
(re-measured by ``python -m tfviz.zoo evaluate``), heads and finding. UI-free.
"""
from __future__ import annotations

import math

from ..analysis import phase as ph
from ..analysis import sinks
from ..analysis.heads import score_model

PHASE_PROBE_HEADS = dict(half=16, batch=32, seed=0)  # the induction probe the heads are labelled on


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def measure_sinks(ckpt, task) -> dict:
    model = ckpt.model
    r = sinks.sink_report(model, ckpt.tokenizer, ckpt.task, label=ckpt.path.stem)
    s, st = r["settings"], r["story"]
    metrics = {f"loss_far.{c}": float(v) for c, v in st["loss_far"].items()}
    for row in r["shares"].itertuples():
        metrics[f"head.L{row.layer}H{row.head}.share_1"] = float(row.share_1)
        metrics[f"head.L{row.layer}H{row.head}.share_4"] = float(row.share_4)
    ev = task.evaluate(model, "test", max_examples=len(task.examples("test")))
    metrics |= {"test_loss": ev["loss"], "test_accuracy": ev["accuracy"]}
    heads = [{"layer": int(row.layer), "head": int(row.head),
              "label": "sink" if row.ratio_1 > sinks.SINK else "other",
              "share_1": _num(row.share_1), "even_1": _num(row.even_1), "share_4": _num(row.share_4)}
             for row in r["shares"].itertuples()]
    return {"sample": (f"{s['sequences']} x {s['tokens']} tokens of fresh grammar text (seed "
                       f"{s['seed']}{', each opening with [BOS]' if s['bos'] else ''}): shares on "
                       f"its first {s['train_length']} tokens, loss per position on all of it with "
                       f"a window of {s['window']}; the lm test split for the loss"),
            "metrics": metrics, "heads": heads,
            "finding": {"settings": s, "story": {k: v for k, v in st.items()},
                        "segments": r["segments"].round(4).to_dict("records"),
                        "paper": sinks.PAPER}}


def measure_phase(ckpt, task) -> dict:
    model, phase = ckpt.model, ckpt.phase
    if not phase or len(phase.get("records", [])) < 2:
        raise ValueError(f"{ckpt.path}: no phase-change records (train it with tfviz.train: an "
                         "induction run records them)")
    story = ph.phase_story(phase, ckpt.path.stem)
    probe = ph.PhaseProbe.for_task(task, ckpt.config)
    now = probe.measure(model, ckpt.step)
    last = phase["records"][-1]
    metrics = {"icl_final": float(now["loss"][probe.late] - now["loss"][probe.early]),
               "recorded.icl_final": float(last["loss"][probe.late] - last["loss"][probe.early]),
               "max_induction_final": max(max(r) for r in now["induction"]),
               "max_prev_token_final": max(max(r) for r in now["prev_token"])}
    ev = task.evaluate(model, "test", max_examples=len(task.examples("test")))
    metrics |= {"test_loss": ev["loss"], "test_loss_repeat": ev["loss_repeat"],
                "test_accuracy_repeat": ev["accuracy_repeat"]}
    df = score_model(model, **PHASE_PROBE_HEADS)
    heads = [{"layer": int(r["layer"]), "head": int(r["head"]), "label": r["label"],
              **{k: _num(r[k]) for k in ("induction", "prev_token", "first_token")}}
             for r in df.to_dict("records")]
    return {"sample": (f"the phase records kept while training ({len(phase['records'])} logged "
                       f"steps; probe: {phase['probe']['sequences']} fresh [BOS] r r of "
                       f"{phase['probe']['tokens']} tokens, seed {phase['probe']['seed']}); the "
                       "final model re-measured on that probe; the induction test split"),
            "metrics": metrics, "heads": heads,
            "finding": {"story": story, "probe": phase["probe"], "paper": ph.PAPER}}


MEASURES = {"sinks": measure_sinks, "phase": measure_phase}


def sinks_headline(card: dict) -> str:
    st = card["finding"]["story"]
    g = st["gap"]
    k = st["kmax"]
    return (f"{st['sink_heads']}/{st['heads']} sink heads (top {st['top_head']} "
            f"{st['top_share']:.2f} on position 0); beyond {st['train_length']} tokens: window "
            f"{g['window']:+.2f}, {k} sinks {g[f'sinks {k}']:+.2f}, dense {g['dense']:+.2f} nats vs "
            f"recomputation; signature {'holds' if st['signature'] else 'absent'}")


def phase_headline(card: dict) -> str:
    s = card["finding"]["story"]
    w = s["icl_window"]
    formed = (f" (above {ph.FORMED} from step {s['formed_at']})" if s["formed"]
              else " (never formed)")
    return (f"ICL score {s['icl_start']:+.2f} -> {s['icl_end']:+.2f} nats"
            f"{f' (steps {w[0]}-{w[1]})' if w else ''}; best induction head {s['best_head']} "
            f"{s['induction_end']:.2f}{formed}")


__all__ = ["MEASURES", "measure_phase", "measure_sinks", "phase_headline", "sinks_headline"]
