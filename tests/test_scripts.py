"""scripts/test.sh's Chromium install, with a stand-in apt-get on PATH (nothing is installed):
it waits for another apt's lock instead of giving up, and when Chromium really cannot be
installed it says so clearly, and the browser tests fail under CI=true."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LOCKED = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)"

# A stand-in apt-get: logs its arguments; "busy" times fail on the lock, then "install" makes a
# fake chromium (or, with FAKE_APT_FAIL set, fails as on a machine without the package).
FAKE_APT = f"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_APT_LOG"
n=$(wc -l < "$FAKE_APT_LOG")
if [ "$n" -le "${{FAKE_APT_BUSY:-0}}" ]; then echo "{LOCKED}" >&2; exit 100; fi
if [ -n "${{FAKE_APT_FAIL:-}}" ]; then echo "E: Unable to locate package chromium" >&2; exit 100; fi
if [[ " $* " == *" install "* ]]; then printf '#!/bin/sh\\n' > "$TFVIZ_CHROMIUM"; chmod +x "$TFVIZ_CHROMIUM"; fi
"""


def run_test_sh(tmp_path: Path, *pytest_args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in {"apt-get": FAKE_APT, "sudo": '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n'}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "apt.log"
    full_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_APT_LOG": str(log),
                "TFVIZ_CHROMIUM": str(tmp_path / "chromium"), "TFVIZ_APT_WAIT_S": "120",
                "TFVIZ_APT_RETRY_S": "0.2", "CI": "",
                "TFVIZ_TEST_LOG": str(tmp_path / "pytest.log"), **env}  # not the outer run's log
    proc = subprocess.run(["bash", "scripts/test.sh", *pytest_args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=600)
    return proc, log.read_text().splitlines() if log.exists() else []


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="needs the project's .venv")
def test_waits_for_another_apt_then_installs(tmp_path):
    proc, calls = run_test_sh(tmp_path, "-q", "tests/test_config.py", FAKE_APT_BUSY="2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(calls) == 3 and all("install -y -q chromium" in c for c in calls), calls
    assert all("DPkg::Lock::Timeout=120" in c for c in calls), calls  # apt's own wait, too
    assert "apt is busy" in proc.stderr and "chromium installed" in proc.stderr
    assert "Chromium is missing" not in proc.stderr


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="needs the project's .venv")
def test_no_chromium_is_a_clear_message_and_a_failure_in_ci(tmp_path):
    proc, calls = run_test_sh(tmp_path, "-q", "tests/e2e/test_browser_home.py", FAKE_APT_FAIL="1", CI="true")
    assert [c.split()[-1] for c in calls] == ["chromium", "-q"]  # install, then update (fails too)
    assert "Chromium is missing" in proc.stderr and "Unable to locate package chromium" in proc.stderr
    assert proc.returncode != 0 and "CI=true and Chromium not found" in proc.stdout
