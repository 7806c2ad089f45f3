"""Results computed once for the whole server (the causal grids of ``ui.effects``): the first
caller of a key computes it, every later caller — however many are waiting meanwhile — gets that
value (they wait on the first and see its progress, they never compute it again); one owner (a
student's session) computes one thing at a time; the newest ``keep`` results are kept.

    results = SharedResults(keep=48)
    value = results.get(key, compute, owner=sid, wait=lambda fraction, message: ...)

``compute(report)`` gets ``report(fraction, message)``, which the waiters' ``wait`` is called
with (every ``poll`` seconds). A computation that raises stores nothing: the next caller computes
it again (one that was waiting included). Another owner's computations never wait on this one's,
and different keys never wait for each other.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

MISSING = object()


class Busy(RuntimeError):
    """The owner is computing something else already (``key``: what)."""

    def __init__(self, key) -> None:
        super().__init__(f"already computing {key!r}")
        self.key = key


class SharedResults:
    def __init__(self, keep: int = 48, poll: float = 0.25) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep!r} must be at least 1")
        self.keep, self.poll = int(keep), float(poll)
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, Any] = OrderedDict()
        self._gates: dict[Hashable, list] = {}  # key -> [lock, callers holding or waiting on it]
        self._progress: dict[Hashable, tuple[float, str]] = {}
        self._owners: dict[Hashable, Hashable] = {}  # owner -> the key it computes
        self.computations = 0  # how many times a compute function ran (tests, logs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

    def peek(self, key: Hashable, default: Any = MISSING) -> Any:
        """The result for ``key`` if there is one (it becomes the newest), else ``default``."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
        return default

    def callers(self, key: Hashable) -> int:
        """How many callers compute ``key`` or wait for it now."""
        with self._lock:
            gate = self._gates.get(key)
            return 0 if gate is None else gate[1]

    def computing(self, owner: Hashable) -> Hashable | None:
        """The key ``owner`` computes now, or None."""
        with self._lock:
            return self._owners.get(owner)

    def get(self, key: Hashable, compute: Callable[[Callable[[float, str], None]], Any], *,
            owner: Hashable | None = None, wait: Callable[[float, str], None] | None = None) -> Any:
        """The result for ``key``: stored, or the one a caller computing it now gets (waited
        for), or ``compute(report)`` run here. ``Busy`` when ``owner`` computes another key."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            gate = self._gates.setdefault(key, [threading.Lock(), 0])
            gate[1] += 1
        try:
            while not gate[0].acquire(timeout=self.poll):
                if wait is not None:
                    wait(*self._progress.get(key, (0.0, "started by another session")))
            try:
                with self._lock:  # look again: the caller we waited for may have computed it
                    if key in self._done:
                        self._done.move_to_end(key)
                        return self._done[key]
                    if owner is not None and owner in self._owners:
                        raise Busy(self._owners[owner])
                    if owner is not None:
                        self._owners[owner] = key
                    self.computations += 1
                try:
                    value = compute(lambda fraction, message: self._report(key, fraction, message))
                finally:
                    with self._lock:
                        if owner is not None and self._owners.get(owner) == key:
                            del self._owners[owner]
                        self._progress.pop(key, None)
                with self._lock:
                    self._done[key] = value
                    while len(self._done) > self.keep:
                        self._done.popitem(last=False)
                return value
            finally:
                gate[0].release()
        finally:
            with self._lock:
                gate[1] -= 1
                if gate[1] == 0 and self._gates.get(key) is gate:
                    del self._gates[key]

    def _report(self, key: Hashable, fraction: float, message: str) -> None:
        with self._lock:
            self._progress[key] = (float(fraction), str(message))
