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
import stat
import struct
import uuid
from pathlib import Path

import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

SUFFIX = ".safetensors"
MAX_HEADER_BYTES = 64 * 2**20
# The header JSON itself: a root object of tensor entries ({dtype, shape: [...], data_offsets: [...]})
# and __metadata__ (strings). Its brackets are bounded before it is parsed (json.loads turns each
# two-byte "{}" into a ~100-byte object: a 45 MB header of them took 1.4 GB), and so is its depth.
MAX_TENSORS = 100_000          # a 256-layer encoder-decoder with optimizer state and snapshots: ~60k
MAX_METADATA_BRACKETS = 300_000  # brackets inside metadata strings (a big BPE tokenizer's merges)
MAX_JSON_DEPTH = 32            # any JSON a checkpoint holds (the header itself: 3)
NOT_SAFETENSORS = "not a safetensors file (is it a pickle/torch.save file? those are never loaded)"
# safetensors dtype -> (torch dtype, bytes per element)
DTYPES = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
          "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
          "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1), "BOOL": (torch.bool, 1)}
ST_NAME = {v[0]: k for k, v in DTYPES.items()}

Header = dict[str, dict]  # tensor name -> {"dtype", "shape", "data_offsets"}


class CheckpointError(ValueError):
    """A file that is not a valid tfviz checkpoint; the message says what is wrong.

    ``str(e)`` is "<path>: <reason>"; ``e.reason`` is the reason alone and ``e.for_user(name)``
    says it about ``name`` (what a user called the file), never a server path."""

    def __init__(self, message: str, *, path=None, reason: str | None = None):
        super().__init__(message)
        self.path, self.reason = path, reason

    def for_user(self, name: str) -> str:
        if self.reason is not None:
            return f"{name}: {self.reason}"
        text = str(self)
        return text.replace(str(self.path), name) if self.path is not None else text


def fail(path, msg: str) -> CheckpointError:
    return CheckpointError(f"{path}: {msg}", path=path, reason=msg)


# ---------------------------------------------------------------------------------- JSON, bounded
def json_depth(value) -> int:
    """How deeply ``value`` (parsed JSON) nests: 0 for a scalar, 1 for [] or {}, ... (no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((x, depth + 1) for x in item if isinstance(x, (dict, list)))
    return deepest


def loads(text: str | bytes, path, what: str, *, max_bytes: int, max_containers: int,
          max_depth: int = MAX_JSON_DEPTH, invalid: str | None = None,
          bound: str = "a checkpoint like this one needs at most"):
    """``json.loads`` with its cost bounded first: at most ``max_bytes`` of text and
    ``max_containers`` brackets (counted in C before parsing; brackets inside strings count too,
    so this is an upper bound) — and at most ``max_depth`` levels (a RecursionError is never
    raised). CheckpointError naming ``what`` otherwise (``invalid``: the reason for text that is
    not JSON at all; ``bound``: the words before a limit, e.g. "tfviz reads at most")."""
    if len(text) > max_bytes:
        raise fail(path, f"{what} is {len(text):,} bytes; {bound} {max_bytes:,}")
    brackets = text.count("{" if isinstance(text, str) else b"{") + \
        text.count("[" if isinstance(text, str) else b"[")
    if brackets > max_containers:
        raise fail(path, f"{what} has {brackets:,} JSON objects/arrays; {bound} {max_containers:,}")
    try:
        value = json.loads(text)
    except RecursionError:
        value = None
    except (UnicodeDecodeError, ValueError):
        raise fail(path, invalid or f"{what} is not valid JSON") from None
    else:
        if json_depth(value) <= max_depth:
            return value
    raise fail(path, f"{what} nests deeper than {max_depth} levels")


def read_text(path: Path, what: str, *, max_bytes: int, bound: str = "tfviz reads at most") -> str:
    """A text file's contents, its size checked *before* it is read (and no more than
    ``max_bytes`` + 1 bytes read, should it grow meanwhile), strict UTF-8. CheckpointError naming
    ``what`` for anything else: a folder, a missing or unreadable file, other bytes."""
    def check(info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):  # a folder, a pipe (open would wait), a device
            raise fail(path, f"{what} is not a file (a folder?)")
        if info.st_size > max_bytes:
            raise fail(path, f"{what} is {info.st_size:,} bytes; {bound} {max_bytes:,}")
    try:
        check(os.stat(path))  # before it is opened
        with open(path, "rb") as f:
            check(os.fstat(f.fileno()))  # the file opened is the file checked
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:  # it grew meanwhile
            raise fail(path, f"{what} is over {max_bytes:,} bytes; {bound} {max_bytes:,}")
    except OSError as e:
        raise fail(path, f"{what} cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(path, f"{what} is not UTF-8 text (byte {e.start:,} is 0x{data[e.start]:02x})") from None


def read_json(path: Path, what: str, *, max_bytes: int, max_containers: int,
              max_depth: int = MAX_JSON_DEPTH, bound: str = "tfviz reads at most"):
    """A JSON file, bounded like ``loads`` and read like ``read_text``."""
    return loads(read_text(path, what, max_bytes=max_bytes, bound=bound), path, what,
                 max_bytes=max_bytes, max_containers=max_containers, max_depth=max_depth, bound=bound)


def checkpoint_path(path: str | os.PathLike) -> Path:
    """``runs/x`` -> ``runs/x.safetensors`` (a path already ending in .safetensors is kept)."""
    p = Path(path)
    return p if p.suffix == SUFFIX else p.with_name(p.name + SUFFIX)


# ---------------------------------------------------------------------------------- writing
def _write_all(f, data: bytes, chunk: int = 1 << 20) -> None:
    view = memoryview(data)
    for start in range(0, len(view), chunk):
        f.write(view[start:start + chunk])


def file_mode(folder: Path) -> int:
    """A new file is as private as its folder: 0600 in a folder only its owner may enter (a
    student's session folder, 0700), else the usual 0666 less the umask."""
    try:
        private = not os.stat(folder).st_mode & 0o077
    except OSError:
        private = False
    return 0o600 if private else 0o666


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder`` (links not followed; files vanishing meanwhile skipped)."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass  # deleted meanwhile
    return total


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the new one (a
    killed process may leave the hidden ``.NAME.XXXXXXXX.tmp``: never listed, swept by
    ``tfviz.classroom.disk``)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        mode = file_mode(path.parent)
        with open(tmp, "wb", opener=lambda name, flags: os.open(name, flags, mode)) as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_folder(path.parent)  # make the rename itself durable


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
    try:  # one copy: the text (a slice of the bytes first would be a second)
        text = str(memoryview(head)[8:8 + n], "utf-8")
    except UnicodeDecodeError:
        raise fail(path, NOT_SAFETENSORS) from None
    header = loads(text, path, "the header", max_bytes=MAX_HEADER_BYTES,
                   max_containers=3 * MAX_TENSORS + 2 + MAX_METADATA_BRACKETS, max_depth=3,
                   invalid=NOT_SAFETENSORS)
    if not isinstance(header, dict):
        raise fail(path, NOT_SAFETENSORS)
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise fail(path, "__metadata__ must map strings to strings")
    if len(header) > MAX_TENSORS:
        raise fail(path, f"{len(header):,} tensors; a checkpoint holds at most {MAX_TENSORS:,}")
    spans, available = [], size - 8 - n
    for name, info in header.items():
        if not (isinstance(info, dict) and info.get("dtype") in DTYPES and isinstance(info.get("shape"), list)
                and all(isinstance(d, int) and d >= 0 for d in info["shape"])
                and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
                and all(isinstance(o, int) for o in info["data_offsets"])):
            shown = {k: info[k] for k in list(info)[:4]} if isinstance(info, dict) else type(info).__name__
            raise fail(path, f"tensor {name[:100]!r} has a malformed header entry {str(shown)[:200]}")
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


def sync_folder(folder) -> None:
    """fsync a folder, so that a rename inside it is durable (not possible on every OS or
    filesystem: then nothing)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
