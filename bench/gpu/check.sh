#!/usr/bin/env bash
# hybridrl's GPU check: one run of at most about 5.5 minutes on one H200, no network, no Ray.
#   env     versions, the device, bf16 matmul peak, which attention kernels exist
#   probe   packed attention fwd+bwd: dense block-diagonal mask vs per-document loop vs torch varlen_attn
#   tests   the project's tests that touch CUDA
#   memory  bench/memory.py --device cuda --workers 1 on a Qwen2.5-0.5B shape (NCCL, world size 1)
#   train   GRPO actor update: plain loop vs hybridrl's padded / packed / prefix-shared paths (tok/s, MFU, memory)
#   gen     hybridrl's hf rollout engine vs plain model.generate (tok/s vs the decode bandwidth bound)
# From the repository root (the checkout is the project's source; .whl/ holds the wheels of the pure-Python
# packages the GPU machine lacks: bash bench/gpu/fetch_wheels.sh, on a machine with network):
#   bash bench/gpu/check.sh                                                   # on the GPU machine, $OUT set
#   GPU_CHECK_SMOKE=1 PYTHON=.venv/bin/python bash bench/gpu/check.sh         # tiny shapes on the CPU
# Every step runs under its own timeout, cut to what is left of GPU_CHECK_TOTAL_S (320 s; later steps keep a
# reserve, so train and gen run even when earlier steps are slow). $OUT gets 8 files: summary.md,
# results.json, env.log, tests.log, memory.log, train.log, gen.log, profile.txt.
# Knobs: GPU_CHECK_TOTAL_S, GPU_CHECK_SHAPE (1.5b), GPU_CHECK_PROFILE (1: one profiled call per train path
# and per generation engine, when the time allows), GPU_CHECK_SKIP (steps to leave out, e.g. "memory tests").
set -u
T_START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # bench/gpu
ROOT=$(cd "$HERE/../.." && pwd)                     # the repository root
cd "$ROOT"
PY=${PYTHON:-python3}
SMOKE=${GPU_CHECK_SMOKE:-0}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
SITE=$WORK/site
if [ "$SMOKE" = 1 ]; then DEV=cpu; else DEV=cuda; fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# One rank, one node, no network: NCCL's bootstrap stays on the loopback interface.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
TOTAL_S=${GPU_CHECK_TOTAL_S:-320}
SKIP=" ${GPU_CHECK_SKIP:-} "
PROFILE=${GPU_CHECK_PROFILE:-1}
PROFILE_ARGS=()
if [ "$PROFILE" = 1 ]; then PROFILE_ARGS=(--profile-file "$OUT/profile.txt"); fi

elapsed() { echo $(( $(date +%s) - T_START )); }
# cap LIMIT_S [RESERVE_S]: the step's limit, cut to what is left of TOTAL_S once RESERVE_S is kept for later steps
cap() {
  local left=$(( TOTAL_S - $(elapsed) - ${2:-0} ))
  if [ "$left" -lt 0 ]; then left=0; fi
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

# run_step NAME LIMIT_S LOG CMD...: CMD under its own timeout (its whole process group), appended to LOG.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local t0 rc
  t0=$(date +%s)
  if [[ "$SKIP" == *" $name "* ]] || [ "$limit" -lt 5 ]; then
    echo "step=$name rc=skipped elapsed_s=0 limit_s=$limit" | tee -a "$WORK/steps.txt"
    return
  fi
  echo "== [$(elapsed)s] $name (limit ${limit}s)"
  echo "== [$(elapsed)s] $name: $*" >> "$log"
  timeout -k 5 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  echo "step=$name rc=$rc elapsed_s=$(( $(date +%s) - t0 )) limit_s=$limit" | tee -a "$WORK/steps.txt"
  if [ "$rc" != 0 ]; then tail -n 15 "$log" | cut -c1-300; fi
}

echo "hybridrl GPU check: smoke=$SMOKE device=$DEV python=$("$PY" -c 'import sys; print(sys.version.split()[0])') out=$OUT"

# -- 0. the missing pure-Python packages (omegaconf, tensordict and theirs), from .whl/ ---------------------
WHEELS=("$ROOT"/.whl/*.whl)
if [ ! -e "${WHEELS[0]}" ]; then
  echo "no wheels in $ROOT/.whl (run bash bench/gpu/fetch_wheels.sh where there is network)" | tee -a "$OUT/env.log"
fi
if [ "$SMOKE" = 1 ] && "$PY" -c 'import omegaconf, tensordict' 2> /dev/null; then
  # This python has them: PYTHONPATH cannot put a site dir after its own packages, so use its own, and only
  # prove that the wheels install.
  export PYTHONPATH="$ROOT"
  run_step wheels "$(cap 30)" "$OUT/env.log" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$WORK/wheel-check" "${WHEELS[@]}"
else
  export PYTHONPATH="$SITE:$ROOT"
  mkdir -p "$SITE"
  run_step wheels "$(cap 30)" "$OUT/env.log" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" "${WHEELS[@]}"
  if ! grep -q "step=wheels rc=0" "$WORK/steps.txt"; then  # no pip: a wheel is a zip file
    for w in "${WHEELS[@]}"; do run_step unzip "$(cap 15)" "$OUT/env.log" "$PY" -m zipfile -e "$w" "$SITE"; done
  fi
fi
echo "PYTHONPATH=$PYTHONPATH" >> "$OUT/env.log"

# -- 1. environment and packed attention kernels ---------------------------------------------------------
if command -v nvidia-smi > /dev/null; then
  run_step nvidia-smi "$(cap 10)" "$OUT/env.log" nvidia-smi
else
  echo "nvidia-smi: not found" >> "$OUT/env.log"
fi
run_step env "$(cap 30 230)" "$OUT/env.log" "$PY" "$HERE"/env_check.py --device "$DEV" --out "$WORK/env.json"
if [ "$SMOKE" = 1 ]; then PROBE_ARGS=(--tokens 512 --iters 2); else PROBE_ARGS=(); fi
run_step probe "$(cap 20 230)" "$OUT/env.log" "$PY" "$HERE"/varlen_probe.py "${PROBE_ARGS[@]}" --out "$WORK/probe.json"

# -- 2. the project's tests that touch CUDA (those marked gpu need Ray: collected only) --------------------
CUDA_TESTS=()
for f in tests/observability/perf/test_device_peak.py tests/observability/perf/test_utilization.py tests/engine/test_dtypes.py \
  tests/generation/engines/test_hf.py tests/generation/engines/test_sglang.py; do
  if [ -f "$f" ]; then CUDA_TESTS+=("$f"); else echo "tests: $f is gone" >> "$OUT/tests.log"; fi
done
PYTEST_ARGS=(-p no:cacheprovider -q -rfEs)
if "$PY" -c 'import pytest_timeout' 2> /dev/null; then PYTEST_ARGS+=(--timeout 30); fi
mapfile -t GPU_MARKED < <(grep -rlE "pytest\.mark\.gpu|mark\.gpu\b" tests --include='*.py' 2> /dev/null)
if [ "${#GPU_MARKED[@]}" -gt 0 ]; then
  run_step tests-gpu-marker "$(cap 20 220)" "$WORK/gpu-marker.log" "$PY" -m pytest -p no:cacheprovider -q -m gpu --co \
    "${GPU_MARKED[@]}"
  cat "$WORK/gpu-marker.log" >> "$OUT/tests.log"
  grep -E "collected|deselected|^ERROR|rror:" "$WORK/gpu-marker.log" | tail -n 20 > "$WORK/gpu-marker-summary.txt"
else
  echo "tests: none marked gpu" >> "$OUT/tests.log"
fi
if [ "${#CUDA_TESTS[@]}" -gt 0 ]; then
  run_step tests "$(cap 40 220)" "$OUT/tests.log" "$PY" -m pytest "${PYTEST_ARGS[@]}" \
    --junitxml="$WORK/junit-cuda.xml" "${CUDA_TESTS[@]}"
fi

# -- 3. the project's memory bench on the device ---------------------------------------------------------
if [ "$SMOKE" = 1 ]; then
  MEM_ARGS=(--device cpu --workers 1 --algorithms grpo ppo --hidden 32 --layers 2 --heads 4 --kv-heads 2 --ffn 64)
else
  MEM_ARGS=(--device cuda --workers 1 --algorithms grpo ppo --hidden 896 --layers 24 --heads 14 --kv-heads 2 --ffn 4864)
fi
run_step memory "$(cap 60 220)" "$OUT/memory.log" "$PY" bench/memory.py "${MEM_ARGS[@]}"

# -- 4. training throughput and MFU (paths in the order d,b,b0,a,c: the bench starts none past its budget) --
TRAIN_LIMIT=$(cap 160 60)  # 60 s kept for gen
TRAIN_BUDGET=$(( TRAIN_LIMIT > 40 ? TRAIN_LIMIT - 25 : TRAIN_LIMIT / 2 ))
if [ "$SMOKE" = 1 ]; then
  TRAIN_ARGS=(--device cpu --shape tiny --prompts 2 --n 4 --prompt-min 48 --prompt-max 96 --resp-min 8
    --resp-max 48 --micro 4 --max-tokens 320 --warmup 1 --iters 1 --min-path-s 5)
else
  TRAIN_ARGS=(--device cuda --shape "${GPU_CHECK_SHAPE:-1.5b}" --warmup 1 --iters 3 --min-path-s 22)
fi
run_step train "$TRAIN_LIMIT" "$OUT/train.log" "$PY" "$HERE"/train_bench.py "${TRAIN_ARGS[@]}" \
  --budget-s "$TRAIN_BUDGET" "${PROFILE_ARGS[@]}" --out "$WORK/train.json"

# -- 5. generation ---------------------------------------------------------------------------------------
GEN_LIMIT=$(cap 75)  # 60 s kept for it by the steps before; up to 75 when they left time
if [ "$SMOKE" = 1 ]; then
  GEN_ARGS=(--device cpu --shape tiny --prompts 8 --n 4 --prompt-min 8 --prompt-max 80 --new-tokens 8 --repeats 2
    --profile-tokens 4)
else
  GEN_ARGS=(--device cuda --shape "${GPU_CHECK_SHAPE:-1.5b}" --prompts 64 --new-tokens 128 --repeats 2)
fi
run_step gen "$GEN_LIMIT" "$OUT/gen.log" "$PY" "$HERE"/gen_bench.py "${GEN_ARGS[@]}" \
  --budget-s $(( GEN_LIMIT > 20 ? GEN_LIMIT - 10 : GEN_LIMIT / 2 )) "${PROFILE_ARGS[@]}" --out "$WORK/gen.json"

# -- results ---------------------------------------------------------------------------------------------
echo "step=total rc=0 elapsed_s=$(elapsed) limit_s=$TOTAL_S" >> "$WORK/steps.txt"
for f in "$OUT"/*.log "$OUT"/*.txt; do  # the returned files are capped in size
  if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 8000000 ]; then tail -c 8000000 "$f" > "$f.tmp" && mv "$f.tmp" "$f"; fi
done
timeout 15 "$PY" "$HERE"/summarize.py --work "$WORK" --out "$OUT" || echo "summarize failed"
echo "== done in $(elapsed)s; files in \$OUT ($(ls "$OUT" | wc -l)): $(ls "$OUT" | tr '\n' ' ')"
rm -rf "$WORK"
