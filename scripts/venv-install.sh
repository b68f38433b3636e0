#!/usr/bin/env bash
# venv-install.sh [--no-bytecode] VENV ARGS...: `pip install ARGS` into the virtualenv VENV, done by uv where uv can
# be had. --no-bytecode: no bytecode compiled at install (uv only): for a virtualenv whose users write their own.
#
# Why uv: on a fresh 2-core machine it builds .venv in 31 s and .venv-vllm in 37 s, where pip takes 78 s and
# 106 s side by side (2026-12-07), which is most of CI's set-up. It reads what pip is configured with here
# (`pip config list`: find-links, extra index URLs, constraints, timeout), so both take the same wheels, the
# local CPU build of torch included, and considers every index as pip does. Where uv cannot be installed or
# fails, pip does the install as before.
set -euo pipefail
bytecode=(--compile-bytecode)
if [ "${1:-}" = --no-bytecode ]; then
    bytecode=()
    shift
fi
venv=$1
shift
py=$venv/bin/python

uv_args=(--quiet --python "$py" "${bytecode[@]}" --index-strategy unsafe-best-match)
while IFS= read -r line; do
    key=${line%%=*}
    value=${line#*=}
    value=${value#\'}
    value=${value%\'}
    case ${key##*.} in
        find-links) for v in $value; do uv_args+=(--find-links "$v"); done ;;
        index-url) uv_args+=(--index-url "$value") ;;
        extra-index-url) for v in $value; do uv_args+=(--extra-index-url "$v"); done ;;
        constraint) for v in $value; do uv_args+=(--constraint "$v"); done ;;
        default-timeout) export UV_HTTP_TIMEOUT=${value%.*} ;;
    esac
done < <("$py" -m pip config list 2>/dev/null || true)

if "$py" -m pip install --quiet uv >/dev/null 2>&1 && "$venv/bin/uv" pip install "${uv_args[@]}" "$@"; then
    exit 0
fi
echo "venv-install: uv is not available or failed; installing with pip" >&2
"$py" -m pip install --quiet --upgrade pip
exec "$py" -m pip install --quiet "$@"
