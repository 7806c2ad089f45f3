"""A model out of the app as a Hugging Face folder (issue 30): the "Export as a Hugging Face
folder" panel — on the Train page for a finished run, in the sidebar for the model picked — and
the Train form's "Architecture shape" choice that makes a run exportable (GPT-2-, Llama- or
BERT-shaped). What a family can express, writing a folder and checking it are
``tfviz.interop.export``'s (no transformers needed); the settings of each shape are the family's
``Adapter.shape``. This module is the glue.

The download is built when the button is pressed (a zip of the folder), one export at a time on
the server; "Save into models/" writes the folder where the picker's *local* source lists it (the
catalogue is refreshed at once, so the next render lists it) — on a server with a teacher key,
for the teacher only: a folder there is listed for every session, as a published model is.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from pathlib import Path

import streamlit as st

P = "train_"  # the Train form's widget keys (ui.train_state.P; imported lazily there: it loads torch)
ANY = "tfviz (any setting)"
NOT_A_FOLDER = ("local", "hf-cache")  # sources whose models are Hugging Face folders already


# ------------------------------------------------------------------------------ the shapes
def _shapes() -> dict:
    """label -> adapter of every family the Train page can train as ("GPT-2-shaped": GPT2, ...)."""
    from tfviz.interop.export import shapes

    return {a.shape_label: a for a in shapes()}


def shape_options(archs, arch: str | None = None) -> list[str]:
    """"tfviz (any setting)", then the shapes a task of ``archs`` can train as (those of the
    preset's ``arch`` first)."""
    fits = [(label, a) for label, a in _shapes().items() if a.shape["arch"] in archs]
    return [ANY] + [label for label, a in sorted(fits, key=lambda x: x[1].shape["arch"] != arch)]


def _form_model(ss) -> dict:
    """The transformer fields the form holds now, as ``configs_from_form`` reads them."""
    from .train_state import MODEL_KEYS

    model = {k: ss.get(P + k) for k in MODEL_KEYS}
    kind = ss.get(P + "attn_kind", "MHA")
    model["n_kv_heads"] = {"MHA": model["n_heads"], "MQA": 1}.get(kind, model["n_kv_heads"])
    model["window"] = model["window"] or None
    return model


VISIBLE = {"arch": "Architecture", "pos": "Positions", "window": "Window", "attn_only": "Attention only",
           "n_kv_heads": "K/V heads"}  # model fields the form shows -> their label there
HIDDEN = {"norm": "norm placement", "normalization": "normalization", "activation": "activation",
          "bias": "biases", "tie_embeddings": "tied embeddings", "rope_pairs": "RoPE pairs",
          "embed_norm": "a norm on the embeddings", "head": "output head"}


def _fmt(value) -> str:
    return {None: "none", True: "on", False: "off"}.get(value, str(value)) if not isinstance(value, str) \
        else value


def _widgets(field: str, value, ss) -> dict:
    """The form's widget values (key without prefix -> value) that show ``field`` = ``value``."""
    if field == "window":
        return {"window": value or 0}
    if field == "n_kv_heads":
        return {"attn_kind": "MHA", "n_kv_heads": value} if value == ss.get(P + "n_heads") else {}
    return {field: value}


def apply_shape() -> None:
    """on_change of the shape: the form's fields that the family fixes take its values (Positions,
    Window, Attention only, K/V heads, Architecture); the others are kept. Going back to
    "tfviz (any setting)" puts back what the shape changed."""
    from .train_state import form

    ss, f = st.session_state, form()
    adapter = _shapes().get(ss.get(P + "shape"))
    ss["_train_shape_for"] = _preset_id(ss)
    before = ss.pop("_train_shape_before", {})
    if before and adapter is None:  # back to the preset's own settings, where the shape changed them
        ss.update({P + k: v for k, v in before.items()})
        f.update(before)
    ss["_train_shape_changed"] = []
    if adapter is None:
        return
    if before:  # from one shape to another: start from what the form had before either
        ss.update({P + k: v for k, v in before.items()})
    model = _form_model(ss)
    want = adapter.shaped(model)
    changed, kept = [], {}
    for field, label in VISIBLE.items():
        if field in want and want[field] != model[field]:
            for k, v in _widgets(field, want[field], ss).items():
                kept.setdefault(k, ss.get(P + k))
                ss[P + k] = f[k] = v
            changed.append((label, model[field], want[field]))
    ss["_train_shape_before"], ss["_train_shape_changed"] = kept, changed


def _preset_id(ss) -> tuple:
    return ss.get(P + "task"), ss.get(P + "kind"), ss.get(P + "preset")


def shape_choice(where, task_cls, pre) -> None:
    """The Train form's "Architecture shape" (outside the form: a choice updates the form's
    fields at once), and a caption saying what it sets and what it changed. A preset applied
    while a shape is chosen gets the shape again; a task no shape fits resets it."""
    from .train_state import form
    from .widgets import choice

    ss, f = st.session_state, form()
    key = P + "shape"
    ss.setdefault(key, f.get("shape", ANY))  # Streamlit drops a widget's state on other pages
    options = shape_options(task_cls.archs, pre.model.get("arch"))
    if ss[key] not in options:
        ss[key] = ANY
        ss.pop("_train_shape_before", None)
    elif ss[key] != ANY and ss.get("_train_shape_for") != _preset_id(ss):
        ss.pop("_train_shape_before", None)  # a new preset: the shape applies to it afresh
        apply_shape()
    choice(where, "Architecture shape", options, key, on_change=apply_shape,
           help="GPT-2- / Llama- / BERT-shaped: the settings that make the trained model exactly "
                "that family's model, so it can be exported as a Hugging Face folder when it has "
                "trained. tfviz (any setting): the preset as it is.")
    f["shape"] = ss[key]
    adapter = _shapes().get(ss[key])
    if adapter is None:
        if len(options) == 1:
            where.caption("No Hugging Face family tfviz writes has this task's architecture "
                          f"({', '.join(task_cls.archs)}): a run of it stays in tfviz.")
        return
    base = {**{x.name: x.default for x in dataclasses.fields(_config_class())}, **pre.model}
    sets = [f"{HIDDEN[k]} {_fmt(base.get(k))} → {_fmt(v)}" for k, v in adapter.shape.items()
            if k in HIDDEN and base.get(k) != v]
    changed = [f"{label} {_fmt(a)} → {_fmt(b)}" for label, a, b in ss.get("_train_shape_changed", [])]
    where.caption(f"**{adapter.shape_label}**: the run is exactly a {adapter.label} model "
                  f"(`{adapter.exports_as}`), exportable when it has trained. "
                  + (f"Set here (the form does not show them): {'; '.join(sets)}. " if sets else "")
                  + (f"Changed in the form: {'; '.join(changed)}. " if changed else "")
                  + "Everything else is the preset's.")


def _config_class():
    from tfviz.model import ModelConfig

    return ModelConfig


def shaped_fields(model: dict) -> dict:
    """At Start: the form's model fields with the chosen shape's hidden settings added; a field
    of the form that the shape fixes otherwise is refused by name (the form shows what trains)."""
    adapter = _shapes().get(st.session_state.get(P + "shape", ANY))
    if adapter is None:
        return model
    want = adapter.shaped(model)
    wrong = [(VISIBLE.get(k, k), model[k], want[k]) for k in model
             if k in want and (model[k] or None) != (want[k] or None)]
    if wrong:
        raise ValueError(f"{adapter.shape_label} needs " + ", ".join(
            f"{label} = {_fmt(w)} (the form has {_fmt(h)})" for label, h, w in wrong)
            + f": set {'it' if len(wrong) == 1 else 'them'}, or choose “{ANY}”")
    return want


# ------------------------------------------------------------------------------ the panel
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


def _models_dir() -> Path:
    from tfviz import paths

    return paths.models_dir()


def save(lm, name: str) -> Path:
    """Write the model as ``models/<name>`` and list it at once; ValueError saying why not."""
    from tfviz import paths
    from tfviz.interop import catalogue
    from tfviz.interop.export import write_checkpoint
    from tfviz.publish import safe_stem

    stem = safe_stem(name)
    out = _models_dir() / stem
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


def _open(path: str) -> None:
    from .picker import DEFAULTED

    st.session_state["model_path"] = path
    st.session_state.pop(DEFAULTED, None)


def panel(lm, key: str, name: str | None = None, where=None, expanded: bool = False) -> None:
    """The "Export as a Hugging Face folder" expander for the loaded model ``lm``: which family
    it is written as (or why none), the zip download, and "Save into models/"."""
    from tfviz.interop.export import family_for
    from tfviz.publish import safe_stem

    where = where or st
    name = safe_stem(name or Path(lm.ref.path).stem)
    with where.expander("Export as a Hugging Face folder", expanded=expanded, icon=":material/output:"):
        if lm.ref.source in NOT_A_FOLDER:
            st.caption("This model is a Hugging Face folder already, on the server's disk: "
                       "transformers opens that folder as it is.")
            return
        try:
            adapter = family_for(lm.config)
        except ValueError as e:
            st.info(f"Not exportable: {e}.")
            if getattr(lm.config, "arch", None) in ("decoder", "encoder"):
                st.caption("On the **Train** page, choose an *Architecture shape* (GPT-2-shaped, "
                           "Llama-shaped or BERT-shaped) to train a model that exports.")
            return
        st.caption(f"Written as **{adapter.label}** (`{adapter.exports_as}`): config.json, "
                   "model.safetensors, the tokenizer files and its task (tfviz_task.json, which "
                   "transformers ignores and tfviz reads back: its examples and probes). Open it "
                   "with `transformers.AutoModel…from_pretrained(folder)`, or with tfviz again. "
                   "Checked before it is offered: the folder's logits are the model's.")
        st.download_button("Download the folder (zip)", lambda: _zip(lm, name), f"{name}.zip",
                           "application/zip", key=f"{key}_zip", on_click="ignore",
                           icon=":material/download:")
        if not can_save():
            st.caption("Saving into the server's models/ folder lists the model for every session: "
                       "on this server that is the teacher's (the Teacher panel). Download it instead.")
            return
        st.text_input("Folder name", value=name, key=f"{key}_name", max_chars=60,
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
            st.button("Open it", key=f"{key}_open", on_click=_open, args=(said[2],),
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
