#!/usr/bin/env bash
# The device checks of issue 21 in one run, for a machine with one CUDA GPU.
#
#   benchmarks/gpu_suite.sh [LOGDIR]      # from the repository root; logs to LOGDIR (default .)
#
# 1. gpu_check.py at Pythia-160m's shape (d = 768, 12 layers, 64k tokens, 4 sites): the measured
#    split, the cost model's predictions, and the exactness of the device statistics against the
#    CPU's float64 on the same captured rows (2 batches);
# 2. bench_memory.py: the device bytes per site, computed and measured with the CUDA allocator;
# 3. gpu_check.py at Pythia-1b's width and depth (d = 2048, 16 layers, 32k tokens; exactness on
#    1 batch);
# 4. gpu_check.py at d = 4096 with 4 layers (16k tokens, no exactness): the statistics' cost at
#    Pythia-6.9b's width against a short model.
# Uses the python3 that has torch (PYTHON overrides); the project needs no install there, only
# PYTHONPATH. Every step runs even when one before it failed; the exit status is the first failure.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${1:-.}"
mkdir -p "$LOG"
export PYTHON="${PYTHON:-python3}" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TANGENTLAB_QUIET=1
status=0
step() {  # step NAME COMMAND...: run, tee to LOG/NAME.log, remember the first failure
    local name=$1; shift
    echo "== $name: $*"
    local t0=$SECONDS
    "$@" 2>&1 | tee "$LOG/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    [ "$status" -ne 0 ] || status=$rc
}
step env bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader;
  "$PYTHON" -c "import torch, transformers, numpy; print(\"torch\", torch.__version__, \"transformers\",
  transformers.__version__, \"numpy\", numpy.__version__, \"cuda\", torch.cuda.is_available())"'
step d768 benchmarks/gpu_check.sh --exact-batches 2
step memory "$PYTHON" benchmarks/bench_memory.py
step d2048 benchmarks/gpu_check.sh --d 2048 --layers 16 --tokens 32768 --exact-batches 1
step d4096 benchmarks/gpu_check.sh --d 4096 --layers 4 --tokens 16384 --no-exactness
exit "$status"
