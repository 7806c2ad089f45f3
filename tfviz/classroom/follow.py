"""The class follows the teacher (reveal.js's multiplex, in one small record): the server holds the
lead's current view — the lesson step and its settings, a few short strings — and a version number
that grows with every change. Only the holder of the teacher key writes it (``ui.lesson`` checks
the key before calling ``publish``); every student's session reads it about once a second
(``current``: a lock and two attribute reads, no copy of anything large) and redraws only when the
version it last drew is not the current one.

What one session can make the server do is bounded: the record holds at most ``MAX_FIELDS``
fields of at most ``MAX_VALUE`` characters each (a ``ValueError`` otherwise), so a leader cannot
grow it, and followers only read.

Who leads lives here too, not in a page's widget (issue 41): the browsers that gave the teacher
key (``add_teacher``: their ``tfviz_client`` cookie, at most ``MAX_TEACHERS``) and whether the
class follows now (``leading``, switched by ``set_leading``). A widget not drawn in a run loses
its state in Streamlit, so a switch on the page was turned off by presenting; the record keeps it
through presenting, Esc, a reload and the teacher's second tab. The followers who polled within
``FOLLOWER_S`` are counted (``followers``; at most ``MAX_FOLLOWERS`` remembered) so the teacher
sees how many follow.

The record lives in the server process: a class on one app server follows its teacher there. With
several app servers (docs/deploy.md) each holds its own record, and students must open the class
link on the teacher's server.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_FIELDS = 16
MAX_VALUE = 500
MAX_TEACHERS = 8  # browsers that gave the key, remembered (the least recent forgotten first)
MAX_FOLLOWERS = 5000  # followers remembered for the count (the least recent forgotten first)
FOLLOWER_S = 15.0  # a follower counts while it polled or redrew within this long


@dataclass(frozen=True)
class Lead:
    """One published view: ``version`` (0 = nothing published yet), ``state`` (name -> value,
    e.g. {"step": "qkv", "model": "shipped/coref", "head": "L1·H1"}) and when it was published
    (``time.time()``)."""
    version: int = 0
    state: Mapping[str, str] = field(default_factory=dict)
    at: float = 0.0


class ClassRecord:
    """The teacher's current view, shared by every session of the server (thread-safe).

    The leader goes first: while the leader's page is being drawn (``begin`` … ``end``), a
    follower about to poll or redraw waits (``wait_for_leader``, at most ``MAX_WAIT_S``, asleep:
    it holds no CPU), so thirty students polling once a second, or catching up with the last
    step, do not slow the teacher's next one. A leader whose
    run died without ``end`` holds nobody back for more than ``STALE_S``."""

    MAX_WAIT_S = 2.0
    STALE_S = 10.0
    REDRAWS = 2  # followers' page redraws at once (the others wait their turn, asleep)
    TURN_WAIT_S = 10.0

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._lead = Lead()
        self._busy_since: float | None = None
        self._turns = threading.BoundedSemaphore(self.REDRAWS)
        self._teachers: OrderedDict[str, None] = OrderedDict()
        self._leading = False
        self._followers: OrderedDict[str, float] = OrderedDict()

    # ------------------------------------------------------------------ who leads
    def add_teacher(self, who: str) -> None:
        """``who`` (a browser: its client cookie) gave the teacher key (the caller checked it)."""
        with self._lock:
            self._teachers[str(who)] = None
            self._teachers.move_to_end(str(who))
            while len(self._teachers) > MAX_TEACHERS:
                self._teachers.popitem(last=False)

    def is_teacher(self, who: str) -> bool:
        with self._lock:
            return str(who) in self._teachers

    @property
    def leading(self) -> bool:
        """Whether the class follows the teacher now."""
        with self._lock:
            return self._leading

    def set_leading(self, on: bool, who: str) -> None:
        """Start or stop leading; only a teacher's browser may (``PermissionError`` otherwise)."""
        with self._lock:
            if str(who) not in self._teachers:
                raise PermissionError("only the teacher leads the class")
            self._leading = bool(on)

    def leads(self, who: str) -> bool:
        """``who``'s pages move the class now: a teacher's browser while leading is on."""
        with self._lock:
            return self._leading and str(who) in self._teachers

    def polled(self, who: str) -> None:
        """A follower read the record (for ``followers``)."""
        now = time.monotonic()
        with self._lock:
            self._followers[str(who)] = now
            self._followers.move_to_end(str(who))
            while len(self._followers) > MAX_FOLLOWERS:
                self._followers.popitem(last=False)

    def followers(self) -> int:
        """How many followers polled within ``FOLLOWER_S``."""
        since = time.monotonic() - FOLLOWER_S
        with self._lock:
            while self._followers and next(iter(self._followers.values())) < since:
                self._followers.popitem(last=False)
            return len(self._followers)

    @contextlib.contextmanager
    def follower_turn(self):
        """A follower's redraw, ``REDRAWS`` at a time: Python runs one thread at a time, and
        with thirty redraws runnable at once the teacher's page got one turn in thirty-one;
        now it shares with at most two. A turn not free within ``TURN_WAIT_S`` is taken anyway
        (a redraw is never refused)."""
        got = self._turns.acquire(timeout=self.TURN_WAIT_S)
        try:
            yield
        finally:
            if got:
                self._turns.release()

    def begin(self) -> None:
        """The leader's page run starts."""
        with self._lock:
            self._busy_since = time.monotonic()

    def end(self) -> None:
        """The leader's page run ended (after ``publish``)."""
        with self._lock:
            self._busy_since = None
            self._lock.notify_all()

    def leader_busy(self) -> bool:
        with self._lock:
            return self._busy()

    def _busy(self) -> bool:
        return self._busy_since is not None and time.monotonic() - self._busy_since < self.STALE_S

    def wait_for_leader(self, timeout: float | None = None) -> float:
        """Block while the leader's page is being drawn (at most ``timeout``, default
        ``MAX_WAIT_S``); the seconds waited."""
        t0 = time.monotonic()
        deadline = t0 + (self.MAX_WAIT_S if timeout is None else timeout)
        with self._lock:
            while self._busy() and (left := deadline - time.monotonic()) > 0:
                stale_in = self._busy_since + self.STALE_S - time.monotonic()
                self._lock.wait(max(0.0, min(left, stale_in)))
        return time.monotonic() - t0

    def current(self) -> Lead:
        with self._lock:
            return self._lead

    def publish(self, state: Mapping[str, object]) -> Lead:
        """Make ``state`` the class's view (every value kept as a string). Publishing the view
        that is already current changes nothing (the version stays, followers do not redraw)."""
        clean = {str(k): str(v) for k, v in state.items() if v is not None}
        if len(clean) > MAX_FIELDS:
            raise ValueError(f"a lead holds at most {MAX_FIELDS} settings, not {len(clean)}")
        too_long = [k for k, v in clean.items() if len(k) > MAX_VALUE or len(v) > MAX_VALUE]
        if too_long:
            raise ValueError(f"{too_long[0]}: a lead's values hold at most {MAX_VALUE} characters")
        with self._lock:
            if dict(self._lead.state) == clean:
                return self._lead
            self._lead = Lead(self._lead.version + 1, clean, time.time())
            return self._lead
