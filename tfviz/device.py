"""Which device models run on: the one place that asks torch about CUDA GPUs, Apple's MPS and the
CPU (training, the job manager, the benchmarks and the app's device banner all ask here)."""
from __future__ import annotations

import os
import platform

import torch


def cpu_count() -> int:
    """Cores this process may use (respects CPU affinity / container limits where the OS tells us)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def cuda_available() -> bool:
    return torch.cuda.is_available()


def mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def default_device() -> str:
    """"cuda" when a CUDA GPU is there, else "cpu" (where benchmarks measure)."""
    return "cuda" if cuda_available() else "cpu"


def resolve_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """"auto" picks cuda > mps > cpu; a forced device that is not there is a ValueError."""
    if name == "auto":
        name = "cuda" if cuda_available() else "mps" if mps_available() else "cpu"
    if name == "cuda":
        if not cuda_available():
            raise ValueError("device='cuda' was requested but no CUDA GPU is available (use 'auto' or 'cpu')")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if name == "mps":
        if not mps_available():
            raise ValueError("device='mps' was requested but Apple's MPS backend is not available")
        return torch.device("mps")
    if name == "cpu":
        return torch.device("cpu")
    raise ValueError(f"unknown device {name!r}")


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return f"GPU ({torch.cuda.get_device_name(device)})"
    return {"mps": "Apple GPU (MPS)", "cpu": "CPU"}.get(device.type, str(device))


def device_name(device: str | torch.device) -> str:
    """The hardware's own name: the GPU model, or the CPU model from /proc/cpuinfo where there is one."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
    except OSError:
        return name


def describe_device() -> str:
    """One line naming where models will run: the GPU if torch sees one, else the CPU and its cores."""
    if cuda_available():
        index = torch.cuda.current_device()
        gib = torch.cuda.get_device_properties(index).total_memory / 2**30
        return f"GPU: {torch.cuda.get_device_name(index)} ({gib:.0f} GiB)"
    if mps_available():
        return "GPU: Apple silicon (MPS)"
    return f"CPU ({cpu_count()} cores)"


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_available() -> int | None:
    """What this process's memory cgroup (a container's limit) still allows, if it has a limit."""
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        used = int(open("/sys/fs/cgroup/memory.current").read())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def free_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes that can still be allocated on ``device`` now: the GPU's free memory, or the machine's
    available RAM (within a container's limit); None when it cannot be told (MPS)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    known = [m for m in (_meminfo_available(), _cgroup_available()) if m is not None]
    return min(known) if known else None


def use_bf16(setting: bool | None, device: torch.device) -> bool:
    """bfloat16 autocast only on CUDA; automatic (None) = on when the GPU supports bf16."""
    if device.type != "cuda":
        return False
    return torch.cuda.is_bf16_supported() if setting is None else setting


# Dense bf16 tensor-core peak, FLOP/s, from NVIDIA's datasheets (without sparsity), by a substring
# of torch.cuda.get_device_name. First match wins: the more specific names come first.
BF16_PEAK = (("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12),
             ("GH200", 989e12), ("B200", 2250e12), ("A100", 312e12), ("L40S", 362e12),
             ("L4", 121e12), ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12),
             ("RTX 3090", 71e12))


def bf16_peak_flops(device: torch.device) -> float | None:
    """The GPU's dense bf16 peak from its datasheet (``BF16_PEAK``), or None when unknown / no GPU:
    the denominator of MFU (model FLOPs utilisation)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in BF16_PEAK if key in name), None)


def gpu_memory_gib(device: torch.device) -> float | None:
    """Peak memory allocated on the GPU by tensors since the last reset, GiB (None off CUDA)."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2 ** 30
