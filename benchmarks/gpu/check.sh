#!/usr/bin/env bash
# lopd's GPU check on an offline CUDA machine, from the repo root, with the kit from
# make_kit.py in KIT (default .gpu). Every stage has its own time limit, so a failing stage
# still leaves the others' results. Results and OUT/check.log go to OUT (default runs/gpu-check).
#
#   bash benchmarks/gpu/check.sh [KIT] [OUT] [STAGES]
#
# STAGES (default all): prepare resume determinism tests bench_smollm2 prepare_qwen bench_qwen3_4b
set -u
KIT=${1:-.gpu}
OUT=${2:-runs/gpu-check}
STAGES=${3:-prepare resume determinism tests bench_smollm2 prepare_qwen bench_qwen3_4b}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 LOPD_CACHE=/tmp/lopd-cache \
       HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
stage() {  # stage NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    [[ " $STAGES " == *" $name "* ]] || return 0
    local started=$SECONDS
    timeout "$limit" "$@" >/tmp/stage.log 2>&1
    local rc=$?
    { echo "=== stage $name: rc=$rc in $((SECONDS - started)) s"; cat /tmp/stage.log; } >>"$OUT/check.log"
    echo "stage $name: rc=$rc in $((SECONDS - started)) s"
    tail -n 4 /tmp/stage.log
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
} 2>&1 | tee "$OUT/check.log"
stage prepare 90 python3 benchmarks/gpu/prepare.py --kit "$KIT" --site /tmp/site
# its own process: cuBLAS reads the workspace setting when its first handle is made
stage resume 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k deterministic
stage determinism 90 python3 benchmarks/gpu/determinism.py --out "$OUT/determinism.json"
stage tests 170 python3 -m pytest -q -p no:cacheprovider --timeout 120 \
    tests/test_gpu.py tests/test_trainer.py tests/test_config.py
stage bench_smollm2 100 python3 benchmarks/bench_step.py --model smollm2-135m --adapter "" \
    --threads 8 --results-dir "$OUT" --name step_time_h200_smollm2
stage prepare_qwen 60 python3 benchmarks/gpu/prepare.py --kit "$KIT" --site /tmp/site \
    --skip-wheels --qwen3-4b /tmp/qwen3-4b-shape
stage bench_qwen3_4b 170 python3 benchmarks/bench_step.py --model /tmp/qwen3-4b-shape \
    --adapter "" --dtype auto --tasks 4 --group 8 --micro-batch 8 --max-steps 2 \
    --max-new-tokens 128 --threads 8 --results-dir "$OUT" --name step_time_h200_qwen3_4b_shape
