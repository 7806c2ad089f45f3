"""Runs outlive the server (issue 23), in a real browser against a real `streamlit run app.py`:
start a training on the Train page, `kill -9` the server and the worker training the run, start
the server again, open the same `?sid=` URL: the run is listed, continues from its last
checkpoint, and finishes at exactly its number of steps.

Its own server (not the session's): it is killed on purpose, in its own checkpoint folder.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from browser_helpers import CURRENT, DEADLINE_MS, TRAINING_DEADLINE_MS, select, settle
from conftest import REPO, _free_port
from playwright.sync_api import expect

SID = "0123456789ab"
STEPS = 1000


def _start(folder: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    # no model folders: the session's server fixture points TFVIZ_MODELS_DIR at a tiny GPT-2 in
    # this process's environment, and its fine-tune panel has a second "Batch size"
    empty = folder.parent / "no-models"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TFVIZ_CHECKPOINT_DIR": str(folder),
           "TFVIZ_CHECKPOINT_SECONDS": "0.5", "TFVIZ_RUN_LEASE_S": "3",
           "TFVIZ_MODELS_DIR": str(empty), "HF_HUB_CACHE": str(empty)}
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless",
                                 "true", "--server.port", str(port), "--server.address", "127.0.0.1",
                                 "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE_MS / 1000
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return proc, url
        except OSError:
            time.sleep(0.1)


def _open_train(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(DEADLINE_MS)
    page = context.new_page()
    page.goto(f"{url}/train?sid={SID}")
    expect(page.get_by_role("button", name="Start training")).to_be_visible()
    settle(page)
    return context, page


def test_a_run_survives_kill_9_of_the_server_and_its_worker(browser, tiny_zoo, tmp_path) -> None:
    from tfviz.runs.store import SqliteRunStore

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    shutil.copy(tiny_zoo["tiny-coref"], folder / "tiny-coref.safetensors")
    log = tmp_path / "server.log"
    server, url = _start(folder, log)
    try:
        context, page = _open_train(browser, url)
        main = page.locator("[data-testid='stMain']")
        select(page, main, "Task", "copy")
        expect(page.get_by_label("Name", exact=True)).to_have_value(re.compile(r"^copy-"))  # the preset
        settle(page)
        form = page.locator(".st-key-train_form")  # the run's form, not fine-tuning's (issue 30:
        # no longer an st.form, whose Enter started a run)
        form.get_by_label("Steps", exact=True).fill(str(STEPS))
        form.get_by_label("Warmup steps").fill("5")
        form.get_by_label("Batch size", exact=True).fill("8")
        page.get_by_role("button", name="Start training").click()
        expect(page.locator(CURRENT).locator("[data-testid='stProgress']")).to_contain_text(
            re.compile(rf"running — step \d+ of {STEPS}"))
        context.close()
        store = SqliteRunStore(folder / "runs" / "runs.sqlite")
        (run,) = store.list(owner=SID)
        deadline = time.monotonic() + DEADLINE_MS / 1000
        while not (store.get(run["id"])["checkpoint"] and Path(store.get(run["id"])["checkpoint"]).is_file()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        rec = store.get(run["id"])
        server.kill()
        os.kill(int(rec["worker"].split(":")[1]), signal.SIGKILL)
        server.wait(30)
        killed_at = store.get(run["id"])["step"]
        assert killed_at < STEPS
    finally:
        server.kill()
    server, url = _start(folder, log)  # the restart
    try:
        context, page = _open_train(browser, url)
        expect(page.get_by_role("combobox", name="Run")).to_have_value(run["name"])  # listed again
        expect(page.get_by_text(re.compile(rf"finished {STEPS} steps in"))).to_be_visible(
            timeout=TRAINING_DEADLINE_MS)
        rec = store.get(run["id"])
        assert rec["state"] == "done" and rec["step"] == STEPS and rec["attempts"] == 2
        context.close()
    finally:
        server.terminate()
        server.wait(30)
