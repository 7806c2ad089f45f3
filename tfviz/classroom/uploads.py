"""A student's uploaded checkpoint: checked fully, then kept in their session's private folder.

Only ``.safetensors`` tfviz checkpoints (tensors + JSON metadata) are accepted, at most
``tfviz.limits.UPLOAD_MB`` each, ``TFVIZ_SESSION_UPLOAD_MB`` per session and within the
server-wide quota (``tfviz.classroom.disk``). The bytes go to a hidden temp file (0600) that no
picker lists, ``load_checkpoint`` checks them (never unpickles; rejects zips, truncation, lying
headers, oversized or too deeply nested metadata, task specs beyond their bounds, shapes/dtypes
off the config, NaN/inf, future versions), and only a valid file is renamed into place (a new
name, never over another upload). Anything wrong: ``ValueError`` whose message names the user's
file, never a server path; nothing is kept (a full disk too: said in words, the temp file removed).
"""
from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

from .. import limits, paths
from ..publish import safe_stem
from ..storage import SUFFIX, CheckpointError
from ..train.checkpoint import load_checkpoint
from .disk import private_dir, reserve

MB = 2**20
PICKLES = "pickles (.pt, .pth, .bin, .ckpt, .pkl) are never loaded"


def uploads_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob(f"*{SUFFIX}")) if folder.is_dir() else 0


def save_upload(folder: Path, name: str, data: bytes) -> Path:
    """Check ``data`` (a file the user called ``name``) and keep it in ``folder`` (a session's
    ``uploaded/``) -> the kept file's path. ValueError with the reason."""
    shown = Path(str(name)).name[:80] or "the file"
    if not shown.lower().endswith(SUFFIX):
        hint = (" (a .json file is only the human-readable copy of a checkpoint's metadata: upload "
                "the .safetensors file next to it)" if shown.lower().endswith(".json") else "")
        raise ValueError(f"{shown}: only tfviz checkpoints (.safetensors: tensors + JSON metadata) "
                         f"are accepted{hint}; {PICKLES}")
    if len(data) > limits.upload_bytes():
        raise ValueError(f"{shown} is {len(data) / MB:.0f} MB; the limit is {limits.UPLOAD_MB} MB")
    have, cap = uploads_size(folder), limits.session_upload_bytes()
    if have + len(data) > cap:
        raise ValueError(f"this session already keeps {have / MB:.0f} MB of uploads; the limit is "
                         f"{cap / MB:.0f} MB per session")
    tmp = folder / f".{uuid.uuid4().hex}.upload.tmp"  # hidden, not *.safetensors: never listed
    try:  # the bytes are held in the run store's ledger while they are written and checked
        held = reserve(len(data), shown, tmp)
        held.__enter__()
    except ValueError as e:
        raise ValueError(f"{shown}: not kept: {e}") from None
    try:
        try:
            private_dir(folder)
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
        except OSError as e:  # a full disk, a quota, a folder that cannot be written: in words
            raise ValueError(f"{shown}: not kept: {unwritable(e)}") from None
        try:
            load_checkpoint(tmp, max_bytes=limits.upload_bytes())
        except CheckpointError as e:  # say it about the user's file, not our temp path
            raise ValueError(paths.scrub(e.for_user(shown))) from None
        except Exception as e:  # noqa: BLE001 - whatever a hostile file triggers is a rejection
            raise ValueError(f"{shown}: not a usable tfviz checkpoint ({type(e).__name__}: "
                             f"{paths.scrub(str(e))[:200]})") from None
        stem, i = safe_stem(shown), 2
        final = folder / f"{stem}{SUFFIX}"
        while final.exists():  # a second upload of the same name never replaces the first
            final, i = folder / f"{stem}-{i}{SUFFIX}", i + 1
        try:
            os.replace(tmp, final)
        except OSError as e:
            raise ValueError(f"{shown}: not kept: {unwritable(e)}") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        try:
            held.__exit__(None, None, None)
        except ValueError:  # the store cannot be written now (a full disk): the row goes with this
            pass            # process (the ledger drops reservations of ended processes)
    return final


def unwritable(e: OSError) -> str:
    """Why a file could not be written, as a sentence (no server path)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the server's disk is full, so nothing was written (ask your teacher to free space)"
    return f"the server could not write it ({os.strerror(e.errno) if e.errno else type(e).__name__})"
