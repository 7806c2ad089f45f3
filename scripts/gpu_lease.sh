#!/usr/bin/env bash
# scripts/gpu_check.sh inside one short device lease (the device tool gives 15 minutes in all):
# every part under a time box, the CPU-heavy suite beside the GPU tests and presets, then the
# timed benchmarks alone on the machine (launch-bound figures need idle CPUs). Logs and the
# docs/bench/*_cuda.* files land in $OUT (one tarball). The gpu-marked tests compile FlexAttention
# for every variant (~4 min on an H100 while the suite runs beside them; 120 s was too short). Wheels for packages the device image lacks
# (streamlit, plotly, ...) are installed from .whl/ when it travels. Time boxes: SUITE_S, GPU_S, ...
set -u
OUT="${OUT:-artifacts/lease}"; mkdir -p "$OUT" artifacts docs/bench
S="$OUT/summary.txt"; : >"$S"
note() { echo "[$(date +%T)] $*" | tee -a "$S"; }
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        >"$OUT/pip.log" 2>&1 && export PYTHONPATH=/tmp/site
fi
export PYTHON=python3 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$S" 2>&1
python3 -c 'import torch,streamlit,plotly,transformers;print("torch",torch.__version__,"cuda",torch.version.cuda,"streamlit",streamlit.__version__,"transformers",transformers.__version__)' >>"$S" 2>&1
note "start; nproc $(nproc)"
(
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout -k 10 "${SUITE_S:-280}" python3 -m pytest -m "not e2e and not gpu" \
        --ignore=tests/e2e -n "${JOBS:-8}" -q -p no:cacheprovider >"$OUT/suite.log" 2>&1
    note "suite (non-browser, CUDA visible, -n ${JOBS:-8}) rc=$? $(tail -1 "$OUT/suite.log")"
) &
timeout -k 5 "${GPU_S:-300}" python3 -m pytest -m gpu --ignore=tests/e2e -q -rs -p no:cacheprovider >"$OUT/gpu_tests.log" 2>&1
note "gpu-marked tests rc=$? $(tail -1 "$OUT/gpu_tests.log")"
timeout -k 5 "${PRESETS_S:-120}" bash scripts/gpu_check.sh presets >"$OUT/presets.log" 2>&1
note "presets rc=$?"
timeout -k 5 "${DDP_S:-120}" bash scripts/gpu_check.sh ddp >"$OUT/ddp.log" 2>&1
note "ddp rc=$?"
wait
note "suite done; benches alone"
timeout -k 5 "${ATT_S:-100}" python3 -m tfviz.bench attention --device cuda --dtype bfloat16 \
    --csv docs/bench/attention_cuda.csv >docs/bench/attention_cuda.txt 2>&1
note "bench attention rc=$?"
timeout -k 5 "${MODEL_S:-110}" python3 -m tfviz.bench model --device cuda >docs/bench/model_cuda.txt 2>&1
note "bench model rc=$?"
timeout -k 5 "${PROBE_S:-60}" python3 scripts/flex_probe.py >"$OUT/flex_probe.txt" 2>&1
note "flex probe rc=$?"
tar czf "$OUT/results.tgz" docs/bench/*_cuda* artifacts/*.log "$OUT"/*.log 2>/dev/null
note "end"
