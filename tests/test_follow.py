"""Who leads the class lives in the class record (issue 41, item 1), not in a page's widget: only a
browser that gave the teacher key switches leading, the state holds until it is switched again,
the teachers and the followers counted are bounded."""
from __future__ import annotations

import pytest

from tfviz.classroom import follow
from tfviz.classroom.follow import ClassRecord


def test_only_a_teacher_switches_leading_and_it_stays() -> None:
    r = ClassRecord()
    assert not r.leading and not r.leads("teacher-browser")
    with pytest.raises(PermissionError):
        r.set_leading(True, "student")
    r.add_teacher("teacher-browser")
    r.set_leading(True, "teacher-browser")
    assert r.leading and r.leads("teacher-browser") and not r.leads("student")
    r.publish({"step": "qkv"})
    assert r.leads("teacher-browser")  # publishing, presenting, reloading: nothing switches it off
    with pytest.raises(PermissionError):
        r.set_leading(False, "student")
    assert r.leading
    r.set_leading(False, "teacher-browser")
    assert not r.leading and not r.leads("teacher-browser")


def test_teachers_and_followers_are_bounded(monkeypatch) -> None:
    r = ClassRecord()
    for i in range(follow.MAX_TEACHERS + 3):
        r.add_teacher(f"t{i}")
    assert not r.is_teacher("t0") and r.is_teacher(f"t{follow.MAX_TEACHERS + 2}")
    monkeypatch.setattr(follow, "MAX_FOLLOWERS", 50)
    for i in range(80):
        r.polled(f"s{i}")
    r.polled("s79")  # the same follower twice counts once
    assert r.followers() == 50
    clock = [1000.0]
    monkeypatch.setattr(follow.time, "monotonic", lambda: clock[0])
    r2 = ClassRecord()
    r2.polled("a")
    clock[0] += follow.FOLLOWER_S / 2
    r2.polled("b")
    assert r2.followers() == 2
    clock[0] += follow.FOLLOWER_S * 0.75
    assert r2.followers() == 1  # "a" stopped polling
