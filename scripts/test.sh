#!/usr/bin/env bash
# Run every test: bash scripts/test.sh [pytest options, e.g. -m "not e2e" or -k home]
# Creates .venv, installs requirements-dev.txt when needed, installs Debian's chromium for the
# browser tests when it is missing, then runs pytest. With CI=true a missing chromium fails the run;
# otherwise the browser (e2e) tests are skipped with the reason printed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_env.sh

ensure_venv
ensure_requirements dev requirements-dev.txt requirements.txt

CHROMIUM="${TFVIZ_CHROMIUM:-/usr/bin/chromium}"
install_chromium() {
    command -v apt-get >/dev/null 2>&1 || { echo "apt-get not found (not Debian/Ubuntu)"; return 1; }
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
        echo "not root and no sudo"; return 1
    fi
    say "Installing chromium with apt-get (for the browser tests; about a minute)"
    apt_get install -y -q chromium && return 0
    say "apt-get install failed; running apt-get update and retrying"
    apt_get update -q && apt_get install -y -q chromium && return 0
    echo "apt-get install -y chromium failed (see apt's messages above)"; return 1
}
if [ ! -x "$CHROMIUM" ]; then
    if why="$(install_chromium)" && [ -x "$CHROMIUM" ]; then
        say "chromium installed at $CHROMIUM"
    else
        export TFVIZ_CHROMIUM_ERROR="${why:-installed, but $CHROMIUM is still missing}"
        printf '\033[1;31m%s\033[0m\n' \
            "###################################################################" \
            "# Chromium is missing ($CHROMIUM): $TFVIZ_CHROMIUM_ERROR" \
            "# The browser (e2e) tests will be SKIPPED (they FAIL when CI=true)." \
            "# Fix: sudo apt-get install -y chromium   (or set TFVIZ_CHROMIUM)" \
            "###################################################################" >&2
    fi
fi

LOG="${TFVIZ_TEST_LOG:-artifacts/pytest.log}"
mkdir -p "$(dirname "$LOG")"
color=(); [ -t 1 ] && color=(--color=yes)
set +e
.venv/bin/python -m pytest "${color[@]}" "$@" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
summary="$(sed 's/\x1b\[[0-9;]*m//g' "$LOG" \
    | grep -E '(passed|failed|error|skipped|deselected|no tests ran)' | tail -n 1 | sed 's/^=* *//; s/ *=*$//')"
say "pytest: ${summary:-no summary line (see $LOG)} (exit code $rc)"
exit "$rc"
