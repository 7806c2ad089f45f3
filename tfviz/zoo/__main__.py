"""``python -m tfviz.zoo build | measure | evaluate | list | why | causal`` (see ``tfviz.zoo``, ``tfviz.zoo.why``)."""
from __future__ import annotations

import argparse
import sys

import torch

from .build import build, evaluate
from .specs import SPECS, select


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.zoo",
                                description="Build and check the shipped model zoo.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="train every zoo model (CPU, 1 thread, fixed seeds)")
    b.add_argument("--only", nargs="+", metavar="NAME", help="build just these models")
    b.add_argument("--out", default=None, help="output folder (default: $TFVIZ_ZOO_DIR, else the repo's checkpoints/)")
    b.add_argument("--steps", type=int, default=None, help="override every model's step count "
                   "(quick checks; the shipped models use their own)")
    e = sub.add_parser("evaluate", help="re-measure the shipped models and compare with their cards")
    e.add_argument("--dir", default=None, help="checkpoint folder (default: $TFVIZ_ZOO_DIR, else the repo's checkpoints/)")
    e.add_argument("--only", nargs="+", metavar="NAME")
    m = sub.add_parser("measure", help="measure shipped models again and rewrite their cards "
                       "(no training; the weights stay as they are)")
    m.add_argument("--only", nargs="+", metavar="NAME")
    m.add_argument("--dir", default=None, help="checkpoint folder (default: $TFVIZ_ZOO_DIR, else the repo's checkpoints/)")
    sub.add_parser("list", help="list the zoo models")
    c = sub.add_parser("causal", help="switch the coref and induction models' heads off and write "
                       "the cards' 'Does each head matter?' sections (no training)")
    c.add_argument("--dir", default=None, help="checkpoint folder (default: $TFVIZ_ZOO_DIR, else the repo's checkpoints/)")
    w = sub.add_parser("why", help="train and measure the 'why attention' experiments (tfviz.zoo.why): "
                       "recall (RNN / LSTM / transformer) and the bottleneck (GRU with / without "
                       "attention / transformer)")
    w.add_argument("--only", nargs="+", metavar="NAME", help="recall and/or bottleneck")
    w.add_argument("--out", default=None, help="output folder (default: the zoo folder's why/)")
    w.add_argument("--steps", type=int, default=None, help="override every model's step count")
    w.add_argument("--measure-only", action="store_true", help="measure the saved checkpoints again (no training)")
    args = p.parse_args(argv)

    torch.set_num_threads(1)  # small models: extra threads only fight over the cores
    try:
        if args.command == "list":
            for s in SPECS:
                print(f"{s.name:14} {s.kind:11} {s.about}")
            return 0
        if args.command == "why":
            from . import why
            if args.measure_only:
                why.remeasure(args.only, args.out)
            else:
                why.build(args.only, args.out, args.steps)
            return 0
        if args.command == "causal":
            from .causal import write_sections
            from ..paths import zoo_dir
            write_sections(args.dir or zoo_dir())
            return 0
        if args.command == "build":
            build(args.only, args.out, args.steps)
            return 0
        if args.command == "measure":
            from .build import remeasure
            remeasure(args.only, args.dir)
            return 0
        select(args.only)  # unknown names fail before any work
        results = evaluate(args.dir, args.only)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = sum(not r["ok"] for rows in results.values() for r in rows)
    print("every card reproduces" if not bad else f"{bad} metric(s) do not reproduce")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
