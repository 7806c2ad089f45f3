"""``from_pretrained``: a Hugging Face model folder -> a tfviz ``Checkpoint``; ``import_folder``
writes it as a tfviz checkpoint (``python -m tfviz import PATH --out NAME``).

    ck = tfviz.from_pretrained("models/gpt2", progress=lambda f, msg: print(f"{f:.0%} {msg}"))
    ck.model        # a tfviz.Transformer: record(), generate(), every hook point
    ck.tokenizer    # the folder's tokenizer.json, with its own ids and special tokens
    ck.task         # the tfviz task it was trained on, for a folder tfviz wrote (tfviz_task.json)
    ck.meta["extra"]["imported"]   # family, model_type, notes (what was adapted), its config.json

Offline and read only: the folder (or the hub cache) is read, nothing is downloaded, written or
unpickled. Tensors are read one at a time from memory-mapped safetensors files and become the
model's parameters directly (no random initialisation, no second copy).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from ..model import Transformer
from ..train.checkpoint import Checkpoint, save_checkpoint
from ..version import __version__
from .families import adapter_for, unused
from . import taskfile
from .folder import ModelFolder, ModelFolderError, Progress
from .tokenizer import load_tokenizer

SOURCE = "huggingface"


def from_pretrained(path: str | os.PathLike, *, max_bytes: int | None = None,
                    progress: Progress | None = None, device: str | torch.device = "cpu") -> Checkpoint:
    """Open a Hugging Face model folder (see ``tfviz.interop.folder`` for the layouts) as a
    ``Checkpoint`` whose ``model`` computes what transformers computes (float32). Raises
    ``ModelFolderError`` (a ValueError) saying why a folder cannot be opened: an unknown
    model_type, an option tfviz does not implement, pickle-only weights, weights over
    ``max_bytes`` (default ``folder.local_max_bytes()``), a mapping that leaves weights unused —
    and for any malformed file (wrong JSON types, too large or too deep, not UTF-8, truncated,
    a folder where a file belongs, a link out of the folder): never another exception.
    The model is moved to ``device`` (as ``load_checkpoint`` does) and put in eval mode."""
    try:
        return _from_pretrained(path, max_bytes, progress, device)
    except ModelFolderError:
        raise
    except Exception as e:  # noqa: BLE001 — a file no check foresaw: still a reason, not a crash
        raise ModelFolderError(f"{path}: cannot be opened as a model folder "
                               f"({type(e).__name__}: {_first_line(e)})") from e


def _first_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[-1].strip()[:300] if lines else ""


def model_config(config: dict, w) -> tuple[type, object, list[str]]:
    """(adapter, ModelConfig, notes) for a folder's config.json (``w``: its weights, or a stand-in
    that has every tensor); ModelFolderError for anything it cannot read."""
    family = adapter_for(config)
    try:
        cfg, notes = family.model_config(config, w)
    except ModelFolderError:
        raise
    except ValueError as e:  # ModelConfig's own checks: still about this folder's config.json
        raise ModelFolderError(f"config.json: {e}") from None
    except (TypeError, AttributeError, KeyError, IndexError, OverflowError) as e:
        raise ModelFolderError(f"config.json has a value tfviz cannot read ({type(e).__name__}: "
                               f"{_first_line(e)})") from None
    return family, cfg, notes


def _from_pretrained(path, max_bytes, progress, device) -> Checkpoint:
    report = progress or (lambda fraction, message: None)
    report(0.0, "reading config.json")
    folder = ModelFolder.open(path, max_bytes)
    with folder.weights(lambda f, msg: report(0.02 + 0.88 * f, msg)) as w:
        try:
            family, cfg, notes = model_config(folder.config, w)
        except ModelFolderError as e:
            msg = str(e)
            raise ModelFolderError(msg if msg.startswith(str(folder.path)) else f"{folder.path}: {msg}") from None
        state = dict(family.state_dict(cfg, w))
        left = unused(w, family, cfg)
    if left:
        raise ModelFolderError(
            f"{folder.path}: {len(left)} weight(s) that the {family.label} mapping does not use "
            f"({', '.join(left[:4])}{' ...' if len(left) > 4 else ''}): the model has parts tfviz does not "
            "implement, so it would compute something else; refused")
    report(0.9, "reading tokenizer.json")
    tokenizer = None
    if folder.tokenizer_file is not None:
        tokenizer = load_tokenizer(folder.tokenizer_file, folder.tokenizer_config, folder.config,
                                   folder.special_tokens_map, max_tokens=cfg.vocab_size)
        if tokenizer.vocab_size > cfg.vocab_size:
            raise ModelFolderError(f"{folder.path}: tokenizer.json has {tokenizer.vocab_size} tokens but "
                                   f"the model only {cfg.vocab_size} embeddings")
    else:
        notes.append("no tokenizer.json in the folder: token ids only (tfviz reads the fast-tokenizer "
                     "file that save_pretrained writes, not vocab.txt / tokenizer.model)")
    task, written, task_notes = taskfile.read(folder.path, tokenizer)
    notes += task_notes
    if attention_only(written, cfg, state):  # the same function without the MLPs of zeros
        cfg, state = cfg.replace(attn_only=True), {k: v for k, v in state.items() if not _MLP.search(k)}
        notes.append("attention-only, as tfviz trained it: every MLP in the folder is zeros (adds exactly 0)")
    report(0.95, "building the model")
    try:
        model = Transformer.from_state_dict(cfg, state).to(device).eval()
    except (RuntimeError, ValueError) as e:  # a shape that does not fit config.json
        raise ModelFolderError(f"{folder.path}: the weights do not fit config.json: "
                               f"{str(e).splitlines()[-1].strip()[:300]}") from None
    imported = {"source": SOURCE, "family": family.name, "model_type": folder.config.get("model_type"),
                "architectures": folder.config.get("architectures") or [], "folder": str(folder.path),
                "notes": notes, "weights_bytes": folder.nbytes, "hf_config": folder.config}
    report(1.0, "loaded")
    return Checkpoint(folder.path, model, cfg, tokenizer, task, None, [],
                      {"tfviz_version": __version__, "extra": {"imported": imported}})


_MLP = re.compile(r"^stack\.blocks\.\d+\.(ln2|mlp)\.")


def attention_only(written: dict, cfg, state: dict) -> bool:
    """Whether a folder tfviz wrote for an attention-only model (its tfviz_task.json says
    ``attn_only``) still holds MLPs that add exactly 0: every MLP output weight and bias zero."""
    trained = written.get("tfviz_config") if isinstance(written, dict) else None
    if not (isinstance(trained, dict) and trained.get("attn_only") is True) or cfg.attn_only:
        return False
    outs = [v for k, v in state.items() if re.search(r"^stack\.blocks\.\d+\.mlp\.W_out\.", k)]
    return bool(outs) and all(not bool(v.any()) for v in outs)


def import_folder(path: str | os.PathLike, out: str | os.PathLike, *, max_bytes: int | None = None,
                  progress: Progress | None = None) -> Path:
    """``from_pretrained(path)`` saved as a tfviz checkpoint at ``out`` (safetensors + JSON, the
    folder's family, model_type, notes and config.json kept under ``extra["imported"]``, its task
    when the folder brought one)."""
    ck = from_pretrained(path, max_bytes=max_bytes, progress=progress)
    with torch.no_grad():
        return save_checkpoint(out, ck.model, tokenizer=ck.tokenizer, task=ck.task, extra=ck.meta["extra"])
