"""Issue 29, items 3 and 4, measured: does a causal grid hold the other sessions up, and is a cold
result computed once however many sessions ask?

    .venv/bin/python scripts/measure_shared_grids.py --folder /tmp/gpt2-random --keep
    .venv/bin/python scripts/measure_shared_grids.py --repo /tmp/before --folder /tmp/gpt2-random

``--repo``: the tfviz tree measured (default: this one; e.g. a ``git archive`` of main for the
numbers before). Two measurements, through ``ui.effects.computed`` itself (outside a page run its
progress bar draws nothing), in this one process:

  lock      a GPT-2-small-shaped folder (``scripts/measure_hf_app.py``'s: GPT2Config() defaults,
            random weights, a 50,257-token BPE; built in ``--folder`` when missing): one thread runs
            the Effects tab's head grid (every one of the 144 heads off, next-token loss) on
            ``--tokens`` tokens; when it reports its first progress, a second thread — another
            session on the same model — records one forward under ``locked([lm])``, as every
            page does. Printed: how long that second session waited, and the grid's time.
  findings  ``--sessions`` threads open the Findings page's pronoun story on a cold server at the
            same moment (``zoo.causal.coref_effects`` on the zoo's coref model, through
            ``computed``): how many times it was computed and each session's wait.

The grid's own size bound and button (``TFVIZ_GRID_MAX_GFLOP``, ``TFVIZ_GRID_AUTO_GFLOP``) are the
page's, not ``computed``'s: not in the way here. The machine's load is printed with the figures.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure_lock(repo: Path, folder: Path, tokens: int) -> None:
    import torch

    from tfviz import from_pretrained
    from tfviz.analysis import effects as ef
    from ui import effects
    from ui.models import LoadedModel, ModelRef, locked

    ckpt = from_pretrained(folder)
    ckpt.model.eval()
    lm = LoadedModel(ModelRef(folder.name, str(folder), "local"), ckpt, 1)
    x = torch.tensor([list(range(1000, 1000 + tokens))])
    started, times = threading.Event(), {}

    def compute(progress, *models):
        model = models[0] if models else lm.model  # the old computed passed no model

        def first(fraction, message):
            started.set()
            progress(fraction, message)
        return ef.head_effects(model, ef.lm_probe(x), progress=first)

    def grid():
        t = time.perf_counter()
        effects.computed(lm, ("measure", time.time()), compute, "head grid")
        times["grid"] = time.perf_counter() - t

    def other():
        started.wait()
        t = time.perf_counter()
        with locked([lm]):
            lm.record(x, names=["blocks.0.attn.hook_pattern"])
        times["other"] = time.perf_counter() - t

    threads = [threading.Thread(target=grid), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cfg = ckpt.model.config
    print(f"lock: {cfg.n_layers * cfg.n_heads} heads x {tokens} tokens: the grid took {times['grid']:.1f} s; "
          f"another session's locked() recording of the same model, started as the grid began, "
          f"took {times['other']:.2f} s")
    if hasattr(effects, "_forward_seconds"):  # the page's estimate, before a grid starts
        from tfviz.analysis import interventions as iv

        cost = iv.grid_cost(lm.model, 1, tokens, iv.head_grid_layers(lm.model))
        print(f"estimate: {cost.flops / 1e9:,.0f} GFLOP, the page would say about "
              f"{cost.seconds(effects._forward_seconds(lm, (x,), cost.rows)):.0f} s (measured above: "
              f"{times['grid']:.0f} s, with the other session's recording beside it)")


def measure_findings(repo: Path, sessions: int) -> None:
    from tfviz.paths import zoo_dir
    from tfviz.train.checkpoint import load_checkpoint
    from tfviz.zoo import causal as zc
    from tfviz.zoo.findings import zoo_path
    from ui import cache, effects
    from ui.models import LoadedModel, ModelRef

    path = zoo_path("coref", zoo_dir())
    ckpt = load_checkpoint(path)
    ckpt.model.eval()
    lm = LoadedModel(ModelRef("coref", str(path), "shipped"), ckpt, path.stat().st_mtime_ns)
    task = cache.task_of(lm)
    runs, waits, go = [], {}, threading.Barrier(sessions)

    def compute(progress, *models):
        runs.append(1)
        return zc.coref_effects(models[0] if models else lm.model, task)

    def session(i):
        go.wait()
        t = time.perf_counter()
        kwargs = {"owner": f"s{i}"} if "owner" in effects.computed.__code__.co_varnames else {}
        effects.computed(lm, ("measure findings", os.getpid()), compute, "findings", **kwargs)
        waits[i] = time.perf_counter() - t

    threads = [threading.Thread(target=session, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"findings: {sessions} sessions at once on a cold server: computed {len(runs)} time(s); "
          f"their waits {', '.join(f'{w:.1f}' for w in sorted(waits.values()))} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=REPO)
    ap.add_argument("--folder", type=Path, help="the GPT-2-shaped folder (built there when missing)")
    ap.add_argument("--keep", action="store_true", help="keep a folder this script built")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--cases", default="lock,findings")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import logging

    logging.getLogger("streamlit").setLevel(logging.ERROR)  # bare mode's warnings, once per call
    repo = args.repo.resolve()
    sys.path[:0] = [str(repo), str(REPO / "scripts")]
    import torch

    torch.set_num_threads(args.threads)
    print(f"tree {repo}; load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    tmp = Path(tempfile.mkdtemp(prefix="tfviz-grids-"))
    try:
        if "findings" in args.cases:
            measure_findings(repo, args.sessions)
        if "lock" in args.cases:
            folder = args.folder or tmp / "gpt2-random"
            if not (folder / "config.json").is_file():
                from measure_hf_app import build

                build(folder)
            measure_lock(repo, folder, args.tokens)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
