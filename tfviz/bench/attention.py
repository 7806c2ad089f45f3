"""python -m tfviz.bench attention — full O(n²) attention against the O(n·w) sliding window, measured.

Variants, each a function of q, k, v [batch, head, pos, d_head] that builds whatever mask it needs
inside the measured call. They are the model's own kernels: a real ``tfviz.model.attention.Attention``
layer's methods (its projections are not run, so only attention itself is timed):
  full-explicit   ``Attention._explicit``: scores and pattern materialised (the recording path)
  full-sdpa       ``Attention._sdpa`` on a causal mask: ``scaled_dot_product_attention(is_causal=True)``,
                  the flash kernel, no mask tensor (the model's fast path)
  window-masked   ``Attention._sdpa`` on a window mask (``impl="sdpa"``): SDPA given an n×n window
                  mask — a "sliding window" that costs as much as full attention
  window-banded   ``tfviz.model.banded.banded_attention`` (what the model runs for a window):
                  only the band is computed; on CUDA that is compiled FlexAttention
                  (``tfviz.model.flex``), on a CPU chunks of SDPA
  window-chunked  (CUDA only) ``banded.chunked_attention``: the CPU's chunked-SDPA band on the GPU
For each n every variant runs ``--repeats`` times, interleaved (the order rotates each repeat, so
drifting machine load hits all alike): forward under ``no_grad`` and forward+backward; the median is
reported. Then peak memory, once per variant and pass (method: ``tfviz.bench.measure``). A variant
whose analytic peak (``tfviz.analysis.cost.attention_bytes``) exceeds ``--mem-budget-gib`` is skipped
at that n, and the table says so. ``--csv`` writes every row; ``tfviz.viz.cost`` draws them.
The issue's targets are checked at the end, each ratio printed with PASS/FAIL.

On a shared machine (load average above the core count) OpenMP's default spin-waiting makes every
parallel region wait for a descheduled thread, which distorts many-small-op kernels most. There, run
``OMP_WAIT_POLICY=PASSIVE python -m tfviz.bench attention`` (or ``--threads 1``); the header prints
the load average and the policy so a reader can judge the figures.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import time
from datetime import datetime, timezone
from typing import Callable

import pandas as pd
import torch

from ..analysis.cost import attention_bytes, attention_flops
from ..device import cpu_count, cuda_available, device_name
from ..model import ModelConfig
from ..model.attention import Attention, AttnContext
from ..model.banded import banded_attention, chunked_attention, flex_available
from ..model.masks import MaskSpec
from .measure import peak_bytes, timed

VARIANTS = ("full-explicit", "full-sdpa", "window-masked", "window-banded", "window-chunked")
KERNEL = {"full-explicit": "explicit", "full-sdpa": "fused", "window-masked": "masked",
          "window-banded": "fused", "window-chunked": "fused"}
# What each variant is, in plain words (legends, tables, the Cost page); the names above are the
# CSV's and the command line's.
LABELS = {"full-explicit": "full attention, every score stored",
          "full-sdpa": "full attention, fused kernel",
          "window-masked": "window as a mask over all n² scores",
          "window-banded": "window, band only",
          "window-chunked": "window, band in chunks (GPU)"}
GIB, MIB = 2 ** 30, 2 ** 20


@functools.lru_cache(maxsize=16)
def model_layer(heads: int, kv_heads: int, d_head: int) -> Attention:
    """A real attention layer of a tfviz model with this head layout (its weights are never used:
    the variants call its kernels on given q, k, v)."""
    cfg = ModelConfig(arch="decoder", vocab_size=2, d_model=heads * d_head, n_heads=heads,
                      n_kv_heads=kv_heads, n_layers=1, pos="none", pad_id=None)
    return Attention(cfg).eval()


def _layer_for(q, k) -> Attention:
    return model_layer(q.shape[1], k.shape[1], q.shape[3])


def explicit_attention(q, k, v, spec: MaskSpec) -> torch.Tensor:
    """``Attention._explicit`` of the model: O(n²) scores, an additive -inf mask, softmax.
    A fresh ``AttnContext`` per call, so building the mask is part of what is measured."""
    return _layer_for(q, k)._explicit(q, k, v, AttnContext(spec))


def sdpa_attention(q, k, v, spec: MaskSpec) -> torch.Tensor:
    """``Attention._sdpa`` of the model: ``is_causal=True`` for plain causal, else an n×n bool mask."""
    return _layer_for(q, k)._sdpa(q, k, v, AttnContext(spec))


def make_variant(name: str, window: int, causal: bool):
    full, win = MaskSpec(causal=causal), MaskSpec(causal=causal, window=window)
    return {
        "full-explicit": lambda q, k, v: explicit_attention(q, k, v, full),
        "full-sdpa": lambda q, k, v: sdpa_attention(q, k, v, full),
        "window-masked": lambda q, k, v: sdpa_attention(q, k, v, win),
        "window-banded": lambda q, k, v: banded_attention(q, k, v, window, causal),
        "window-chunked": lambda q, k, v: chunked_attention(q, k, v, window, causal),
    }[name]


def default_variants(variants, device) -> list[str]:
    """``variants`` or all; "window-chunked" only on CUDA (on a CPU it is what window-banded runs)."""
    gpu = torch.device(device).type == "cuda" and flex_available()
    return [v for v in (variants or VARIANTS) if v != "window-chunked" or gpu]


def label(name: str) -> str:
    """A variant's plain-language name (``LABELS``), else its code name."""
    return LABELS.get(name, name)


def _growth(name: str) -> int:
    """How a variant's time grows with n: 1 for the band, 2 for anything over n×n."""
    return 1 if name in ("window-banded", "window-chunked") else 2


def _passes(fn, q, k, v, grad):
    def forward():
        with torch.no_grad():
            fn(q, k, v)

    def forward_backward():
        fn(q, k, v).backward(grad)
        q.grad = k.grad = v.grad = None
    return {"fwd": forward, "fwd+bwd": forward_backward}


PASSES = ("fwd", "fwd+bwd")
Progress = Callable[[float, str], None]


def run(ns, window=128, heads=4, d_head=64, batch=1, causal=True, repeats=3, variants=None,
        device="cpu", dtype=torch.float32, mem_budget_gib=8.0, log=print, *,
        passes=PASSES, progress: Progress | None = None,
        time_limit_s: float | None = None) -> pd.DataFrame:
    """Measure every variant at every n; one row per (n, variant, pass).

    ``passes``: which of "fwd", "fwd+bwd" to measure. ``progress(fraction, text)`` is called as
    the work advances (a fraction of the expected work, weighting each n by n²).
    ``time_limit_s``: before each n, a variant's time there is predicted from its time at the
    previous n (× the n ratio, squared for the O(n²) variants, linear for the band); variants
    are kept cheapest first while the predicted total fits in what is left of the limit, and
    the others are skipped with the reason (like the memory budget). The first n always runs.
    """
    variants = default_variants(variants, device)
    passes = [p for p in PASSES if p in passes]
    if not passes:
        raise ValueError("passes must include 'fwd' and/or 'fwd+bwd'")
    nbytes = torch.finfo(dtype).bits // 8
    rows = []
    weights = [n * n for n in ns]
    done, total = 0.0, float(sum(weights)) or 1.0
    started, spent, prev_n = time.perf_counter(), {}, None  # spent: variant -> seconds at prev_n

    def skip(n, name, reason):
        log(f"n={n:>6}  {name:<14} {reason}")
        rows.extend(dict(n=n, variant=name, pass_=p, skipped=reason) for p in passes)

    for n, weight in zip(ns, weights):
        steps = repeats + 2  # warm-up, the repeats, the peak-memory pass

        def tick(step, text, n=n, weight=weight, steps=steps):
            if progress is not None:
                progress(min(1.0, (done + weight * step / steps) / total), text)

        tick(0, f"n = {n}: preparing")
        g = torch.Generator(device=device).manual_seed(n)
        q, k, v, grad = (torch.randn(batch, heads, n, d_head, generator=g, device=device, dtype=dtype)
                         for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        candidates = []
        for name in variants:
            w = window if name.startswith("window") else None
            est = attention_bytes(n, w, heads, d_head, batch, "fwd+bwd" in passes, causal,
                                  KERNEL[name], nbytes)
            if est > mem_budget_gib * GIB:
                skip(n, name, f"skipped: needs ~{est / GIB:.1f} GiB > budget {mem_budget_gib:g} GiB")
            else:
                candidates.append(name)
        live = candidates
        if time_limit_s is not None and prev_n is not None:
            left = time_limit_s - (time.perf_counter() - started)
            predicted = {name: spent[name] * (n / prev_n) ** _growth(name) if name in spent
                         else float("inf") for name in candidates}
            live, budget = [], left
            for name in sorted(candidates, key=predicted.get):
                if predicted[name] <= budget:
                    live.append(name)
                    budget -= predicted[name]
                else:
                    shown = "?" if predicted[name] == float("inf") else f"~{predicted[name]:.0f} s"
                    skip(n, name, f"skipped: {shown} would pass the {time_limit_s:g} s time limit")
            live = [name for name in candidates if name in live]  # the usual order
        if not live:
            done += weight
            del q, k, v, grad
            continue
        times, spent_n = {}, {name: 0.0 for name in live}
        for name in live:
            fns = _passes(make_variant(name, window, causal), q, k, v, grad)
            times[name] = {p: fns[p] for p in passes}
            # warm-up: first-call costs (kernel choice, lazy init; on a GPU each pass's compilation)
            for p in (passes if torch.device(device).type == "cuda" else ["fwd"]):
                fns[p]()
        tick(1, f"n = {n}: warmed up")
        samples = {(name, p): [] for name in live for p in passes}
        for r in range(repeats):
            for name in live[r % len(live):] + live[:r % len(live)]:
                for p, fn in times[name].items():
                    samples[(name, p)].append(timed(fn, device))
            tick(2 + r, f"n = {n}: repeat {r + 1} of {repeats}")
        for name in live:
            w = window if name.startswith("window") else None
            for p, fn in times[name].items():
                ts, cpu = zip(*samples[(name, p)])
                peak = peak_bytes(fn, device)
                # what this variant and pass cost here: the repeats, the peak pass, the warm-up
                # (one-off costs such as a kernel's compilation are left out of the prediction)
                spent_n[name] += statistics.median(ts) * (repeats + 1 + (p == "fwd"))
                rows.append(dict(
                    n=n, variant=name, pass_=p, time_s=statistics.median(ts), time_min_s=min(ts),
                    cpu_s=statistics.median(cpu), peak_bytes=peak,
                    flops=attention_flops(n, w, heads, d_head, batch, p == "fwd+bwd", causal,
                                          KERNEL[name]),
                    bytes_analytic=attention_bytes(n, w, heads, d_head, batch, p == "fwd+bwd",
                                                   causal, KERNEL[name], nbytes),
                    skipped=""))
                r_ = rows[-1]
                log(f"n={n:>6}  {name:<14} {p:<8} {r_['time_s'] * 1e3:9.1f} ms "
                    f"(cpu {r_['cpu_s'] * 1e3:8.1f})  "
                    f"peak {r_['peak_bytes'] / MIB:9.1f} MiB  "
                    f"(analytic {r_['bytes_analytic'] / MIB:9.1f} MiB, {r_['flops'] / 1e9:8.2f} GFLOP)")
        done += weight
        tick(0, f"n = {n}: done")
        spent, prev_n = spent_n, n
        del q, k, v, grad
    return pd.DataFrame(rows).rename(columns={"pass_": "pass"})


def analytic_frame(ns, window=128, heads=4, d_head=64, batch=1, causal=True, variants=None,
                   dtype_bytes=4, passes=PASSES, device="cpu") -> pd.DataFrame:
    """The same rows as ``run`` on paper only: n, variant, pass, flops, bytes_analytic, skipped=""."""
    variants = default_variants(variants, device)
    return pd.DataFrame([
        dict(n=n, variant=name, **{"pass": p},
             flops=attention_flops(n, window if name.startswith("window") else None, heads, d_head,
                                   batch, p == "fwd+bwd", causal, KERNEL[name]),
             bytes_analytic=attention_bytes(n, window if name.startswith("window") else None, heads,
                                            d_head, batch, p == "fwd+bwd", causal, KERNEL[name],
                                            dtype_bytes),
             skipped="")
        for n in ns for name in variants for p in PASSES if p in passes])


def with_analytic(df: pd.DataFrame, window=128, heads=4, d_head=64, batch=1, causal=True,
                  dtype_bytes=4) -> pd.DataFrame:
    """``df`` (rows of ``run``, e.g. a reference CSV) with its analytic columns, flops and
    bytes_analytic, recomputed from today's formulas: the measured columns are kept as they were
    measured, the paper ones cannot go stale."""
    def row(r):
        w = window if str(r["variant"]).startswith("window") else None
        kernel, bwd = KERNEL.get(r["variant"], "fused"), r["pass"] == "fwd+bwd"
        return pd.Series({"flops": attention_flops(int(r["n"]), w, heads, d_head, batch, bwd, causal, kernel),
                          "bytes_analytic": attention_bytes(int(r["n"]), w, heads, d_head, batch, bwd,
                                                            causal, kernel, dtype_bytes)})
    out = df.copy()
    out[["flops", "bytes_analytic"]] = df.apply(row, axis=1) if len(df) else df[[]].assign(
        flops=[], bytes_analytic=[])
    return out


def table(df: pd.DataFrame) -> str:
    """n × variant: median wall ms (and process CPU ms) per pass, peak and analytic MiB, GFLOP
    ("-" for a pass that was not measured)."""
    lines = [f"{'n':>6}  {'variant':<14} {'fwd ms':>9} {'fwd+bwd ms':>11} {'(cpu ms)':>10} "
             f"{'peak fwd MiB':>13} {'peak f+b MiB':>13} {'analytic f+b':>13} {'GFLOP f+b':>10}"]

    def cell(row, col, scale, width):
        return f"{'-':>{width}}" if row is None else f"{row[col] * scale:{width}.1f}"

    for (n, name), g in df.groupby(["n", "variant"], sort=False):
        by = {r["pass"]: r for _, r in g.iterrows()}
        first = next(iter(by.values()))
        if first.get("skipped"):
            lines.append(f"{n:>6}  {name:<14} {first['skipped']}")
            continue
        f, b = by.get("fwd"), by.get("fwd+bwd")
        gflop = f"{'-':>10}" if b is None else f"{b['flops'] / 1e9:10.2f}"
        lines.append(f"{n:>6}  {name:<14} {cell(f, 'time_s', 1e3, 9)} {cell(b, 'time_s', 1e3, 11)} "
                     f"{cell(b, 'cpu_s', 1e3, 10)} {cell(f, 'peak_bytes', 1 / MIB, 13)} "
                     f"{cell(b, 'peak_bytes', 1 / MIB, 13)} {cell(b, 'bytes_analytic', 1 / MIB, 13)} "
                     f"{gflop}")
    return "\n".join(lines)


def ratio_table(df: pd.DataFrame, pass_: str = "fwd+bwd", reference: str = "window-banded",
                time_col: str = "time_s") -> pd.DataFrame:
    """The Cost page's summary of a run, measured beside analytic, for one pass.

    1. Each other variant against ``reference`` at the largest n where both ran: time ratio beside
       the FLOPs ratio, peak-memory ratio beside the analytic-bytes ratio.
    2. Each variant's growth per doubling of n (between its two largest measured n, rescaled to a
       factor of 2 in n): about 2 for O(n), 4 for O(n²).
    Columns: comparison (in ``LABELS``' words), n, time (of ``time_col``: "time_s" wall, or
    "cpu_s" the work's CPU time), flops, peak, bytes_analytic (ratios; NaN where not defined).
    """
    rows = df[(df["pass"] == pass_)]
    if "skipped" in rows:
        rows = rows[rows["skipped"].fillna("").astype(str) == ""]
    cols = (time_col, "flops", "peak_bytes", "bytes_analytic")
    out = []
    ref = rows[rows["variant"] == reference].set_index("n")
    for name, g in rows.groupby("variant", sort=False):
        if name == reference:
            continue
        both = sorted(set(g["n"]) & set(ref.index))
        if not both:
            continue
        n = both[-1]
        a = g.set_index("n").loc[n]
        out.append(dict(comparison=f"{label(name)} ÷ {label(reference)}", n=int(n),
                        **{c: float(a[c]) / float(ref.loc[n, c]) for c in cols}))
    for name, g in rows.groupby("variant", sort=False):
        g = g.sort_values("n")
        if len(g) < 2:
            continue
        a, b = g.iloc[-2], g.iloc[-1]
        doublings = math.log2(float(b["n"]) / float(a["n"]))
        out.append(dict(comparison=f"{label(name)}: growth per 2× n ({int(a['n'])} → {int(b['n'])})",
                        n=int(b["n"]),
                        **{c: (float(b[c]) / float(a[c])) ** (1 / doublings) for c in cols}))
    return pd.DataFrame(out, columns=["comparison", "n", *cols]).rename(
        columns={time_col: "time", "peak_bytes": "peak"})


def machine(device: str | torch.device = "cpu") -> dict:
    """Where a measurement was taken: device name, threads, torch version, load, the process's
    scheduling priority (nice), time (UTC)."""
    device = torch.device(device)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    nice = os.nice(0) if hasattr(os, "nice") else 0  # < 0: run ahead of the machine's other work
    return dict(device=device.type, name=device_name(device), cores=cpu_count(), threads=torch.get_num_threads(),
                torch=torch.__version__, load_average=load, nice=nice,
                measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def _value(df, n, variant, column, pass_="fwd+bwd"):
    sel = df[(df["n"] == n) & (df["variant"] == variant) & (df["pass"] == pass_)]
    if sel.empty or sel.iloc[0].get("skipped") or column not in sel or pd.isna(sel.iloc[0][column]):
        return None
    return float(sel.iloc[0][column])


def targets(df: pd.DataFrame, n_at: int = 8192, doubling=(2048, 4096, 8192, 16384), *,
            gpu: bool = False, gpu_at: int = 65536, gpu_max_n: int = 131072) -> list[tuple]:
    """The issue's targets on fwd+bwd rows, each as (what, ratio or None, ">=" / "<=", threshold,
    "PASS" / "FAIL" / "n/a", the same ratio in process CPU time or None). PASS/FAIL is judged on
    the median wall time, as specified; the CPU-time ratio is printed beside it as evidence.
    ``gpu``: the CUDA targets instead (window-banded reaches ``gpu_max_n``; at ``gpu_at`` it is
    >= 20x faster than flash SDPA on the causal mask; time and peak grow <= 2.3x per doubling of n
    from 8192 up)."""
    out = []

    def ratio(num, den, col):
        a, b = _value(df, *num, col), _value(df, *den, col)
        return None if a is None or b is None else a / b

    def check(what, num, den, col, op, threshold):
        value = ratio(num, den, col)
        ok = None if value is None else (value >= threshold if op == ">=" else value <= threshold)
        cpu = ratio(num, den, "cpu_s") if col == "time_s" else None
        out.append((what, value, op, threshold, "n/a" if ok is None else ("PASS" if ok else "FAIL"), cpu))

    banded, explicit, sdpa = "window-banded", "full-explicit", "full-sdpa"
    if gpu:  # the GPU targets: bf16 FlexAttention to n = 131072, linear from 8192 up
        last = _value(df, gpu_max_n, banded, "time_s")
        out.append((f"window-banded runs at n={gpu_max_n}", None if last is None else 1.0, ">=", 1,
                    "n/a" if last is None else "PASS", None))
        check(f"n={gpu_at} time: full-sdpa / window-banded", (gpu_at, sdpa), (gpu_at, banded),
              "time_s", ">=", 20)
        ns = [n for n in sorted(set(df["n"])) if n >= 8192]
        for a, b in zip(ns, ns[1:]):
            check(f"window-banded time  {a}->{b}", (b, banded), (a, banded), "time_s", "<=", 2.3)
            check(f"window-banded peak  {a}->{b}", (b, banded), (a, banded), "peak_bytes", "<=", 2.3)
        return out
    check(f"n={n_at} time: full-explicit / window-banded", (n_at, explicit), (n_at, banded),
          "time_s", ">=", 30)
    check(f"n={n_at} time: full-sdpa / window-banded", (n_at, sdpa), (n_at, banded), "time_s", ">=", 5)
    check(f"n={n_at} peak: full-explicit / window-banded", (n_at, explicit), (n_at, banded),
          "peak_bytes", ">=", 20)
    for a, b in zip(doubling, doubling[1:]):
        check(f"window-banded time  {a}->{b}", (b, banded), (a, banded), "time_s", "<=", 2.3)
        check(f"window-banded peak  {a}->{b}", (b, banded), (a, banded), "peak_bytes", "<=", 2.3)
        check(f"full-explicit peak  {a}->{b}", (b, explicit), (a, explicit), "peak_bytes", ">=", 3.5)
    return out


def format_targets(results) -> str:
    lines = ["targets (fwd+bwd; time = median wall clock; n/a = a side was skipped or not run):"]
    for what, value, op, threshold, status, cpu in results:
        shown = "   -   " if value is None else f"{value:7.2f}x"
        extra = "" if cpu is None else f"   cpu-time ratio {cpu:6.2f}x"
        lines.append(f"  {status:<4}  {what:<42} {shown}  (target {op} {threshold:g}x){extra}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cuda = cuda_available()
    p = argparse.ArgumentParser(prog="python -m tfviz.bench attention", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", help="sequence lengths (default: 1024 doubling to --max-n)")
    p.add_argument("--max-n", type=int, default=131072 if cuda else 16384)
    p.add_argument("--window", "-w", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--bidirectional", action="store_true", help="default: causal")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", nargs="+", choices=VARIANTS)
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16", "float64"))
    p.add_argument("--mem-budget-gib", type=float, default=None,
                   help="skip a variant whose analytic peak is larger (default: 8 on CPU, half the GPU)")
    p.add_argument("--csv", help="write every measurement to this CSV file")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    ns = a.n or [1 << i for i in range(10, 40) if (1 << i) <= a.max_n]
    budget = a.mem_budget_gib
    if budget is None:
        budget = 8.0 if a.device == "cpu" else torch.cuda.get_device_properties(0).total_memory / GIB / 2
    where = machine(a.device)  # before the run: the load average is the machine's, not ours
    print(f"{where['name']}; torch {where['torch']}; {where['measured_at']}")
    print(f"attention benchmark: device={a.device} threads={torch.get_num_threads()} dtype={a.dtype} "
          f"batch={a.batch} heads={a.heads} d_head={a.d_head} window={a.window} "
          f"{'bidirectional' if a.bidirectional else 'causal'} repeats={a.repeats} n={ns}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} on {os.cpu_count()} cores, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(default)')}")
    if load > (os.cpu_count() or 1) and "OMP_WAIT_POLICY" not in os.environ:
        print("  the machine is busy: timings will be noisy; consider OMP_WAIT_POLICY=PASSIVE")
    df = run(ns, a.window, a.heads, a.d_head, a.batch, not a.bidirectional, a.repeats, a.variants,
             a.device, getattr(torch, a.dtype), budget)
    print("\n" + table(df) + "\n")
    print(format_targets(targets(df, gpu=torch.device(a.device).type == "cuda")))
    if a.csv:
        df.to_csv(a.csv, index=False)
        policy = os.environ.get("OMP_WAIT_POLICY")
        command = ((f"nice -n {where['nice']} " if where.get("nice", 0) < 0 else "")
                   + (f"OMP_WAIT_POLICY={policy} " if policy else "")
                   + f"python -m tfviz.bench attention --n {' '.join(map(str, ns))} --window {a.window} "
                   f"--heads {a.heads} --d-head {a.d_head} --batch {a.batch} --repeats {a.repeats} "
                   f"--device {a.device} --dtype {a.dtype} --mem-budget-gib {budget:g}"
                   + " --bidirectional" * a.bidirectional + (f" --threads {a.threads}" if a.threads else ""))
        meta = dict(where, command=command, window=a.window, heads=a.heads, d_head=a.d_head,
                    batch=a.batch, causal=not a.bidirectional, repeats=a.repeats, dtype=a.dtype,
                    omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "(default)"))
        with open(meta_path(a.csv), "w") as f:
            json.dump(meta, f, indent=2)
        print(f"wrote {len(df)} rows to {a.csv} (where and when: {meta_path(a.csv)})")
    return 0


def meta_path(csv_path: str) -> str:
    """The JSON beside a ``--csv`` file saying where, when and how it was measured."""
    return str(csv_path).removesuffix(".csv") + ".json"
