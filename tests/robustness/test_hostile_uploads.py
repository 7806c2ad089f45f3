"""Hostile checkpoint uploads (ui.uploads.save_upload and the sidebar uploader in AppTest): each is
rejected with a clear message, nothing is kept in the session's folder, and nothing is executed
(the pickle's canary file never appears). Valid uploads are confined to the session's folder and
never replace another upload."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from apptest_helpers import messages, problems
from robust_helpers import hostile_files, session_files

import ui.uploads as uploads

CASES = ["too-big", "empty", "pickle-extension", "pkl-extension", "json-sidecar", "no-extension",
         "pickle-canary", "pickle-canary-proto0", "torch-save-zip", "zip", "truncated",
         "truncated-header", "garbage", "huge-header-claim", "header-length-lie", "shape-lie",
         "shape-off-config", "dtype-off-config", "extra-tensor", "missing-tensor", "nan-weights",
         "inf-weights", "future-version", "not-tfviz", "bad-config", "tokenizer-vocab-mismatch"]


@pytest.fixture(scope="module")
def good(tiny_zoo) -> bytes:
    return Path(tiny_zoo["tiny-coref"]).read_bytes()


@pytest.fixture
def session(tmp_path, monkeypatch) -> Path:
    """save_upload outside a Streamlit run: this test's folder is the session's."""
    from tfviz import paths

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    folder = paths.session_dir("0123456789ab")
    monkeypatch.setattr(uploads, "session_dir", lambda: folder)
    return folder


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.mark.parametrize("case", CASES)
def test_save_upload_rejects(case, good, session, tmp_path):
    canary = tmp_path / "canary"
    name, data, message = hostile_files(good, canary)[case]
    with pytest.raises(ValueError, match=message) as err:
        uploads.save_upload(name, data)
    assert str(session) not in str(err.value) and ".upload.tmp" not in str(err.value)  # no server paths
    assert files_under(session) == []  # nothing kept, not even the temp file
    assert not canary.exists()  # the pickle was never unpickled


def test_session_quota_and_unexpected_errors(good, session, monkeypatch):
    monkeypatch.setenv("TFVIZ_SESSION_UPLOAD_MB", str(len(good) * 1.5 / 2**20))
    uploads.save_upload("a.safetensors", good)
    with pytest.raises(ValueError, match=r"this session already keeps .* per session"):
        uploads.save_upload("b.safetensors", good)
    monkeypatch.setenv("TFVIZ_SESSION_UPLOAD_MB", "200")

    def explode(*a, **k):  # anything a file might trigger inside the loader is a rejection too
        raise RuntimeError("unexpected failure inside the loader")

    import tfviz.classroom.uploads
    monkeypatch.setattr(tfviz.classroom.uploads, "load_checkpoint", explode)
    with pytest.raises(ValueError, match="not a usable tfviz checkpoint .RuntimeError"):
        uploads.save_upload("c.safetensors", good)
    assert [p.name for p in files_under(session)] == ["a.safetensors"]


def test_valid_upload_is_confined_and_never_replaces_another(good, session):
    first = uploads.save_upload("../../../etc/evil name.safetensors", good)
    second = uploads.save_upload("evil name.safetensors", good)
    assert first.source == "uploaded" and Path(first.path).parent == session / "uploaded"
    assert Path(first.path).name == "evil_name.safetensors"
    assert Path(second.path).name == "evil_name-2.safetensors"  # the first upload is kept
    assert [p.name for p in files_under(session)] == ["evil_name-2.safetensors", "evil_name.safetensors"]


# ------------------------------------------------------------------------------ through the UI
def upload(at, name: str, data: bytes):
    at.sidebar.file_uploader(key="upload").set_value((name, data, "application/octet-stream"))
    at.run()
    assert not problems(at), problems(at)
    return at


UI_CASES = ["pickle-canary", "torch-save-zip", "truncated", "huge-header-claim", "shape-lie",
            "nan-weights", "future-version", "pickle-extension", "too-big"]


def test_sidebar_uploader_rejects_hostile_files_and_keeps_the_selection(app, classroom, good, tmp_path):
    """One AppTest session uploads every hostile file in turn: each gets a "Not loaded: …" error,
    the selected model stays selected, the session keeps no file, the canary never appears."""
    at = app("attention", model=classroom["tiny-induction"])
    sid = at.session_state["sid"]
    canary = tmp_path / "canary"
    files = hostile_files(good, canary)
    for case in UI_CASES:
        name, data, message = files[case]
        upload(at, name, data)
        errors = [e.value for e in at.sidebar.error]
        assert any(e.startswith("Not loaded:") and re.search(message, e) for e in errors), (case, errors)
        assert at.session_state["model_path"] == str(classroom["tiny-induction"]), case
        assert session_files(classroom["dir"], sid) == [], case
        assert at.get("plotly_chart"), case  # the page still shows the selected model
    assert not canary.exists()

    upload(at, "mine.safetensors", good)  # then a valid file: kept, listed and selected
    assert "Loaded mine (uploaded)" in messages(at)
    picker = at.sidebar.selectbox(key="model_select")
    assert picker.value.endswith("/uploaded/mine.safetensors") and "mine (uploaded)" in picker.options
    assert [p.name for p in session_files(classroom["dir"], sid)] == ["mine.safetensors"]
