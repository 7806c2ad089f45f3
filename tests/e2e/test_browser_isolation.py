"""Session isolation in real browsers (separate contexts = separate students), on a server of its
own (TFVIZ_TEACHER_KEY set, a private checkpoint folder):

- student A uploads a model: A's picker lists it, student B's does not; a hostile upload (a pickle
  with a canary payload) is refused with a message, nothing is executed or kept;
- session ids in URLs are 12 random hex digits; whoever has A's URL sees A's work (documented);
- the teacher unlocks the Teacher panel with the key and publishes a model: A and B both see it.
"""
from __future__ import annotations

import pickle
import re
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "robustness"))
from browser_helpers import DEADLINE_MS, nav, rerun, settle, track_runs  # noqa: E402
from robust_helpers import Canary  # noqa: E402

from scripts.load_test import StreamlitServer  # noqa: E402

KEY = "owl-7f3c-maple"


@pytest.fixture(scope="module")
def classroom_server(tiny_zoo, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classroom")
    for name in ("tiny-coref", "tiny-induction"):
        shutil.copy(tiny_zoo[name], folder / f"{name}.safetensors")
    env = {"TFVIZ_CHECKPOINT_DIR": str(folder), "TFVIZ_TEACHER_KEY": KEY}
    with StreamlitServer(env, log=REPO / "artifacts" / "streamlit-isolation-server.log") as server:
        server.folder = folder
        yield server


class Student:
    """One browser context (its own cookies, its own Streamlit session)."""

    def __init__(self, browser, url: str, name: str):
        self.name = name
        self.ctx = browser.new_context(base_url=url, viewport={"width": 1400, "height": 900})
        self.ctx.set_default_timeout(DEADLINE_MS)
        self.page = self.ctx.new_page()
        track_runs(self.page)
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def settle(self):
        settle(self.page)

    def open(self, query: str = "") -> "Student":
        self.page.goto("/" + query)
        self.settle()
        self.nav("Attention explorer")
        return self

    def nav(self, title: str):
        """Go to a page and wait for *its* run (not the previous page's finished state)."""
        nav(self.page, title)
        if title == "Home":
            expect(self.page.locator(".js-plotly-plot")).to_have_count(0)
        else:
            self.page.locator(".js-plotly-plot").first.wait_for()
        self.settle()

    @property
    def sid(self) -> str:
        return re.search(r"[?&]sid=([^&]+)", self.page.url).group(1)

    @property
    def sidebar(self):
        return self.page.locator("[data-testid='stSidebar']")

    def models(self) -> list[str]:
        """The sidebar picker's options, after a fresh script run (navigate Home and back)."""
        self.nav("Home")
        self.nav("Attention explorer")
        self.sidebar.locator("[data-testid='stSelectbox']").filter(has_text="Model").first.click()
        self.page.get_by_role("option").first.wait_for()  # the list is open
        options = self.page.get_by_role("option").all_inner_texts()
        self.page.keyboard.press("Escape")
        return [o.strip() for o in options]

    def upload(self, path: Path) -> None:
        if not self.sidebar.locator("[data-testid='stFileUploaderDropzone']").is_visible():
            self.sidebar.get_by_text("Upload a checkpoint (.safetensors)").click()  # open the expander
        rerun(self.page, lambda: self.sidebar.locator("input[type='file']").set_input_files(str(path)))

    def check(self):
        boxes = self.page.locator("[data-testid='stException']").all_inner_texts()
        assert not boxes and not self.errors, (self.name, boxes, self.errors)

    def close(self):
        self.ctx.close()


def test_students_are_isolated_and_the_teacher_publishes(browser, classroom_server, tmp_path):
    url, folder = classroom_server.url, classroom_server.folder
    a = Student(browser, url, "A").open()
    b = Student(browser, url, "B").open()
    assert re.fullmatch(r"[0-9a-f]{12}", a.sid) and re.fullmatch(r"[0-9a-f]{12}", b.sid) and a.sid != b.sid

    # A uploads a hostile pickle: refused with a message, nothing runs, nothing is kept
    canary = tmp_path / "canary"
    evil = tmp_path / "evil.safetensors"
    evil.write_bytes(pickle.dumps({"weights": Canary(canary)}))
    a.upload(evil)
    expect(a.sidebar.get_by_text(re.compile(r"Not loaded: evil.safetensors: not a safetensors file"))).to_be_visible()
    assert not canary.exists() and not list((folder / "user").rglob("*.safetensors"))

    # A uploads a real checkpoint: A's picker lists it, B's does not
    mine = tmp_path / "student-a.safetensors"
    shutil.copy(folder / "tiny-induction.safetensors", mine)
    a.upload(mine)
    expect(a.sidebar.get_by_text("Loaded student-a (uploaded).")).to_be_visible()
    assert "student-a (uploaded)" in a.models()
    assert not [m for m in b.models() if "student-a" in m]

    # … but anyone who has A's URL (with ?sid=) sees A's work: the id is the only key
    c = Student(browser, url, "C with A's URL").open(f"?sid={a.sid}")
    assert c.sid == a.sid and "student-a (uploaded)" in c.models()
    c.close()

    # a student guessing the teacher key: refused
    b.sidebar.get_by_text("Teacher", exact=True).click()
    box = b.sidebar.locator("input[aria-label='Teacher key']")
    box.fill("1234")
    rerun(b.page, lambda: box.press("Enter"))
    expect(b.sidebar.get_by_text("Wrong teacher key.")).to_be_visible()
    expect(b.page.get_by_role("button", name="Publish this model to the class")).to_have_count(0)

    # the teacher: upload, unlock, publish -> every student sees it
    t = Student(browser, url, "teacher").open()
    lesson = tmp_path / "lesson.safetensors"
    shutil.copy(folder / "tiny-coref.safetensors", lesson)
    t.upload(lesson)
    expect(t.sidebar.get_by_text("Loaded lesson (uploaded).")).to_be_visible()
    t.sidebar.get_by_text("Teacher", exact=True).click()
    key = t.sidebar.locator("input[aria-label='Teacher key']")
    key.fill(KEY)
    rerun(t.page, lambda: key.press("Enter"))
    rerun(t.page, t.page.get_by_role("button", name="Publish this model to the class").click)
    expect(t.sidebar.get_by_text(re.compile("Published as lesson"))).to_be_visible()
    assert (folder / "published" / "lesson.safetensors").is_file()
    for s in (a, b):
        models = s.models()
        assert "lesson (published)" in models, (s.name, models)
    assert not [m for m in b.models() if "student-a" in m]  # A's own upload stays A's

    for s in (a, b, t):
        s.check()
        s.close()
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=DEADLINE_MS / 1000) as r:
        assert r.read().decode().strip() == "ok"  # the server stayed up throughout
