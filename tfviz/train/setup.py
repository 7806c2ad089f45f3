"""Glue shared by the CLI, the job manager and the zoo: build a task from a name/spec, a model
config that fits it (vocabulary size, position table long enough for the longest example), and a
freshly initialised model from a seed."""
from __future__ import annotations

import threading
from typing import Any

import torch

from ..model import ModelConfig
from ..model.families import build_model, config_for_kind
from ..tasks import make_task

_INIT_LOCK = threading.Lock()  # seeding + initialising uses torch's global RNG


def as_task(task: Any, **overrides: Any):
    """A Task instance is returned as is; a name or spec dict goes through the task registry."""
    if hasattr(task, "batch") and hasattr(task, "evaluate"):
        if overrides:
            raise ValueError("overrides apply to a task name or spec, not to a built task")
        return task
    return make_task(task, **overrides)


def longest_example(task) -> int:
    """Longest decoder (or source) sequence over every split, in tokens."""
    longest = 1
    for split in ("train", "validation", "test"):
        for ex in task.examples(split):
            longest = max(longest, len(ex.tokens), len(ex.src or ()))
    return longest


def model_config_for(task, kind: str = "transformer", **fields: Any) -> ModelConfig:
    """A model config sized for ``task``: vocab_size = the tokenizer's, max_len >= the longest
    example (rounded up to a multiple of 16), arch = the task's recommended one. ``kind``: a
    ``tfviz.model.families.KINDS`` entry ("transformer" -> ModelConfig; "rnn" / "lstm" / "gru" ->
    RecurrentConfig). ``fields`` override (ValueError for a field the kind does not have)."""
    fields.setdefault("vocab_size", task.tokenizer.vocab_size)
    fields.setdefault("arch", getattr(task, "arch", task.archs[0]))
    if fields.get("max_len") is None:
        fields["max_len"] = -(-longest_example(task) // 16) * 16
    if fields["arch"] not in task.archs:
        raise ValueError(f"task {task.name!r} is meant for {', '.join(task.archs)}, not {fields['arch']!r}")
    if fields["vocab_size"] != task.tokenizer.vocab_size:  # a checkpoint must match its tokenizer
        raise ValueError(f"vocab_size={fields['vocab_size']} differs from the task's tokenizer "
                         f"({task.tokenizer.vocab_size} tokens)")
    return config_for_kind(kind, **fields)


def new_model(config: ModelConfig, seed: int):
    """The model of ``config`` (any family) initialised after ``torch.manual_seed(seed)``: the same
    seed gives the same weights (the CLI, the job manager and the zoo all build models this way).
    Thread-safe."""
    with _INIT_LOCK:
        torch.manual_seed(seed)
        return build_model(config)
