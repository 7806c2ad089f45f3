#!/usr/bin/env bash
# The GPU check, one command on any CUDA machine:   bash scripts/gpu_check.sh [PART ...]
#
#   tests    the whole non-browser suite with CUDA visible (CPU-heavy part in parallel with
#            pytest-xdist when it is installed), then the `gpu`-marked tests one at a time
#   bench    python -m tfviz.bench attention (bf16, to n = 131072) and model (nanoGPT and GPT-2
#            small shapes, MFU), writing docs/bench/attention_cuda.{csv,json,txt} and model_cuda.txt
#   presets  trains every "bigger (GPU)" preset (all at once) -> docs/bench/presets_cuda.txt
#   ddp      torchrun --nproc_per_node=N -m tfviz train … with nccl, N = the GPUs visible (1 at least)
#
# Default: all four. Each benchmark file starts with the date, the GPU's name and torch's version.
# Environment: PYTHON (default .venv/bin/python, else python3), GPU_CHECK_JOBS (pytest workers for
# the CPU-heavy part; default: half the cores, at most 8), PYTEST_ARGS (extra pytest arguments).
# Exit code: the number of parts that failed (a test failed, a command failed or a target missed).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY="${PYTHON:-}"
[ -n "$PY" ] || { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
say() { printf '\033[1m[gpu_check]\033[0m %s\n' "$*" >&2; }

if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    say "no CUDA GPU visible to $PY (torch.cuda.is_available() is False): nothing to check here"
    exit 2
fi
GPUS="$("$PY" -c 'import torch; print(torch.cuda.device_count())')"
say "$("$PY" -c 'import torch; print(f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, torch {torch.__version__}, CUDA {torch.version.cuda}")')"

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(tests bench presets ddp)
failed=()
mkdir -p docs/bench artifacts

run_tests() {
    local jobs="${GPU_CHECK_JOBS:-$(( $(nproc) / 2 > 8 ? 8 : $(nproc) / 2 ))}" xdist=() rc=0
    if [ "$jobs" -gt 1 ] && "$PY" -c 'import xdist' 2>/dev/null; then xdist=(-n "$jobs"); fi
    say "non-browser suite with CUDA visible ${xdist[*]:+(pytest ${xdist[*]})}"
    # shellcheck disable=SC2086
    "$PY" -m pytest -m "not e2e and not gpu" --ignore=tests/e2e "${xdist[@]}" -q ${PYTEST_ARGS:-} 2>&1 | tee artifacts/gpu_check_suite.log
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    say "gpu-marked tests (one process: they share the GPU)"
    # shellcheck disable=SC2086
    "$PY" -m pytest -m gpu --ignore=tests/e2e -q -rs ${PYTEST_ARGS:-} 2>&1 | tee artifacts/gpu_check_gpu_tests.log
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    return $rc
}

run_bench() {
    local rc=0
    say "attention benchmark (bf16) -> docs/bench/attention_cuda.*"
    "$PY" -m tfviz.bench attention --device cuda --dtype bfloat16 --csv docs/bench/attention_cuda.csv \
        2>&1 | tee docs/bench/attention_cuda.txt
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    grep -q '^  FAIL' docs/bench/attention_cuda.txt && rc=1
    say "model benchmark -> docs/bench/model_cuda.txt"
    "$PY" -m tfviz.bench model --device cuda 2>&1 | tee docs/bench/model_cuda.txt
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    grep -q 'FAIL' docs/bench/model_cuda.txt && rc=1
    return $rc
}

run_presets() {
    say "bigger (GPU) presets, all at once -> docs/bench/presets_cuda.txt"
    "$PY" -m tfviz.bench presets --parallel --out docs/bench/presets_cuda.txt || return 1
    ! grep -q -E '^  FAIL|ERROR' docs/bench/presets_cuda.txt
}

run_ddp() {
    # World size = the GPUs visible: nccl across N >= 2, and world size 1 on a single GPU (the same
    # code path: init_process_group, DistributedSampler, rank-0 checkpoint).
    local out; out="$(mktemp -d)"
    say "ddp: torchrun --nproc_per_node=$GPUS -m tfviz train (nccl)"
    "$PY" -m torch.distributed.run --standalone --nproc_per_node="$GPUS" -m tfviz train --task copy \
        --task-arg arch=decoder --d-model 64 --heads 4 --layers 2 --pos rope --steps 200 \
        --batch-size $((32 * GPUS)) --lr 3e-3 --warmup 20 --device cuda --out "$out/ddp" \
        && "$PY" -m tfviz info "$out/ddp"
}

for part in "${parts[@]}"; do
    case "$part" in
        tests) run_tests || failed+=(tests) ;;
        bench) run_bench || failed+=(bench) ;;
        presets) run_presets || failed+=(presets) ;;
        ddp) run_ddp || failed+=(ddp) ;;
        *) say "unknown part '$part' (tests, bench, presets, ddp)"; failed+=("$part") ;;
    esac
done
if [ ${#failed[@]} -eq 0 ]; then say "all green: ${parts[*]}"; else say "FAILED: ${failed[*]}"; fi
exit ${#failed[@]}
