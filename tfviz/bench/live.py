"""The measurement the Cost page runs on request, and the reference it shows before one.

    s = Settings(max_n=1024, window=64, pass_="fwd", threads=1)
    result = measure(s, kv_models, progress)     # attention benchmark + real KV caches
    df, meta = reference("cpu", bench_dir)       # docs/bench/attention_cpu.csv + .json
    describe(meta)                               # "AMD EPYC (cpu, 1 thread, load 0.4), 2026-…"

Attention: ``tfviz.bench.attention.run`` (the model's own kernels, one layer of ``HEADS`` heads ×
``D_HEAD``, batch ``BATCH``, float32, causal) at n = ``MIN_N`` doubling up to ``max_n``. KV cache:
``tfviz.bench.kvcache`` on the given MHA / GQA / MQA models (real caches of real models).
UI-free: the caller decides how a measurement is shared (the app allows one at a time).
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from . import attention as bench
from . import kvcache

HEADS, D_HEAD, BATCH, MIN_N = 4, 64, 1, 256
KV_PROMPT, KV_SPEED_TOKENS = 16, 128
CPU_TIME_LIMIT_S = 120.0
CPU_MEM_BUDGET_GIB = 2.0  # a laptop serving a class: never more than this for one attention call


def default_threads(cores: int) -> int:
    """All ``cores``, or 1 when the machine is already busy (load average >= cores): OpenMP
    threads waiting for a descheduled sibling make every kernel many times slower than one."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return 1 if load >= cores else cores


@dataclass(frozen=True)
class Settings:
    max_n: int = 4096
    window: int = 128
    pass_: str = "fwd"
    repeats: int = 2
    threads: int = 1
    device: str = "cpu"

    @property
    def ns(self) -> list[int]:
        """MIN_N doubling up to max_n."""
        out, n = [], min(MIN_N, self.max_n)
        while n <= self.max_n:
            out.append(n)
            n *= 2
        return out

    @property
    def mem_budget_gib(self) -> float:
        if self.device == "cuda":
            return torch.cuda.get_device_properties(0).total_memory / 2 ** 30 / 2
        return CPU_MEM_BUDGET_GIB

    @property
    def time_limit_s(self) -> float:
        return CPU_TIME_LIMIT_S


Progress = Callable[[float, str], None]
KvModel = tuple  # (kind, label, model, lock): the lock is held while the model is stepped


def kv_tables(models: list[KvModel], repeats: int, progress: Progress) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cache bytes per position, generation speed with and without the cache) of each model."""
    sizes, speed = [], []
    for i, (kind, label, model, lock) in enumerate(models):
        progress(i / len(models), f"KV cache — {kind} ({label})")
        steps = (model.config.max_positions or 256) - KV_PROMPT
        with lock:
            sizes.append(kvcache.cache_table(model, kind, KV_PROMPT, steps, BATCH, every=16)
                         .assign(model=label))
            speed.append(kvcache.generation_speed(model, kind, KV_PROMPT, min(KV_SPEED_TOKENS, steps),
                                                  BATCH, repeats).assign(model=label))
    return pd.concat(sizes, ignore_index=True), pd.concat(speed, ignore_index=True)


def measure(s: Settings, models: list[KvModel], progress: Progress, shipped: bool = True) -> dict:
    """The attention benchmark, then the KV caches of ``models``. Torch threads are set for this
    thread only, then restored. Returns attention, sizes, speed (DataFrames), shipped, machine,
    settings and seconds."""
    threads_before = torch.get_num_threads()
    try:
        if s.device == "cpu":
            torch.set_num_threads(s.threads)
        where = bench.machine(s.device)
        t0 = time.perf_counter()
        df = bench.run(s.ns, s.window, HEADS, D_HEAD, BATCH, True, s.repeats, None, s.device,
                       torch.float32, s.mem_budget_gib, log=lambda *_: None, passes=(s.pass_,),
                       progress=lambda f, text: progress(0.8 * f, f"Attention — {text}"),
                       time_limit_s=s.time_limit_s)
        attention_s = time.perf_counter() - t0
        sizes, speed = kv_tables(models, s.repeats, lambda f, text: progress(0.8 + 0.2 * f, text))
        progress(1.0, "done")
        return dict(attention=df, sizes=sizes, speed=speed, shipped=shipped, machine=where,
                    settings=s, seconds=time.perf_counter() - t0, attention_seconds=attention_s)
    finally:
        torch.set_num_threads(threads_before)


# ------------------------------------------------------------------------------ how long it takes
CAL_N = 512      # the calibration's n: past the small sizes' fixed costs, a fraction of a second
KV_CAL_TOKENS = 8


@dataclass(frozen=True)
class Estimate:
    """How long ``measure`` will take here: ``seconds`` in all, of which ``attention_s`` the
    attention benchmark (its own time limit applied) and ``kv_s`` the KV caches; ``how`` says
    where the figure comes from, ``calibration_s`` what finding it cost."""
    seconds: float
    attention_s: float
    kv_s: float
    how: str
    calibration_s: float


def calibrate(s: Settings, models: list[KvModel]) -> dict:
    """This server's speed now, for ``estimate``: each attention variant's seconds per call at
    n = ``CAL_N`` (``s``'s window and pass, one repeat), and each KV model's seconds per generated
    token with and without its cache (``KV_CAL_TOKENS`` tokens after a ``KV_PROMPT``-token prompt,
    under the model's lock)."""
    threads_before = torch.get_num_threads()
    t0 = time.perf_counter()
    try:
        if s.device == "cpu":
            torch.set_num_threads(s.threads)
        df = bench.run([CAL_N], s.window, HEADS, D_HEAD, BATCH, True, 1, None, s.device, torch.float32,
                       s.mem_budget_gib, log=lambda *_: None, passes=(s.pass_,))
        kv = []
        for kind, _, model, lock in models:
            prompt = kvcache.random_prompt(model, KV_PROMPT, BATCH)
            with lock:
                per = {c: kvcache.time_once(lambda c=c: model.generate(prompt, KV_CAL_TOKENS, use_cache=c))
                       / KV_CAL_TOKENS for c in (True, False)}
            kv.append(dict(kind=kind, steps=(model.config.max_positions or 256) - KV_PROMPT,
                           cached_s=per[True], full_s=per[False]))
    finally:
        torch.set_num_threads(threads_before)
    times = {r["variant"]: float(r["time_s"]) for _, r in df.iterrows() if not r["skipped"]}
    return dict(n=CAL_N, attention=times, kv=kv, seconds=time.perf_counter() - t0)


def _calls(pass_: str, device: str, repeats: int) -> int:
    """Calls of one (variant, pass) at one n in ``bench.run``: warm-up, repeats, the peak pass."""
    warm = 1 if device == "cuda" or pass_ == "fwd" else 0
    return warm + repeats + 1


def _attention_seconds(s: Settings, per_call) -> float:
    """The attention benchmark's seconds for ``per_call(n, variant)`` seconds a call, with
    ``bench.run``'s time limit played out as it plays it (variants whose predicted time no longer
    fits are skipped, cheapest kept first)."""
    calls = _calls(s.pass_, s.device, s.repeats)
    variants = list(per_call(s.ns[0], None))
    total, spent, prev = 0.0, {}, None
    for n in s.ns:
        live = variants
        if prev is not None:
            left, live = s.time_limit_s - total, []
            predicted = {v: spent[v] * (n / prev) ** bench._growth(v) for v in variants if v in spent}
            for v in sorted(predicted, key=predicted.get):
                if predicted[v] <= left:
                    live.append(v)
                    left -= predicted[v]
        spent = {v: per_call(n, v) * calls for v in live}
        total += sum(spent.values())
        variants, prev = live, n
    return total


def _kv_seconds(kv: list[dict], repeats: int) -> float:
    """``kv_tables``' seconds from each model's per-token costs: the cache table steps the cached
    model to its last position; the speed test generates ``KV_SPEED_TOKENS`` with and without the
    cache, ``repeats`` times. Without the cache a step re-reads the whole sequence: its cost is
    taken to grow in proportion to the length from one cached step at 1 token to the measured
    one at ``KV_PROMPT + KV_CAL_TOKENS / 2``."""
    total = 0.0
    for m in kv:
        new = min(KV_SPEED_TOKENS, m["steps"])
        slope = max(0.0, m["full_s"] - m["cached_s"]) / (KV_PROMPT + KV_CAL_TOKENS / 2 - 1)
        full = sum(m["cached_s"] + slope * (KV_PROMPT + t - 1) for t in range(new))
        total += m["steps"] * m["cached_s"] + repeats * (new * m["cached_s"] + full)
    return total


def estimate(s: Settings, calibration: dict) -> Estimate:
    """How long ``measure(s, …)`` will take on this server, from a ``calibrate`` just taken: a
    variant's call at n costs its calibrated call × the analytic FLOPs at n over those at
    ``CAL_N`` (``tfviz.analysis.cost.attention_flops``); a variant not calibrated (over the memory
    budget at ``CAL_N``) is not counted."""
    cal, bwd = calibration["attention"], s.pass_ == "fwd+bwd"

    def flops(n, v):
        return bench.attention_flops(n, s.window if v.startswith("window") else None, HEADS, D_HEAD,
                                     BATCH, bwd, True, bench.KERNEL[v])

    def per_call(n, v):
        if v is None:
            return cal
        return cal[v] * flops(n, v) / flops(calibration["n"], v)
    attention, kv = _attention_seconds(s, per_call), _kv_seconds(calibration["kv"], s.repeats)
    how = (f"from a calibration just now ({calibration['seconds']:.1f} s): each attention variant "
           f"timed once at n = {calibration['n']} and scaled by its analytic FLOPs, each KV model "
           f"stepped {KV_CAL_TOKENS} tokens with and without its cache")
    return Estimate(attention + kv, attention, kv, how, calibration["seconds"])


def time_column(device: str, threads: int | None, columns=("time_s", "cpu_s")) -> tuple[str, str, str]:
    """(column, short name, what it is) of a run's time to show. On a CPU with one thread: the
    CPU time of the work ("cpu_s"), because on a shared machine (a class on one server, a
    container's CPU quota) wall time mostly measures waiting for a core — the reference shipped
    before, measured at load 3.5 on 2 cores, grew only 1.4x per doubling of n in wall time where
    its CPU time grew 4.1x, as O(n²) predicts. Otherwise (a GPU, several threads, a frame
    without "cpu_s") the median wall time ("time_s")."""
    if device == "cpu" and threads == 1 and "cpu_s" in columns:
        return ("cpu_s", "CPU time", "CPU time of the work, median: one thread, so waiting for a "
                "busy machine's cores is not counted")
    return "time_s", "time", "median wall time"


def read_reference(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """A reference CSV (``--csv`` of ``python -m tfviz.bench attention``) and its ``.json``; the
    analytic columns are recomputed from the formulas with the shape the JSON records."""
    df = pd.read_csv(path)
    df["skipped"] = df["skipped"].astype(object).fillna("").astype(str) if "skipped" in df else ""
    meta_file = Path(path).with_suffix(".json")
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    dtype_bytes = torch.finfo(getattr(torch, meta.get("dtype", "float32"))).bits // 8
    shape = {k: meta[k] for k in ("window", "heads", "d_head", "batch", "causal") if k in meta}
    return bench.with_analytic(df, **shape, dtype_bytes=dtype_bytes), meta


def reference_path(device: str, folder: str | Path) -> Path | None:
    """``folder/attention_<device>.csv``, else the other device's, else None."""
    for name in (device, "cpu" if device == "cuda" else "cuda"):
        path = Path(folder) / f"attention_{name}.csv"
        if path.is_file():
            return path
    return None


def describe(meta: dict) -> str:
    """'Intel … (cpu, 2 threads, load 1.2), 2025-… UTC' from ``tfviz.bench.attention.machine``."""
    if not meta:
        return "an unknown machine"
    load = meta.get("load_average")
    load = "" if load is None else f", load average {load:.1f}"
    n = meta.get("threads")
    threads = f", {n} thread{'s' * (n != 1)}" if meta.get("device") == "cpu" and n else ""
    busy = meta.get("device") == "cpu" and meta.get("load_average") is not None and \
        meta["load_average"] >= (meta.get("cores") or 1)
    ahead = (meta.get("nice") or 0) < 0
    note = (f" — the machine was busy; the measurement ran ahead of the other work (nice "
            f"{meta['nice']}), so it hardly waited for a core" if busy and ahead else
            " — the machine was busy, so wall times include waiting for a core" if busy else "")
    when = str(meta.get("measured_at", "")).replace("T", " ").replace("+00:00", " UTC")
    return f"{meta.get('name', '?')} ({meta.get('device', '?')}{threads}{load}), {when}{note}"


def honest_windows(df: pd.DataFrame, pass_: str, time_col: str = "time_s") -> str:
    """The Cost page's sentence on windows, with the numbers of ``df`` (a measured run, or the
    ``analytic_frame``) at the largest n where the masked window, the banded one and full
    attention with every score stored all have rows: what each computes, and what it cost."""
    rows = df[(df["pass"] == pass_)]
    if "skipped" in rows:
        rows = rows[rows["skipped"].fillna("").astype(str) == ""]
    at = {v: g.set_index("n") for v, g in rows.groupby("variant")}
    names = ("window-masked", "window-banded", "full-explicit")
    common = sorted(set.intersection(*(set(at[v].index) for v in names))) if all(v in at for v in names) else []
    if not common:
        return ""
    n = common[-1]
    masked, banded, full = (at[v].loc[n] for v in names)
    out = (f"**Honest windows.** At n = {n:,}, a window handed to the kernel as a mask "
           f"(*{bench.label('window-masked')}*) computes {masked['flops'] / 1e9:,.2f} GFLOPs — as "
           f"many as full attention with every score stored ({full['flops'] / 1e9:,.2f}): every one "
           f"of the n² scores is computed, then thrown away. Only the banded kernel "
           f"(*{bench.label('window-banded')}*) computes just the band: "
           f"{banded['flops'] / 1e9:,.2f} GFLOPs, {masked['flops'] / banded['flops']:,.0f}× fewer, "
           f"which makes it O(n·w).")
    t = time_col
    if t in rows and pd.notna(masked.get(t)) and pd.notna(banded.get(t)):
        out += (f" Measured: the masked window took {masked[t] * 1e3:,.1f} ms, the banded one "
                f"{banded[t] * 1e3:,.1f} ms ({masked[t] / banded[t]:,.1f}×).")
    return out


def _mb(b: float) -> str:
    return f"{b / 2**30:,.2f} GiB" if b >= 2**30 else f"{b / 2**20:,.1f} MiB"


def fused_memory(df: pd.DataFrame, pass_: str) -> str:
    """Why the fused full-attention kernel can use less memory than the window, with the numbers
    of ``df`` (a measured run or the reference) at the largest n where the fused kernel, the
    banded window and full attention with every score stored all ran: a fused kernel never
    stores the n × n scores (it computes them a block at a time with a running softmax), so its
    peak grows like the output (×2 per doubling of n), while it still does the O(n²) work.
    "" when one of them did not run."""
    rows = df[(df["pass"] == pass_)]
    if "skipped" in rows:
        rows = rows[rows["skipped"].fillna("").astype(str) == ""]
    at = {v: g.set_index("n").sort_index() for v, g in rows.groupby("variant")}
    names = ("full-sdpa", "window-banded", "full-explicit")
    if not all(v in at for v in names) or "peak_bytes" not in rows:
        return ""
    common = sorted(set.intersection(*(set(at[v].index) for v in names)))
    if not common:
        return ""
    n = common[-1]
    fused, banded, full = (at[v].loc[n] for v in names)
    f_peak, b_peak, e_peak = (float(x["peak_bytes"]) for x in (fused, banded, full))
    if not all(pd.notna(x) and x > 0 for x in (f_peak, b_peak, e_peak)):
        return ""
    ns = [m for m in at["full-sdpa"].index if m < n]
    growth = ""
    if ns:
        m = ns[-1]
        per = (f_peak / float(at["full-sdpa"].loc[m, "peak_bytes"])) ** (1 / math.log2(n / m))
        growth = f" (×{per:.2f} per doubling of n, like the output, not ×4 like the scores)"
    work = float(fused["flops"]) / float(banded["flops"])
    return (f"**Memory: the fused kernel stores no scores.** At n = {n:,} full attention's fused "
            f"kernel peaked at {_mb(f_peak)}, {f_peak / b_peak:.2f}× the band-only window's "
            f"{_mb(b_peak)}, though it computes {work:,.0f}× the window's FLOPs. It never stores the "
            f"n × n scores: it computes them a block of keys at a time and keeps a running softmax "
            f"(as FlashAttention does), so its peak grows with n{growth}. Full attention with every "
            f"score stored kept them all: {_mb(e_peak)}. The window saves work (time); storing no scores saves memory — the two are different costs.")

