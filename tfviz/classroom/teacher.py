"""The teacher key (``TFVIZ_TEACHER_KEY``): what unlocks publishing and the view of every job.

Guessing it must be hopeless: a key shorter than ``MIN_TEACHER_KEY`` (12) characters leaves the
Teacher panel off (the panel and the server log say why); every check, right or wrong, takes a
turn at one server-wide turnstile that lets at most one check through per
``TEACHER_ATTEMPT_INTERVAL_S`` (1 s) — twenty sessions guessing in parallel get one guess a
second together, not twenty — and at most ``MAX_WAITING`` checks may wait for their turn (more
are refused at once: "too many attempts"). Wrong keys are logged (session id and count, never
the guess). A random 12-character key (``secrets.token_urlsafe(9)``) at one guess a second takes
10^14 years to find.
"""
from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable

from .. import limits

log = logging.getLogger("tfviz.teacher")
MAX_WAITING = 8


class TooManyAttempts(Exception):
    """More checks are waiting for their turn than the turnstile lets queue."""


class TeacherKey:
    def __init__(self, key: str, *, interval: float = limits.TEACHER_ATTEMPT_INTERVAL_S,
                 max_waiting: int = MAX_WAITING, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self._key = (key or "").encode()
        self.interval, self.max_waiting = interval, max_waiting
        self._clock, self._sleep = clock, sleep
        self._turnstile = threading.Lock()
        self._count_lock = threading.Lock()
        self._waiting = 0
        self._next = 0.0
        self.failures = 0

    @property
    def problem(self) -> str | None:
        """Why the Teacher panel is off, or None when the key is usable."""
        if not self._key:
            return "no TFVIZ_TEACHER_KEY is set"
        n = len(self._key.decode(errors="replace"))
        if n < limits.MIN_TEACHER_KEY:
            return (f"TFVIZ_TEACHER_KEY has {n} characters; it needs at least {limits.MIN_TEACHER_KEY} "
                    "(e.g. python -c \"import secrets; print(secrets.token_urlsafe(12))\")")
        return None

    @property
    def enabled(self) -> bool:
        return self.problem is None

    def check(self, given: str, who: str = "?") -> bool:
        """Whether ``given`` is the key, after this check's turn at the turnstile.
        TooManyAttempts when ``max_waiting`` checks are already waiting."""
        if not self.enabled:
            return False
        with self._count_lock:
            if self._waiting >= self.max_waiting:
                log.warning("teacher key: too many attempts at once (session %s refused)", who)
                raise TooManyAttempts("too many attempts at once: try again in a minute")
            self._waiting += 1
        try:
            with self._turnstile:
                wait = self._next - self._clock()
                if wait > 0:
                    self._sleep(wait)
                self._next = self._clock() + self.interval
                ok = hmac.compare_digest(str(given).encode(), self._key)
                if not ok:
                    self.failures += 1
                    log.warning("teacher key: wrong key from session %s (%d failed attempts since "
                                "the server started)", who, self.failures)
                return ok
        finally:
            with self._count_lock:
                self._waiting -= 1
