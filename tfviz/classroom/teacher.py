"""The teacher key (``TFVIZ_TEACHER_KEY``): what unlocks publishing and the view of every job.

Guessing it must be hopeless, and the teacher must always get in:

* a key shorter than ``MIN_TEACHER_KEY`` (12) characters leaves the Teacher panel off (the panel
  and the server log say why);
* the whole server checks at most one key per ``TEACHER_ATTEMPT_INTERVAL_S`` (1 s), right or
  wrong: twenty sessions guessing in parallel get one guess a second together, not twenty;
* each session may have one check pending; a second one from the same session while the first
  waits is refused at once ("still being checked");
* a session's wrong keys grow its own back-off: after its n-th wrong key in a row it may try again
  only after ``interval * 2**(n-1)`` seconds, at most ``TEACHER_BACKOFF_MAX_S`` (60 s); an attempt
  before then is refused at once, without a check and without taking a turn. A right key resets it;
* the pending checks take their turns by how many wrong keys their session has given in a row,
  fewest first (first come, first served among equals). There is no queue the guessers can fill:
  a session that has guessed wrong waits behind every session that has not, so the teacher's
  check waits for the server's interval since the last check and for sessions that have never
  guessed wrong that came first — never behind the guessers, never refused for their sake.

Wrong keys are logged (session id and count, never the guess). A random 12-character key
(``secrets.token_urlsafe(9)``) at one guess a second takes 10^14 years to find. What remains: a
client that opens a new session for every guess stays among the sessions without wrong keys; the
teacher then waits one interval for each of those ahead of them (never refused).
"""
from __future__ import annotations

import heapq
import hmac
import itertools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .. import limits

log = logging.getLogger("tfviz.teacher")
MAX_SESSIONS = 10_000  # sessions whose wrong keys are remembered (least recently seen forgotten first)


class TooManyAttempts(Exception):
    """This session may not try now (a check of its own is pending, or it is in its back-off).
    ``retry_after``: seconds until it may (0 when a pending check is the reason)."""

    def __init__(self, message: str, retry_after: float = 0.0):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class _Session:
    failures: int = 0  # wrong keys in a row
    not_before: float = 0.0  # the clock time its next attempt is accepted
    pending: bool = False


class TeacherKey:
    def __init__(self, key: str, *, interval: float = limits.TEACHER_ATTEMPT_INTERVAL_S,
                 backoff: float | None = None, backoff_max: float = limits.TEACHER_BACKOFF_MAX_S,
                 clock: Callable[[], float] = time.monotonic):
        self._key = (key or "").encode()
        self.interval = interval
        self.backoff = interval if backoff is None else backoff
        self.backoff_max = backoff_max
        self._clock = clock
        self._cond = threading.Condition()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._queue: list[tuple[int, int, str]] = []  # (failures, arrival, who): a heap
        self._arrivals = itertools.count()
        self._next = -math.inf  # the clock time the next check may be made
        self.failures = 0
        self.checks = 0  # keys compared since the server started (right or wrong)

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

    def waiting(self) -> int:
        """How many checks wait for their turn now."""
        with self._cond:
            return len(self._queue)

    def backoff_after(self, failures: int) -> float:
        """Seconds a session waits after its ``failures``-th wrong key in a row."""
        return 0.0 if failures <= 0 else min(self.backoff_max, self.backoff * 2.0 ** (failures - 1))

    def check(self, given: str, who: str = "?") -> bool:
        """Whether ``given`` is the key, after this check's turn (see the module docstring).
        TooManyAttempts, at once, when ``who`` has a check pending or is in its back-off."""
        if not self.enabled:
            return False
        with self._cond:
            s = self._session(who)
            wait = s.not_before - self._clock()
            if s.pending:
                raise TooManyAttempts("your previous attempt is still being checked")
            if wait > 0:
                raise TooManyAttempts(f"{s.failures} wrong key{'s' if s.failures > 1 else ''} from this "
                                      f"session: try again in {math.ceil(wait)} s", retry_after=wait)
            s.pending = True
            ticket = (s.failures, next(self._arrivals), who)
            heapq.heappush(self._queue, ticket)
            try:
                while True:  # my turn: first in the queue, and the server's interval has passed
                    if self._queue[0] is ticket:
                        wait = self._next - self._clock()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                heapq.heappop(self._queue)
                self._next = self._clock() + self.interval
                self.checks += 1
                ok = hmac.compare_digest(str(given).encode(), self._key)
                if ok:
                    s.failures, s.not_before = 0, 0.0
                else:
                    s.failures += 1
                    self.failures += 1
                    s.not_before = self._clock() + self.backoff_after(s.failures)
                    log.warning("teacher key: wrong key from session %s (%d in a row; %d failed attempts "
                                "since the server started)", who, s.failures, self.failures)
                return ok
            finally:
                if ticket in self._queue:  # interrupted while waiting
                    self._queue.remove(ticket)
                    heapq.heapify(self._queue)
                s.pending = False
                self._cond.notify_all()

    def _session(self, who: str) -> _Session:
        """This session's record (under the lock), the least recently seen idle ones forgotten
        past MAX_SESSIONS."""
        s = self._sessions.get(who)
        if s is None:
            s = self._sessions[who] = _Session()
        self._sessions.move_to_end(who)
        while len(self._sessions) > MAX_SESSIONS:
            old = next((k for k, v in self._sessions.items() if not v.pending), None)
            if old is None or old == who:
                break
            del self._sessions[old]
        return s
