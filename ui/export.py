"""A model out of the app as a Hugging Face folder (issue 30): the "Export as a Hugging Face
folder" panel — on the Train page for a finished run, in the sidebar for the model picked. What
a family can express, writing a folder and checking it are ``tfviz.interop.export``'s (no
transformers needed); the Train form's "Architecture shape" that makes a run exportable is
``ui.train_state``'s (``shape_choice``). This module is the glue.

The download is built when the button is pressed (a zip of the folder), one export at a time on
the server; "Save into models/" writes the folder where the picker's *local* source lists it (the
catalogue is refreshed at once, so the next render lists it) — on a server with a teacher key,
for the teacher only: a folder there is listed for every session, as a published model is.
"""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import streamlit as st

NOT_A_FOLDER = ("local", "hf-cache")  # sources whose models are Hugging Face folders already


@st.cache_resource
def _writing() -> threading.Lock:
    """One export at a time on this server (a folder or a zip holds one model's weights again)."""
    return threading.Lock()


def can_save() -> bool:
    """Whether this session may write into the server's models/ folder: on a server without a
    teacher key (one person's), or the teacher (unlocked)."""
    return not os.environ.get("TFVIZ_TEACHER_KEY") or bool(st.session_state.get("teacher"))


def _zip(lm, name: str) -> bytes:
    from tfviz.interop.export import export_zip

    with _writing(), lm.lock:
        return export_zip(lm.ckpt, name)


def save(lm, name: str) -> Path:
    """Write the model as ``models/<name>`` and list it at once; ValueError saying why not."""
    from tfviz import paths
    from tfviz.interop import catalogue
    from tfviz.interop.export import write_checkpoint
    from tfviz.publish import safe_stem

    stem = safe_stem(name)
    out = paths.models_dir() / stem
    if out.exists():
        raise ValueError(f"models/{stem} already exists: pick another name")
    need = 3 * sum(p.numel() * 4 for p in lm.model.parameters())  # the folder, with room to spare
    out.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(out.parent).free < need:
        raise ValueError(f"not enough free disk space for models/{stem} (about {need / 2**20:,.0f} MB)")
    with _writing(), lm.lock:
        try:
            write_checkpoint(lm.ckpt, out)
        except ValueError as e:
            raise ValueError(paths.scrub(str(e))) from None
    catalogue(paths.models_dir(), paths.hf_cache_dir()).refresh(block=True, force=True)
    return out


def panel(lm, key: str, name: str | None = None, where=None, expanded: bool = False,
          on_open=None) -> None:
    """The "Export as a Hugging Face folder" expander for the loaded model ``lm``: which family
    it is written as (or why none), the zip download, and "Save into models/" (then "Open it"
    when ``on_open(path)`` selects a model: the picker's)."""
    from tfviz.interop.export import family_for
    from tfviz.publish import safe_stem

    from .widgets import forget_on_model_change

    where = where or st
    name = safe_stem(name or Path(lm.ref.path).stem)
    forget_on_model_change(lm, key, [f"{key}_name", f"{key}_saved"])  # another model: its own name
    with where.expander("Export as a Hugging Face folder", expanded=expanded, icon=":material/output:"):
        if lm.ref.source in NOT_A_FOLDER:
            st.caption("This model is a Hugging Face folder already, on the server's disk: "
                       "transformers opens that folder as it is.")
            return
        try:
            adapter = family_for(lm.config)
        except ValueError as e:
            st.caption(f"Not exportable: {e}.")  # a note, not an alert: most models are not
            if getattr(lm.config, "arch", None) in ("decoder", "encoder"):
                st.caption("On the **Train** page, choose an *Architecture shape* (GPT-2-shaped, "
                           "Llama-shaped or BERT-shaped) to train a model that exports.")
            return
        st.caption(f"Written as **{adapter.label}** (`{adapter.exports_as}`), with its tokenizer and "
                   "its task (tfviz_task.json: transformers ignores it, tfviz reads it back). Each "
                   "folder is read back as it is written: the same logits, or nothing is written.")
        st.download_button("Download the folder (zip)", lambda: _zip(lm, name), f"{name}.zip",
                           "application/zip", key=f"{key}_zip", on_click="ignore",
                           icon=":material/download:")
        if not can_save():
            st.caption("Saving into the server's models/ folder lists the model for every session: "
                       "on this server that is the teacher's (the Teacher panel). Download it instead.")
            return
        st.session_state.setdefault(f"{key}_name", name)
        st.text_input("Folder name", key=f"{key}_name", max_chars=60,
                      help="A new folder under models/ on the server (letters, digits, _ . -)")
        if st.button("Save into models/", key=f"{key}_save", icon=":material/save:"):
            with st.spinner("Writing and checking the folder…"):
                try:
                    out = save(lm, st.session_state[f"{key}_name"] or name)
                except ValueError as e:
                    st.session_state[f"{key}_saved"] = ("error", str(e))
                else:
                    st.session_state[f"{key}_saved"] = ("ok", out.name, str(out))
                    st.rerun()  # the picker, drawn above, lists the new folder on this next render
        said = st.session_state.get(f"{key}_saved")
        if said and said[0] == "error":
            st.error(f"Not saved: {said[1]}")
        elif said:
            st.success(f"Saved as **models/{said[1]}**: the model picker lists it now (*local*).")
            if on_open is not None:
                st.button("Open it", key=f"{key}_open", on_click=on_open, args=(said[2],),
                          icon=":material/open_in_new:")


def run_panel(checkpoint: str, name: str, key: str) -> None:
    """The panel for a finished run of the Train page (its checkpoint, loaded once per server)."""
    from .models import ModelRef, load_model

    try:
        lm = load_model(ModelRef(f"{name} (trained)", checkpoint, "trained"))
    except ValueError as e:
        st.warning(f"The run's checkpoint cannot be opened to export it: {e}")
        return
    panel(lm, key, name, expanded=True)
