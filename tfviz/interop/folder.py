"""A Hugging Face model folder on disk: which files it has, whether tfviz may open them, and its
tensors read lazily. Read only and offline: nothing is written, downloaded or unpickled.

    folder = ModelFolder.open("models/gpt2")          # or a cache folder models--org--name
    folder.config                                     # config.json as a dict
    with folder.weights() as w: w.get("wte.weight")   # one tensor at a time (safetensors, mmap)

Accepted layouts (what ``save_pretrained`` writes, and the hub cache):
    FOLDER/config.json + model.safetensors                              one file
    FOLDER/config.json + model.safetensors.index.json + shards          sharded ("weight_map")
    models--ORG--NAME/snapshots/<revision>/...                          the cache (refs/main picks
                                                                        the revision; else the newest)
A folder whose weights are only pickles (pytorch_model.bin, *.pt, *.pth, *.ckpt) is refused:
unpickling runs arbitrary code, so tfviz never does it.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

from .. import limits, storage

CONFIG, WEIGHTS, INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
TOKENIZER, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"  # older transformers wrote the special tokens here
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
LOCAL_MAX_BYTES = 2 * 2**30  # the default of limits.local_model_bytes
"""Default limit on a folder's weight files (2 GiB: GPT-2 small is 0.5 GB, medium 1.5 GB). Loaded
as float32, a model takes about (file size x 4 / bytes per stored number) of memory. Override
with ``$TFVIZ_LOCAL_MODEL_MAX_MB`` or ``max_bytes=``. Uploads keep their own, smaller limit."""
_SHARD_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.safetensors$")

Progress = Callable[[float, str], None]
"""progress(fraction done in [0, 1], what is happening) — for a progress bar."""


class ModelFolderError(ValueError):
    """A folder tfviz cannot open as a model; the message says why and what would work."""


def local_max_bytes() -> int:
    """The largest weights read from a local folder: ``tfviz.limits.local_model_bytes``
    ($TFVIZ_LOCAL_MODEL_MAX_MB, default 2048)."""
    try:
        return limits.local_model_bytes()
    except ValueError as e:
        raise ModelFolderError(str(e)) from None


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB"


def resolve(path: str | os.PathLike) -> Path:
    """The folder holding config.json: ``path`` itself, or for a Hugging Face cache folder
    (``models--org--name``) the snapshot that ``refs/main`` names (else the newest snapshot)."""
    p = Path(path).expanduser()
    if p.is_file() and p.name == CONFIG:
        p = p.parent
    if not p.is_dir():
        raise ModelFolderError(f"{p}: no such folder")
    if (p / CONFIG).is_file():
        return p
    snaps = p / "snapshots"
    if snaps.is_dir():
        ref = p / "refs" / "main"
        rev = ref.read_text().strip() if ref.is_file() else ""
        if re.fullmatch(r"[0-9a-zA-Z_-][0-9a-zA-Z._-]*", rev) and (snaps / rev / CONFIG).is_file():
            return snaps / rev
        found = sorted((s for s in snaps.iterdir() if (s / CONFIG).is_file()),
                       key=lambda s: s.stat().st_mtime, reverse=True)
        if found:
            return found[0]
        raise ModelFolderError(f"{p}: a Hugging Face cache folder, but no snapshot in it has a "
                               f"{CONFIG} (was the download interrupted?)")
    raise ModelFolderError(f"{p}: no {CONFIG} here, so it is not a Hugging Face model folder "
                           f"(save_pretrained writes {CONFIG} next to {WEIGHTS})")


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelFolderError(f"{path}: the {what} could not be read as JSON ({e})") from None
    if not isinstance(data, dict):
        raise ModelFolderError(f"{path}: the {what} must be a JSON object")
    return data


@dataclass
class ModelFolder:
    """The files of one model folder, checked (see the module docstring)."""

    path: Path
    config: dict
    shards: dict[str, Path]          # tensor name -> the safetensors file holding it
    files: list[Path]                # the weight files
    nbytes: int                      # their total size on disk
    tokenizer_file: Path | None
    tokenizer_config: dict = field(default_factory=dict)
    special_tokens_map: dict = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | os.PathLike, max_bytes: int | None = None) -> "ModelFolder":
        """Find and check the folder's files (headers only; no tensor data is read)."""
        root = resolve(path)
        config = _read_json(root / CONFIG, "model config")
        files, index = cls._weight_files(root)
        limit = local_max_bytes() if max_bytes is None else max_bytes
        nbytes = sum(f.stat().st_size for f in files)
        if nbytes > limit:
            raise ModelFolderError(
                f"{root}: the weights are {_mb(nbytes)}, over the {_mb(limit)} limit for local models "
                f"(a model takes about that much memory again, or more, once loaded as float32); "
                f"set TFVIZ_LOCAL_MODEL_MAX_MB to allow more")
        shards: dict[str, Path] = {}
        for f in files:
            try:
                header, _ = storage.read_header(f)
            except storage.CheckpointError as e:
                raise ModelFolderError(str(e)) from None
            for name in header:
                shards[name] = f
        if index is not None:  # the index must agree with the shards it names
            wrong = [n for n, f in index.items() if shards.get(n) != root / f]
            if wrong:
                raise ModelFolderError(f"{root / INDEX}: names tensors its shards do not hold "
                                       f"({', '.join(sorted(wrong)[:3])})")
        tok = root / TOKENIZER
        extra = {name: _read_json(root / name, name) if (root / name).is_file() else {}
                 for name in (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP)}
        return cls(root, config, shards, files, nbytes, tok if tok.is_file() else None,
                   extra[TOKENIZER_CONFIG], extra[SPECIAL_TOKENS_MAP])

    @staticmethod
    def _weight_files(root: Path) -> tuple[list[Path], dict[str, str] | None]:
        if (root / INDEX).is_file():
            data = _read_json(root / INDEX, "shard index")
            wmap = data.get("weight_map")
            if not isinstance(wmap, dict) or not wmap or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()):
                raise ModelFolderError(f"{root / INDEX}: needs a \"weight_map\" of tensor name -> file")
            bad = sorted({v for v in wmap.values() if not _SHARD_NAME.match(v) or v.startswith(".")})
            if bad:
                raise ModelFolderError(f"{root / INDEX}: shard names must be plain .safetensors file "
                                       f"names in the same folder, not {bad[:3]}")
            missing = sorted({v for v in wmap.values() if not (root / v).is_file()})
            if missing:
                raise ModelFolderError(f"{root}: shard(s) {', '.join(missing[:3])} named in {INDEX} "
                                       "are missing (an interrupted download?)")
            return [root / v for v in sorted(set(wmap.values()))], wmap
        if (root / WEIGHTS).is_file():
            return [root / WEIGHTS], None
        pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ModelFolderError(
                f"{root}: its weights are only in {', '.join(pickles[:3])}, a PyTorch pickle. Loading "
                "a pickle can run any code hidden in it, so tfviz never opens one. Save the model "
                f"as safetensors ({WEIGHTS}) where you trust the file, e.g. "
                "model.save_pretrained(folder, safe_serialization=True)")
        others = sorted(p.name for p in root.glob("*.safetensors"))
        hint = f" (found {', '.join(others[:3])}; expected {WEIGHTS} or {INDEX})" if others else ""
        raise ModelFolderError(f"{root}: no {WEIGHTS} and no {INDEX}{hint}")

    @contextmanager
    def weights(self, progress: Progress | None = None) -> Iterator["Weights"]:
        """The tensors, opened with safetensors' ``safe_open`` (memory-mapped, read one by one)."""
        handles: dict[Path, object] = {}
        w = Weights(self, handles, progress)
        try:
            yield w
        finally:
            handles.clear()


class Weights:
    """Lazy access to a folder's tensors by their Hugging Face names; remembers what was read."""

    def __init__(self, folder: ModelFolder, handles: dict, progress: Progress | None):
        self.folder, self._handles, self._progress = folder, handles, progress
        self.used: set[str] = set()
        self._done, self._total = 0, max(folder.nbytes, 1)

    def names(self) -> list[str]:
        return sorted(self.folder.shards)

    def __contains__(self, name: str) -> bool:
        return name in self.folder.shards

    def _open(self, name: str):
        f = self.folder.shards[name]
        if f not in self._handles:
            self._handles[f] = safe_open(str(f), framework="pt", device="cpu")
        return self._handles[f]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._open(name).get_slice(name).get_shape())

    def get(self, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The tensor ``name`` as ``dtype`` (float16/bfloat16 weights become float32)."""
        if name not in self.folder.shards:
            raise ModelFolderError(f"{self.folder.path}: the weights have no tensor {name!r}")
        t = self._open(name).get_tensor(name)
        if not t.is_floating_point():
            raise ModelFolderError(f"{self.folder.path}: tensor {name!r} holds {t.dtype}, not weights")
        if not bool(torch.isfinite(t).all()):
            raise ModelFolderError(f"{self.folder.path}: tensor {name!r} holds NaN or infinite values")
        self.used.add(name)
        self._done += t.numel() * t.element_size()
        if self._progress is not None:
            self._progress(min(self._done / self._total, 1.0), f"reading {name}")
        return t.to(dtype)

    def first(self, *names: str) -> str | None:
        """The first of ``names`` the folder has (e.g. "LayerNorm.weight" or the older "...gamma")."""
        return next((n for n in names if n in self.folder.shards), None)
