"""Loaded models shared by every session, bounded by memory (not by a count: one 124M-parameter
model weighs as much as a thousand of the shipped ones).

    cache = ModelCache(max_bytes=limits.model_cache_bytes())
    loaded = cache.get(key, lambda: load(...), size=checkpoint_bytes)

Least recently used entries are dropped while the total is over ``max_bytes``; the entry just
loaded always stays (a single model larger than the budget is kept alone). A key is built once
even when several sessions ask at the same moment (a per-key lock); different keys never wait
for each other. A session that still holds a dropped model keeps using it until it lets go.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch


def checkpoint_bytes(ckpt) -> int:
    """Memory a loaded ``tfviz.Checkpoint`` holds: its model's tensors (shared ones once), the
    training state's and the snapshots' tensors, and its history."""
    seen, total = set(), 0
    tensors = [*ckpt.model.state_dict().values()]
    if ckpt.train_state is not None:
        tensors += list(ckpt.train_state.tensors.values())
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()
    total += sum(a.nbytes for s in ckpt.snapshots for a in s.patterns.values())
    total += 4 * len(json.dumps(ckpt.history))  # parsed JSON takes a few times its text
    return total


class ModelCache:
    def __init__(self, max_bytes: int):
        if not max_bytes > 0:
            raise ValueError(f"max_bytes={max_bytes!r} must be above 0")
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._loading: dict[Hashable, threading.Lock] = {}

    @property
    def used(self) -> int:
        with self._lock:
            return sum(n for _, n in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def keys(self) -> list:
        with self._lock:
            return list(self._entries)

    def get(self, key: Hashable, load: Callable[[], Any], size: Callable[[Any], int]) -> Any:
        """The cached value for ``key``, or ``load()`` (once, however many ask) stored with
        ``size(value)`` bytes. Whatever ``load`` raises goes to the caller; nothing is stored."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key][0]
            try:
                value = load()
                nbytes = int(size(value))
                with self._lock:
                    self._entries[key] = (value, nbytes)
                    self._trim(keep=key)
            finally:
                with self._lock:
                    self._loading.pop(key, None)
        return value

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def _trim(self, keep: Hashable) -> None:
        total = sum(n for _, n in self._entries.values())
        for key in list(self._entries):
            if total <= self.max_bytes:
                break
            if key != keep:
                total -= self._entries.pop(key)[1]
