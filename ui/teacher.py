"""The teacher's sidebar panel (only when ``TFVIZ_TEACHER_KEY`` is set): unlock it with the key,
then publish the selected trained/uploaded model to every session (``tfviz.publish``), or
withdraw a published one, and see and stop every session's trainings. The key's rules (a
minimum length, one check per second server-wide, one pending check and a growing back-off per
session, failures logged) are ``tfviz.classroom.teacher.TeacherKey``'s; this is the glue."""
from __future__ import annotations

import os
import time
from pathlib import Path

import streamlit as st

from .models import SOURCE, ModelRef, published_dir
from .session import session_id


@st.cache_resource(max_entries=2)
def _gate(key: str):
    """The server's one turnstile for this key (every session's checks take turns at it)."""
    from tfviz.classroom.teacher import TeacherKey

    return TeacherKey(key)


def gate():
    return _gate(os.environ.get("TFVIZ_TEACHER_KEY", ""))


def _check_teacher_key(box: str = "teacher_key") -> None:
    """on_change of the key box: checked once per entry, then the box is cleared (the key is not
    kept in session state)."""
    from tfviz.classroom.teacher import TooManyAttempts

    given = st.session_state.get(box, "") or ""
    st.session_state[box] = ""
    if not given:
        return
    try:
        ok = gate().check(given, who=session_id())
    except TooManyAttempts as e:  # this session's own check pending, or its back-off
        why = str(e)
        st.session_state["_teacher_wrong"] = f"{why[:1].upper()}{why[1:]}."
        return
    if ok:
        st.session_state["teacher"] = True
        st.session_state.pop("_teacher_wrong", None)
    else:
        st.session_state["_teacher_wrong"] = "Wrong teacher key."


def key_box(where, key: str = "teacher_key") -> None:
    """The teacher-key box (each entry checked once, by ``gate``'s rules) and why the last entry
    failed. Unlocked, ``st.session_state["teacher"]`` is True (the Lesson page's "Lead")."""
    where.text_input("Teacher key", type="password", key=key, on_change=_check_teacher_key, args=(key,),
                     help="Set by whoever started the server (TFVIZ_TEACHER_KEY).")
    if st.session_state.get("_teacher_wrong"):
        where.error(st.session_state["_teacher_wrong"])


def _publish(ref: ModelRef) -> None:
    from tfviz.publish import publish

    try:
        out = publish(ref.path, published_dir(), name=Path(ref.path).stem)
    except ValueError as e:
        st.error(f"Not published: {e}")
    else:
        st.success(f"Published as **{out.stem}**: every student's model picker lists it now "
                   "(as *published*).")


def teacher_panel(where, ref: ModelRef) -> None:
    if not os.environ.get("TFVIZ_TEACHER_KEY"):
        return
    from tfviz.publish import unpublish

    with where.expander("Teacher", icon=":material/school:"):
        if gate().problem:
            st.warning(f"The Teacher panel is off: {gate().problem}.")
        elif not st.session_state.get("teacher"):
            key_box(st)
        elif SOURCE[ref.source].private:
            if st.button("Publish this model to the class", key="teacher_publish",
                         icon=":material/campaign:"):
                _publish(ref)
        elif ref.source == "published":
            if st.button("Withdraw from the class", key="teacher_unpublish", icon=":material/undo:"):
                unpublish(ref.path, published_dir())
                st.session_state["model_path"] = None
                st.rerun()
        else:
            st.caption("Shipped and local models are already visible to everyone. Select a model you trained "
                       "or uploaded to publish it.")
        if st.session_state.get("teacher") and not gate().problem:
            _trainings()


def _trainings() -> None:
    """Every run of the class (the run store's records: every session's, also from before a
    restart), active ones first; Stop on any running or queued one (it saves what it learned),
    and "Start next" on a queued one (it goes to the front of the queue; if no slot frees within
    a minute, the longest-running run is paused for it). Then the store's own state: a fault as
    a sentence, what happened to it (made anew), every disk reservation, and the workers' log."""
    from tfviz.runs.store import StoreUnavailable

    from .jobs import job_manager, store_trouble

    manager = job_manager()
    try:
        _runs(manager)
    except StoreUnavailable as e:
        st.error(store_trouble(e))
    _store_state(manager)


def _runs(manager) -> None:
    from .train_state import jobs_table, status

    runs = manager.jobs()
    active = [j for j in runs if j.snapshot().active]
    st.markdown("**Trainings on this server**")
    if not runs:
        st.caption("None yet.")
        return
    ended = [j for j in runs if j not in active][-20:]  # the newest ended ones
    st.dataframe(jobs_table(ended + active, owners=True), hide_index=True, key="teacher_jobs",
                 column_order=("session", "run", "state"))
    if not active:
        st.caption("None running or queued.")
    for j in active:
        s = j.snapshot()
        if st.button(f"Stop {s.name} ({status(s)})", key=f"teacher_stop_{j.id}", icon=":material/stop:"):
            manager.stop(j.id)
            st.toast(f"Stopping {s.name}: it saves what it learned so far.")
        if s.state == "queued" and (s.queue_position or 0) > 1 and st.button(
                f"Start {s.name} next", key=f"teacher_front_{j.id}", icon=":material/vertical_align_top:"):
            manager.move_to_front(j.id)
            st.toast(f"{s.name} is first in the queue now; if no training ends within a minute, "
                     "the one that has run longest is paused (it resumes later) to give it a slot.")


LOG_TAIL_BYTES = 16_384  # the end of workers.log the panel shows


def log_tail(path: Path, lines: int = 30) -> str | None:
    """The last ``lines`` lines of the workers' log (at most ``LOG_TAIL_BYTES`` read), or None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return "\n".join(text.splitlines()[-lines:])


def _store_state(manager) -> None:
    """The run store's notices, every reservation of the disk ledger, the workers' log."""
    import pandas as pd

    from tfviz.runs.store import StoreUnavailable

    try:
        for note in getattr(manager.store, "notices", lambda: [])():
            st.info(note)
        held = manager.store.reservations()
    except StoreUnavailable:
        held = None  # said above
    if held is not None:
        st.markdown("**Disk space reserved** (trainings' checkpoints, uploads being checked)")
        if not held:
            st.caption("Nothing reserved.")
        else:
            now = time.time()
            st.table(pd.DataFrame([{
                "for": (f"training {r['name']} ({r['state']})" if r.get("run_id")
                        else "an upload being checked" if str(r["key"]).startswith("file:") else r["key"]),
                "session": f"{(r.get('owner') or '?')[:4]}…", "MB": round(r["bytes"] / 2**20, 1),
                "held for": f"{(now - r['created']) / 60:.0f} min"} for r in held]).set_index("for"))
    log = getattr(manager.executor, "log", None)
    if log is not None:
        tail = log_tail(Path(log))
        with st.expander("Training workers' log (the last lines)"):
            if tail is None:
                st.caption("No log yet (or it cannot be read).")
            else:
                st.code(tail or "(empty)", language=None)
