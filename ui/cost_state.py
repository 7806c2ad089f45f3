"""Cost page state: one measurement at a time per server, the models whose KV caches are read,
the reference CSV, and the run itself (``measure``), reporting progress to the page.

The benchmarks are ``tfviz.bench.attention.run`` (the model's own attention kernels) and
``tfviz.bench.kvcache.cache_table`` / ``generation_speed`` (real caches of real models).
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import streamlit as st

from tfviz.paths import bench_dir
from ui.models import available_models, load_model

KV_ZOO = {"MHA": "lm", "GQA": "lm-gqa", "MQA": "lm-mqa"}  # kind -> shipped checkpoint stem
HEADS, D_HEAD, BATCH, MIN_N = 4, 64, 1, 256
KV_PROMPT, KV_SPEED_TOKENS = 16, 128
RESULT_KEY = "cost_result"
BUSY = "another measurement is running — try again in a few seconds"


class Busy(RuntimeError):
    """Another session's measurement holds the machine."""


@st.cache_resource
def bench_lock() -> threading.Lock:
    """One per server: two measurements at once would slow each other and both be wrong."""
    return threading.Lock()


@st.cache_resource(show_spinner=False)
def _device() -> str:
    from tfviz.device import default_device

    return default_device()


def device() -> str:
    return _device()


def default_threads() -> int:
    """All cores, or 1 when the machine is already busy (load average >= cores): OpenMP threads
    waiting for a descheduled sibling make every kernel many times slower than one thread."""
    from tfviz.device import cpu_count

    cores = cpu_count()
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
            import torch

            return torch.cuda.get_device_properties(0).total_memory / 2 ** 30 / 2
        return 2.0  # a laptop serving a class: never more than this for one attention call

    @property
    def time_limit_s(self) -> float:
        return 120.0


# ------------------------------------------------------------------------------ KV models
@st.cache_resource(show_spinner=False)
def _random_kv_models() -> dict:
    from tfviz.bench.kvcache import random_models

    return {kind: (model, threading.Lock())
            for kind, model in random_models(d_model=64, n_heads=4, n_layers=2, vocab=64,
                                             max_len=256).items()}


def kv_models() -> tuple[list[tuple[str, str, object, threading.RLock]], bool]:
    """[(kind, label, model, lock)] for MHA / GQA / MQA and whether they are the shipped zoo's
    lm / lm-gqa / lm-mqa (else small untrained decoders of the three kinds)."""
    shipped = {Path(r.path).stem: r for r in available_models() if r.source == "shipped"}
    if all(stem in shipped for stem in KV_ZOO.values()):
        try:
            loaded = {kind: load_model(shipped[stem]) for kind, stem in KV_ZOO.items()}
        except ValueError:
            loaded = None
        if loaded and all(lm.config.arch == "decoder" for lm in loaded.values()):
            return [(kind, lm.ref.label, lm.model, lm.lock) for kind, lm in loaded.items()], True
    return [(kind, f"untrained {kind} decoder", model, lock)
            for kind, (model, lock) in _random_kv_models().items()], False


# ------------------------------------------------------------------------------ reference CSV
@st.cache_data(show_spinner=False)
def _read_reference(path: str, mtime: int):
    import pandas as pd

    df = pd.read_csv(path)
    df["skipped"] = df["skipped"].astype(object).fillna("").astype(str) if "skipped" in df else ""
    meta_file = Path(path).with_suffix(".json")
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    return df, meta


def reference(dev: str):
    """(DataFrame, metadata) of ``docs/bench/attention_<device>.csv`` (else the other device's),
    or None. The metadata says where, when and with which command it was measured."""
    for name in (dev, "cpu" if dev == "cuda" else "cuda"):
        path = bench_dir() / f"attention_{name}.csv"
        if path.is_file():
            try:
                return _read_reference(str(path), path.stat().st_mtime_ns)
            except (OSError, ValueError, KeyError):
                return None
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
    note = " — the machine was busy, so wall times include waiting for a core" if busy else ""
    when = str(meta.get("measured_at", "")).replace("T", " ").replace("+00:00", " UTC")
    return f"{meta.get('name', '?')} ({meta.get('device', '?')}{threads}{load}), {when}{note}"


# ------------------------------------------------------------------------------ the run
def measure(s: Settings, progress: Callable[[float, str], None]) -> dict:
    """Run the attention benchmark and the KV-cache measurements; raises ``Busy`` when another
    session is measuring. Torch threads are set for this script thread only, then restored."""
    import pandas as pd
    import torch

    from tfviz.bench import attention as bench
    from tfviz.bench import kvcache

    lock = bench_lock()
    if not lock.acquire(blocking=False):
        raise Busy(BUSY)
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
        models, shipped = kv_models()
        sizes, speed = [], []
        for i, (kind, label, model, model_lock) in enumerate(models):
            progress(0.8 + 0.2 * i / len(models), f"KV cache — {kind} ({label})")
            steps = (model.config.max_positions or 256) - KV_PROMPT
            with model_lock:
                sizes.append(kvcache.cache_table(model, kind, KV_PROMPT, steps, BATCH, every=16)
                             .assign(model=label))
                speed.append(kvcache.generation_speed(model, kind, KV_PROMPT,
                                                      min(KV_SPEED_TOKENS, steps), BATCH, s.repeats)
                             .assign(model=label))
        progress(1.0, "done")
        return dict(attention=df, sizes=pd.concat(sizes, ignore_index=True),
                    speed=pd.concat(speed, ignore_index=True), shipped=shipped, machine=where,
                    settings=s, seconds=time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads_before)
        lock.release()
