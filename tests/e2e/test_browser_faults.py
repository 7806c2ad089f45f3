"""Faults in a real browser: the laptop is closed mid-training (the browser context goes away while
the job runs); the job finishes on the server, and a new tab opened with the same ?sid= finds it
done, with its checkpoint listed as a trained model. (kill -9 during checkpoint writes:
tests/robustness/test_kill9.py; a worker that raises, NaN, OOM, the queue:
tests/robustness/test_faults_ui.py.)"""
from __future__ import annotations

import re
import time
import urllib.request

from browser_helpers import CURRENT, DEADLINE_MS, TRAINING_DEADLINE_MS, nav, select, settle, track_runs
from playwright.sync_api import expect

STEPS = 1000  # long enough to be still running when the browser closes (200 ended first on a quiet CI)


def _context(browser, url):
    ctx = browser.new_context(base_url=url, viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(DEADLINE_MS)
    page = ctx.new_page()
    track_runs(page)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return ctx, page, errors


def test_closing_the_browser_mid_training_loses_nothing(browser, streamlit_server):
    url = streamlit_server.url
    ctx, page, errors = _context(browser, url)
    page.goto("/")
    settle(page)
    nav(page, "Train")
    expect(page.get_by_role("button", name="Start training")).to_be_visible()
    settle(page)
    select(page, page.locator("[data-testid='stMain']"), "Task", "induction")
    expect(page.get_by_label("Name", exact=True)).to_have_value(re.compile(r"^induction-"))  # the preset
    settle(page)
    page.get_by_label("Steps", exact=True).fill(str(STEPS))
    page.get_by_label("Warmup steps").fill("5")
    page.get_by_role("button", name="Start training").click()
    live = page.locator(CURRENT).locator("[data-testid='stProgress']")  # not a stale copy (CURRENT)
    expect(live).to_contain_text(re.compile(rf"running — step \d+ of {STEPS}"))
    sid = re.search(r"[?&]sid=([0-9a-f]{12})", page.url).group(1)
    run = page.get_by_role("combobox", name="Run")
    expect(run).to_have_value(re.compile(r"^induction-"))
    name = run.input_value()
    assert not errors and not page.locator("[data-testid='stException']").count()
    progress = live.inner_text()
    at_close = int(re.search(r"step (\d+)", progress).group(1))
    assert at_close < STEPS
    ctx.close()  # the laptop lid closes: no browser session is left for this student
    closed_at = time.perf_counter()

    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=DEADLINE_MS / 1000) as r:
        assert r.read().decode().strip() == "ok"

    # a new tab (a new browser context) at the same URL, later
    ctx2, page2, errors2 = _context(browser, url)
    page2.goto(f"/?sid={sid}")
    settle(page2)
    nav(page2, "Train")
    expect(page2.get_by_role("combobox", name="Run")).to_have_value(name)
    expect(page2.locator("p").filter(has_text=re.compile(rf"finished {STEPS} steps in")).first).to_be_visible(
        timeout=TRAINING_DEADLINE_MS)
    done_after = time.perf_counter() - closed_at
    assert re.search(rf"[?&]sid={sid}", page2.url)
    settle(page2)
    # its checkpoint is this session's trained model
    sidebar_box = page2.locator("[data-testid='stSidebar']").get_by_role("combobox", name="Model")
    page2.get_by_role("button", name="Open in the Attention explorer").click()
    page2.wait_for_url(re.compile(r"/attention"))
    settle(page2)
    expect(sidebar_box).to_have_value(f"{name} (trained)")
    assert not errors2 and not page2.locator("[data-testid='stException']").count(), errors2
    ctx2.close()
    print(f"\nclosed at step {at_close} of {STEPS}; found done from a new tab {done_after:.1f} s later")


def test_a_students_tabs_count_as_one_student(browser, tiny_zoo, tmp_path):
    """Issue 29, defect 10, in a real browser against its own `streamlit run app.py`: the server
    sets a cookie on every browser, so three fresh tabs (three sessions, three ?sid=) of one
    student share one limit of 2 trainings; another student's first run then waits before the
    first student's queued one."""
    import shutil

    from scripts.load_test import StreamlitServer

    from tfviz.runs.store import SqliteRunStore

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    shutil.copy(tiny_zoo["tiny-coref"], folder / "tiny-coref.safetensors")
    empty = tmp_path / "no-models"
    empty.mkdir()
    env = {"TFVIZ_CHECKPOINT_DIR": str(folder), "TFVIZ_MAX_JOBS": "1", "TFVIZ_JOBS_PER_SESSION": "2",
           "TFVIZ_MODELS_DIR": str(empty), "HF_HUB_CACHE": str(empty)}
    store = SqliteRunStore(folder / "runs" / "runs.sqlite")

    def start(page) -> None:
        page.goto("/train")
        expect(page.get_by_role("button", name="Start training")).to_be_visible()
        settle(page)
        main = page.locator("[data-testid='stMain']")
        select(page, main, "Task", "copy")
        expect(page.get_by_label("Name", exact=True)).to_have_value(re.compile(r"^copy-"))
        settle(page)
        form = page.locator(".st-key-train_form")  # the run's form (a keyed container: no st.form since issue 30)
        form.get_by_label("Steps", exact=True).fill("1000000")
        form.get_by_label("Warmup steps").fill("5")
        page.get_by_role("button", name="Start training").click()

    with StreamlitServer(env, log=tmp_path / "server.log") as server:
        a = browser.new_context(base_url=server.url, viewport={"width": 1400, "height": 900})
        b = browser.new_context(base_url=server.url, viewport={"width": 1400, "height": 900})
        try:
            for ctx in (a, b):
                ctx.set_default_timeout(DEADLINE_MS)
            tabs = [a.new_page() for _ in range(3)]
            start(tabs[0])
            expect(tabs[0].locator(CURRENT).locator("[data-testid='stProgress']")).to_contain_text(
                re.compile(r"running — step \d+"))
            start(tabs[1])
            expect(tabs[1].get_by_text(re.compile(r"queued — position 1"))).to_be_visible()
            start(tabs[2])
            expect(tabs[2].get_by_text(re.compile(
                r"Not started: you already have 2 trainings running or queued"))).to_be_visible()
            sids = {re.search(r"sid=([0-9a-f]{12})", t.url).group(1) for t in tabs}
            assert len(sids) == 3  # three sessions ...
            clients = {r["client"] for r in store.list()}
            assert len(clients) == 1 and len(next(iter(clients))) == 16  # ... of one student
            other = b.new_page()
            start(other)
            expect(other.get_by_text(re.compile(r"queued — position 1"))).to_be_visible()
            order = store.queue_order()
            assert store.get(order[0])["client"] not in clients  # before the first student's second run
            assert not any(t.locator("[data-testid='stException']").count() for t in [*tabs, other])
        finally:
            a.close()
            b.close()
            for r in store.list(active_only=True):
                store.request_stop(r["id"])
