"""Train the agreement and induction quick presets exactly as the Train page does (one torch
thread, the preset's configs through ``build_configs``) and measure what issue 31 claims of them
on fresh inputs (never the splits they trained on):

    agreement   accuracy (whole vocabulary, pairwise) on the test split's held-out frames and
                pairs and on fresh sentences; the heads whose pattern picks the referent;
                pairwise accuracy with them off; the share of answers that flip when they are
                patched from the sentence with the other pronoun (``tfviz.zoo.causal``)
    induction   loss on the repeat of fresh [BOS] r r, r drawn with replacement, beside the
                floor of a perfect bigram copier (``tfviz.analysis.induction.floor_table``)

    .venv/bin/python scripts/measure_issue31_presets.py [--seed 5]   # prints JSON lines

Also printed: CPU seconds of each training and the load average before and after (the machine
is shared: say it beside any number quoted from here).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from tfviz.analysis.induction import floor_table  # noqa: E402
from tfviz.tasks import make_task  # noqa: E402
from tfviz.train import new_model, train  # noqa: E402
from tfviz.train.presets import QUICK, build_configs  # noqa: E402
from tfviz.zoo import causal  # noqa: E402


def trained(name: str):
    p = QUICK[name]
    task = make_task(p.task, **p.task_params)
    mc, tc = build_configs(task, p.model, p.train.to_dict())
    c0 = time.process_time()
    model = new_model(mc, tc.seed)
    result = train(model, task, tc)
    return model.eval(), task, round(time.process_time() - c0, 1), result.status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=5, help="fresh inputs' seed (the cards use 1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    model, task, cpu, status = trained("agreement")
    d = causal.agreement_effects(model, task, n_test=300, n_fresh=192, seed=args.seed)
    ph = d["pattern_heads"]
    name = " + ".join(ph) if ph else None
    row = lambda n, k: causal._row(d, n, k) if n else None  # noqa: E731
    print(json.dumps({"preset": "agreement", "cpu_seconds": cpu, "status": status,
                      "baseline": {k: {m: round(v, 4) for m, v in b.items()} for k, b in d["baseline"].items()},
                      "pattern_heads": ph, "checks": causal.agreement_checks(d),
                      "off_pairwise": {k: round(float(row(name, k)[causal.PAIR]), 4) for k in ("held-out", "fresh")} if ph else None,
                      "patch_flips": {k: round(float(causal._prow(d, name, k)[causal.FLIP]), 4)
                                      for k in ("held-out", "fresh")} if ph else None}), flush=True)
    model, task, cpu, status = trained("induction")
    halves = [4, 8, 12, 16]  # |r| of the preset's training sequences (min_half .. half)
    df = floor_table(model, task.tokenizer.vocab_size, halves, batch=64, seed=args.seed)
    print(json.dumps({"preset": "induction", "cpu_seconds": cpu, "status": status,
                      "floor": df[["half", "loss", "floor", "ambiguous_loss", "ambiguous_floor"]]
                      .round(4).to_dict("records")}), flush=True)
    print(json.dumps({"load_average": [round(load0, 1), round(os.getloadavg()[0], 1)],
                      "cpu_count": os.cpu_count(), "measured": time.strftime("%Y-%m-%d %H:%M")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
