"""The file format of a checkpoint: one safetensors file, tensors + JSON metadata. Never a pickle.

This layer knows tensors and JSON only (what a checkpoint *means* is ``tfviz.train.checkpoint``):

    u64 little-endian N | N bytes of JSON header | tensor bytes

The header maps tensor name -> {dtype, shape, data_offsets} and ``__metadata__`` (str -> str).
``read_header`` checks every entry against the file's length *before* any tensor is read;
``check_tensors`` / ``load_tensors`` check names, dtypes, shapes and finiteness; ``write`` and
``atomic_write`` write a temp file in the same folder, flush + fsync, then ``os.replace``, so a
crash leaves the old file or the new one, never half of one.
"""
from __future__ import annotations

import json
import math
import os
import struct
import uuid
from pathlib import Path

import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

SUFFIX = ".safetensors"
DEFAULT_MAX_BYTES = 200 * 2**20
MAX_HEADER_BYTES = 64 * 2**20
NOT_SAFETENSORS = "not a safetensors file (is it a pickle/torch.save file? those are never loaded)"
# safetensors dtype -> (torch dtype, bytes per element)
DTYPES = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
          "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
          "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1), "BOOL": (torch.bool, 1)}
ST_NAME = {v[0]: k for k, v in DTYPES.items()}

Header = dict[str, dict]  # tensor name -> {"dtype", "shape", "data_offsets"}


class CheckpointError(ValueError):
    """A file that is not a valid tfviz checkpoint; the message says what is wrong."""


def fail(path, msg: str) -> CheckpointError:
    return CheckpointError(f"{path}: {msg}")


def checkpoint_path(path: str | os.PathLike) -> Path:
    """``runs/x`` -> ``runs/x.safetensors`` (a path already ending in .safetensors is kept)."""
    p = Path(path)
    return p if p.suffix == SUFFIX else p.with_name(p.name + SUFFIX)


# ---------------------------------------------------------------------------------- writing
def _write_all(f, data: bytes, chunk: int = 1 << 20) -> None:
    view = memoryview(data)
    for start in range(0, len(view), chunk):
        f.write(view[start:start + chunk])


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable (not possible on every OS / filesystem)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Tensors (contiguous, CPU) + str -> str metadata as one safetensors file, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, _st_save(tensors, metadata=metadata))


# ---------------------------------------------------------------------------------- reading
def parse_header(head: bytes, size: int, path="checkpoint") -> tuple[Header, dict[str, str]]:
    """Parse and check a safetensors header from the file's first bytes ``head`` (at least the
    header) and its total ``size``, without reading tensor data -> (header, metadata)."""
    if head[:4] == b"PK\x03\x04":
        raise fail(path, "a zip archive, not a safetensors file (torch.save writes zips of pickles; "
                         "those are never loaded)")
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise fail(path, NOT_SAFETENSORS)
    if size < 10:
        raise fail(path, f"only {size} bytes: too short to be a checkpoint (truncated?)")
    (n,) = struct.unpack("<Q", head[:8])
    if head[8:9] != b"{" or n < 2 or n > MAX_HEADER_BYTES:
        raise fail(path, NOT_SAFETENSORS)
    if 8 + n > size:
        raise fail(path, f"truncated: the header says it is {n} bytes but the file ends after {size - 8}")
    try:
        header = json.loads(head[8:8 + n])
    except (UnicodeDecodeError, ValueError):
        raise fail(path, NOT_SAFETENSORS) from None
    if not isinstance(header, dict):
        raise fail(path, NOT_SAFETENSORS)
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise fail(path, "__metadata__ must map strings to strings")
    spans, available = [], size - 8 - n
    for name, info in header.items():
        if not (isinstance(info, dict) and info.get("dtype") in DTYPES and isinstance(info.get("shape"), list)
                and all(isinstance(d, int) and d >= 0 for d in info["shape"])
                and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
                and all(isinstance(o, int) for o in info["data_offsets"])):
            raise fail(path, f"tensor {name!r} has a malformed header entry {str(info)[:200]}")
        begin, end = info["data_offsets"]
        need = math.prod(info["shape"]) * DTYPES[info["dtype"]][1]
        if not 0 <= begin <= end or end - begin != need:
            raise fail(path, f"tensor {name!r}: shape {info['shape']} of {info['dtype']} needs {need} "
                             f"bytes but its header entry spans {begin}..{end}")
        spans.append((begin, end))
    end = max((e for _, e in spans), default=0)
    if end > available:
        raise fail(path, f"truncated or corrupt: the header claims {end} bytes of tensor data but only "
                         f"{available} follow it")
    covered = 0
    for b, e in sorted(spans):
        if b != covered:
            raise fail(path, "tensor data overlaps or leaves gaps: the header is corrupt")
        covered = e
    if end < available:
        raise fail(path, f"{available - end} unexpected bytes after the tensor data")
    return header, meta


def read_header(source: bytes | str | os.PathLike, path=None) -> tuple[Header, dict[str, str]]:
    """The checked header and metadata of a checkpoint, from its bytes or from a file (reading only
    the header: no tensor data). CheckpointError for anything that is not a sound safetensors file."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return parse_header(bytes(source), len(source), path or "checkpoint")
    path = path or source
    try:
        with open(source, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
            head += f.read(max(0, min(n, size - 8, MAX_HEADER_BYTES + 1)))
    except OSError as e:
        raise fail(path, f"cannot be read ({e.strerror or e})") from None
    return parse_header(head, size, path)


def check_tensors(header: Header, want: dict[str, tuple[torch.dtype, tuple]], path,
                  optional=lambda name: False) -> None:
    """Exactly the names in ``want`` (plus any ``optional(name)`` allows), each with its dtype and shape."""
    extra = {k for k in header if optional(k)}
    missing = sorted(set(want) - set(header))
    unexpected = sorted(set(header) - set(want) - extra)
    if missing:
        raise fail(path, f"missing tensor(s) {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if unexpected:
        raise fail(path, f"unexpected tensor(s) {', '.join(unexpected[:5])}"
                         f"{' ...' if len(unexpected) > 5 else ''} for this model config")
    for k, (dtype, shape) in want.items():
        got = (DTYPES[header[k]["dtype"]][0], tuple(header[k]["shape"]))
        if got != (dtype, shape):
            raise fail(path, f"tensor {k!r} is {got[0]} {list(got[1])} but the config needs "
                             f"{dtype} {list(shape)}")


def load_tensors(data: bytes, path) -> dict[str, torch.Tensor]:
    """Every tensor of a file whose header was checked; CheckpointError for NaN / inf values."""
    tensors = _st_load(data)
    for k, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise fail(path, f"tensor {k!r} holds NaN or infinite values (saved from a diverged run?)")
    return tensors


def read_bytes(path: Path, max_bytes: int) -> bytes:
    """A file's bytes, refusing files over ``max_bytes`` (before reading them)."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    size = path.stat().st_size
    if size > max_bytes:
        raise fail(path, f"{size / 2**20:.1f} MB is over the {max_bytes / 2**20:.0f} MB limit for "
                         "checkpoints (pass max_bytes= to allow larger files)")
    return path.read_bytes()
