"""Generated tasks and the registry that rebuilds a task from its spec.

    make_task("coref")                                  defaults (see each class's ``defaults``)
    make_task({"name": "sort", "seed": 3, "max_len": 12})
    make_task(task.spec())                              same examples as ``task``
"""
from __future__ import annotations

import functools
import json
from typing import Any

from .base import IGNORE, Batch, Example, Task, collate
from .coref import CorefTask
from .induction import InductionTask
from .lm import LMTask
from .mlm import MLMTask
from .seq2seq import CopyTask, ReverseTask, SortTask
from .translate import TranslateTask

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (
    LMTask, CorefTask, InductionTask, CopyTask, ReverseTask, SortTask, TranslateTask, MLMTask)}


def make_task(spec: dict[str, Any] | str, **overrides: Any) -> Task:
    """Build a task from a name or a ``Task.spec()`` dict; ``overrides`` replace params (or seed)."""
    params = {"name": spec} if isinstance(spec, str) else dict(spec)
    params.update(overrides)
    name = params.pop("name", None)
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name](**params)


def cached_task(spec: dict[str, Any] | str) -> Task:
    """One shared task per spec in this process (built once: the lm corpus takes seconds). Tasks
    are read-only once built, so every caller (the app's sessions, jobs, the zoo) may share it."""
    return _cached(json.dumps({"name": spec} if isinstance(spec, str) else spec, sort_keys=True))


@functools.lru_cache(maxsize=16)
def _cached(spec_json: str) -> Task:
    return make_task(json.loads(spec_json))


__all__ = ["TASKS", "cached_task", "make_task", "Task", "Example", "Batch", "collate", "IGNORE",
           "LMTask", "CorefTask", "InductionTask", "CopyTask", "ReverseTask", "SortTask",
           "TranslateTask", "MLMTask"]
