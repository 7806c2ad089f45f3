"""Faults seen from the UI (AppTest): a checkpoint deleted while selected, training that goes NaN,
GPU out of memory (simulated), a worker thread that raises while another job goes on, more jobs
than may run at once (queue), invalid training settings. Each: a clear message, no exception,
the session keeps what it had."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from apptest_helpers import messages, my_jobs, poll, problems
from robust_helpers import in_process_workers, start

from tfviz.train import loop
import ui.models as models


# ------------------------------------------------------------------------------ models
def test_selected_upload_deleted_then_model_file_vanishing_mid_load(app, classroom):
    at = app("attention", model=classroom["tiny-coref"])
    at.sidebar.file_uploader(key="upload").set_value(
        ("mine.safetensors", classroom["tiny-induction"].read_bytes(), "application/octet-stream"))
    at.run()
    mine = at.session_state["model_path"]
    assert mine.endswith("uploaded/mine.safetensors")
    at.session_state["att_source"] = "Type text"
    at.session_state["att_text"] = "a b c a b c"
    at.run()
    Path(mine).unlink()  # deleted behind the student's back (disk cleanup, another tab…)
    at.run()
    assert not problems(at), problems(at)
    assert "The model you had selected is gone; showing another one." in messages(at)
    assert at.session_state["model_path"] != mine and at.get("plotly_chart")
    # the narrow race: listed a moment ago, gone when loaded
    ref = models.ModelRef("mine (uploaded)", mine, "uploaded")
    with pytest.raises(ValueError, match="mine.safetensors is no longer there"):
        models.load_model(ref)


def test_shipped_checkpoint_deleted_while_selected(app, classroom):
    extra = Path(shutil.copy(classroom["tiny-coref"], classroom["dir"] / "zz-extra.safetensors"))
    at = app("masks", model=extra)
    assert at.sidebar.selectbox(key="model_select").value == str(extra)
    extra.unlink()
    at.run()
    assert not problems(at) and "gone" in messages(at) and at.get("plotly_chart")


# ------------------------------------------------------------------------------ training
@pytest.mark.parametrize("values, message", [
    # issue 30: the form names its field and range (the config's "lr=0.0 must be above 0" and
    # "lr=10.0 is absurdly large (at most 1.0)" named neither the field as shown nor both ends)
    (dict(lr=0.0), r"\*\*Learning rate\*\* must be above 0 and at most 1 \(it is 0\)"),
    (dict(lr=10.0), r"\*\*Learning rate\*\* must be above 0 and at most 1 \(it is 10\)"),
    (dict(steps=1), r"warmup=1 must be below steps=1"),
    (dict(d_model=30), r"not divisible by n_heads"),
], ids=["lr-zero", "lr-absurd", "steps-one-warmup", "d_model-heads"])
def test_invalid_training_settings_show_the_configs_message(train, values, message):
    values = {"steps": 6, **values}
    start(train, **values)
    assert re.search(message, messages(train)), messages(train)
    assert any(e.value.startswith("Not started:") for e in train.error)
    assert not my_jobs(train)


def test_nan_loss_fails_the_job_with_advice(train, monkeypatch):
    real = loop.token_loss
    in_process_workers()  # the patch below reaches the training loop
    monkeypatch.setattr(loop, "token_loss", lambda *a: real(*a) * float("nan"))
    start(train)
    (job,) = my_jobs(train)
    poll(train, lambda a: not job.snapshot().active)
    text = messages(train)
    assert "Training failed" in text and "loss became nan" in text and "smaller lr" in text


def test_out_of_memory_is_a_message_with_advice(train, monkeypatch):
    def oom(*a):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")

    in_process_workers()  # the patch below reaches the training loop
    monkeypatch.setattr(loop, "token_loss", oom)
    start(train)
    (job,) = my_jobs(train)
    poll(train, lambda a: not job.snapshot().active)
    text = messages(train)
    assert "Training failed" in text and "out of memory" in text and "smaller batch size" in text


def pick_run(at, name: str) -> None:
    """Select a run in the page's "Run" box (its values are job ids, shown by name)."""
    at.session_state["train_job"] = next(j.id for j in my_jobs(at) if j.name == name)
    at.run()
    assert not problems(at), problems(at)
    assert at.selectbox(key="train_job").options[at.selectbox(key="train_job").index] == name


def test_worker_that_raises_shows_its_error_and_the_other_job_finishes(train):
    """A run that raises in its worker process (runs train in ``python -m tfviz worker``, so the
    failure is a real one there: a model whose vocabulary is too small for the task's tokens)."""
    import dataclasses

    from ui.jobs import job_manager

    start(train, steps=8)
    (good,) = my_jobs(train)
    small = dataclasses.replace(good.spec["model_config"], vocab_size=3)
    bad = job_manager().submit(small, good.spec["task"], good.spec["train_config"],
                               owner=train.session_state["sid"], name="exploding-run")
    train.run()
    pick_run(train, "exploding-run")  # the page shows the chosen run
    poll(train, lambda a: not any(j.snapshot().active for j in my_jobs(a)))
    assert re.search(r"Training failed: \w+Error: .+", messages(train)), messages(train)
    assert good.snapshot().state == "done" and Path(good.snapshot().checkpoint).is_file()
    pick_run(train, good.name)
    assert not problems(train) and "Training failed" not in messages(train)


def test_more_jobs_than_slots_wait_in_a_queue(app, train):
    """The server's limits as the app sets them (tfviz.limits: TFVIZ_MAX_JOBS running at once,
    TFVIZ_JOBS_PER_SESSION each): one session fills the queue; another session's job goes before
    its second one, since nobody may hold two slots while another session waits (issue 23): a
    second run that had already started is paused (checkpointed, queued again), and the other
    session's starts."""
    from ui.jobs import job_manager

    manager = job_manager()
    for _ in range(min(manager.max_concurrent, manager.per_owner)):
        start(train, steps=100_000)
    other = app("train")
    try:
        for _ in range(max(0, manager.max_concurrent - manager.per_owner)):
            start(other, steps=100_000)  # slots a single session cannot fill
        start(other, steps=100_000)
        other.run()
        states = [j.snapshot().state for j in manager.jobs()]
        assert states.count("running") <= manager.max_concurrent
        theirs = my_jobs(other)[-1]
        poll(other, lambda a: theirs.snapshot().state == "running")
        mine = [j.snapshot() for j in my_jobs(train)]
        if manager.max_concurrent > 1:
            assert [s.state for s in mine].count("running") == 1
            waiting = next(s for s in mine if s.state == "queued")
            if waiting.started is not None:  # it had started before the other session's run came
                assert "paused to give another session's waiting run a slot" in waiting.message
            train.run()
            assert re.search(r"queued — position \d+", " ".join(train.dataframe[0].value["state"]))
    finally:
        for job in my_jobs(other):
            manager.stop(job.id)


def test_a_session_has_at_most_its_share_of_jobs(train):
    from ui.jobs import job_manager

    for _ in range(job_manager().per_owner):
        start(train, steps=100_000)
    train.button(key="train_start").click().run()  # one more: refused, with the reason
    assert f"the limit is {job_manager().per_owner} per session" in messages(train)
    assert len(my_jobs(train)) == job_manager().per_owner
