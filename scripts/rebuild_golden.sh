#!/usr/bin/env bash
# Rebuild tests/empirical/data/golden_* on this machine, deliberately (see that folder's README).
#
# The golden results.csv must come from the statistics path *before* issue 21 (commit 9e7a7bf),
# measured on the weights that today's code trains for the `tiny_runs` fixture on this machine.
# Steps: train the fixture with today's code (exactly as the test session does), measure it with
# the 9e7a7bf code from a temporary worktree, write the gzipped results, the weights' SHA-256 and
# this machine's fingerprint (test_collect_exact.build_fingerprint).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORK=$(mktemp -d)
OLD=9e7a7bf
git worktree add -q --detach "$WORK/old" "$OLD"
trap 'git worktree remove --force "$WORK/old"; rm -rf "$WORK"' EXIT
export HF_HUB_OFFLINE=1 TANGENTLAB_QUIET=1
PYTHONPATH=. "$PY" - "$WORK" <<'PY'
import sys
from pathlib import Path
from tangentlab.empirical.training.train import train_model
root = Path(sys.argv[1]) / "runs"
for arch in ("decoder", "encoder"):
    train_model(arch, root / arch, preset="tiny", device="cpu", seed=0)
PY
PYTHONPATH="$WORK/old" "$PY" - "$WORK" <<'PY'
import sys
from pathlib import Path
from tangentlab.empirical.measurement.protocol import measure_trajectory
assert "old" in __import__("tangentlab").__file__
w = Path(sys.argv[1])
TEST_MEASURE = {"n_batches": 8, "batch_size": 4, "sample_rows": 512, "n_boot": 50,
                "causal_checkpoints": 2, "causal_batches": 2, "causal_controls": 3}
for arch in ("decoder", "encoder"):
    measure_trajectory(w / "runs" / arch, w / "m" / arch, device="cpu", seed=0,
                       overrides=TEST_MEASURE)
PY
for a in decoder encoder; do
  gzip -9 -n -c "$WORK/m/$a/results.csv" > "tests/empirical/data/golden_results_$a.csv.gz"
done
PYTHONPATH=. "$PY" - "$WORK" <<'PY'
import hashlib, importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("tce", "tests/empirical/measurement/test_collect_exact.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
out = {arch: {p.parent.name: hashlib.sha256(p.read_bytes()).hexdigest()
              for p in sorted((Path(sys.argv[1]) / "runs" / arch / "checkpoints")
                              .glob("*/model.safetensors"))}
       for arch in ("decoder", "encoder")}
out["built_with"] = m.build_fingerprint()
Path("tests/empirical/data/golden_weights.json").write_text(json.dumps(out, indent=1) + "\n")
print("golden rebuilt for", out["built_with"])
PY
