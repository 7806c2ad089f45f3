"""The sidebar's "Upload a checkpoint" box: glue around ``tfviz.classroom.uploads`` (where the
checks live: .safetensors only, size and per-session and server-wide quotas, validated fully in a
private temp file, never unpickled, never over another upload; every message names the user's
file, never a server path)."""
from __future__ import annotations

import streamlit as st

from .models import ModelRef, session_dir


def save_upload(name: str, data: bytes) -> ModelRef:
    """Check an uploaded checkpoint and keep it in this session's folder; ValueError with the
    reason (nothing kept)."""
    from tfviz.classroom.uploads import save_upload as keep

    final = keep(session_dir() / "uploaded", name, data)
    return ModelRef(f"{final.stem} (uploaded)", str(final), "uploaded")


def upload_box(where) -> bool:
    """Each file is checked once; a valid one becomes the selected model. Returns True when a new
    file was saved this run."""
    from tfviz.limits import UPLOAD_MB

    saved = False
    with where.expander("Upload a checkpoint (.safetensors)"):
        # No type= filter: Streamlit would raise on another extension; save_upload says why instead.
        up = st.file_uploader("tfviz checkpoint", key="upload", label_visibility="collapsed",
                              help=f"A tfviz .safetensors checkpoint, at most {UPLOAD_MB} MB. "
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
