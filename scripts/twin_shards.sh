#!/usr/bin/env bash
# Run the unfinished shards of a planted twin, JOBS at a time, under their stored configs.
#
#   scripts/twin_shards.sh WORKTREE TWIN_DIR [JOBS]
#
# JOBS (default 2, one per core): how many shards run at once, each in one process (--nproc 1).
# Shards side by side keep every core busy to the end; one shard on N processes leaves N - 1
# idle while its last simulation runs (a shard of 19 on 2 processes: about 5% of the time).
#
# WORKTREE: a git worktree of the commit the twin is pinned to (its shards' `git.commit`), with
# a `.venv` (a link to the main checkout's is enough: `ln -s ../../../.venv WORKTREE/.venv`).
# TWIN_DIR: the folder holding the shard directories (s01 ... sNN), each with its
# end_to_end.json written at that commit. Each shard without a manifest.json is resumed with
# `tangentlab validate --end-to-end --resume --shard K/N --out DIR` (no setting flag: the
# config stored in DIR), so neither the RUN the twin was read from nor a setting is needed; a
# kill loses only the simulations in flight, and running the script again continues. Each shard's
# output goes to TWIN_DIR/logs/sNN.log (ignored by git). When every shard is finished:
# `tangentlab validate merge TWIN_DIR/s*/ --out MERGED`, then
# `tangentlab validate certify MERGED --out tangentlab/claims/shipped/NAME.json` from main.
set -euo pipefail

# The records are committed: a finished shard's manifest.json records its argv, whose paths
# (the worktree's __main__.py, --out) name this machine. Rewrite them relative to the folder
# above the worktree's checkout root and the twin's (the repository root), atomically.
relative_argv() {
  [ -f "$1" ] || return 0
  python3 - "$1" "$(git -C "$twin" rev-parse --show-toplevel)" "$worktree" <<'PY'
import json, os, sys
path, repo, worktree = sys.argv[1:]
m = json.load(open(path))
def rel(a):
    for root in (worktree, repo):
        if a.startswith(root + os.sep):
            return os.path.relpath(a, root)
    return a
m["argv"] = [rel(a) for a in m.get("argv", [])]
tmp = os.path.join(os.path.dirname(path), ".manifest.json.tmp")  # hidden: git ignores it
with open(tmp, "w") as f:
    json.dump(m, f, indent=2)
os.replace(tmp, path)
PY
}

# Run one shard (its directory) under its stored config, on one process. Never fails: a shard
# that stops (or a directory that is not a shard) is reported and the others go on; the script
# exits 1 at the end if any stopped.
run_shard() {
  local dir=$1 shard log
  log="$twin/logs/$(basename "$dir").log"
  if ! shard=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['shard'])" \
      "$dir/end_to_end.json" 2>>"$log"); then
    echo "$dir: no shard's end_to_end.json there; skipped (see $log)"
    return 0
  fi
  echo "$(date -u +%H:%M:%S) shard $shard -> $dir"
  if ! (cd "$worktree" && PYTHONPATH="$worktree" HF_HUB_OFFLINE=1 .venv/bin/python -m \
      tangentlab validate --end-to-end --resume --shard "$shard" --nproc 1 --out "$dir" \
      >> "$log" 2>&1); then
    echo "shard $shard stopped; see $log"
    touch "$twin/logs/.stopped"
    return 0
  fi
  relative_argv "$dir/manifest.json" || echo "shard $shard: manifest argv not rewritten"
}

worktree=$(cd "$1" && pwd)
twin=$(cd "$2" && pwd)
jobs=${3:-2}
case $jobs in
  '' | *[!0-9]* | 0) echo "JOBS must be a positive whole number; got '$jobs'" >&2; exit 2 ;;
esac
mkdir -p "$twin/logs"  # not beside the shards: `validate status TWIN_DIR/s*/` globs no log
rm -f "$twin/logs/.stopped"
# a stopped script stops its shards, whole process group (each loses only the simulation in
# flight; run it again to go on)
trap 'trap - INT TERM; kill 0' INT TERM
shopt -s nullglob
running=0
for dir in "$twin"/s*/; do
  dir=${dir%/}
  [ -f "$dir/manifest.json" ] && continue
  run_shard "$dir" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
[ ! -e "$twin/logs/.stopped" ]
