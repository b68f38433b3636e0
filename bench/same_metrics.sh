#!/usr/bin/env bash
# The default run (10 steps, validation every 5) at commit BASE (default: main's parent) and at the working
# tree, on 1 and 2 workers; then bench/same_metrics.py compares each pair. Usage:
#   bash bench/same_metrics.sh [BASE_COMMIT]
#   EXTRA="algorithm.adv_estimator=gae ..." bash bench/same_metrics.sh 5e99490   # overrides on both sides
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:-HEAD~1}
PY=${PYTHON:-.venv/bin/python}
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"  # absolute, the virtualenv's own path
WORK=${WORK:-$(mktemp -d)}
git worktree add --detach "$WORK/base" "$BASE" >/dev/null
trap 'git worktree remove --force "$WORK/base"' EXIT
ARGS="trainer.total_steps=10 trainer.test_freq=5 trainer.save_freq=-1 trainer.save_hf=false trainer.resume_mode=disable ${EXTRA:-}"
status=0
for workers in 1 2; do
  for side in base head; do
    src=$([ "$side" = base ] && echo "$WORK/base" || pwd)
    (cd "$src" && PYTHONPATH="$src" "$PY" -m hybridrl.trainer.main_ppo $ARGS \
      resource_pool.pools.global_pool.GPU="$workers" trainer.output_dir="$WORK/$side-$workers" >"$WORK/$side-$workers.log" 2>&1)
  done
  "$PY" bench/same_metrics.py "$WORK/base-$workers" "$WORK/head-$workers" || status=1
done
exit $status
