"""What a checkpoint holds, and how it becomes a model again: ``NAME.safetensors`` (the file
format is ``tfviz.storage``: tensors + JSON metadata, never a pickle) and ``NAME.json``, a copy
of the metadata for humans.

Metadata (JSON strings): format, format_version, model_config, train_config, task (spec),
tokenizer, history, extra, train_state, snapshots, phase (an induction run's phase-change records,
``tfviz.analysis.phase``), created, tfviz_version.
Tensors: the model's ``state_dict`` (a tied ``unembed.weight`` is stored once, as ``embed.weight``,
and re-tied on load); a resumable checkpoint adds AdamW moments ``optim.<param>.<slot>`` and RNG
states ``rng.<name>`` (uint8) — their scalars (step counts) live in the ``train_state`` JSON;
training snapshots add ``snapshots.<i>.<hook name>`` (``tfviz.train.snapshot``).

Loading parses and checks the header *before* touching tensor data, builds the expected shapes from
the saved model config on the meta device, and raises :class:`CheckpointError` for anything off.
Every metadata field is bounded by what a checkpoint of its model config can need (``field_limits``:
bytes, JSON objects/arrays, nesting depth) before it is parsed, and the task spec is checked like
a config (``tfviz.tasks.check_spec``: known names and params, bounded sizes), so a stranger's file
costs at most what a real one would. The history is kept compact (``compact_history``: at most
``MAX_HISTORY`` entries, saved and loaded).
The config names its family (``"family"``: "transformer" | "recurrent", ``tfviz.model.families``;
absent in checkpoints written before there were two: a transformer), which says what to build.
``read_metadata`` reads the metadata alone (the header: no tensors, no model).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import limits, storage
from ..analysis import phase as phase_io
from ..model import ModelConfig
from ..model.families import build_model, config_from_dict, family_of, min_parameters, tensor_shapes
from ..storage import ST_NAME, CheckpointError, checkpoint_path, fail
from ..tasks import cached_task, check_spec, make_task
from ..tasks.common import MAX_TEXT_CHARS
from ..tokenize import Tokenizer
from ..version import __version__
from . import snapshot as snapshots_io
from .config import TrainConfig

FORMAT = "tfviz-checkpoint"
FORMAT_VERSION = 1
TIED_KEY = "unembed.weight"
RAW_KEYS = ("format", "format_version", "created", "tfviz_version", "tokenizer")  # plain strings
JSON_KEYS = ("model_config", "train_config", "task", "history", "extra", "train_state", "snapshots",
             "phase")
MAX_HISTORY = 2000  # entries kept (saved, loaded, streamed by jobs): a loss curve needs no more
KB = 2**10


def compact_history(history: list[dict], max_entries: int = MAX_HISTORY) -> list[dict]:
    """At most ``max_entries`` of ``history``: while longer, every other entry is dropped (the
    last one always kept), so a long run keeps an evenly thinned curve of bounded size."""
    history = list(history)
    while len(history) > max(max_entries, 2):
        history = history[::-2][::-1]  # every other one, counted back from the last
    return history


def field_limits(config, n_tensors: int = storage.MAX_TENSORS) -> dict[str, tuple[int, int]]:
    """Metadata key -> (bytes, JSON objects/arrays) a checkpoint of ``config`` can need at most
    (``n_tensors``: the header's tensor count). Without a config: the header's own bounds."""
    if config is None:
        return {k: (storage.MAX_HEADER_BYTES, storage.MAX_METADATA_BRACKETS) for k in JSON_KEYS}
    v, L = config.vocab_size, config.n_layers
    return {"model_config": (16 * KB, 16), "train_config": (16 * KB, 16),
            "task": (64 * KB + 12 * MAX_TEXT_CHARS, 16),  # the lm task's corpus, JSON-escaped
            "tokenizer": (64 * KB + 512 * v, 1000 + 2 * v),
            "history": (4 * MAX_HISTORY * KB, 4 * MAX_HISTORY + 1),  # compacted to MAX_HISTORY
            "extra": (1024 * KB, 20_000),
            "train_state": (64 * KB + 256 * n_tensors, 16 + 2 * n_tensors),
            "snapshots": (64 * KB + 32 * (200 * config.max_len + 300 * L), 32 * 8 + 8),
            "phase": _phase_limits(config)}


def _phase_limits(config) -> tuple[int, int]:
    """An induction run's phase records (``tfviz.analysis.phase``): per record a loss per probe
    position and two scores per head, each a number of at most ~24 characters."""
    heads = config.n_layers * getattr(config, "n_heads", 1)
    n = 2 * phase_io.MAX_RECORDS
    return (8 * KB + n * (200 + 24 * (phase_io.PROBE_MAX_TOKENS + 2 * heads)),
            8 + n * (4 + 2 * config.n_layers))


@dataclass
class TrainState:
    """What resuming needs beyond the weights: step, optimizer/RNG tensors, JSON scalars."""

    step: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # "optim.*", "rng.*"
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Checkpoint:
    path: Path
    model: torch.nn.Module  # a Transformer or a RecurrentModel (``tfviz.model.families``)
    config: ModelConfig  # or a RecurrentConfig: the model's config, whatever its family
    tokenizer: Tokenizer | None
    task: dict | None  # the task spec; build_task() rebuilds the task
    train_config: TrainConfig | None
    history: list[dict]
    meta: dict[str, Any]
    train_state: TrainState | None = None
    snapshots: list[snapshots_io.AttentionSnapshot] = field(default_factory=list)  # oldest first

    @property
    def phase(self) -> dict | None:
        """An induction run's phase-change records (``tfviz.analysis.phase``; None for others)."""
        return self.meta.get("phase")

    @property
    def step(self) -> int:
        if self.train_state is not None:
            return self.train_state.step
        return int(self.history[-1].get("step", 0)) if self.history else 0

    def build_task(self, **overrides: Any):
        """A fresh task from the saved spec (``overrides`` replace its params)."""
        if self.task is None:
            raise CheckpointError(f"{self.path} records no task")
        return make_task(self.task, self._given_tokenizer(), **overrides)

    def _given_tokenizer(self):
        """The checkpoint's tokenizer for a task that reads text with the model's own (lm with
        tokenizer="given": a fine-tuned imported model), else None."""
        return self.tokenizer if self.task.get("tokenizer") == "given" else None

    def shared_task(self):
        """The task of the saved spec, built once per process and shared by every caller
        (``tfviz.tasks.cached_task``): for reading examples, never for changing them."""
        if self.task is None:
            raise CheckpointError(f"{self.path} records no task")
        return cached_task(self.task, self._given_tokenizer())

    def card(self) -> str:
        """A short human-readable summary (what ``python -m tfviz info`` prints)."""
        c = self.config
        n_params = sum(p.numel() for p in self.model.parameters())
        lines = [f"checkpoint   {self.path}",
                 f"created      {self.meta.get('created', '?')} by tfviz {self.meta.get('tfviz_version', '?')}",
                 f"model        {c.summary()}, {n_params:,} parameters",
                 f"vocab        {c.vocab_size}" + (f" ({self.tokenizer!r})" if self.tokenizer else "")]
        imported = (self.meta.get("extra") or {}).get("imported")
        if isinstance(imported, dict):  # tfviz.interop: a Hugging Face folder
            lines.append(f"imported     {imported.get('family')} ({', '.join(imported.get('architectures') or [])}) "
                         f"from {imported.get('folder')}")
            lines += [f"note         {n}" for n in imported.get("notes") or []]
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


def model_tensors(model) -> dict[str, torch.Tensor]:
    sd = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        sd.pop(TIED_KEY)  # the same storage as embed.weight: stored once, re-tied on load
    return sd


def save_checkpoint(path, model, *, tokenizer=None, task=None, train_config=None,
                    history: list[dict] | None = None, extra: dict | None = None,
                    train_state: TrainState | None = None, snapshots: list | None = None,
                    phase: dict | None = None, sidecar: bool = True) -> Path:
    """Write ``path`` (``.safetensors`` appended if missing) atomically; returns the final path.

    ``task``: a Task (its spec and tokenizer are saved) or a spec dict. ``train_state`` makes the
    checkpoint resumable. ``extra``: any JSON-able dict (e.g. final metrics). ``snapshots``: attention
    snapshots taken while training (thinned to at most 32 / 8 MB, so the app can replay them).
    ``phase``: an induction run's phase-change records (``tfviz.analysis.phase``, thinned to
    ``MAX_RECORDS``).
    """
    path = checkpoint_path(path)
    family_of(model)  # a Transformer or a recurrent model (ValueError for anything else)
    spec = task.spec() if hasattr(task, "spec") else task
    if tokenizer is None and hasattr(task, "tokenizer"):
        tokenizer = task.tokenizer
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "tfviz_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "model_config": model.config.to_dict(), "task": spec,
            "train_config": None if train_config is None else train_config.to_dict(),
            "history": compact_history(history or []), "extra": dict(extra or {})}
    tensors = model_tensors(model)
    if train_state is not None:
        meta["train_state"] = {"step": int(train_state.step), **train_state.info}
        tensors.update({k: v.detach().to("cpu").contiguous() for k, v in train_state.tensors.items()})
    if snapshots:
        snap_tensors, meta["snapshots"] = snapshots_io.to_tensors(snapshots_io.thin(snapshots))
        tensors.update(snap_tensors)
    if phase:
        meta["phase"] = phase_io.thin(phase)
    str_meta = {k: str(v) if k in RAW_KEYS else json.dumps(v) for k, v in meta.items()}
    if tokenizer is not None:
        str_meta["tokenizer"] = tokenizer.to_json()
    storage.write(path, tensors, str_meta)
    if sidecar:
        human = {**meta, "tokenizer": None if tokenizer is None else repr(tokenizer),
                 "snapshots": [{"step": x["step"]} for x in meta.get("snapshots", [])],
                 **({"phase": {"probe": meta["phase"]["probe"], "records": len(meta["phase"]["records"])}}
                    if meta.get("phase") else {}),
                 "tensors": {k: [ST_NAME[v.dtype], list(v.shape)] for k, v in tensors.items()}}
        storage.atomic_write(path.with_suffix(".json"), json.dumps(human, indent=1).encode())
    return path


# ---------------------------------------------------------------------------------- loading
def _json_field(meta: dict[str, str], key: str, path, bounds: dict[str, tuple[int, int]],
                required: bool = False):
    if key not in meta:
        if required:
            raise fail(path, f"metadata lacks {key!r}")
        return None
    max_bytes, max_containers = bounds[key]
    return storage.loads(meta[key], path, f"metadata {key!r}", max_bytes=max_bytes,
                         max_containers=max_containers)


def _decode(meta: dict[str, str], path, bounds: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """The metadata's fields: plain strings as they are (the tokenizer's JSON text too), the JSON
    fields decoded within ``bounds`` (None when absent)."""
    for k in RAW_KEYS:
        if k != "tokenizer" and len(meta.get(k, "")) > KB:
            raise fail(path, f"metadata {k!r} is {len(meta[k]):,} characters; at most {KB}")
    return {**{k: meta[k] for k in RAW_KEYS if k in meta},
            **{k: _json_field(meta, k, path, bounds) for k in JSON_KEYS}}


def _config(meta: dict[str, str], path):
    """The saved model config, whatever its family (``tfviz.model.families.config_from_dict``)."""
    try:
        return config_from_dict(_json_field(meta, "model_config", path, field_limits(ModelConfig()),
                                                 required=True))
    except CheckpointError:
        raise
    except (TypeError, ValueError) as e:
        raise fail(path, f"invalid metadata: {e}") from None


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint's metadata (model_config, task, extra, tokenizer text, ...) from its header
    alone: no tensor data read, no model built. CheckpointError if the header is unreadable."""
    header, meta = storage.read_header(path)
    try:
        bounds = field_limits(_config(meta, path), len(header))
    except CheckpointError:
        bounds = field_limits(None)
    return _decode(meta, path, bounds)


def _plausible_size(header: dict, config, path) -> None:
    """Cheap, before any model is built (a 256-layer shell takes seconds): the tensor data must hold
    at least the float32 weights every model of ``config`` has (``tfviz.model.families.
    min_parameters``: e.g. a transformer's token embedding and each layer's attention output)."""
    need = 4 * min_parameters(config)
    have = sum(e - b for b, e in (info["data_offsets"] for info in header.values()))
    if have < need:
        raise fail(path, f"the config describes a model of at least {need / 2**20:.1f} MB of weights "
                          f"({config.n_layers} layers, d_model {config.d_model}, vocab "
                          f"{config.vocab_size}) but the file holds {have / 2**20:.1f} MB of tensors")


def _expected(config, meta_state: dict | None) -> dict[str, tuple[torch.dtype, tuple]]:
    """Every tensor name -> (dtype, shape) a checkpoint of ``config`` holds, whatever the model's
    family (no model is built: ``tfviz.model.families.tensor_shapes``)."""
    want = tensor_shapes(config)
    if config.tie_embeddings:
        want.pop(TIED_KEY)
    if meta_state is not None:
        params = {k: shape for k, (_, shape) in tensor_shapes(config, parameters_only=True).items()}
        for name in meta_state.get("param_steps", {}):
            if name not in params:
                raise ValueError(f"train_state names an unknown parameter {str(name)[:100]!r}")
            for slot in ("exp_avg", "exp_avg_sq"):
                want[f"optim.{name}.{slot}"] = (torch.float32, params[name])
    return want


def _parse_meta(meta: dict[str, str], path, header: dict | None = None) -> dict[str, Any]:
    """Check format/version and parse every JSON field within the bounds its config allows;
    returns them with the built objects under ``config``, ``train_config_obj`` and
    ``tokenizer_obj``."""
    if meta.get("format") != FORMAT:
        raise fail(path, f"a safetensors file but not a tfviz checkpoint (metadata format is "
                          f"{meta.get('format')!r}, expected {FORMAT!r})")
    try:
        version = int(meta.get("format_version", ""))
    except ValueError:
        raise fail(path, f"format_version {meta.get('format_version')!r} is not a number") from None
    if version > FORMAT_VERSION:
        raise fail(path, f"written by a newer tfviz (checkpoint format_version {version}; this tfviz "
                          f"reads up to {FORMAT_VERSION}): upgrade tfviz to load it")
    if version < 1:
        raise fail(path, f"invalid format_version {version}")
    config = _config(meta, path)
    if header is not None:
        _plausible_size(header, config, path)
    bounds = field_limits(config, storage.MAX_TENSORS if header is None else len(header))
    parsed = {**_decode(meta, path, bounds), "format_version": version}
    parsed.pop("tokenizer", None)  # built below
    if "tokenizer" in meta:  # parsed by the tokenizer itself, once it is known to be bounded
        storage.loads(meta["tokenizer"], path, "metadata 'tokenizer'", max_bytes=bounds["tokenizer"][0],
                      max_containers=bounds["tokenizer"][1])
    try:
        for key, kind in (("history", list), ("task", dict), ("extra", dict), ("train_state", dict)):
            if parsed.get(key) is not None and not isinstance(parsed[key], kind):
                raise ValueError(f"{key} must be a JSON {'array' if kind is list else 'object'}")
        if not all(isinstance(h, dict) for h in parsed.get("history") or []):
            raise ValueError("history must be a list of JSON objects")
        parsed["history"] = compact_history(parsed.get("history") or [])
        if parsed.get("task") is not None:
            check_spec(parsed["task"])  # like a config: known names and params, bounded sizes
        state = parsed.get("train_state")
        if state is not None and not (isinstance(state.get("step"), int) and state["step"] >= 0
                                      and isinstance(state.get("param_steps", {}), dict)):
            raise ValueError("train_state needs a whole-number step and a param_steps object")
        objs = {"config": config,
                "train_config_obj": None if parsed.get("train_config") is None
                else TrainConfig.from_dict(parsed["train_config"]),
                "tokenizer_obj": None if "tokenizer" not in meta else Tokenizer.from_json(meta["tokenizer"], **limits.tokenizer_bounds())}
        objs["want"] = _expected(objs["config"], state)
        if parsed.get("snapshots") is not None:
            objs["want"].update(snapshots_io.expected_tensors(parsed["snapshots"], objs["config"].n_heads))
        if parsed.get("phase") is not None:
            phase_io.check_phase(parsed["phase"], config.n_layers, getattr(config, "n_heads", 1))
    except CheckpointError:
        raise
    except (TypeError, ValueError) as e:
        raise fail(path, f"invalid metadata: {str(e)[:500]}") from None
    tok, cfg = objs["tokenizer_obj"], objs["config"]
    # Ids outside either would break pages. An imported model may have more embedding rows than
    # its tokenizer has tokens (padded to a round number: Qwen2), never fewer.
    if tok is not None and (tok.vocab_size > cfg.vocab_size
                            or tok.fixed_specials and tok.vocab_size != cfg.vocab_size):
        raise fail(path, f"the tokenizer has {tok.vocab_size} tokens but the model's vocab_size is "
                          f"{cfg.vocab_size}: they do not belong together")
    return {**parsed, **objs}


def _check_tensors(header: dict, want: dict, resumable: bool, path) -> None:
    """Exactly the expected names, each with the config's dtype and shape; RNG states when resumable."""
    rng = (lambda k: k.startswith("rng.")) if resumable else (lambda k: False)
    storage.check_tensors(header, want, path, optional=rng)
    rng_keys = [k for k in header if rng(k)]
    if resumable and "rng.batch" not in rng_keys:
        raise fail(path, "train_state without the batch sampler's RNG state (rng.batch)")
    for k in rng_keys:
        if header[k]["dtype"] != "U8" or len(header[k]["shape"]) != 1:
            raise fail(path, f"RNG state {k!r} must be a 1-D uint8 tensor")


def load_checkpoint(path, *, max_bytes: int | None = None,
                    device: str | torch.device = "cpu") -> Checkpoint:
    """Load and validate ``path`` (``.safetensors`` may be omitted). Raises CheckpointError.
    ``max_bytes``: the largest file accepted (default ``tfviz.limits.checkpoint_bytes()``, the
    size the app trains up to)."""
    path = Path(path)
    if not path.exists() and checkpoint_path(path).exists():
        path = checkpoint_path(path)
    data = storage.read_bytes(path, limits.checkpoint_bytes() if max_bytes is None else max_bytes)
    header, meta = storage.read_header(data, path)
    parsed = _parse_meta(meta, path, header)
    config, state_info = parsed.pop("config"), parsed.get("train_state")
    train_config, tokenizer = parsed.pop("train_config_obj"), parsed.pop("tokenizer_obj")
    _check_tensors(header, parsed.pop("want"), state_info is not None, path)
    tensors = storage.load_tensors(data, path)
    weights = {k: t for k, t in tensors.items() if not k.startswith(("optim.", "rng.", "snapshots."))}
    if config.tie_embeddings:
        weights[TIED_KEY] = weights["embed.weight"]
    model = build_model(config)
    model.load_state_dict(weights, strict=True)
    model.to(device).eval()
    train_state = None
    if state_info is not None:
        train_state = TrainState(state_info["step"],
                                 {k: t for k, t in tensors.items() if k.startswith(("optim.", "rng."))},
                                 {k: v for k, v in state_info.items() if k != "step"})
    return Checkpoint(path, model, config, tokenizer, parsed.get("task"), train_config,
                      parsed.get("history") or [], parsed, train_state,
                      snapshots_io.from_tensors(tensors, parsed.get("snapshots")))
