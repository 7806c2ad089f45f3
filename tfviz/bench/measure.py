"""Wall time and peak memory of one call, on CPU or CUDA.

Time: ``time.perf_counter`` around the call (after ``torch.cuda.synchronize`` on a GPU), and the
CPU time of the work beside it (``cpu_clock``: the calling thread's with one torch thread, else the
process's). The benchmarks interleave variants
and take the median over repeats; nothing here averages.

Peak memory = the most bytes allocated *on top of what existed before the call*, at any instant
during it:

* CUDA: ``torch.cuda.reset_peak_memory_stats()``, then ``max_memory_allocated() - memory_allocated()``
  as it was before the call (the caching allocator's own statistics).
* CPU: PyTorch keeps no CPU allocator statistics, so the call runs once under
  ``torch.profiler.profile(profile_memory=True)``. Every allocation and free by PyTorch's CPU
  allocator (also inside autograd's backward and in ``at::parallel_for`` worker threads) is then
  recorded as a ``[memory]`` event with a signed size (+ allocated, - freed) and a timestamp. Sorted by
  time, their running sum is the bytes allocated during the call and still live at each instant;
  its maximum is the peak. The profiler reports no frees of memory allocated *before* the call,
  so freeing an old tensor does not offset new ones: the figure can only overstate net growth,
  never understate it (the benchmarks free nothing that predates the call). Memory that bypasses
  PyTorch's allocator (BLAS/oneDNN scratch, thread stacks) is not seen.
  ``tests/test_cost.py`` checks the method on known allocations.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_once(fn: Callable[[], object], device: torch.device | str = "cpu") -> float:
    """Wall-clock seconds for one call of ``fn``."""
    return timed(fn, device)[0]


def cpu_clock() -> Callable[[], float]:
    """The CPU clock of the work: with one torch thread the work runs on the calling thread, so
    its own CPU time (``time.thread_time``: other threads of the process — a web server's other
    sessions — are not counted); with several, the whole process's (``time.process_time``)."""
    return time.thread_time if torch.get_num_threads() == 1 else time.process_time


def timed(fn: Callable[[], object], device: torch.device | str = "cpu") -> tuple[float, float]:
    """(wall seconds, CPU seconds of the work, ``cpu_clock``) for one call of ``fn``.

    On a shared machine wall time includes waiting for a core (and a container's CPU quota
    throttles every process in it, whatever its priority); CPU time counts only the work done, so
    a kernel's scaling shows through the noise (with t threads, CPU ~ t x wall when idle)."""
    clock = cpu_clock()
    sync(device)
    start, cpu = time.perf_counter(), clock()
    fn()
    sync(device)
    return time.perf_counter() - start, clock() - cpu


@contextlib.contextmanager
def _quiet_stderr():
    """Kineto prints a start/stop line to fd 2 for every profiling session: hide those lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak extra bytes allocated while ``fn()`` runs (see the module docstring for the method)."""
    device = torch.device(device)
    if device.type == "cuda":
        sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        sync(device)
        return max(0, torch.cuda.max_memory_allocated(device) - base)
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return peak_from_events(prof.profiler.kineto_results.events())


def peak_from_events(events) -> int:
    """Max of the running sum of CPU ``[memory]`` event sizes, in time order."""
    mem = [e for e in events if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    mem.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in mem:
        current += e.nbytes()
        peak = max(peak, current)
    return peak


def interleave(fns: dict[str, Callable[[], object]], reps: int, warmup: int,
               device: torch.device | str = "cpu") -> dict[str, float]:
    """Median wall seconds per variant, the variants run in turn within every rep (so drift and a
    neighbour's load hit all of them alike), after ``warmup`` untimed rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            times[k].append(time_once(fn, device))
    return {k: statistics.median(v) for k, v in times.items()}


STEP_WARMUP = 2  # untimed steps of each model first: the first steps pay one-off costs


def step_times(runs: list[tuple], repeats: int = 3, warmup: int = STEP_WARMUP) -> list[float]:
    """Median wall seconds of one training step (``step_seconds``) of each ``(model, inputs,
    targets)``, compared fairly: every model first takes ``warmup`` untimed steps (the process's
    first backward, a shape's first kernels: the first model's row read 1,328 ms beside ~310 ms),
    then the timed steps go round the models in turn, so a change in the machine's load falls on
    all of them alike. Each model's train/eval mode is restored and its gradients cleared."""
    steps = [_step(*r) for r in runs]
    modes = [m.training for m, *_ in runs]
    times: list[list[float]] = [[] for _ in runs]
    try:
        for (m, *_), step in zip(runs, steps):
            m.train()
            for _ in range(warmup):
                step()
        for _ in range(max(1, repeats)):
            for i, ((m, inputs, _), step) in enumerate(zip(runs, steps)):
                times[i].append(time_once(step, next(m.parameters()).device))
    finally:
        for (m, *_), was in zip(runs, modes):
            m.zero_grad(set_to_none=True)
            m.train(was)
    return [sorted(t)[len(t) // 2] for t in times]


def _step(model, inputs: tuple, targets: torch.Tensor) -> Callable[[], None]:
    device = next(model.parameters()).device
    inputs = tuple(x.to(device) for x in inputs)
    targets = targets.to(device)

    def step():
        logits = model(*inputs)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(),
                                          ignore_index=-100).backward()
    return step


def step_seconds(model, inputs: tuple, targets: torch.Tensor, repeats: int = 5,
                 warmup: int = 1) -> float:
    """Median wall seconds of one training step's forward and backward (mean cross-entropy over
    the targets, -100 ignored; no optimizer update) of ``model`` on ``inputs`` (the tensors its
    forward takes), after ``warmup`` untimed steps. Gradients are cleared after; the model's
    train/eval mode is restored. Several models compared: ``step_times``."""
    return step_times([(model, inputs, targets)], repeats, warmup)[0]
