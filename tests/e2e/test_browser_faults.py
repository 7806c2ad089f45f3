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

STEPS = 200


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
    expect(live).to_contain_text(re.compile(r"running — step \d+"))
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
