"""Publishing to the class (tfviz.publish, `python -m tfviz publish`, the Teacher panel in AppTest):
validated and atomic; invalid files never reach published/; students cannot publish; a published
model shows up in every session, a student's own models in none but theirs."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from apptest_helpers import messages, problems
from robust_helpers import Canary

from tfviz.train.checkpoint import CheckpointError, load_checkpoint
from tfviz.cli import main
from tfviz.publish import publish, published, safe_stem, unpublish

KEY = "correct horse battery staple"


def test_publish_validates_copies_and_never_overwrites(classroom, tmp_path):
    dest = tmp_path / "published"
    src = classroom["tiny-coref"]
    out = publish(src, dest)
    assert out == dest / "tiny-coref.safetensors" and out.read_bytes() == src.read_bytes()
    assert publish(src, dest) == out  # the same bytes again: nothing new
    other = publish(classroom["tiny-induction"], dest, name="tiny-coref")  # a name clash
    assert other.name == "tiny-coref-2.safetensors" and out.read_bytes() == src.read_bytes()
    assert load_checkpoint(other).config.pos == "learned"
    assert set(published(dest)) == {out, other}
    assert [p.name for p in dest.iterdir()] and not [p for p in dest.iterdir() if p.name.startswith(".")]
    assert unpublish("tiny-coref-2", dest) and not other.exists() and not unpublish("tiny-coref-2", dest)
    with pytest.raises(ValueError, match="not a published checkpoint"):
        unpublish(classroom["tiny-coref"], dest)  # only inside the published folder
    assert classroom["tiny-coref"].exists()
    assert safe_stem("../../x y.safetensors") == "x_y" and safe_stem("...") == "model"


@pytest.mark.parametrize("payload, message", [
    (b"", "too short"), (b"\x80\x04junk", "not a safetensors file"), (None, "not a safetensors file")])
def test_invalid_files_are_never_published(tmp_path, payload, message):
    canary = tmp_path / "canary"
    import pickle
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(pickle.dumps(Canary(canary)) if payload is None else payload)
    dest = tmp_path / "published"
    with pytest.raises(CheckpointError, match=message) as err:
        publish(bad, dest)
    assert str(bad) in str(err.value) and ".publish-" not in str(err.value)
    assert list(dest.iterdir()) == [] and not canary.exists()
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        publish(tmp_path / "missing.safetensors", dest)


def test_cli_publish(classroom, tmp_path, capsys):
    dest = tmp_path / "pub"
    assert main(["publish", str(classroom["tiny-coref"]), "--dir", str(dest), "--name", "demo"]) == 0
    assert (dest / "demo.safetensors").is_file() and "published:" in capsys.readouterr().out
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"PK\x03\x04 not really")
    assert main(["publish", str(bad), "--dir", str(dest)]) == 1
    assert "zip archive" in capsys.readouterr().err and published(dest) == [dest / "demo.safetensors"]


# ------------------------------------------------------------------------------ the Teacher panel
def upload_own(at, classroom, name="mine"):
    data = classroom["tiny-induction"].read_bytes()
    at.sidebar.file_uploader(key="upload").set_value((f"{name}.safetensors", data, "application/octet-stream"))
    at.run()
    assert not problems(at), problems(at)
    return at


def labels(at) -> list[str]:
    return list(at.sidebar.selectbox(key="model_select").options)


def test_no_teacher_panel_without_a_key(app, classroom):
    at = app("attention", model=classroom["tiny-coref"])
    assert not [e for e in at.sidebar.expander if e.label == "Teacher"]
    assert not [w for w in at.text_input if w.label == "Teacher key"]


def test_teacher_publishes_a_students_model_to_every_session(app, classroom, monkeypatch):
    monkeypatch.setenv("TFVIZ_TEACHER_KEY", KEY)
    student = upload_own(app("attention", model=classroom["tiny-coref"]), classroom, "student-model")
    other = app("attention", model=classroom["tiny-coref"])
    assert "student-model (uploaded)" in labels(student)
    assert not [x for x in labels(other) if "student-model" in x]  # sessions are isolated

    # a student without the key cannot publish: a wrong key is refused, no publish button
    student.text_input(key="teacher_key").input("guess").run()
    assert "Wrong teacher key" in messages(student) and not [b for b in student.button if b.key == "teacher_publish"]
    assert student.session_state["teacher_key"] == ""  # the box is cleared; the guess is not kept

    # the teacher's session: unlock, upload, publish
    teacher = upload_own(app("attention", model=classroom["tiny-coref"]), classroom, "teacher-demo")
    teacher.text_input(key="teacher_key").input(KEY).run()
    assert not problems(teacher) and teacher.session_state["teacher"] is True
    teacher.button(key="teacher_publish").click().run()
    assert not problems(teacher)
    assert "Published as **teacher-demo**" in messages(teacher)
    assert (classroom["dir"] / "published" / "teacher-demo.safetensors").is_file()
    for at in (student, other):  # every session lists it now; the student's own model stays private
        at.run()
        assert "teacher-demo (published)" in labels(at)
    assert not [x for x in labels(other) if "student-model" in x]

    # withdraw it: gone for everyone, with a message for whoever had it selected
    shared = str(classroom["dir"] / "published" / "teacher-demo.safetensors")
    for at in (other, teacher):
        at.session_state["model_path"] = shared  # as a pick in the sidebar does
        at.run()
        assert at.sidebar.selectbox(key="model_select").value == shared
    teacher.button(key="teacher_unpublish").click().run()
    assert not problems(teacher) and not (classroom["dir"] / "published" / "teacher-demo.safetensors").exists()
    other.run()
    assert not problems(other) and "The model you had selected is gone" in messages(other)
    assert not [x for x in labels(other) if "teacher-demo" in x]


def test_published_file_deleted_or_replaced_by_garbage_while_selected(app, classroom):
    pub = classroom["dir"] / "published"
    pub.mkdir()
    target = Path(shutil.copy(classroom["tiny-induction"], pub / "shared.safetensors"))
    at = app("attention", model=target)
    assert at.sidebar.selectbox(key="model_select").value == str(target)
    target.write_bytes(b"garbage written over the file")  # new mtime: the cache loads it again
    at.run()
    assert not problems(at)
    assert "Could not load shared (published)" in messages(at) and "not a safetensors file" in messages(at)
    target.unlink()
    at.run()
    assert not problems(at) and "gone" in messages(at)
