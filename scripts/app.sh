#!/usr/bin/env bash
# Start tfviz: bash scripts/app.sh [streamlit options, e.g. --server.port 8502]
# Creates .venv and installs requirements.txt when needed (fast when nothing changed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/_env.sh

ensure_venv
# The dev requirements include the runtime ones: a venv set up by test.sh is good enough.
dev_hash="$(files_hash requirements-dev.txt requirements.txt)"
if [ "$(cat .venv/.tfviz-dev.sha256 2>/dev/null)" != "$dev_hash" ]; then
    ensure_requirements runtime requirements.txt
fi

say "Starting tfviz; open http://localhost:8501 (or the port you passed). Ctrl+C stops it."
# the Lesson's steps computed in the background at start (ui.lesson.warm_up): no cold waits in class
export TFVIZ_LESSON_WARM="${TFVIZ_LESSON_WARM:-1}"
exec .venv/bin/streamlit run app.py "$@"
