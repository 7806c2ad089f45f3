"""Generated tasks and the registry that rebuilds a task from its spec.

    make_task("coref")                                  defaults (see each class's ``defaults``)
    make_task({"name": "sort", "seed": 3, "max_len": 12})
    make_task(task.spec())                              same examples as ``task``
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from .agreement import AgreementTask
from .base import IGNORE, Batch, Example, Task, collate
from .coref import CorefTask
from .induction import InductionTask
from .lm import LMTask
from .mlm import MLMTask
from .recall import RecallTask
from .seq2seq import CopyTask, ReverseTask, SortTask
from .translate import TranslateTask

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (
    LMTask, CorefTask, InductionTask, CopyTask, ReverseTask, SortTask, TranslateTask, MLMTask,
    RecallTask, AgreementTask)}


def make_task(spec: dict[str, Any] | str, given_tokenizer=None, **overrides: Any) -> Task:
    """Build a task from a name or a ``Task.spec()`` dict; ``overrides`` replace params (or seed).
    Construction checks every param (names, types, bounds: ``GeneratedTask``) and builds nothing:
    the examples are generated on first use. ``given_tokenizer``: a model's own tokenizer, for a
    task that reads text with it (lm with ``tokenizer="given"``)."""
    if not isinstance(spec, (str, dict)):
        raise ValueError(f"a task spec must be a name or a JSON object, not {type(spec).__name__}")
    params = {"name": spec} if isinstance(spec, str) else dict(spec)
    params.update(overrides)
    name = params.pop("name", None)
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"unknown task {str(name)[:60]!r}; known tasks: {sorted(TASKS)}")
    if given_tokenizer is not None:
        if not getattr(TASKS[name], "takes_tokenizer", False):
            raise ValueError(f"task {name!r} trains its own tokenizer; only "
                             f"{sorted(n for n, t in TASKS.items() if getattr(t, 'takes_tokenizer', False))} "
                             "can read text with a given one")
        params["given_tokenizer"] = given_tokenizer
    return TASKS[name](**params)


def check_spec(spec: Any) -> dict[str, Any]:
    """A task spec read from a file, checked like a config (``make_task`` builds nothing) ->
    the full spec; ValueError with the reason."""
    return make_task(spec).spec()


_CACHE: OrderedDict[str, Task] = OrderedDict()
_CACHE_LOCK = threading.Lock()
CACHED_TASKS = 16


def cached_task(spec: dict[str, Any] | str, given_tokenizer=None) -> Task:
    """One shared task per spec (and given tokenizer, by its fingerprint) in this process (built
    once, on first use: the lm corpus takes seconds). Tasks are read-only once built, so every
    caller (the app's sessions, jobs, the zoo) may share it. Building holds only that task's lock:
    other specs never wait for it."""
    key = json.dumps({"name": spec} if isinstance(spec, str) else spec, sort_keys=True)
    if given_tokenizer is not None:
        key += "\n" + given_tokenizer.fingerprint()
    with _CACHE_LOCK:  # constructing checks the spec and builds nothing: cheap under the lock
        task = _CACHE.get(key)
        if task is None:
            task = _CACHE[key] = make_task(json.loads(key.split("\n")[0]), given_tokenizer)
            while len(_CACHE) > CACHED_TASKS:
                _CACHE.popitem(last=False)
        else:
            _CACHE.move_to_end(key)
    return task


__all__ = ["TASKS", "cached_task", "check_spec", "make_task", "Task", "Example", "Batch", "collate", "IGNORE",
           "LMTask", "CorefTask", "InductionTask", "CopyTask", "ReverseTask", "SortTask",
           "TranslateTask", "MLMTask", "RecallTask", "AgreementTask"]
