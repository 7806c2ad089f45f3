"""python -m tfviz.bench presets — train the Train page's presets and check what they promise.

For each preset (default: every "bigger (GPU)" one): build its task and configs exactly as the
Train page does (``tfviz.train.presets.build_configs``), train, and report the training time
(``TrainResult.elapsed``: the loop, evaluations and snapshots; not building the task), where the
validation loss and accuracy were best and where they ended, tokens/s, MFU and GPU memory.
Targets for the GPU presets: <= 60 s, and the final validation loss within 10% of its best
(final <= 1.1 x best) and the final validation accuracy within 10% of its best.

``--parallel`` trains all of them at once, one process each (the figures are then upper bounds
for a preset trained alone: they shared the GPU and the CPU). ``--out FILE`` writes the table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import torch

from ..device import cuda_available, device_name
from ..tasks import make_task
from ..train import new_model, train
from ..train.presets import GPU, QUICK, RECURRENT, build_configs, presets_for

LIMIT_S = 60.0
WITHIN = 0.10


def train_preset(task_name: str, label: str, stop_after: float | None = None) -> dict:
    """Train one preset (stopped after ``stop_after`` seconds of training, if given); -> its
    figures (JSON-able)."""
    pre = RECURRENT[task_name] if task_name in RECURRENT else presets_for(task_name, cuda=True)[label]
    task = make_task(pre.task, **pre.task_params)
    mcfg, tcfg = build_configs(task, pre.model, pre.train.to_dict(), kind=pre.kind)
    model = new_model(mcfg, tcfg.seed)
    deadline = None if stop_after is None else time.perf_counter() + stop_after
    result = train(model, task, tcfg, stop=None if deadline is None else (lambda: time.perf_counter() > deadline))
    evals = [h for h in result.history if "val_loss" in h]
    best = min(evals, key=lambda h: h["val_loss"]) if evals else {}
    logged = [h for h in result.history if "tokens_per_s" in h]
    last = logged[-1] if logged else {}
    return dict(preset=task_name, label=label, status=result.status, message=result.message,
                steps=result.step, max_steps=tcfg.steps, elapsed_s=result.elapsed, device=result.device,
                params=sum(p.numel() for p in model.parameters()),
                best_val_loss=best.get("val_loss"), best_step=best.get("step"),
                best_val_accuracy=max((h.get("val_accuracy", float("nan")) for h in evals), default=None),
                final_val_loss=result.final.get("val_loss"),
                final_val_accuracy=result.final.get("val_accuracy"),
                test_accuracy=result.final.get("test_accuracy"),
                train_loss=last.get("train_loss"), tokens_per_s=last.get("tokens_per_s"),
                mfu=last.get("mfu"),
                gpu_memory_gib=max((h["gpu_memory_gib"] for h in logged if "gpu_memory_gib" in h), default=None),
                curve=[(h["step"], round(h["val_loss"], 4), round(h.get("val_accuracy", float("nan")), 4))
                       for h in evals])


def checks(r: dict) -> list[tuple[str, bool]]:
    out = [(f"finished on its own (status {r['status']})", r["status"] == "done"),
           (f"time {r['elapsed_s']:.1f} s <= {LIMIT_S:g} s", r["elapsed_s"] <= LIMIT_S)]
    if r["final_val_loss"] is not None and r["best_val_loss"] is not None:
        best = min(r["best_val_loss"], r["final_val_loss"])
        out.append((f"final val loss {r['final_val_loss']:.3f} within 10% of best {best:.3f}",
                    r["final_val_loss"] <= best * (1 + WITHIN) + 1e-9))
    if r["final_val_accuracy"] is not None and r["best_val_accuracy"] is not None:
        best = max(r["best_val_accuracy"], r["final_val_accuracy"])
        out.append((f"final val accuracy {r['final_val_accuracy']:.3f} within 10% of best {best:.3f}",
                    r["final_val_accuracy"] >= best * (1 - WITHIN) - 1e-9))
    return out


def report(results: list[dict], header: str) -> str:
    lines = [header, "",
             f"{'preset':<10} {'steps':>11} {'time s':>7} {'best val loss (step)':>21} {'final val loss':>14} "
             f"{'val acc best/final':>18} {'test acc':>8} {'tokens/s':>10} {'MFU':>6} {'GPU GiB':>7}"]
    for r in results:
        if "error" in r:
            lines.append(f"{r['preset']:<10} ERROR {r['error']}")
            continue
        f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        lines.append(
            f"{r['preset']:<10} {r['steps']:>5}/{r['max_steps']:<5} {r['elapsed_s']:7.1f} "
            f"{f(r['best_val_loss'], '.3f'):>13} ({f(r['best_step'], 'd'):>5}) {f(r['final_val_loss'], '.3f'):>14} "
            f"{f(r['best_val_accuracy'], '.3f'):>8}/{f(r['final_val_accuracy'], '.3f'):<9} "
            f"{f(r['test_accuracy'], '.3f'):>8} {f(r['tokens_per_s'], ',.0f'):>10} {f(r['mfu'], '.1%'):>6} "
            f"{f(r['gpu_memory_gib'], '.2f'):>7}")
    lines.append("")
    all_ok = True
    for r in results:
        if "error" in r:
            all_ok = False
            continue
        for what, ok in checks(r):
            all_ok &= ok
            lines.append(f"  {'PASS' if ok else 'FAIL'}  {r['preset']:<10} {what}")
        lines.append(f"        {r['preset']:<10} {r['message']}")
        lines.append(f"        {r['preset']:<10} val curve (step, loss, acc): {r['curve']}")
    lines.append("\nall targets met" if all_ok else "\nsome targets missed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.bench presets", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--names", nargs="+", default=list(QUICK),
                   help=f"presets: task names, or the recurrent presets' names ({', '.join(RECURRENT)}), "
                        "trained as the Train page offers them, on the GPU when there is one")
    p.add_argument("--label", default=GPU, help=f"which preset of each task (default {GPU!r})")
    p.add_argument("--parallel", action="store_true", help="all at once, one process each")
    p.add_argument("--stop-after", type=float, help="stop each run after this many seconds")
    p.add_argument("--json", help="write the raw figures here (JSON)")
    p.add_argument("--out", help="write the report here")
    a = p.parse_args(argv)
    cuda = cuda_available()
    name = device_name("cuda") if cuda else "CPU"
    header = (f"presets {a.label!r}: {name}; torch {torch.__version__}; "
              f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}"
              + (f"; all {len(a.names)} trained at once (parallel processes: upper bounds)" if a.parallel else ""))
    results = []
    if a.parallel and len(a.names) > 1:
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // len(a.names)))}
        procs = {n: subprocess.Popen([sys.executable, "-m", "tfviz.bench", "presets", "--names", n,
                                      "--label", a.label, "--json", "/dev/stdout"]
                                     + ([] if a.stop_after is None else ["--stop-after", str(a.stop_after)]),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for n in a.names}
        for n, proc in procs.items():
            out, err = proc.communicate()
            try:
                results.append(json.loads(out.strip().splitlines()[-1])[0])
            except (ValueError, IndexError):
                results.append(dict(preset=n, error=(err or out).strip()[-2000:]))
    else:
        for n in a.names:
            t0 = time.perf_counter()
            try:
                results.append(train_preset(n, a.label, a.stop_after))
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                results.append(dict(preset=n, error=f"{type(e).__name__}: {e}"))
            if not a.json:
                print(f"{n}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            f.write(json.dumps(results) + "\n")
        if a.json == "/dev/stdout":
            return 0
    text = report(results, header)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0
