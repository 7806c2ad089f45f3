"""The model picker shared by every page, and safe access to shared models.

Sources, in the order the picker lists them:
  shipped    checkpoints/*.safetensors           trained by `python -m tfviz.zoo build`, in git
  published  checkpoints/published/*.safetensors  models the teacher chose to share with everyone
  trained    models this browser session trained (its jobs' checkpoints)
  uploaded   files this session uploaded (validated by tfviz.load_checkpoint, never unpickled)

A loaded model is cached once per server (``st.cache_resource``) and shared by every session, so
each forward goes through ``LoadedModel.record`` / ``LoadedModel.forward``, which hold that model's
lock: recording attaches hooks to the module, and another session's forward must not run through
them meanwhile.
"""
from __future__ import annotations

import hmac
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

MAX_UPLOAD_MB = 50  # per file; .streamlit/config.toml's server.maxUploadSize says the same
MAX_SESSION_UPLOAD_MB = int(os.environ.get("TFVIZ_SESSION_UPLOAD_MB", "200"))  # per session


def _paths():
    """tfviz.paths, imported on first use: importing tfviz loads torch (seconds), which the first
    page view should not wait for before it can show a spinner."""
    from tfviz import paths

    return paths


def published_dir() -> Path:
    return _paths().published_dir()


@dataclass(frozen=True)
class ModelRef:
    label: str
    path: str
    source: str  # shipped | published | trained | uploaded


@dataclass
class LoadedModel:
    ref: ModelRef
    ckpt: object  # tfviz.train.checkpoint.Checkpoint
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def model(self):
        return self.ckpt.model

    @property
    def config(self):
        return self.ckpt.config

    @property
    def tokenizer(self):
        return self.ckpt.tokenizer

    def record(self, *inputs, names=None, **kwargs):
        import tfviz

        with self.lock:
            return tfviz.record(self.ckpt.model, *inputs, names=names, **kwargs)

    def forward(self, *inputs, **kwargs):
        import torch

        with self.lock, torch.no_grad():
            return self.ckpt.model(*inputs, **kwargs)


# ------------------------------------------------------------------------------ session identity
def session_id() -> str:
    """A per-browser-session id, kept in the URL (``?sid=…``) so a reload finds the same jobs and
    uploads again. Only hex characters are accepted (it becomes a folder name)."""
    if "sid" not in st.session_state:
        sid = st.query_params.get("sid", "")
        if not re.fullmatch(r"[0-9a-f]{12}", sid or ""):
            sid = uuid.uuid4().hex[:12]
        st.session_state["sid"] = sid
    if st.query_params.get("sid") != st.session_state["sid"]:
        st.query_params["sid"] = st.session_state["sid"]
    return st.session_state["sid"]


def session_dir() -> Path:
    return _paths().sessions_dir() / session_id()


# ------------------------------------------------------------------------------ discovery
def _scan(folder: Path, source: str) -> list[ModelRef]:
    if not folder.is_dir():
        return []
    return [ModelRef(f"{p.stem} ({source})", str(p), source)
            for p in sorted(folder.glob("*.safetensors"))]


def available_models() -> list[ModelRef]:
    refs = _scan(_paths().checkpoint_dir(), "shipped") + _scan(published_dir(), "published")
    refs += _scan(session_dir() / "trained", "trained") + _scan(session_dir() / "uploaded", "uploaded")
    return refs


@st.cache_resource(max_entries=24, show_spinner="Loading model…")
def _load(path: str, mtime_ns: int, source: str) -> LoadedModel:
    from tfviz.train.checkpoint import load_checkpoint

    ckpt = load_checkpoint(path)
    ckpt.model.eval()
    return LoadedModel(ModelRef(f"{Path(path).stem} ({source})", path, source), ckpt)


def load_model(ref: ModelRef) -> LoadedModel:
    """Load (or fetch from the cache) a model; raises ``ValueError`` with a readable reason."""
    p = Path(ref.path)
    if not p.is_file():
        raise ValueError(f"{p.name} is no longer there (deleted?) — pick another model")
    return _load(str(p), p.stat().st_mtime_ns, ref.source)


def _session_upload_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) if folder.is_dir() else 0


def save_upload(name: str, data: bytes) -> ModelRef:
    """Validate an uploaded checkpoint fully, then keep it in this session's folder.

    Only ``.safetensors`` tfviz checkpoints (tensors + JSON metadata) are accepted, at most
    ``MAX_UPLOAD_MB`` each and ``MAX_SESSION_UPLOAD_MB`` per session. The bytes go to a hidden
    temp file that the picker never lists, ``tfviz.load_checkpoint`` checks them (never unpickles;
    rejects zips, truncation, lying headers, shapes/dtypes off the config, NaN/inf, future
    versions), and only a valid file is renamed into place (a new name, never over another
    upload). Anything wrong: ``ValueError`` with the reason, and nothing is kept."""
    from tfviz.train.checkpoint import load_checkpoint
    from tfviz.publish import safe_stem

    shown = Path(str(name)).name[:80] or "the file"
    if not shown.lower().endswith(".safetensors"):
        hint = (" (a .json file is only the human-readable copy of a checkpoint's metadata: upload "
                "the .safetensors file next to it)" if shown.lower().endswith(".json") else "")
        raise ValueError(f"{shown}: only tfviz checkpoints (.safetensors: tensors + JSON metadata) "
                         f"are accepted{hint}; pickles (.pt, .pth, .bin, .ckpt, .pkl) are never loaded")
    if len(data) > MAX_UPLOAD_MB * 2**20:
        raise ValueError(f"{shown} is {len(data) / 2**20:.0f} MB; the limit is {MAX_UPLOAD_MB} MB")
    folder = session_dir() / "uploaded"
    if _session_upload_bytes(folder) + len(data) > MAX_SESSION_UPLOAD_MB * 2**20:
        raise ValueError(f"this session already keeps {_session_upload_bytes(folder) / 2**20:.0f} MB of "
                         f"uploads; the limit is {MAX_SESSION_UPLOAD_MB} MB per session")
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


# ------------------------------------------------------------------------------ teacher
def teacher_key() -> str:
    """``TFVIZ_TEACHER_KEY``: when set, a "Teacher" sidebar panel can publish models to the class."""
    return os.environ.get("TFVIZ_TEACHER_KEY", "")


def _check_teacher_key() -> None:
    """on_change of the key box: checked once per entry, then the box is cleared (the key is not
    kept in session state). A wrong key costs a second, which makes guessing slow."""
    given = st.session_state.get("teacher_key", "") or ""
    st.session_state["teacher_key"] = ""
    if not given:
        return
    if hmac.compare_digest(given.encode(), teacher_key().encode()):
        st.session_state["teacher"] = True
        st.session_state.pop("_teacher_wrong", None)
    else:
        time.sleep(1.0)
        st.session_state["_teacher_wrong"] = True


def teacher_panel(where, ref: ModelRef) -> None:
    """Sidebar panel (only with TFVIZ_TEACHER_KEY set): unlock with the key, then publish the
    selected trained/uploaded model to every session (tfviz.publish), or withdraw a published one."""
    if not teacher_key():
        return
    from tfviz.publish import publish, unpublish

    with where.expander("Teacher", icon=":material/school:"):
        if not st.session_state.get("teacher"):
            st.text_input("Teacher key", type="password", key="teacher_key", on_change=_check_teacher_key,
                          help="Set by whoever started the server (TFVIZ_TEACHER_KEY).")
            if st.session_state.get("_teacher_wrong"):
                st.error("Wrong teacher key.")
            return
        if ref.source in ("trained", "uploaded"):
            if st.button("Publish this model to the class", key="teacher_publish",
                         icon=":material/campaign:"):
                try:
                    out = publish(ref.path, published_dir(), name=Path(ref.path).stem)
                except ValueError as e:
                    st.error(f"Not published: {e}")
                else:
                    st.success(f"Published as **{out.stem}**: every student's model picker lists it "
                               "now (as *published*).")
        elif ref.source == "published":
            if st.button("Withdraw from the class", key="teacher_unpublish", icon=":material/undo:"):
                unpublish(ref.path, published_dir())
                st.session_state["model_path"] = None
                st.rerun()
        else:
            st.caption("Shipped models are already visible to everyone. Select a model you trained "
                       "or uploaded to publish it.")


# ------------------------------------------------------------------------------ the picker
def _picked() -> None:
    st.session_state["model_path"] = st.session_state["model_select"]


def model_picker(sidebar: bool = True) -> LoadedModel | None:
    """The shared model selector. Returns the chosen, loaded model, or None (with a message)."""
    where = st.sidebar if sidebar else st
    refs = available_models()
    with where.expander("Upload a checkpoint (.safetensors)"):
        # No type= filter: Streamlit would raise on another extension; save_upload says why instead.
        up = st.file_uploader("tfviz checkpoint", key="upload", label_visibility="collapsed",
                              help=f"A tfviz .safetensors checkpoint, at most {MAX_UPLOAD_MB} MB. "
                                   "Checked fully before use; pickles are never loaded.")
        if up is not None:
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
                    refs = available_models()
            kind, message = st.session_state.get("_upload_result", ("info", ""))
            if message:
                getattr(st, kind)(message)
    if not refs:
        where.info("No models yet: train one on the **Train** page or upload a checkpoint.")
        return None
    paths = [r.path for r in refs]
    current = st.session_state.get("model_path")
    if current not in paths:
        if current is not None:
            where.warning("The model you had selected is gone; showing another one.")
        current = paths[0]
    # "model_path" is the selection; any page may set it (e.g. "open the model I just trained").
    if st.session_state.get("model_select") != current:
        st.session_state["model_select"] = current
    # on_change: a pick in this box becomes "model_path" before the next run's sync above, which
    # would otherwise put the previous model back into the box (the pick never took effect)
    choice = where.selectbox("Model", paths, format_func=lambda p: refs[paths.index(p)].label,
                             key="model_select", on_change=_picked)
    st.session_state["model_path"] = choice
    ref = refs[paths.index(choice)]
    try:
        loaded = load_model(ref)
    except ValueError as e:
        where.error(f"Could not load {ref.label}: {e}")
        return None
    teacher_panel(where, ref)
    return loaded


def current_model(required: bool = True) -> LoadedModel | None:
    """Render the sidebar model picker and return the picked model. Each page that shows a model
    calls this once; the page then works however it was reached (through app.py's navigation, or
    a bookmarked URL that a fresh server runs before app.py has registered its pages).
    With ``required``, a page without a model shows a hint and stops there."""
    loaded = model_picker()
    if loaded is None and required:
        st.info("Pick a model in the sidebar (or train one on the **Train** page) to see this page.")
        st.stop()
    return loaded
