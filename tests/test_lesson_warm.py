"""Issue 41, item 3: the server computes every Lesson step's default view at start, in the
background (``ui.lesson.warm_up``, started by ``ui.server`` when ``TFVIZ_LESSON_WARM=1``, which
scripts/app.sh sets): the first visitor of a step then draws the view already computed — the
warm-up's model and default settings are exactly what a visit asks for."""
from __future__ import annotations

import dataclasses

from apptest_helpers import APP, ok
from streamlit.testing.v1 import AppTest

from ui import lesson, lesson_steps


def test_a_visit_draws_the_view_the_warm_up_computed(monkeypatch) -> None:
    monkeypatch.delenv("TFVIZ_ZOO_DIR", raising=False)  # the shipped zoo, as the server's
    calls = []
    steps = []
    for sid in ("heatmap", "masks"):  # two steps with a model and controls
        step = lesson_steps.BY_ID[sid]
        steps.append(dataclasses.replace(step, view=lambda lm, v, real=step.view, sid=sid:
                                         (calls.append(sid), real(lm, v))[1]))
    monkeypatch.setattr(lesson, "STEPS", steps)
    monkeypatch.setattr(lesson, "BY_ID", {s.id: s for s in steps})
    lesson_steps._MEMO.clear()
    done = lesson.warm_up(pause_s=0)
    assert done["done"] == 2 and not done["failed"] and done["seconds"] is not None
    assert calls == ["heatmap", "masks"]
    for sid in ("heatmap", "masks"):  # a visitor, presenting: nothing computed again
        at = AppTest.from_file(str(APP), default_timeout=300)
        at.query_params.update(step=sid, present="1")
        at.switch_page("app_pages/lesson.py")
        ok(at.run())
        assert at.session_state["lesson_step"] == sid
    assert calls == ["heatmap", "masks"]


def test_default_values_are_the_pages_defaults() -> None:
    from ui.models import load_model

    step = lesson_steps.BY_ID["sinusoidal"]  # a slider and another control, no model
    assert set(lesson.default_values(step, None)) == {c.name for c in step.controls}
    step = lesson_steps.BY_ID["qkv"]
    lm = load_model(lesson._zoo_ref(step.model))
    values = lesson.default_values(step, lm)
    assert values["head"] in lesson_steps.heads_of(lm)
