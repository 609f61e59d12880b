#!/usr/bin/env bash
# GPU check (prepared for a machine with a CUDA GPU; nothing in `make test` depends on it).
#
# A random-initialized GPT-NeoX the size of Pythia-160m (d = 768, 12 layers), 4 sites, 64k
# tokens: prints tokens/s of a plain forward+backward and of a full measure pass, their ratio
# (target <= 1.2), peak GPU memory, and the device statistics against the CPU's float64 on the
# same captured rows. Exits non-zero when CUDA is absent (1), any result is not finite (2) or the
# device statistics leave their tolerance (3). Runs in well under 5 minutes on one modern GPU (a time limit of 290 s is set).
#
#   benchmarks/gpu_check.sh                 # from the repository root, with the project's venv
#   PYTHON=python3 benchmarks/gpu_check.sh
#   benchmarks/gpu_check.sh --allow-cpu --tokens 2048 --seq-len 128 --batch 4 --d 64 --layers 4 --vocab 512
#                                           # smoke test of the code path on a CPU
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TANGENTLAB_QUIET=1
exec timeout 290 "$PYTHON" benchmarks/gpu_check.py "$@"
