"""The Cost page's live measurement as a server-wide resource: one at a time (two at once would slow
each other and both be wrong), on the shipped lm / lm-gqa / lm-mqa models whose KV caches are read
(else small untrained decoders of the three kinds). The measuring itself is ``tfviz.bench.live``."""
from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st

from tfviz.bench import live
from tfviz.paths import bench_dir

from .models import shipped

REFERENCE_DIR = bench_dir()  # docs/bench: the shipped reference measurements
KV_ZOO = {"MHA": "lm", "GQA": "lm-gqa", "MQA": "lm-mqa"}  # kind -> shipped checkpoint stem
BUSY = "another measurement is running — try again in a few seconds"


class Busy(RuntimeError):
    """Another session's measurement holds the machine."""


@st.cache_resource
def bench_lock() -> threading.Lock:
    return threading.Lock()


@st.cache_resource(show_spinner=False)
def device() -> str:
    """Where the live measurement runs: the GPU when there is one, else the CPU (never MPS)."""
    from tfviz.device import cuda_available

    return "cuda" if cuda_available() else "cpu"


@st.cache_resource(show_spinner=False)
def _random_kv_models() -> dict:
    from tfviz.bench.kvcache import random_models

    return {kind: (model, threading.Lock())
            for kind, model in random_models(d_model=64, n_heads=4, n_layers=2, vocab=64,
                                             max_len=256).items()}


def kv_models() -> tuple[list[live.KvModel], bool]:
    """[(kind, label, model, lock)] for MHA / GQA / MQA and whether they are the shipped zoo's."""
    loaded = {kind: shipped(stem) for kind, stem in KV_ZOO.items()}
    if all(lm is not None and lm.config.arch == "decoder" for lm in loaded.values()):
        return [(kind, lm.ref.label, lm.model, lm.lock) for kind, lm in loaded.items()], True
    return [(kind, f"untrained {kind} decoder", model, lock)
            for kind, (model, lock) in _random_kv_models().items()], False


@st.cache_data(show_spinner=False)
def _reference(path: str, mtime: int):
    return live.read_reference(path)


def reference(dev: str):
    """(DataFrame, metadata) of the shipped reference measurement for ``dev``, or None."""
    path = live.reference_path(dev, REFERENCE_DIR)
    try:
        return None if path is None else _reference(str(path), Path(path).stat().st_mtime_ns)
    except (OSError, ValueError, KeyError):
        return None


@st.cache_data(max_entries=32, show_spinner=False)
def summaries(df, pass_: str, time_col: str):
    """(``ratio_table``, ``live.honest_windows`` + ``live.fused_memory``) of a measurement: computed once per server for
    its data (25 ms of pandas on every rerun of every session before; hashing the frame: 5 ms)."""
    from tfviz.bench.attention import ratio_table

    notes = [live.honest_windows(df, pass_, time_col), live.fused_memory(df, pass_)]
    return ratio_table(df, pass_, time_col=time_col), "\n\n".join(x for x in notes if x)


@st.cache_data(ttl=60, max_entries=16, show_spinner="Timing this server for an estimate…")
def _calibration(window: int, pass_: str, device: str, threads: int) -> dict:
    """``live.calibrate`` for the whole server, at most once a minute per setting; ``Busy`` (not
    cached) while another session is measuring: the calibration would disturb it."""
    lock = bench_lock()
    if not lock.acquire(blocking=False):
        raise Busy(BUSY)
    try:
        models, _ = kv_models()
        return live.calibrate(live.Settings(window=window, pass_=pass_, threads=threads, device=device),
                              models)
    finally:
        lock.release()


def estimate(s: live.Settings) -> live.Estimate | None:
    """How long Measure now will take with settings ``s`` on this server now (``live.estimate``
    from a calibration of about a second), or None while another session is measuring."""
    try:
        return live.estimate(s, _calibration(s.window, s.pass_, s.device, s.threads))
    except Busy:
        return None


def measure(s: live.Settings, progress) -> dict:
    """``tfviz.bench.live.measure``, unless another session is measuring (``Busy``)."""
    lock = bench_lock()
    if not lock.acquire(blocking=False):
        raise Busy(BUSY)
    try:
        models, from_zoo = kv_models()
        return live.measure(s, models, progress, from_zoo)
    finally:
        lock.release()
