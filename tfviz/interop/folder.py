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

Every file is bounded before it is read: the JSON files by size, brackets and depth
(``tfviz.storage.read_json``; ``tfviz.limits``: config.json, the shard index, tokenizer_config.json
and special_tokens_map.json ``FOLDER_JSON_MB``, tokenizer.json ``TFVIZ_TOKENIZER_MAX_MB``), the
index by its entries (``storage.MAX_TENSORS``), the weights by ``TFVIZ_LOCAL_MODEL_MAX_MB``. A file
must be a regular file inside the folder: a folder where a file belongs, or a link that leads out of
the folder, is refused (the hub cache's links from ``snapshots/<rev>/`` into the same repository's
``blobs/`` are inside it). config.json's fields that tfviz reads by name must have their JSON type
(``CONFIG_FIELDS``). Anything wrong is a ``ModelFolderError`` saying what.
"""
from __future__ import annotations

import os
import re
import stat
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
    if p.name == CONFIG and p.is_file():
        p = p.parent
    if not p.is_dir():
        raise ModelFolderError(f"{p}: no such folder")
    if os.path.lexists(p / CONFIG):  # read (and refused if it is not a file) by read_config
        return p
    snaps = p / "snapshots"
    if snaps.is_dir():
        ref = p / "refs" / "main"
        rev = ""
        if ref.is_file():  # a revision name is 40 hex digits: read no more than a line of it
            with open(ref, "rb") as f:
                rev = f.read(256).decode("utf-8", "replace").strip()
        if re.fullmatch(r"[0-9a-zA-Z_-][0-9a-zA-Z._-]*", rev) and os.path.lexists(snaps / rev / CONFIG):
            return snaps / rev
        found = sorted((s for s in snaps.iterdir() if os.path.lexists(s / CONFIG)),
                       key=lambda s: s.stat().st_mtime, reverse=True)
        if found:
            return found[0]
        raise ModelFolderError(f"{p}: a Hugging Face cache folder, but no snapshot in it has a "
                               f"{CONFIG} (was the download interrupted?)")
    raise ModelFolderError(f"{p}: no {CONFIG} here, so it is not a Hugging Face model folder "
                           f"(save_pretrained writes {CONFIG} next to {WEIGHTS})")


def _home(root: Path) -> Path:
    """Where the files of the model in ``root`` may live: the folder itself, or for a hub-cache
    snapshot (``models--org--name/snapshots/<rev>``) the whole repository folder (its ``blobs/``)."""
    real = root.resolve()  # models/gpt2 may itself be a link to a cache snapshot
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real.parent.parent
    return real


def file_in(root: Path, name: str) -> Path | None:
    """``root / name`` when it is there (None when it is not): a regular file inside the folder,
    else ModelFolderError — a folder where a file belongs, a broken link, or a link to a file
    outside the folder (tfviz reads a model's own files only, as it refuses an index's paths)."""
    f = root / name
    if not os.path.lexists(f):
        return None
    try:
        real, home = f.resolve(), _home(root)
    except (OSError, RuntimeError):  # a link that leads to itself
        raise ModelFolderError(f"{f}: {name} cannot be read (a loop of links)") from None
    if not real.is_relative_to(home):
        raise ModelFolderError(f"{f}: {name} is a link to a file outside the model's folder; tfviz "
                               "reads only the folder's own files (copy the file in, or link the "
                               "whole folder instead)")
    try:
        mode = os.stat(f).st_mode
    except OSError as e:
        raise ModelFolderError(f"{f}: {name} cannot be read ({e.strerror or e}; a broken link?)") from None
    if stat.S_ISDIR(mode):
        raise ModelFolderError(f"{f}: {name} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise ModelFolderError(f"{f}: {name} is not a regular file")
    return f


def read_json(root: Path, name: str, max_bytes: int | None = None,
              max_containers: int = limits.FOLDER_JSON_CONTAINERS) -> dict:
    """The JSON object in ``root / name`` (``file_in``), its size, brackets and depth bounded
    before it is parsed (``tfviz.storage.read_json``; default ``limits.folder_json_bytes()``)."""
    f = file_in(root, name)
    if f is None:
        raise ModelFolderError(f"{root}: no {name}")
    try:
        data = storage.read_json(f, name, max_bytes=limits.folder_json_bytes() if max_bytes is None
                                 else max_bytes, max_containers=max_containers)
    except storage.CheckpointError as e:
        raise ModelFolderError(str(e)) from None
    if not isinstance(data, dict):
        raise ModelFolderError(f"{f}: {name} must be a JSON object {{...}}, not {_kind(data)}")
    return data


def _kind(value) -> str:
    """"a list ([1, 2])": what a JSON value is, for a message."""
    names = {str: "a string", bool: "true/false", int: "a number", float: "a number", list: "a list",
             dict: "an object", type(None): "null"}
    shown = repr(value)
    return f"{names.get(type(value), type(value).__name__)} ({shown[:60]}{'...' if len(shown) > 60 else ''})"


_TEXT, _TEXTS, _OBJECT = "a string", "a list of strings", "an object {...}"
_FLAG, _WHOLE, _NUMBER = "true or false", "a whole number", "a number"
_IS = {_TEXT: lambda v: isinstance(v, str),
       _TEXTS: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
       _OBJECT: lambda v: isinstance(v, dict), _FLAG: lambda v: isinstance(v, bool),
       _WHOLE: lambda v: isinstance(v, int) and not isinstance(v, bool),
       _NUMBER: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}
CONFIG_FIELDS = {
    "model_type": _TEXT, "architectures": _TEXTS, "hidden_act": _TEXT, "activation_function": _TEXT,
    "position_embedding_type": _TEXT, "rope_scaling": _OBJECT, "rope_parameters": _OBJECT,
    "layer_types": _TEXTS, "head_dim": _WHOLE, "n_inner": _WHOLE, "partial_rotary_factor": _NUMBER,
    "tie_word_embeddings": _FLAG, "scale_attn_weights": _FLAG, "scale_attn_by_inverse_layer_idx": _FLAG,
    "add_cross_attention": _FLAG, "is_decoder": _FLAG, "use_sliding_window": _FLAG,
    "attention_bias": _FLAG, "mlp_bias": _FLAG}
"""config.json fields the families read by name (``families.py``; numbers through ``Adapter.number``)
-> the JSON type each must have when present (null counts as absent)."""


def check_config(config: dict) -> None:
    """ModelFolderError naming the first field of ``CONFIG_FIELDS`` with another JSON type."""
    for key, kind in CONFIG_FIELDS.items():
        value = config.get(key)
        if value is not None and not _IS[kind](value):
            example = ' (e.g. ["GPT2LMHeadModel"])' if key == "architectures" else ""
            raise ModelFolderError(f'config.json: "{key}" must be {kind}{example}, not {_kind(value)}')


def read_config(root: Path) -> dict:
    """config.json of the folder ``root`` (``resolve``): bounded, a JSON object, fields typed."""
    config = read_json(root, CONFIG)
    try:
        check_config(config)
    except ModelFolderError as e:
        raise ModelFolderError(f"{root}: {e}") from None
    return config


def weight_files(root: Path) -> tuple[list[Path], dict[str, str] | None]:
    """The folder's safetensors files (each ``file_in`` it) and, when sharded, the index's
    tensor name -> file; ModelFolderError saying what is missing or wrong."""
    if file_in(root, INDEX) is not None:
        data = read_json(root, INDEX)
        wmap = data.get("weight_map")
        if not isinstance(wmap, dict) or not wmap or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()):
            raise ModelFolderError(f"{root / INDEX}: needs a \"weight_map\" of tensor name -> file")
        if len(wmap) > storage.MAX_TENSORS:
            raise ModelFolderError(f"{root / INDEX}: names {len(wmap):,} tensors; a model has at most "
                                   f"{storage.MAX_TENSORS:,}")
        bad = sorted({v for v in wmap.values() if not _SHARD_NAME.match(v) or v.startswith(".")})
        if bad:
            raise ModelFolderError(f"{root / INDEX}: shard names must be plain .safetensors file "
                                   f"names in the same folder, not {bad[:3]}")
        names = sorted(set(wmap.values()))
        missing = [v for v in names if file_in(root, v) is None]
        if missing:
            raise ModelFolderError(f"{root}: shard(s) {', '.join(missing[:3])} named in {INDEX} "
                                   "are missing (an interrupted download?)")
        return [root / v for v in names], wmap
    if file_in(root, WEIGHTS) is not None:
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


def check_size(root: Path, files: list[Path], max_bytes: int | None = None) -> int:
    """The weight files' total size, refused over ``max_bytes`` (default ``local_max_bytes()``)."""
    limit = local_max_bytes() if max_bytes is None else max_bytes
    nbytes = sum(f.stat().st_size for f in files)
    if nbytes > limit:
        raise ModelFolderError(
            f"{root}: the weights are {_mb(nbytes)}, over the {_mb(limit)} limit for local models "
            f"(a model takes about that much memory again, or more, once loaded as float32); "
            f"set TFVIZ_LOCAL_MODEL_MAX_MB to allow more")
    return nbytes


def tokenizer_json_max_bytes() -> int:
    """``tfviz.limits.tokenizer_json_bytes`` ($TFVIZ_TOKENIZER_MAX_MB, default 32)."""
    try:
        return limits.tokenizer_json_bytes()
    except ValueError as e:
        raise ModelFolderError(str(e)) from None


def tokenizer_files(root: Path) -> tuple[Path | None, dict, dict]:
    """(tokenizer.json or None, tokenizer_config.json, special_tokens_map.json) of the folder: each a
    file in it, tokenizer.json within ``TFVIZ_TOKENIZER_MAX_MB`` (by its size: it is parsed when the
    model is loaded), the other two read (bounded; {} when absent)."""
    tok = file_in(root, TOKENIZER)
    if tok is not None and (size := tok.stat().st_size) > (limit := tokenizer_json_max_bytes()):
        raise ModelFolderError(f"{tok}: {TOKENIZER} is {size:,} bytes, over the {limit:,}-byte "
                               f"limit for a tokenizer ({limit / 2**20:,.1f} MB; GPT-2's is 1.4 MB, "
                               "Llama 3's 8.7 MB): set TFVIZ_TOKENIZER_MAX_MB to allow more")
    extra = [read_json(root, name) if file_in(root, name) is not None else {}
             for name in (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP)]
    return tok, *extra


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
        config = read_config(root)
        files, index = weight_files(root)
        nbytes = check_size(root, files, max_bytes)
        tok, tokenizer_config, special_tokens_map = tokenizer_files(root)
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
        return cls(root, config, shards, files, nbytes, tok, tokenizer_config, special_tokens_map)

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
