"""Which Hugging Face model folders are on this machine, cheaply: config.json and file sizes only
(no tensor is read), for a model picker.

    for m in list_models(): print(m.name, m.family, m.nbytes, m.ok, m.reason)

Looked at: the folders directly under ``tfviz.paths.models_dir()`` ($TFVIZ_MODELS_DIR, default
``models/`` in the repository) and, when it exists, the local Hugging Face cache
(``tfviz.paths.hf_cache_dir()``: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), read
only. A folder tfviz cannot open is listed too, with the reason in words.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..model.families import parameter_count
from .families import adapter_for
from .folder import (CONFIG, INDEX, PICKLE_SUFFIXES, TOKENIZER, WEIGHTS, ModelFolderError,
                     local_max_bytes, resolve)

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
    """One folder's ``ModelInfo``: config.json and file sizes only."""
    p = Path(path)
    name = name or p.name
    try:
        root = resolve(p)
        config = json.loads((root / CONFIG).read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ModelFolderError("config.json is not a JSON object")
    except (ModelFolderError, OSError, UnicodeDecodeError, ValueError) as e:
        return ModelInfo(name, p, source, False, _short(e, p))
    base = dict(name=name, path=root, source=source, model_type=config.get("model_type"))
    if (root / INDEX).is_file():
        try:
            files = sorted(set(json.loads((root / INDEX).read_text())["weight_map"].values()))
            nbytes = sum((root / f).stat().st_size for f in files)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return ModelInfo(**base, ok=False, reason=f"{INDEX} is unreadable or names missing shards")
    elif (root / WEIGHTS).is_file():
        nbytes = (root / WEIGHTS).stat().st_size
    else:
        pickles = sorted(f.name for f in root.iterdir() if f.suffix in PICKLE_SUFFIXES)
        why = (f"weights only as a PyTorch pickle ({pickles[0]}), which tfviz never opens: save them "
               "as safetensors" if pickles else f"no {WEIGHTS}")
        return ModelInfo(**base, ok=False, reason=why)
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    info = dict(base, nbytes=nbytes, params=nbytes // BYTES_PER_PARAM.get(dtype, 4))
    try:
        family = adapter_for(config)
        model_config, notes = family.model_config(config, _AnyWeights())
    except ValueError as e:
        return ModelInfo(**info, ok=False, reason=_short(e, root))
    # the count of the model tfviz builds (tied weights once), as its card says: not the file size
    info.update(params=parameter_count(model_config), params_exact=True)
    if nbytes > local_max_bytes():
        return ModelInfo(**info, family=family.name, ok=False,
                         reason=f"{nbytes / 2**20:,.0f} MB of weights, over the {local_max_bytes() / 2**20:,.0f} "
                                "MB limit for local models (TFVIZ_LOCAL_MODEL_MAX_MB)")
    if not (root / TOKENIZER).is_file():
        notes = [*notes, "no tokenizer.json: token ids only"]
    return ModelInfo(**info, family=family.name, ok=True, notes=notes)


def _short(e: Exception, where: Path) -> str:
    """The message without the folder's path in front (the picker shows the name already)."""
    msg = str(e)
    for p in (str(where), str(where.resolve()) if where.exists() else ""):
        if p and msg.startswith(p):
            msg = msg[len(p):].lstrip(": ")
    return msg


def list_models(models_dir: str | os.PathLike | None = None,
                cache_dir: str | os.PathLike | None = None) -> list[ModelInfo]:
    """Every model folder under ``models_dir`` (default ``paths.models_dir()``) and in the Hugging
    Face cache ``cache_dir`` (default ``paths.hf_cache_dir()``), by source then name."""
    out = []
    mdir = Path(models_dir) if models_dir is not None else paths.models_dir()
    if mdir.is_dir():
        for p in sorted(mdir.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                out.append(inspect(p, "models"))
    cdir = Path(cache_dir) if cache_dir is not None else paths.hf_cache_dir()
    if cdir.is_dir():
        for p in sorted(cdir.glob("models--*")):
            if p.is_dir():
                out.append(inspect(p, "hf-cache", p.name.removeprefix("models--").replace("--", "/")))
    return out
