"""One checkpoint = one ``NAME.safetensors`` file: tensors + JSON metadata. Never a pickle.

File layout (safetensors): ``u64 little-endian N | N bytes of JSON header | tensor bytes``.
The header maps tensor name -> {dtype, shape, data_offsets} and ``__metadata__`` (str -> str), where
we keep JSON strings: format, format_version, model_config, train_config, task (spec), tokenizer,
history, extra, train_state, created, tfviz_version. ``NAME.json`` is a copy for humans.

Tensors: the model's ``state_dict`` (a tied ``unembed.weight`` is stored once, as ``embed.weight``,
and re-tied on load); a resumable checkpoint adds AdamW moments ``optim.<param>.<slot>`` and RNG
states ``rng.<name>`` (uint8) — their scalars (step counts) live in the ``train_state`` JSON.

Loading parses and checks the header *before* touching tensor data, builds the expected shapes from
the saved ModelConfig on the meta device, and raises :class:`CheckpointError` for anything off.
Writing is atomic: temp file in the same folder, flush + fsync, ``os.replace``.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

from .model import ModelConfig
from .model import Transformer

FORMAT = "tfviz-checkpoint"
FORMAT_VERSION = 1
SUFFIX = ".safetensors"
DEFAULT_MAX_BYTES = 200 * 2**20
MAX_HEADER_BYTES = 64 * 2**20
TIED_KEY = "unembed.weight"
NOT_SAFETENSORS = "not a safetensors file (is it a pickle/torch.save file? those are never loaded)"
# safetensors dtype -> (torch dtype, bytes per element)
DTYPES = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
          "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
          "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1), "BOOL": (torch.bool, 1)}
ST_NAME = {v[0]: k for k, v in DTYPES.items()}
RAW_KEYS = ("format", "format_version", "created", "tfviz_version", "tokenizer")  # plain strings
JSON_KEYS = ("model_config", "train_config", "task", "history", "extra", "train_state", "snapshots")


class CheckpointError(ValueError):
    """A file that is not a valid tfviz checkpoint; the message says what is wrong."""


@dataclass
class TrainState:
    """What resuming needs beyond the weights: step, optimizer/RNG tensors, JSON scalars."""

    step: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # "optim.*", "rng.*"
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Checkpoint:
    path: Path
    model: Transformer
    config: ModelConfig
    tokenizer: Any  # tfviz.tokenize.Tokenizer | None
    task: dict | None  # the task spec; build_task() rebuilds the task
    train_config: Any  # tfviz.train.TrainConfig | None
    history: list[dict]
    meta: dict[str, Any]
    train_state: TrainState | None = None
    snapshots: list = field(default_factory=list)  # tfviz.train.AttentionSnapshot, oldest first

    @property
    def step(self) -> int:
        if self.train_state is not None:
            return self.train_state.step
        return int(self.history[-1].get("step", 0)) if self.history else 0

    def build_task(self, **overrides: Any):
        if self.task is None:
            raise CheckpointError(f"{self.path} records no task")
        from .tasks import make_task
        return make_task(self.task, **overrides)

    def card(self) -> str:
        """A short human-readable summary (what ``python -m tfviz info`` prints)."""
        c = self.config
        n_params = sum(p.numel() for p in self.model.parameters())
        lines = [f"checkpoint   {self.path}",
                 f"created      {self.meta.get('created', '?')} by tfviz {self.meta.get('tfviz_version', '?')}",
                 f"model        {c.arch}, {c.n_layers} layers, {c.n_heads} heads ({c.n_kv_heads} kv), "
                 f"d_model {c.d_model}, d_ff {c.d_ff}, pos {c.pos}, norm {c.norm}"
                 f"{', attention-only' if c.attn_only else ''}, {n_params:,} parameters",
                 f"vocab        {c.vocab_size}" + (f" ({self.tokenizer!r})" if self.tokenizer else "")]
        if self.task:
            lines.append("task         " + ", ".join(f"{k}={v}" for k, v in self.task.items()))
        if self.train_config is not None:
            t = self.train_config
            lines.append(f"training     step {self.step} of {t.steps}, batch {t.batch_size}, lr {t.lr:g} "
                         f"({t.schedule}, warmup {t.warmup}), seed {t.seed}"
                         f"{', resumable' if self.train_state else ''}")
        final = self.meta.get("extra", {}).get("final") if isinstance(self.meta.get("extra"), dict) else None
        evals = [h for h in self.history if "val_accuracy" in h]
        if final:
            lines.append("final        " + ", ".join(f"{k} {v:.4g}" for k, v in final.items()
                                                     if isinstance(v, (int, float))))
        elif evals:
            lines.append(f"last eval    step {evals[-1]['step']}: val loss {evals[-1]['val_loss']:.4f}, "
                         f"val accuracy {evals[-1]['val_accuracy']:.3f}")
        return "\n".join(lines)


def checkpoint_path(path: str | os.PathLike) -> Path:
    """``runs/x`` -> ``runs/x.safetensors`` (a path already ending in .safetensors is kept)."""
    p = Path(path)
    return p if p.suffix == SUFFIX else p.with_name(p.name + SUFFIX)


# ---------------------------------------------------------------------------------- saving
def _write_all(f, data: bytes, chunk: int = 1 << 20) -> None:
    view = memoryview(data)
    for start in range(0, len(view), chunk):
        f.write(view[start:start + chunk])


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable (not possible on every OS / filesystem)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def model_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    sd = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        sd.pop(TIED_KEY)  # the same storage as embed.weight: stored once, re-tied on load
    return sd


def save_checkpoint(path, model: Transformer, *, tokenizer=None, task=None, train_config=None,
                    history: list[dict] | None = None, extra: dict | None = None,
                    train_state: TrainState | None = None, snapshots: list | None = None,
                    sidecar: bool = True) -> Path:
    """Write ``path`` (``.safetensors`` appended if missing) atomically; returns the final path.

    ``task``: a Task (its spec and tokenizer are saved) or a spec dict. ``train_state`` makes the
    checkpoint resumable. ``extra``: any JSON-able dict (e.g. final metrics). ``snapshots``: attention
    snapshots taken while training (thinned to at most 32 / 8 MB, so the app can replay them).
    """
    from . import __version__
    path = checkpoint_path(path)
    if not isinstance(model, Transformer):
        raise ValueError(f"save_checkpoint needs a tfviz.Transformer, not {type(model).__name__}")
    spec = task.spec() if hasattr(task, "spec") else task
    if tokenizer is None and hasattr(task, "tokenizer"):
        tokenizer = task.tokenizer
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "tfviz_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "model_config": model.config.to_dict(), "task": spec,
            "train_config": None if train_config is None else train_config.to_dict(),
            "history": list(history or []), "extra": dict(extra or {})}
    tensors = model_tensors(model)
    if train_state is not None:
        meta["train_state"] = {"step": int(train_state.step), **train_state.info}
        tensors.update({k: v.detach().to("cpu").contiguous() for k, v in train_state.tensors.items()})
    if snapshots:
        from .train.snapshot import thin, to_tensors
        snap_tensors, meta["snapshots"] = to_tensors(thin(snapshots))
        tensors.update(snap_tensors)
    str_meta = {k: str(v) if k in RAW_KEYS else json.dumps(v) for k, v in meta.items()}
    if tokenizer is not None:
        str_meta["tokenizer"] = tokenizer.to_json()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, _st_save(tensors, metadata=str_meta))
    if sidecar:
        human = {**meta, "tokenizer": None if tokenizer is None else repr(tokenizer),
                 "snapshots": [{"step": x["step"]} for x in meta.get("snapshots", [])],
                 "tensors": {k: [ST_NAME[v.dtype], list(v.shape)] for k, v in tensors.items()}}
        atomic_write(path.with_suffix(".json"), json.dumps(human, indent=1).encode())
    return path


# ---------------------------------------------------------------------------------- loading
def _fail(path, msg: str) -> CheckpointError:
    return CheckpointError(f"{path}: {msg}")


def read_header(data: bytes, path="checkpoint") -> tuple[dict, dict[str, str]]:
    """Parse and check a safetensors header without reading tensor data."""
    if data[:4] == b"PK\x03\x04":
        raise _fail(path, "a zip archive, not a safetensors file (torch.save writes zips of pickles; "
                          "those are never loaded)")
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise _fail(path, NOT_SAFETENSORS)
    if len(data) < 10:
        raise _fail(path, f"only {len(data)} bytes: too short to be a checkpoint (truncated?)")
    (n,) = struct.unpack("<Q", data[:8])
    if data[8:9] != b"{" or n < 2 or n > MAX_HEADER_BYTES:
        raise _fail(path, NOT_SAFETENSORS)
    if 8 + n > len(data):
        raise _fail(path, f"truncated: the header says it is {n} bytes but the file ends after "
                          f"{len(data) - 8}")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, ValueError):
        raise _fail(path, NOT_SAFETENSORS) from None
    if not isinstance(header, dict):
        raise _fail(path, NOT_SAFETENSORS)
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _fail(path, "__metadata__ must map strings to strings")
    spans, available = [], len(data) - 8 - n
    for name, info in header.items():
        if not (isinstance(info, dict) and info.get("dtype") in DTYPES and isinstance(info.get("shape"), list)
                and all(isinstance(d, int) and d >= 0 for d in info["shape"])
                and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
                and all(isinstance(o, int) for o in info["data_offsets"])):
            raise _fail(path, f"tensor {name!r} has a malformed header entry {str(info)[:200]}")
        begin, end = info["data_offsets"]
        need = math.prod(info["shape"]) * DTYPES[info["dtype"]][1]
        if not 0 <= begin <= end or end - begin != need:
            raise _fail(path, f"tensor {name!r}: shape {info['shape']} of {info['dtype']} needs {need} "
                              f"bytes but its header entry spans {begin}..{end}")
        spans.append((begin, end))
    end = max((e for _, e in spans), default=0)
    if end > available:
        raise _fail(path, f"truncated or corrupt: the header claims {end} bytes of tensor data but only "
                          f"{available} follow it")
    covered = 0
    for b, e in sorted(spans):
        if b != covered:
            raise _fail(path, "tensor data overlaps or leaves gaps: the header is corrupt")
        covered = e
    if end < available:
        raise _fail(path, f"{available - end} unexpected bytes after the tensor data")
    return header, meta


def _json_field(meta: dict[str, str], key: str, path, required: bool = False):
    if key not in meta:
        if required:
            raise _fail(path, f"metadata lacks {key!r}")
        return None
    try:
        return json.loads(meta[key])
    except ValueError:
        raise _fail(path, f"metadata {key!r} is not valid JSON") from None


def _expected(config: ModelConfig, meta_state: dict | None) -> dict[str, tuple[torch.dtype, tuple]]:
    with torch.device("meta"):
        shell = Transformer(config)
    want = {k: (v.dtype, tuple(v.shape)) for k, v in shell.state_dict().items()}
    if config.tie_embeddings:
        want.pop(TIED_KEY)
    if meta_state is not None:
        params = dict(shell.named_parameters())
        for name in meta_state.get("param_steps", {}):
            if name not in params:
                raise ValueError(f"train_state names an unknown parameter {name!r}")
            for slot in ("exp_avg", "exp_avg_sq"):
                want[f"optim.{name}.{slot}"] = (torch.float32, tuple(params[name].shape))
    return want


def _parse_meta(meta: dict[str, str], path) -> dict[str, Any]:
    """Check format/version and parse every JSON field; returns them with the built objects
    under ``config``, ``train_config_obj`` and ``tokenizer_obj``."""
    from .tokenize import Tokenizer
    from .train.config import TrainConfig
    if meta.get("format") != FORMAT:
        raise _fail(path, f"a safetensors file but not a tfviz checkpoint (metadata format is "
                          f"{meta.get('format')!r}, expected {FORMAT!r})")
    try:
        version = int(meta.get("format_version", ""))
    except ValueError:
        raise _fail(path, f"format_version {meta.get('format_version')!r} is not a number") from None
    if version > FORMAT_VERSION:
        raise _fail(path, f"written by a newer tfviz (checkpoint format_version {version}; this tfviz "
                          f"reads up to {FORMAT_VERSION}): upgrade tfviz to load it")
    if version < 1:
        raise _fail(path, f"invalid format_version {version}")
    parsed = {**{k: meta[k] for k in RAW_KEYS if k in meta and k != "tokenizer"}, "format_version": version,
              **{k: _json_field(meta, k, path) for k in JSON_KEYS}}
    try:
        for key, kind in (("history", list), ("task", dict), ("extra", dict), ("train_state", dict)):
            if parsed.get(key) is not None and not isinstance(parsed[key], kind):
                raise ValueError(f"{key} must be a JSON {'array' if kind is list else 'object'}")
        if not all(isinstance(h, dict) for h in parsed.get("history") or []):
            raise ValueError("history must be a list of JSON objects")
        state = parsed.get("train_state")
        if state is not None and not (isinstance(state.get("step"), int) and state["step"] >= 0
                                      and isinstance(state.get("param_steps", {}), dict)):
            raise ValueError("train_state needs a whole-number step and a param_steps object")
        objs = {"config": ModelConfig.from_dict(_json_field(meta, "model_config", path, required=True)),
                "train_config_obj": None if parsed.get("train_config") is None
                else TrainConfig.from_dict(parsed["train_config"]),
                "tokenizer_obj": None if "tokenizer" not in meta else Tokenizer.from_json(meta["tokenizer"])}
        objs["want"] = _expected(objs["config"], state)
        if parsed.get("snapshots") is not None:
            from .train.snapshot import expected_tensors
            objs["want"].update(expected_tensors(parsed["snapshots"], objs["config"].n_heads))
    except ValueError as e:
        raise _fail(path, f"invalid metadata: {e}") from None
    tok, cfg = objs["tokenizer_obj"], objs["config"]
    if tok is not None and tok.vocab_size != cfg.vocab_size:  # ids outside either would break pages
        raise _fail(path, f"the tokenizer has {tok.vocab_size} tokens but the model's vocab_size is "
                          f"{cfg.vocab_size}: they do not belong together")
    return {**parsed, **objs}


def _check_tensors(header: dict, want: dict, resumable: bool, path) -> None:
    """Exactly the expected names, each with the config's dtype and shape."""
    rng_keys = {k for k in header if k.startswith("rng.")} if resumable else set()
    missing = sorted(set(want) - set(header))
    unexpected = sorted(set(header) - set(want) - rng_keys)
    if missing:
        raise _fail(path, f"missing tensor(s) {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if unexpected:
        raise _fail(path, f"unexpected tensor(s) {', '.join(unexpected[:5])}"
                          f"{' ...' if len(unexpected) > 5 else ''} for this model config")
    for k, (dtype, shape) in want.items():
        got = (DTYPES[header[k]["dtype"]][0], tuple(header[k]["shape"]))
        if got != (dtype, shape):
            raise _fail(path, f"tensor {k!r} is {got[0]} {list(got[1])} but the config needs "
                              f"{dtype} {list(shape)}")
    if resumable and "rng.batch" not in rng_keys:
        raise _fail(path, "train_state without the batch sampler's RNG state (rng.batch)")
    for k in rng_keys:
        if header[k]["dtype"] != "U8" or len(header[k]["shape"]) != 1:
            raise _fail(path, f"RNG state {k!r} must be a 1-D uint8 tensor")


def load_checkpoint(path, *, max_bytes: int = DEFAULT_MAX_BYTES, device: str | torch.device = "cpu") -> Checkpoint:
    """Load and validate ``path`` (``.safetensors`` may be omitted). Raises CheckpointError."""
    path = Path(path)
    if not path.exists() and checkpoint_path(path).exists():
        path = checkpoint_path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    size = path.stat().st_size
    if size > max_bytes:
        raise _fail(path, f"{size / 2**20:.1f} MB is over the {max_bytes / 2**20:.0f} MB limit for "
                          "checkpoints (pass max_bytes= to allow larger files)")
    data = path.read_bytes()
    header, meta = read_header(data, path)
    parsed = _parse_meta(meta, path)
    config, state_info = parsed.pop("config"), parsed.get("train_state")
    train_config, tokenizer = parsed.pop("train_config_obj"), parsed.pop("tokenizer_obj")
    _check_tensors(header, parsed.pop("want"), state_info is not None, path)
    tensors = _st_load(data)
    for k, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise _fail(path, f"tensor {k!r} holds NaN or infinite values (saved from a diverged run?)")
    weights = {k: t for k, t in tensors.items() if not k.startswith(("optim.", "rng.", "snapshots."))}
    if config.tie_embeddings:
        weights[TIED_KEY] = weights["embed.weight"]
    model = Transformer(config)
    model.load_state_dict(weights, strict=True)
    model.to(device).eval()
    train_state = None
    if state_info is not None:
        train_state = TrainState(state_info["step"],
                                 {k: t for k, t in tensors.items() if k.startswith(("optim.", "rng."))},
                                 {k: v for k, v in state_info.items() if k != "step"})
    from .train.snapshot import from_tensors
    return Checkpoint(path, model, config, tokenizer, parsed.get("task"), train_config,
                      parsed.get("history") or [], parsed, train_state,
                      from_tensors(tensors, parsed.get("snapshots")))
