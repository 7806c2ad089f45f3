"""Shared machinery for generated tasks: params with defaults, cached splits, seeded RNGs,
the sequence-to-sequence layouts and a token-level evaluation.

Sequence-to-sequence layouts (``seq2seq_example``), for source s1..sn and target t1..tm:
    encoder-decoder:  src = s1..sn          tokens = [BOS] t1..tm      targets = t1..tm [EOS]
    decoder:          tokens = [BOS] s1..sn [SEP] t1..tm
                      targets = -100 x (n+1), t1..tm [EOS]   (loss only on the answer + [EOS])
"""
from __future__ import annotations

import math
import random
import threading
from typing import Any, Callable, Hashable

import torch

from .base import IGNORE, Example, Task, collate

SPLITS = ("train", "validation", "test")
# Bounds every spec meets at construction, so a checkpoint's task spec (a stranger's upload) is
# checked like a config before anything is built: the largest shipped task has 9,000 examples
# (mlm); 20,000 take ~1-3 s to build on one core; 3,000,000 took 130 s and 2.6 GB.
MAX_EXAMPLES = 20_000      # n_train + n_val + n_test
MAX_TOKENS = 4_000_000     # examples x their longest sequence (~16 bytes a token in memory)
MAX_TEXT_CHARS = 1_000_000  # a text param (the lm task's corpus)
SIZE_LIMITS = {"n_train": (1, MAX_EXAMPLES), "n_val": (1, MAX_EXAMPLES), "n_test": (1, MAX_EXAMPLES)}


def _check_param(task: str, name: str, value: Any, default: Any, limits: dict, choices: dict) -> None:
    what = f"task {task!r}: {name}={value!r}"[:200]
    if name in choices:
        if value not in choices[name]:
            raise ValueError(f"{what} is not one of {', '.join(map(repr, choices[name]))}")
        return
    if value is None and default is None:
        return
    if name in limits:
        low, high = limits[name]
        whole = isinstance(default, int) or default is None and isinstance(low, int)
        ok_type = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type or not math.isfinite(value):
            raise ValueError(f"{what} must be a {'whole number' if whole else 'number'}")
        if not low <= value <= high:
            raise ValueError(f"{what} must be between {low} and {high}")
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{what} must be true or false")
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(f"{what} must be text")
        if len(value) > MAX_TEXT_CHARS:
            raise ValueError(f"task {task!r}: {name} has {len(value):,} characters; at most "
                             f"{MAX_TEXT_CHARS:,}")
    elif not (value is None or isinstance(value, (int, float, str))):
        raise ValueError(f"{what} must be a number or text")


class GeneratedTask(Task):
    """A Task whose params have defaults (``defaults``; every task also takes ``arch``, default
    ``archs[0]``) and whose splits are built once, lazily.

    Subclasses implement ``_build() -> (tokenizer, {"train": [...], "validation": [...], "test": [...]})``.
    Every param is checked at construction, cheaply (nothing is built): unknown names, unsupported
    archs, types (those of the defaults), numbers within ``limits`` (param -> (low, high); the
    split sizes within ``SIZE_LIMITS`` and MAX_EXAMPLES together), values in ``choices``, and a
    subclass's ``check_params``. Building holds this task's own lock: one spec is built once, and
    unrelated tasks never wait for each other.
    """

    defaults: dict[str, Any] = {}
    limits: dict[str, tuple[float, float]] = {}
    choices: dict[str, tuple] = {}

    def __init__(self, seed: int = 0, **params: Any) -> None:
        defaults = {"arch": self.archs[0], **self.defaults}
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            shown = ", ".join(repr(u[:40]) for u in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
            raise ValueError(f"task {self.name!r} got unknown params [{shown}]; "
                             f"known: {sorted(defaults)}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"task {self.name!r}: seed={seed!r} must be a whole number >= 0"[:200])
        super().__init__(seed, **{**defaults, **params})
        if self.params["arch"] not in self.archs:
            raise ValueError(f"task {self.name!r} supports archs {self.archs}, "
                             f"not {self.params['arch']!r}"[:300])
        limits = {**{k: v for k, v in SIZE_LIMITS.items() if k in defaults}, **self.limits}
        for name, value in self.params.items():
            if name != "arch":
                _check_param(self.name, name, value, defaults[name], limits, self.choices)
        total = sum(int(self.params.get(k) or 0) for k in SIZE_LIMITS)
        if total > MAX_EXAMPLES:
            raise ValueError(f"task {self.name!r} asks for {total:,} examples (n_train + n_val + "
                             f"n_test); at most {MAX_EXAMPLES:,}")
        self.check_params(self.params)
        self._lock = threading.Lock()
        self._built: tuple[Any, dict[str, list[Example]]] | None = None

    def check_params(self, p: dict[str, Any]) -> None:
        """Rules between params (cheap: nothing is built); ValueError with the reason."""

    def check_tokens(self, longest: int) -> None:
        """For ``check_params``: the examples, ``longest`` tokens at most each, stay within
        MAX_TOKENS together."""
        n = sum(int(self.params.get(k) or 0) for k in SIZE_LIMITS)
        if n * longest > MAX_TOKENS:
            raise ValueError(f"task {self.name!r}: {n:,} examples of up to {longest:,} tokens are "
                             f"{n * longest:,} tokens; at most {MAX_TOKENS:,}")

    def __getstate__(self) -> dict:  # picklable (DDP spawns): the lock stays behind
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def arch(self) -> str:
        return self.params["arch"]

    def rng(self, salt: str = "") -> random.Random:
        """A deterministic RNG for this task, seed and purpose (str seeds are stable across runs)."""
        return random.Random(f"{self.name}:{self.seed}:{salt}")

    def _ensure(self) -> tuple[Any, dict[str, list[Example]]]:
        if self._built is None:
            with self._lock:  # a task may be shared across app sessions: build once
                if self._built is None:
                    self._built = self._build()
        return self._built

    def _build(self):
        raise NotImplementedError

    @property
    def tokenizer(self):
        return self._ensure()[0]

    def examples(self, split: str) -> list[Example]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return self._ensure()[1][split]

    def sizes(self) -> tuple[int, int, int]:
        return int(self.params["n_train"]), int(self.params["n_val"]), int(self.params["n_test"])


def unique_samples(sample: Callable[[], Hashable], n: int, what: str = "examples",
                   max_tries: int | None = None) -> list:
    """Draw ``n`` distinct values from ``sample()``; ValueError if the space is too small."""
    seen: dict = {}
    tries = max_tries if max_tries is not None else 20 * n + 1000
    for _ in range(tries):
        if len(seen) == n:
            break
        seen.setdefault(sample(), None)
    if len(seen) < n:
        raise ValueError(f"could only generate {len(seen)} distinct {what}, {n} requested: "
                         "enlarge the vocabulary/lengths or ask for fewer examples")
    return list(seen)


def split_list(items: list, sizes: tuple[int, int, int]) -> dict[str, list]:
    """Consecutive, hence disjoint, slices of ``items`` for train/validation/test."""
    a, b, c = sizes
    return {"train": items[:a], "validation": items[a:a + b], "test": items[a + b:a + b + c]}


def seq2seq_example(tok, src: list[int], tgt: list[int], arch: str, text: str = "",
                    meta: dict | None = None) -> Example:
    """Lay out one source/target pair for ``arch`` (see the module docstring)."""
    meta = dict(meta or {})
    if arch == "encoder-decoder":
        return Example(tokens=[tok.bos_id] + tgt, targets=tgt + [tok.eos_id], src=list(src),
                       text=text, meta=meta)
    if arch == "decoder":
        tokens = [tok.bos_id] + src + [tok.sep_id] + tgt
        targets = [IGNORE] * (len(src) + 1) + tgt + [tok.eos_id]
        meta["answer_start"] = len(src) + 1  # position whose target is t1
        return Example(tokens=tokens, targets=targets, text=text, meta=meta)
    raise ValueError(f"unsupported arch {arch!r}")


@torch.no_grad()
def token_evaluate(task: Task, model, split: str, max_examples: int, batch_size: int,
                   groups: dict[str, Callable[[Example], list[int]]] | None = None) -> dict[str, float]:
    """Mean cross-entropy and token accuracy over every target position.

    ``groups`` (name -> example -> positions) adds ``loss_<name>`` / ``accuracy_<name>``
    computed over just those positions (e.g. the two halves of an induction sequence);
    NaN where a group has no target positions.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    pool = task.examples(split)[:max_examples]
    groups = {"": None, **(groups or {})}
    sums = {g: [0.0, 0, 0] for g in groups}  # loss sum, right, count
    try:
        for start in range(0, len(pool), batch_size):
            chunk = pool[start:start + batch_size]
            b = collate(chunk, task.tokenizer.pad_id).to(device)
            logits = model(*b.inputs).float()
            valid = b.targets != IGNORE
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), b.targets.flatten().clamp(min=0), reduction="none"
            ).view_as(b.targets)
            right = logits.argmax(-1) == b.targets
            for g, fn in groups.items():
                mask = valid.clone()
                if fn is not None:
                    sel = torch.zeros_like(valid)
                    for row, ex in enumerate(chunk):
                        sel[row, fn(ex)] = True
                    mask &= sel
                sums[g][0] += float(loss[mask].sum())
                sums[g][1] += int(right[mask].sum())
                sums[g][2] += int(mask.sum())
    finally:
        model.train(was_training)
    out = {}
    for g, (loss_sum, n_right, n) in sums.items():
        suffix = f"_{g}" if g else ""
        out["loss" + suffix] = loss_sum / n if n else float("nan")
        out["accuracy" + suffix] = n_right / n if n else float("nan")
    return out


class ExampleSet(Task):
    """Given examples as the test split (fresh inputs to measure a model on), with the tokenizer
    of the task they came from; ``evaluate`` is the base task's (every target token right)."""

    def __init__(self, tokenizer, examples: list[Example], name: str = "examples") -> None:
        super().__init__(0)
        self.name, self._tokenizer, self._examples = name, tokenizer, list(examples)

    @property
    def tokenizer(self):
        return self._tokenizer

    def examples(self, split: str) -> list[Example]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return self._examples if split == "test" else []
