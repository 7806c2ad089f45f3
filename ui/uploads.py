"""Checkpoint uploads: validated fully, kept in the session's own folder, never unpickled.

Only ``.safetensors`` tfviz checkpoints (tensors + JSON metadata) are accepted, at most
``MAX_UPLOAD_MB`` each and ``MAX_SESSION_UPLOAD_MB`` per session. The bytes go to a hidden temp
file that the picker never lists, ``tfviz.load_checkpoint`` checks them (never unpickles; rejects
zips, truncation, lying headers, shapes/dtypes off the config, NaN/inf, future versions), and only
a valid file is renamed into place (a new name, never over another upload).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import streamlit as st

from .models import ModelRef, session_dir

MAX_UPLOAD_MB = 50  # per file; .streamlit/config.toml's server.maxUploadSize says the same
MAX_SESSION_UPLOAD_MB = int(os.environ.get("TFVIZ_SESSION_UPLOAD_MB", "200"))  # per session


def _session_upload_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) if folder.is_dir() else 0


def _check_name_and_size(shown: str, size: int, folder: Path) -> None:
    if not shown.lower().endswith(".safetensors"):
        hint = (" (a .json file is only the human-readable copy of a checkpoint's metadata: upload "
                "the .safetensors file next to it)" if shown.lower().endswith(".json") else "")
        raise ValueError(f"{shown}: only tfviz checkpoints (.safetensors: tensors + JSON metadata) "
                         f"are accepted{hint}; pickles (.pt, .pth, .bin, .ckpt, .pkl) are never loaded")
    if size > MAX_UPLOAD_MB * 2**20:
        raise ValueError(f"{shown} is {size / 2**20:.0f} MB; the limit is {MAX_UPLOAD_MB} MB")
    kept = _session_upload_bytes(folder)
    if kept + size > MAX_SESSION_UPLOAD_MB * 2**20:
        raise ValueError(f"this session already keeps {kept / 2**20:.0f} MB of uploads; the limit "
                         f"is {MAX_SESSION_UPLOAD_MB} MB per session")


def save_upload(name: str, data: bytes) -> ModelRef:
    """Validate an uploaded checkpoint, then keep it in this session's folder. Anything wrong:
    ``ValueError`` with the reason (naming the user's file, never a server path); nothing kept."""
    from tfviz.train.checkpoint import load_checkpoint
    from tfviz.publish import safe_stem

    shown = Path(str(name)).name[:80] or "the file"
    folder = session_dir() / "uploaded"
    _check_name_and_size(shown, len(data), folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{uuid.uuid4().hex}.upload.tmp"  # hidden, not *.safetensors: never listed
    try:
        tmp.write_bytes(data)
        try:
            load_checkpoint(tmp, max_bytes=MAX_UPLOAD_MB * 2**20)
        except ValueError as e:  # CheckpointError: say it about the user's file, not our temp path
            raise ValueError(str(e).replace(str(tmp), shown)) from None
        except Exception as e:  # noqa: BLE001 - whatever a hostile file triggers is a rejection
            raise ValueError(f"{shown}: not a usable tfviz checkpoint ({type(e).__name__}: "
                             f"{str(e)[:200]})") from None
        stem, i = safe_stem(shown), 2
        final = folder / f"{stem}.safetensors"
        while final.exists():  # a second upload of the same name never replaces the first
            final, i = folder / f"{stem}-{i}.safetensors", i + 1
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return ModelRef(f"{final.stem} (uploaded)", str(final), "uploaded")


def upload_box(where) -> bool:
    """The sidebar's "Upload a checkpoint" box. Each file is validated once; a valid one becomes
    the selected model. Returns True when a new file was saved this run."""
    saved = False
    with where.expander("Upload a checkpoint (.safetensors)"):
        # No type= filter: Streamlit would raise on another extension; save_upload says why instead.
        up = st.file_uploader("tfviz checkpoint", key="upload", label_visibility="collapsed",
                              help=f"A tfviz .safetensors checkpoint, at most {MAX_UPLOAD_MB} MB. "
                                   "Checked fully before use; pickles are never loaded.")
        if up is None:
            return False
        seen = (up.file_id, up.name, up.size)
        if st.session_state.get("_upload_seen") != seen:  # validate each file once
            st.session_state["_upload_seen"] = seen
            try:
                ref = save_upload(up.name, up.getvalue())
            except ValueError as e:
                st.session_state["_upload_result"] = ("error", f"Not loaded: {e}")
            else:
                st.session_state["_upload_result"] = ("success", f"Loaded {ref.label}.")
                st.session_state["model_path"] = ref.path
                saved = True
        kind, message = st.session_state.get("_upload_result", ("info", ""))
        if message:
            getattr(st, kind)(message)
    return saved
