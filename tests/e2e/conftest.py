"""End-to-end fixtures: the real app in a subprocess, viewed in a real headless Chromium.

- `streamlit_server` (session): `streamlit run app.py` on a free port from the repo root, logging to
  artifacts/streamlit-server.log; records the cold start (launch → /_stcore/health answers "ok").
- `browser` (session): Playwright's sync Chromium using the system binary (Debian's `chromium`),
  never a downloaded one. Missing binary: skipped with the reason, or a failure when CI is set.
- `page`: a fresh tab per test. After the test body, the test FAILS if the page shows a Streamlit
  exception box or the browser logged a console error / uncaught page error. A screenshot is
  saved to artifacts/screenshots/<test name>.png either way.
- `open_page(page, path)`: goes to `path` and waits until the script run has finished.
Every wait is bounded by browser_helpers.DEADLINE_MS (Playwright's `expect` too) and waits for an
event (browser_helpers explains which).
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest
from browser_helpers import DEADLINE_MS, IGNORED_CONSOLE_ERRORS, READY, SCREENSHOTS, track_runs
from playwright.sync_api import expect

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"
CHROMIUM = os.environ.get("TFVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # needed as root (containers, CI)
    "--disable-background-networking",  # the test machine may be offline: no update/metrics calls
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
EXCEPTION_BOX = "[data-testid='stException']"
SERVER_START_TIMEOUT_S = DEADLINE_MS / 1000
expect.set_options(timeout=DEADLINE_MS)  # Playwright's default is 5 s: too short under load

# Timings shared with the tests (and written to artifacts/e2e-timings.json at the end).
TIMINGS: dict[str, float] = {}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, url: str, started_at: float, cold_start_s: float, log: Path) -> None:
        self.url, self.started_at, self.cold_start_s, self.log = url, started_at, cold_start_s, log


@pytest.fixture(scope="session")
def local_models(tmp_path_factory) -> Iterator[Path | None]:
    """A tiny random GPT-2 folder (tests/hf_folders.py: save_pretrained + tokenizer.json) under a
    temp TFVIZ_MODELS_DIR, set before the server starts, so its picker lists a *local* model (the
    Hugging Face cache pointed at an empty folder). None without ``transformers``."""
    try:
        import hf_folders
        import transformers  # noqa: F401
    except ImportError:
        yield None
        return
    root = tmp_path_factory.mktemp("models")
    hf_folders.build("gpt2", root / "models" / "gpt2-tiny")
    env = {"TFVIZ_MODELS_DIR": str(root / "models"), "HF_HUB_CACHE": str(root / "hub")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield root / "models" / "gpt2-tiny"
    for k, v in old.items():  # the rest of the session sees the machine's own folders again
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def streamlit_server(browser, tiny_zoo, local_models) -> Iterator[Server]:
    # `browser` first: without Chromium the browser tests skip (or fail in CI) at once, before
    # the tiny zoo is trained and the server started for nothing.
    ARTIFACTS.mkdir(exist_ok=True)
    port = _free_port()
    log = ARTIFACTS / "streamlit-server.log"
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1",
           "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as log_file:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with code {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.perf_counter() - started > SERVER_START_TIMEOUT_S:
                pytest.fail(f"streamlit not healthy after {SERVER_START_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read().decode().strip() == "ok":
                        break
            except OSError:
                pass
            time.sleep(0.1)
        cold = time.perf_counter() - started
        TIMINGS["server_cold_start_s"] = round(cold, 2)
        yield Server(url, started, cold, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        why = os.environ.get("TFVIZ_CHROMIUM_ERROR", "not installed")
        msg = (f"Chromium not found at {CHROMIUM} ({why}); browser tests need it: "
               "`sudo apt-get install -y chromium` or set TFVIZ_CHROMIUM, or run `bash scripts/test.sh`")
        if in_ci():
            pytest.fail("CI=true and " + msg, pytrace=False)
        pytest.skip(msg)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


class BrowserErrors:
    """Console errors and uncaught exceptions a page reported while a test ran."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def console(self, msg) -> None:
        full = f"{msg.text} ({msg.location.get('url', '')})"
        if msg.type == "error" and not any(p.search(full) for p in IGNORED_CONSOLE_ERRORS):
            self.messages.append(f"console.error: {full}")

    def page_error(self, exc) -> None:
        self.messages.append(f"uncaught page error: {exc}")


_ERRORS = pytest.StashKey[BrowserErrors]()
_PAGE = pytest.StashKey[object]()


@pytest.fixture
def page(browser, streamlit_server: Server, request: pytest.FixtureRequest):
    context = browser.new_context(base_url=streamlit_server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(DEADLINE_MS)
    pg = context.new_page()
    track_runs(pg)
    errors = BrowserErrors()
    pg.on("console", errors.console)
    pg.on("pageerror", errors.page_error)
    request.node.stash[_ERRORS] = errors
    request.node.stash[_PAGE] = pg
    try:
        yield pg
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid.split("::", 1)[-1])
        try:
            pg.screenshot(path=str(SCREENSHOTS / f"{Path(request.node.path).stem}__{name}.png"), full_page=True)
        finally:
            context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """After a browser test's body passes, fail it on an exception box or a console error."""
    result = yield
    pg = item.stash.get(_PAGE, None)
    if pg is not None:
        problems = list(item.stash[_ERRORS].messages)
        boxes = pg.locator(EXCEPTION_BOX)
        problems += [f"Streamlit exception box: {t.strip()[:2000]}" for t in boxes.all_inner_texts()]
        if problems:
            raise AssertionError("the page reported errors:\n  " + "\n  ".join(problems))
    return result


@pytest.fixture
def timings() -> dict[str, float]:
    """Named durations in seconds; printed in the summary and saved to artifacts/e2e-timings.json."""
    return TIMINGS


@pytest.fixture
def open_page() -> Callable[..., float]:
    """open_page(page, path="/") -> seconds until the page's script run finished."""

    def _open(pg, path: str = "/") -> float:
        t0 = time.perf_counter()
        pg.goto(path)
        pg.wait_for_selector(READY, timeout=DEADLINE_MS)
        return time.perf_counter() - t0

    return _open


def pytest_sessionfinish(session: pytest.Session) -> None:
    if TIMINGS:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "e2e-timings.json").write_text(json.dumps(TIMINGS, indent=2) + "\n")


def pytest_terminal_summary(terminalreporter) -> None:
    if TIMINGS:
        terminalreporter.write_line("e2e timings: " + ", ".join(f"{k}={v}" for k, v in TIMINGS.items()))
    if not os.access(CHROMIUM, os.X_OK) and not in_ci():
        terminalreporter.write_line(
            f"WARNING: browser (e2e) tests were SKIPPED: no Chromium at {CHROMIUM}. "
            "Install it with `sudo apt-get install -y chromium`.", red=True, bold=True)
