#!/usr/bin/env bash
# Issue 46's CUDA runs inside one short device lease (15 minutes of device time in all, at most
# 10 minutes a command): two parts, each one command, run back to back while the machine is warm.
#
#   bash scripts/gpu_lease.sh bench   the targets, alone on the machine (launch-bound figures need
#                                     idle CPUs): tfviz.bench graphs (window vs flash, eager and
#                                     CUDA graphs), tfviz.bench model (nanoGPT eager / compiled /
#                                     CUDA graphs, GPT-2 small eager / compiled, recording)
#   bash scripts/gpu_lease.sh train   GPT-2 small's shape trained on the stdlib corpus (alone, for
#                                     TRAIN_S seconds), then the gpu-marked tests, the recurrent
#                                     presets on CUDA and scripts/flex_probe.py side by side
#
# Every part is time-boxed; logs and docs/bench/*_cuda.* land in $OUT. Packages the device image
# lacks (streamlit, plotly and theirs) are installed from .whl/ when it travels (carry: [".whl"]).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-artifacts/lease}"; mkdir -p "$OUT" docs/bench
S="$OUT/summary.txt"
note() { echo "[$(date +%T)] $*" | tee -a "$S"; }
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl >"$OUT/pip.log" 2>&1 && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader >>"$S" 2>&1
python3 -c 'import torch,transformers;print("torch",torch.__version__,"cuda",torch.version.cuda,"transformers",transformers.__version__)' >>"$S" 2>&1
python3 -c 'import streamlit,plotly;print("streamlit",streamlit.__version__,"plotly",plotly.__version__)' >>"$S" 2>&1
note "part ${1:-bench}; nproc $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg)"

case "${1:-bench}" in
bench)
    timeout -k 5 "${GRAPHS_S:-120}" python3 -m tfviz.bench graphs >docs/bench/graphs_cuda.txt 2>"$OUT/graphs.err"
    note "bench graphs rc=$? $(tail -1 docs/bench/graphs_cuda.txt)"
    timeout -k 5 "${MODEL_S:-180}" python3 -m tfviz.bench model --device cuda >docs/bench/model_cuda.txt 2>"$OUT/model.err"
    note "bench model rc=$? $(tail -1 docs/bench/model_cuda.txt)"
    ;;
train)
    timeout -k 10 "${GPT2_S:-230}" python3 -m tfviz.bench gpt2text --seconds "${TRAIN_S:-120}" \
        --out docs/bench/gpt2_text_cuda.txt >"$OUT/gpt2text.log" 2>&1
    note "gpt2text rc=$? $(grep -m1 '^trained' docs/bench/gpt2_text_cuda.txt 2>/dev/null)"
    (
        timeout -k 5 "${PRESETS_S:-120}" python3 -m tfviz.bench presets --names copy-lstm reverse-lstm \
            coref-lstm coref-rnn lm-gru --parallel --out docs/bench/presets_recurrent_cuda.txt >"$OUT/presets.log" 2>&1
        note "recurrent presets rc=$? $(tail -1 docs/bench/presets_recurrent_cuda.txt 2>/dev/null)"
        timeout -k 5 "${PROBE_S:-60}" python3 scripts/flex_probe.py >docs/bench/flex_probe_cuda.txt 2>&1
        note "flex probe rc=$?"
    ) &
    timeout -k 5 "${GPU_S:-180}" python3 -m pytest -m gpu --ignore=tests/e2e -q -rs -p no:cacheprovider >"$OUT/gpu_tests.log" 2>&1
    note "gpu-marked tests rc=$? $(tail -1 "$OUT/gpu_tests.log")"
    wait
    ;;
esac
tar czf "$OUT/results.tgz" docs/bench/*_cuda* "$OUT"/*.log "$OUT"/*.err 2>/dev/null
note "end"
