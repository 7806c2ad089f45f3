"""The models the app can show, and the one copy of each that every session shares.

Sources, in the order the picker (``ui.picker``) lists them — ``SOURCES``, the one registry:
  shipped    checkpoints/*.safetensors           trained by `python -m tfviz.zoo build`, in git
  published  checkpoints/published/*.safetensors  models the teacher chose to share with everyone
  trained    models this browser session trained (its jobs' checkpoints)
  uploaded   files this session uploaded (``ui.uploads``: validated, never unpickled)
  local      Hugging Face model folders under models/ (TFVIZ_MODELS_DIR) and in the local Hugging
  hf-cache   Face cache, as ``tfviz.interop.list_models`` finds them (read only, offline), opened
             with ``tfviz.from_pretrained`` behind a progress bar; a folder that cannot open is
             not listed but shown with its reason in one line (``unopenable_models``); the
             listing is ``tfviz.interop.catalogue``'s, refreshed off the page's render
To add a source (e.g. pretrained folders on disk): one ``Source`` in ``SOURCES`` with a function
listing its ``ModelRef``s and, when it is not a tfviz checkpoint, a ``load(path) -> Checkpoint``.

A loaded model is cached once per server and shared by every session, in one
``tfviz.classroom.cache.ModelCache`` bounded by memory (``TFVIZ_MODEL_CACHE_MB``; least recently
used models are dropped, a session still holding one keeps using it), so each forward goes through
``LoadedModel.record`` / ``LoadedModel.forward``, which hold that model's lock: recording attaches
hooks to the module, and another session's forward must not run through them meanwhile.
``LoadedModel.key`` (path, mtime) is what every per-model cache is keyed on (``ui.cache``): a
retrained file under the same name is another model.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from .session import session_id

def _paths():
    """tfviz.paths, imported on first use: importing tfviz loads torch (seconds), which the first
    page view should not wait for before it can show a spinner."""
    from tfviz import paths

    return paths


def shipped_dir() -> Path:
    """The app's model folder (``tfviz.paths.checkpoint_dir``: TFVIZ_CHECKPOINT_DIR, else
    checkpoints/; tests point it at a folder of tiny models)."""
    return _paths().checkpoint_dir()


def published_dir() -> Path:
    return _paths().published_dir()


def session_dir() -> Path:
    """This browser session's own folder (its trained and uploaded models; git-ignored)."""
    return _paths().session_dir(session_id())


@dataclass(frozen=True)
class ModelRef:
    label: str
    path: str
    source: str  # the name of its Source in SOURCES


DEFAULTED = "_model_default"  # session state: the path the picker chose itself (nobody picked one)


def model_id(ref: ModelRef) -> str:
    """How a model is named in a link (``?model=…``): its source and file name, never a server
    path ("shipped/lm", "trained/my-run")."""
    return f"{ref.source}/{Path(ref.path).stem}"


@dataclass
class LoadedModel:
    ref: ModelRef
    ckpt: object  # tfviz.train.checkpoint.Checkpoint
    mtime_ns: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def key(self) -> tuple[str, int]:
        """(path, mtime): what caches of this model's computations are keyed on."""
        return self.ref.path, self.mtime_ns

    @property
    def model(self):
        return self.ckpt.model

    @property
    def config(self):
        return self.ckpt.config

    @property
    def tokenizer(self):
        return self.ckpt.tokenizer

    @property
    def task_name(self) -> str | None:
        return (self.ckpt.task or {}).get("name")

    def record(self, *inputs, names=None, **kwargs):
        import tfviz

        with self.lock:
            return tfviz.record(self.ckpt.model, *inputs, names=names, **kwargs)

    def forward(self, *inputs, **kwargs):
        import torch

        with self.lock, torch.no_grad():
            return self.ckpt.model(*inputs, **kwargs)


def _scan(folder: Path, source: str) -> list[ModelRef]:
    if not folder.is_dir():
        return []
    return [ModelRef(f"{p.stem} ({source})", str(p), source)
            for p in sorted(folder.glob("*.safetensors"))]


def _checkpoint(path: str):
    from tfviz.train.checkpoint import load_checkpoint

    return load_checkpoint(path)


# ------------------------------------------------------------------------------ local folders
LOCAL_SOURCES = {"models": "local", "hf-cache": "hf-cache"}  # ModelInfo.source -> ModelRef.source


def local_models() -> list:
    """Every folder under models/ (TFVIZ_MODELS_DIR) and in the Hugging Face cache, from
    config.json and file sizes alone, as ``tfviz.interop.catalogue`` last listed them: the listing
    is refreshed in a background thread (every 10 s at most, each folder re-read only when its
    files changed), never in a page's render; a folder that cannot open is one line with its reason."""
    from tfviz.interop import catalogue

    return catalogue(_paths().models_dir(), _paths().hf_cache_dir()).models()


def _size(info) -> str:
    n = info.params or 0  # exact (the card's count, `python -m tfviz info`) when params_exact
    about = "" if getattr(info, "params_exact", False) else "≈"
    params = (f"{about}{n / 1e6:,.1f}M" if n >= 1e7 else f"{about}{n:,}") if n else "?"
    on_disk = f"{info.nbytes / 2**20:,.0f} MB" if info.nbytes >= 2**20 else f"{info.nbytes / 2**10:,.0f} kB"
    return f"{params} params, {on_disk}"


def local_label(info) -> str:
    """"gpt2 (local · GPT-2 · 124M params, 475 MB)": the picker's line for a folder."""
    from tfviz.interop import ADAPTERS

    family = ADAPTERS[info.family].label if info.family in ADAPTERS else info.family or "?"
    return f"{info.name} ({LOCAL_SOURCES[info.source]} · {family} · {_size(info)})"


def _local_refs(source: str) -> list[ModelRef]:
    return [ModelRef(local_label(i), str(i.path), source)
            for i in local_models() if i.ok and LOCAL_SOURCES[i.source] == source]


def local_refs() -> list[ModelRef]:
    """Every local folder that opens (both local sources)."""
    return [ref for source in LOCAL_SOURCES.values() for ref in _local_refs(source)]


def unopenable_models() -> list[tuple[str, str]]:
    """(name, reason) of every local folder that cannot open (shown, never selectable)."""
    return [(f"{i.name} ({LOCAL_SOURCES[i.source]})", _paths().scrub(i.reason))
            for i in local_models() if not i.ok]


def _folder(path: str, progress=None):
    from tfviz.interop import from_pretrained

    try:
        return from_pretrained(path, progress=progress)
    except ValueError as e:  # ModelFolderError: the reason, without the server's paths
        raise ValueError(_paths().scrub(str(e))) from None


def _folder_stamp(root: Path) -> int:
    """A folder's version: the newest modification time of its files (weights replaced in place
    make another model, which a folder's own mtime would not show)."""
    try:
        return max((f.stat().st_mtime_ns for f in root.iterdir() if f.is_file()), default=0)
    except OSError:  # gone or unreadable meanwhile: loading it says why
        return 0


def _local_label(path: str) -> str:
    return next((local_label(i) for i in local_models() if str(i.path) == path), Path(path).name)


# ------------------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class Source:
    name: str                                    # ModelRef.source, shown in the picker's labels
    refs: Callable[[], list[ModelRef]]           # what it holds now (called on every page run)
    load: Callable[..., object] = _checkpoint    # path -> tfviz Checkpoint
    private: bool = False                        # this session's own (the teacher may publish it)
    progress: bool = False                       # load(path, progress=f(fraction, message)): a bar
    stamp: Callable[[Path], int] = lambda p: p.stat().st_mtime_ns  # the version caches key on
    label: Callable[[str, str], str] = lambda path, source: f"{Path(path).stem} ({source})"


SOURCES: tuple[Source, ...] = (
    Source("shipped", lambda: _scan(shipped_dir(), "shipped")),
    Source("published", lambda: _scan(published_dir(), "published")),
    Source("trained", lambda: _scan(session_dir() / "trained", "trained"), private=True),
    Source("uploaded", lambda: _scan(session_dir() / "uploaded", "uploaded"), private=True),
    *(Source(name, lambda name=name: _local_refs(name), load=_folder, progress=True,
             stamp=_folder_stamp, label=lambda path, _: _local_label(path))
      for name in LOCAL_SOURCES.values()),
)
SOURCE = {s.name: s for s in SOURCES}


def available_models() -> list[ModelRef]:
    return [ref for source in SOURCES for ref in source.refs()]


@st.cache_resource
def model_cache():
    """The server's one cache of loaded models (``tfviz.classroom.cache``), sized by memory."""
    from tfviz import limits
    from tfviz.classroom.cache import ModelCache

    return ModelCache(max_bytes=limits.model_cache_bytes())


def _load(path: str, mtime_ns: int, source: str, progress=None) -> LoadedModel:
    from tfviz.storage import CheckpointError

    src = SOURCE[source]
    try:
        ckpt = src.load(path, progress=progress) if src.progress else src.load(path)
    except CheckpointError as e:  # about the file's name, never a server path
        raise ValueError(_paths().scrub(e.for_user(Path(path).name))) from None
    ckpt.model.eval()
    return LoadedModel(ModelRef(src.label(path, source), path, source), ckpt, mtime_ns)


def load_model(ref: ModelRef) -> LoadedModel:
    """Load (or fetch from the cache) a model; raises ``ValueError`` with a readable reason."""
    from tfviz.classroom.cache import checkpoint_bytes

    p, src = Path(ref.path), SOURCE[ref.source]
    if not p.exists():  # a file, or a folder for a source that keeps models in folders
        raise ValueError(f"{p.name} is no longer there (deleted?) — pick another model")
    key = (str(p), src.stamp(p), ref.source)
    cache = model_cache()
    size = lambda m: checkpoint_bytes(m.ckpt)  # noqa: E731
    if key in cache.keys():
        return cache.get(key, lambda: _load(*key), size=size)
    if not src.progress:
        with st.spinner("Loading model…"):
            return cache.get(key, lambda: _load(*key), size=size)
    name = ref.label.split(" (")[0]
    bar = st.progress(0.0, text=f"Loading {name}…")  # what is being read, as it is read

    def progress(fraction: float, message: str) -> None:
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=f"Loading {name}: {message}")

    try:
        return cache.get(key, lambda: _load(*key, progress), size=size)
    finally:
        bar.empty()


def shipped(name: str) -> LoadedModel | None:
    """The shipped model ``name`` (e.g. "lm"), or None when it is not there or does not load."""
    path = shipped_dir() / f"{name}.safetensors"
    try:
        return load_model(ModelRef(f"{name} (shipped)", str(path), "shipped"))
    except ValueError:
        return None


def zoo_model(name: str) -> LoadedModel | None:
    """The zoo model ``name`` (``tfviz.paths.zoo_dir``: the Findings page's models), or None with a
    warning saying how to build it."""
    from tfviz.zoo.findings import zoo_path

    folder = _paths().zoo_dir()
    if (path := zoo_path(name, folder)).is_file():
        return load_model(ModelRef(f"{name} (shipped)", str(path), "shipped"))
    st.warning(f"The zoo model **{name}** is missing from {folder}: run "
               f"`python -m tfviz.zoo build --only {name}`.")
    return None


@contextlib.contextmanager
def locked(models):
    """Hold the locks of several shared models (in one fixed order, so two sessions locking the
    same models never wait on each other crosswise)."""
    with contextlib.ExitStack() as stack:
        for m in sorted(models, key=lambda m: m.ref.path):
            stack.enter_context(m.lock)
        yield
