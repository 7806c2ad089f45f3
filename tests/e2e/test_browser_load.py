"""A small load test in CI: scripts/load_test.py with 3 concurrent browser sessions switching heads
in the Attention explorer while a training job runs, against the e2e server. Asserts no errors
(no exception box, no console error, every render within the timeout); prints p50 / p95.
The full run (20 sessions, --sweep 5,10,20,30) is documented in docs/robustness.md."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from browser_helpers import DEADLINE_MS

REPO = Path(__file__).resolve().parents[2]


def test_three_sessions_and_a_training_job_without_errors(browser, streamlit_server, timings):
    # (`browser` only for its skip/fail logic when Chromium is missing: the script starts its own)
    out = REPO / "artifacts" / "load-test-ci.json"
    proc = subprocess.run(
        [sys.executable, "scripts/load_test.py", "--url", streamlit_server.url, "--sessions", "3",
         "--duration", "6", "--think", "0.6", "--model", "tiny-coref (shipped)", "--json", str(out),
         "--timeout", str(DEADLINE_MS / 1000)],  # a render slower than the tests' deadline is an error
        cwd=REPO, capture_output=True, text=True, timeout=4 * DEADLINE_MS / 1000)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    report = json.loads(out.read_text())
    (s,) = report["results"]
    assert proc.returncode == 0 and s["errors"] == 0, s["error_samples"]
    assert s["first_render_n"] == 3 and s["switch_n"] >= 3
    assert s["training_steps_during_run"] is not None  # the job ran alongside
    timings.update(load3_switch_p50_s=s["switch_p50_s"], load3_switch_p95_s=s["switch_p95_s"],
                   load3_first_render_p95_s=s["first_render_p95_s"])


def test_every_page_under_two_sessions_without_errors(browser, streamlit_server):
    """The all-pages scenario (issue 15's class load, small): the unmeasured first visit goes to
    every page once, then two sessions switch among the pages over their websockets; no page
    shows an exception or an st.error box, none exceeds the tests' deadline, and every render is
    reported per page (the 20-session figure: docs/robustness.md)."""
    sys.path.insert(0, str(REPO / "scripts"))
    from load_test import page_names

    out = REPO / "artifacts" / "load-test-pages-ci.json"
    proc = subprocess.run(
        [sys.executable, "scripts/load_test.py", "--url", streamlit_server.url, "--client", "ws",
         "--scenario", "pages", "--sessions", "2", "--duration", "8", "--think", "0.5", "--no-train",
         "--json", str(out), "--timeout", str(DEADLINE_MS / 1000)],
        cwd=REPO, capture_output=True, text=True, timeout=6 * DEADLINE_MS / 1000)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    (s,) = json.loads(out.read_text())["results"]
    assert proc.returncode == 0 and s["errors"] == 0, s["error_samples"]
    assert s["cold_first_render_s"] is not None  # the first visit reached every page
    assert s["per_page"] and set(s["per_page"]) <= {p or "home" for p in page_names()}
    assert s["render_p50_s"] <= s["render_p95_s"] <= s["render_max_s"]
