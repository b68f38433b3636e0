#!/usr/bin/env bash
# Download, on a machine with network, the pure-Python wheels the GPU machine lacks (it has torch, transformers,
# numpy, pyyaml, ... but not omegaconf, tensordict or peft) into .whl/ at the repository root, an ignored folder that
# travels with the checkout. bench/gpu/check.sh installs them there with pip --no-index.
#   bash bench/gpu/fetch_wheels.sh            # from the repository root; PYTHON=<python with pip> to choose
# Versions: what the project's virtualenv has (so the GPU runs what CI tests), else the pins below.
# omegaconf 2.4 vendors its antlr4 runtime (omegaconf/vendor/antlr4): antlr4-python3-runtime is only fetched
# for an omegaconf whose metadata still requires it (2.3). Ray is not needed: the check drives roles directly.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
DEST=${WHEEL_DIR:-.whl}

# version NAME DEFAULT: the version installed in $PY's environment, else DEFAULT
version() { "$PY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: print(sys.argv[2])" "$1" "$2"; }

OMEGACONF=$(version omegaconf 2.4.0)
PACKAGES=(
  "omegaconf==$OMEGACONF"
  "tensordict==$(version tensordict 0.15.3)"
  "pyvers==$(version pyvers 0.2.3)"          # tensordict's
  "cloudpickle==$(version cloudpickle 3.1.3)"  # tensordict's
  "peft==$(version peft 0.21.2)"              # LoRA (hybridrl.models.lora, imported by the training engine)
  "accelerate==$(version accelerate 1.16.0)"  # peft's
)
NEEDS_ANTLR=$("$PY" -c "import importlib.metadata as m
try: print(any(r.startswith('antlr4') for r in (m.requires('omegaconf') or [])))
except m.PackageNotFoundError: print(True)")
if [ "$NEEDS_ANTLR" = True ] || [[ "$OMEGACONF" == 2.3* ]]; then
  PACKAGES+=("antlr4-python3-runtime==$(version antlr4-python3-runtime 4.9.3)")
fi

mkdir -p "$DEST"
for spec in "${PACKAGES[@]}"; do
  name=${spec%%==*}
  # a wheel already here for this name and version: keep it (wheel file names use _ for - and any case)
  norm=$(echo "$name" | tr '[:upper:]-' '[:lower:]_')
  ver=${spec##*==}
  if ls "$DEST" 2>/dev/null | tr '[:upper:]' '[:lower:]' | grep -q "^${norm}-${ver}-"; then
    echo "have $spec"
    continue
  fi
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$DEST" "$spec"
  echo "got  $spec"
done
# older versions of the same packages would be installed too (pip takes every file given): drop them
for f in "$DEST"/*.whl; do
  keep=0
  for spec in "${PACKAGES[@]}"; do
    norm=$(echo "${spec%%==*}" | tr '[:upper:]-' '[:lower:]_')
    case "$(basename "$f" | tr '[:upper:]' '[:lower:]')" in "${norm}-${spec##*==}-"*) keep=1 ;; esac
  done
  if [ "$keep" = 0 ]; then echo "removing $(basename "$f") (not in the list)"; rm -f "$f"; fi
done
ls -l "$DEST"
echo "total: $(du -sh "$DEST" | cut -f1) in $DEST"
