"""Publish a checkpoint to the whole class: a validated, atomic copy into ``checkpoints/published/``.

Students only ever see their own trained and uploaded models (their session's folder); the
published folder is the one place every session's model picker reads. Publishing therefore
checks the file exactly as an upload is checked (``load_checkpoint``: safetensors only, never a
pickle; metadata, tensor names, shapes, dtypes and finiteness against the saved config), on the
very bytes that are copied, and only then renames them into place, so a half-written or invalid
file is never listed.

    publish("checkpoints/user/3fa9c2e1b7d0/trained/coref-rope.safetensors", "checkpoints/published")
    python -m tfviz publish runs/coref.safetensors [--name coref-demo] [--dir checkpoints/published]
"""
from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from .paths import published_dir
from .limits import checkpoint_bytes
from .storage import SUFFIX, CheckpointError, atomic_write, fail
from .train.checkpoint import load_checkpoint

__all__ = ["publish", "unpublish", "published", "safe_stem"]


def safe_stem(name: str) -> str:
    """A file stem that is safe in any folder: letters, digits, ``_ . -``; no leading dot."""
    stem = Path(str(name)).name
    if stem.endswith(SUFFIX):
        stem = stem[: -len(SUFFIX)]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:60].strip("._")
    return stem or "model"


def _unique(folder: Path, stem: str, data: bytes) -> tuple[Path, bool]:
    """(target path, already there): ``stem``, or ``stem-2``, ``stem-3``… when another file has the name.
    A file with the same bytes counts as already published."""
    target, i = folder / f"{stem}{SUFFIX}", 2
    while target.exists():
        try:
            if target.stat().st_size == len(data) and target.read_bytes() == data:
                return target, True
        except OSError:
            pass
        target, i = folder / f"{stem}-{i}{SUFFIX}", i + 1
    return target, False


def publish(src: str | os.PathLike, dest_dir: str | os.PathLike | None = None, *, name: str | None = None,
            replace: bool = False, max_bytes: int | None = None) -> Path:
    """Validate ``src`` and copy it atomically into ``dest_dir``; returns the published path.

    The name is ``name`` (or ``src``'s stem), made safe; an existing different file of that name
    is kept and the copy gets ``-2``, ``-3``… unless ``replace``. Publishing the same bytes again
    returns the existing path. Raises ``CheckpointError`` (a ``ValueError``) with the reason when
    ``src`` is not a valid tfviz checkpoint; nothing is written then."""
    src = Path(src)
    max_bytes = checkpoint_bytes() if max_bytes is None else max_bytes
    folder = Path(dest_dir) if dest_dir is not None else published_dir()
    if not src.is_file():
        raise fail(src, "no such checkpoint file")
    size = src.stat().st_size
    if size > max_bytes:
        raise fail(src, f"{size / 2**20:.1f} MB is over the {max_bytes / 2**20:.0f} MB limit")
    data = src.read_bytes()  # validate these bytes, not the file (it may change meanwhile)
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".publish-{uuid.uuid4().hex}{SUFFIX}.tmp"  # hidden: never listed
    try:
        probe.write_bytes(data)
        load_checkpoint(probe, max_bytes=max_bytes)
    except CheckpointError as e:  # name the source, not the probe
        raise (fail(src, e.reason) if e.reason is not None
               else CheckpointError(str(e).replace(str(probe), str(src)), path=src)) from None
    finally:
        probe.unlink(missing_ok=True)
    stem = safe_stem(name or src.name)
    if replace:
        target = folder / f"{stem}{SUFFIX}"
    else:
        target, there = _unique(folder, stem, data)
        if there:
            return target
    atomic_write(target, data)
    return target


def unpublish(path_or_name: str | os.PathLike, dest_dir: str | os.PathLike | None = None) -> bool:
    """Remove a published checkpoint (by name or path; only inside ``dest_dir``). False if absent."""
    folder = (Path(dest_dir) if dest_dir is not None else published_dir()).resolve()
    given = Path(path_or_name)
    if given.suffix == SUFFIX and given.resolve().parent == folder:
        target = given.resolve()
    elif len(given.parts) == 1:  # a bare name
        target = folder / f"{safe_stem(given.name)}{SUFFIX}"
    else:
        raise ValueError(f"{path_or_name} is not a published checkpoint (not in {folder})")
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    target.with_suffix(".json").unlink(missing_ok=True)
    return True


def published(dest_dir: str | os.PathLike | None = None) -> list[Path]:
    """The published checkpoints, by name."""
    folder = Path(dest_dir) if dest_dir is not None else published_dir()
    return sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
