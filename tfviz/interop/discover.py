"""Which Hugging Face model folders are on this machine, cheaply, for a model picker: every check
``from_pretrained`` makes before it reads a tensor (config.json, the JSON files, file sizes, the
safetensors headers; tokenizer.json parsed, bounded, but not built) — no tensor data is read.

    for m in list_models(): print(m.name, m.family, m.nbytes, m.ok, m.reason)
    catalogue().models()   # the same, as last listed, refreshed off the caller's thread

Looked at: the folders directly under ``tfviz.paths.models_dir()`` ($TFVIZ_MODELS_DIR, default
``models/`` in the repository) and, when it exists, the local Hugging Face cache
(``tfviz.paths.hf_cache_dir()``: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), read
only. A folder tfviz cannot open is listed too, with the reason in one line.

Each folder is inspected on its own: whatever is wrong with it (a file of any size, type, depth or
encoding; see ``tfviz.interop.folder``) becomes its reason, never an exception, and never stops
the others being listed. Results, failures included, are kept per folder and its files'
modification times and sizes (``stamp``): listing again costs a few ``stat`` calls per folder.
A page lists through a ``Catalogue``: it returns the last listing at once and refreshes it in a
background thread when it is older than ``REFRESH_S``, so no page's render scans the disk (only
the very first listing of a pair of folders is waited for).
"""
from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from .. import limits, paths
from ..model.families import parameter_count
from .folder import (PICKLE_SUFFIXES, TOKENIZER, ModelFolder, ModelFolderError, local_max_bytes,
                     read_config, resolve, weight_files)
from .load import model_config
from .tokenizer import read_spec

BYTES_PER_PARAM = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class ModelInfo:
    name: str                 # the folder's name, or "org/name" for a cache entry
    path: Path                # what to pass to tfviz.from_pretrained
    source: str               # "models" (TFVIZ_MODELS_DIR) | "hf-cache"
    ok: bool                  # from_pretrained is expected to open it
    reason: str = ""          # why not, in words (when not ok)
    family: str | None = None  # "gpt2" | "bert" | "llama"
    model_type: str | None = None
    nbytes: int = 0           # weight files on disk
    params: int | None = None  # how many parameters: exact from config.json (``params_exact``,
    params_exact: bool = False  # the count ``tfviz info`` prints), else about (file size / dtype)
    notes: list[str] = field(default_factory=list)


class _AnyWeights:
    """Stands in for the weights when only config.json is read: every optional tensor is assumed
    present (so a family's head checks pass); the real load checks them."""

    def __contains__(self, name: str) -> bool:
        return True


def inspect(path: str | os.PathLike, source: str = "models", name: str | None = None) -> ModelInfo:
    """One folder's ``ModelInfo``: what ``from_pretrained`` checks before it reads a tensor (every
    file's size, type and place, the JSON, the safetensors headers, the tokenizer's vocabulary),
    nothing more. Never raises: anything wrong with the folder, foreseen or not, is its
    ``reason`` (one line)."""
    p = Path(path)
    name = name or p.name
    try:
        info = _inspect(p, source, name)
    except Exception as e:  # noqa: BLE001 — a folder no check foresaw: a reason, never a crash
        try:
            text = _short(e, p)
        except Exception:  # noqa: BLE001
            text = str(e)
        info = ModelInfo(name, p, source, False, f"cannot be read ({type(e).__name__}: {text})")
    if info.reason:
        info = ModelInfo(**{**info.__dict__, "reason": _one_line(info.reason)})
    return info


def _inspect(p: Path, source: str, name: str) -> ModelInfo:
    try:
        root = resolve(p)
    except ModelFolderError as e:
        return ModelInfo(name, p, source, False, _short(e, p))
    try:
        config = read_config(root)
    except ModelFolderError as e:
        return ModelInfo(name, p, source, False, _short(e, root, p))
    base = dict(name=name, path=root, source=source, model_type=config.get("model_type"))
    try:
        files, _ = weight_files(root)
        nbytes = sum(f.stat().st_size for f in files)
    except ModelFolderError as e:
        if "PyTorch pickle" in str(e):
            pickles = sorted(f.name for f in root.iterdir() if f.suffix in PICKLE_SUFFIXES)
            return ModelInfo(**base, ok=False, reason=f"weights only as a PyTorch pickle ({pickles[0]}), "
                                                      "which tfviz never opens: save them as safetensors")
        return ModelInfo(**base, ok=False, reason=_short(e, root, p))
    dtype = config.get("dtype") or config.get("torch_dtype")
    info = dict(base, nbytes=nbytes, params=nbytes // BYTES_PER_PARAM.get(dtype if isinstance(dtype, str)
                                                                         else "float32", 4))
    try:
        family, cfg, notes = model_config(config, _AnyWeights())
    except ModelFolderError as e:
        return ModelInfo(**info, ok=False, reason=_short(e, root, p))
    # the count of the model tfviz builds (tied weights once), as its card says: not the file size
    info.update(params=parameter_count(cfg), params_exact=True)
    try:
        limit = local_max_bytes()
        if nbytes > limit:
            return ModelInfo(**info, family=family.name, ok=False,
                             reason=f"{nbytes / 2**20:,.0f} MB of weights, over the {limit / 2**20:,.0f} "
                                    "MB limit for local models (TFVIZ_LOCAL_MODEL_MAX_MB)")
        folder = ModelFolder.open(root)  # every file's checks, the safetensors headers included
        with folder.weights() as w:  # names only: no tensor is read
            _, cfg, notes = model_config(config, w)
        tok = folder.tokenizer_file
        if tok is not None:  # parsed (bounded), not built: its vocabulary must fit the model's
            read_spec(tok, max_tokens=cfg.vocab_size)
    except ModelFolderError as e:
        return ModelInfo(**info, family=family.name, ok=False, reason=_short(e, root, p))
    if tok is None:
        notes = [*notes, f"no {TOKENIZER}: token ids only"]
    return ModelInfo(**info, family=family.name, ok=True, notes=notes)


def _one_line(reason: str, limit: int = 400) -> str:
    text = " ".join(str(reason).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _short(e: Exception, *where: Path) -> str:
    """The message without the folder's path (the picker shows the name already): a file of it is
    named by its own name."""
    msg = str(e)
    places = {str(w) for w in where} | {str(w.resolve()) for w in where if w.exists()}
    for p in sorted(places - {""}, key=len, reverse=True):
        msg = msg.replace(p + os.sep, "").replace(p, "")
    msg = re.sub(r"^([\w.-]+): (?=\1\b)", "", msg.lstrip(": "))  # "config.json: config.json is ..."
    return msg or str(e)


# ---------------------------------------------------------------------------------- listing, cached
STAMP_ENTRIES = 1000   # files of one folder looked at for its stamp (a model folder has tens)
CACHE_ENTRIES = 4096   # folders whose inspection is kept
_cache: OrderedDict[tuple, tuple[tuple, ModelInfo]] = OrderedDict()
_cache_lock = threading.Lock()


def _stat(p) -> tuple | None:
    try:
        s = os.stat(p)
    except (OSError, ValueError):
        return None
    return s.st_mtime_ns, s.st_ctime_ns, s.st_size, s.st_ino


def stamp(p: Path) -> tuple:
    """What ``inspect(p)`` depends on, from ``stat`` alone: the folder, a cache folder's refs/main
    and snapshots/, and every file of the folder holding config.json (links followed: a hub
    blob replaced changes it), plus the limits in force."""
    out: list = [_stat(p), _stat(p / "refs" / "main"), _stat(p / "snapshots")]
    try:
        root = resolve(p)
        with os.scandir(root) as it:
            entries = sorted((e.name for e, _ in zip(it, range(STAMP_ENTRIES + 1))))
        out += [str(root), _stat(root), len(entries)]
        out += [(n, _stat(root / n)) for n in entries[:STAMP_ENTRIES]]
    except Exception:  # noqa: BLE001 — the folder itself is the reason; inspect will say it
        pass
    for limit in (limits.local_model_bytes, limits.tokenizer_json_bytes, limits.tokenizer_max_growth):
        try:
            out.append(limit())
        except ValueError as e:
            out.append(str(e))
    return tuple(out)


def inspect_cached(path: Path, source: str = "models", name: str | None = None) -> ModelInfo:
    """``inspect``, kept until the folder's ``stamp`` changes (a failure too)."""
    key, now = (str(path), source, name), stamp(path)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] == now:
            _cache.move_to_end(key)
            return hit[1]
    info = inspect(path, source, name)
    with _cache_lock:
        _cache[key] = (now, info)
        _cache.move_to_end(key)
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return info


def _folders(folder: Path, pattern: str) -> list[Path]:
    try:
        return sorted(p for p in folder.glob(pattern) if p.is_dir() and not p.name.startswith("."))
    except OSError:  # an unreadable folder: nothing listed from it
        return []


def list_models(models_dir: str | os.PathLike | None = None,
                cache_dir: str | os.PathLike | None = None) -> list[ModelInfo]:
    """Every model folder under ``models_dir`` (default ``paths.models_dir()``) and in the Hugging
    Face cache ``cache_dir`` (default ``paths.hf_cache_dir()``), by source then name; a folder
    unchanged since it was last inspected is not read again (``inspect_cached``)."""
    mdir = Path(models_dir) if models_dir is not None else paths.models_dir()
    cdir = Path(cache_dir) if cache_dir is not None else paths.hf_cache_dir()
    out = [inspect_cached(p, "models") for p in _folders(mdir, "*")]
    out += [inspect_cached(p, "hf-cache", p.name.removeprefix("models--").replace("--", "/"))
            for p in _folders(cdir, "models--*")]
    return out


REFRESH_S = 10.0      # how old a listing may be before a page's call refreshes it (in the background)
FIRST_WAIT_S = 60.0   # how long the very first listing of a pair of folders is waited for
CHANGE_WAIT_S = 2.0   # how long a call waits for the listing when a folder was added or removed


class Catalogue:
    """The model folders of one (models_dir, cache_dir), listed off the caller's thread.

    ``models()`` returns the last listing at once; when it is older than ``refresh_s`` it also
    starts one background thread that lists again (``list_models``: unchanged folders cost a few
    ``stat`` calls) and replaces the listing when done. Only the first call waits (at most
    ``FIRST_WAIT_S``), for the first listing, and a call that finds a folder added to or removed
    from ``models_dir`` / ``cache_dir`` since the last listing began (their own ``stat``: two
    calls per render) lists again at once and waits for it at most ``CHANGE_WAIT_S``, so a new
    folder is listed on the next render, not the one after. ``refresh(force=True)``: list again
    now (e.g. after the app wrote a folder). Thread-safe: one per server, shared by every session."""

    def __init__(self, models_dir: Path, cache_dir: Path, refresh_s: float = REFRESH_S):
        self.models_dir, self.cache_dir, self.refresh_s = Path(models_dir), Path(cache_dir), refresh_s
        self._lock = threading.Lock()
        self._first = threading.Event()
        self._listing: list[ModelInfo] = []
        self._listed_at = float("-inf")
        self._running: threading.Thread | None = None
        self._again = False       # asked to list again while a listing was running
        self._seen: tuple | None = None  # the folders' stat when the latest listing began

    def models(self, wait: float = FIRST_WAIT_S) -> list[ModelInfo]:
        changed = self._seen is not None and self._folders_stat() != self._seen
        thread = self.refresh(block=False, force=changed)
        if changed and thread is not None:
            thread.join(CHANGE_WAIT_S)
        self._first.wait(wait)
        return list(self._listing)

    def _folders_stat(self) -> tuple:
        return _stat(self.models_dir), _stat(self.cache_dir)

    def refresh(self, block: bool = True, force: bool = False) -> threading.Thread | None:
        """Start a listing when the last is older than ``refresh_s`` (or ``force``) and none is
        running (``force`` while one runs: it lists once more when done); ``block``: wait for
        the running one."""
        with self._lock:
            due = force or time.monotonic() - self._listed_at >= self.refresh_s
            if due:
                self._seen = self._folders_stat()
                if self._running is None:
                    self._running = threading.Thread(target=self._list, name="tfviz-model-discovery",
                                                     daemon=True)
                    self._running.start()
                elif force:
                    self._again = True
            thread = self._running
        if block and thread is not None:
            thread.join()
        return thread

    def _list(self) -> None:
        while True:
            with self._lock:
                self._again = False
            try:
                found = list_models(self.models_dir, self.cache_dir)
            except Exception:  # noqa: BLE001 — never happens (each folder is isolated); keep the last
                found = self._listing
            with self._lock:
                self._listing, self._listed_at = found, time.monotonic()
                if not self._again:
                    self._running = None
                    break
        self._first.set()


_catalogues: dict[tuple[str, str], Catalogue] = {}
_catalogues_lock = threading.Lock()


def catalogue(models_dir: str | os.PathLike | None = None,
              cache_dir: str | os.PathLike | None = None) -> Catalogue:
    """The one ``Catalogue`` of these folders (defaults as ``list_models``) in this process."""
    mdir = Path(models_dir) if models_dir is not None else paths.models_dir()
    cdir = Path(cache_dir) if cache_dir is not None else paths.hf_cache_dir()
    with _catalogues_lock:
        return _catalogues.setdefault((str(mdir), str(cdir)), Catalogue(mdir, cdir))


def forget() -> None:
    """Drop every kept inspection and catalogue (tests; a running refresh finishes harmlessly)."""
    with _cache_lock:
        _cache.clear()
    with _catalogues_lock:
        _catalogues.clear()
