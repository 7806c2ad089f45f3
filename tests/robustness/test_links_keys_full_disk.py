"""Issue 40, item 4: a bad ``task=`` in a Train link (S5-6), widget keys that carried the session id
and the server's path (S5-8), an upload on a full disk (S5-9).

The full disk is real: a tmpfs of a few MB mounted in a user and mount namespace of its own
(``unshare -rm``) holds the checkpoint folder (so the run store's ledger and the session's
folder), filled until a little less than the upload is free; the upload goes through
``tfviz.classroom.uploads.save_upload`` in that process. Skipped where the kernel allows no such
namespace."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from apptest_helpers import messages, ok, problems
from streamlit.testing.v1 import AppTest

from apptest_helpers import APP

REPO = Path(__file__).resolve().parents[2]

BAD_TASKS = ["Coref", "nan", "", "../", "../../etc/passwd", "coref\x00", "x" * 3000, "lm ", "%2e%2e", "-1"]


@pytest.mark.parametrize("value", BAD_TASKS, ids=range(len(BAD_TASKS)))
def test_a_train_link_with_a_bad_task_falls_back_with_a_sentence(classroom, value):
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["task"] = value
    at.switch_page("app_pages/train.py")
    at.run()
    assert not problems(at), problems(at)
    notes = " ".join(i.value for i in at.info)
    assert "is not usable here" in notes and "task=" in notes, notes
    from tfviz.tasks import TASKS

    assert at.session_state["train_task"] in TASKS  # the form's own task, shown and trainable


def test_a_good_train_link_still_sets_the_task(classroom):
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["task"] = "induction"
    at.switch_page("app_pages/train.py")
    at.run()
    ok(at)
    assert at.session_state["train_task"] == "induction"
    assert "is not usable here" not in messages(at)


def upload(at, name: str, data: bytes):
    at.sidebar.file_uploader(key="upload").set_value((name, data, "application/octet-stream"))
    at.run()
    assert not problems(at), problems(at)
    return at


def test_no_widget_key_holds_the_session_id_or_a_server_path_after_an_upload(classroom):
    """S5-8: after an upload the Generate page's prompt box was keyed by the model's path (the
    session's id and the server's folders), sent to the browser as its element id and CSS class."""
    lm = REPO / "checkpoints" / "lm.safetensors"
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    at.switch_page("app_pages/generate.py").run()
    ok(at)
    upload(at, "mine.safetensors", lm.read_bytes())
    assert "Loaded mine (uploaded)" in messages(at), messages(at)
    at.run()
    ok(at)
    sid, path = at.session_state["sid"], at.session_state["model_path"]
    assert path.endswith("/uploaded/mine.safetensors") and sid in path
    keys = [w.key for kind in ("text_input", "text_area", "selectbox", "slider", "number_input", "checkbox",
                               "button", "radio", "multiselect", "toggle")
            for w in getattr(at, kind) if getattr(w, "key", None)]
    assert any(k.startswith("gen_prompt:") for k in keys), keys
    for k in keys:
        assert sid not in k and str(classroom["dir"]) not in k and "/" not in k, k


FULL_DISK = r"""
import json, os, sys
repo, mnt, upload = sys.argv[1:4]
sys.path.insert(0, repo)
os.environ["TFVIZ_CHECKPOINT_DIR"] = mnt
from tfviz import paths
from tfviz.classroom import disk
from tfviz.classroom.uploads import save_upload
data = open(upload, "rb").read()
folder = paths.session_dir("0123456789ab") / "uploaded"
with disk.reserve(1, "warm-up"):  # the store exists before the disk fills
    pass
st = os.statvfs(mnt)
free = st.f_bavail * st.f_frsize
keep = min(len(data) // 2, 256 * 1024)  # room for the store's pages, not for the upload
with open(os.path.join(mnt, "filler"), "wb") as f:
    f.write(b"\0" * max(0, free - keep))
out = {"free_before": os.statvfs(mnt).f_bavail * st.f_frsize, "size": len(data)}
try:
    save_upload(folder, "mine.safetensors", data)
    out["result"] = "kept"
except ValueError as e:
    out["result"] = "refused"
    out["message"] = str(e)
except BaseException as e:
    out["result"] = "exception"
    out["message"] = f"{type(e).__name__}: {e}"
out["left"] = sorted(str(p.relative_to(mnt)) for p in folder.parent.rglob("*") if p.is_file()) if folder.parent.exists() else []
os.remove(os.path.join(mnt, "filler"))
out["reserved_after"] = disk.ledger().reserved()  # the upload's reservation released
print("RESULT " + json.dumps(out))
"""


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt && umount /mnt"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _namespaces_work(), reason="no user + mount namespace for a real full disk")
def test_an_upload_on_a_full_disk_says_so_in_words_and_leaves_nothing(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    lm = REPO / "checkpoints" / "lm.safetensors"
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    cmd = (f"mount -t tmpfs -o size=4m tmpfs {mnt} && "
           f"{sys.executable} {script} {REPO} {mnt} {lm}")
    out = subprocess.run(["unshare", "-rm", "sh", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["free_before"] < result["size"], result  # the disk cannot hold the upload
    assert result["result"] == "refused", result
    assert "mine.safetensors: not kept: the server's disk is full" in result["message"], result
    assert str(mnt) not in result["message"]
    assert [p for p in result["left"] if "uploaded" in p] == [], result  # no file, no temp file
    assert result["reserved_after"] == 0, result
