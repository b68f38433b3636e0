# shellcheck shell=bash
# Sourced by start_head.sh and start_worker.sh: what both node types share (the object-store size and
# the /dev/shm check, spilling, node IP, foreground mode) and the `ray start` call itself.
SPILL_DIR="${SPILL_DIR:-}"
NODE_IP="${NODE_IP:-}"
RAY_BLOCK="${RAY_BLOCK:-0}"

# The seed suggests an object store of about 30% of the node's memory.
mem_total_kb="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
OBJECT_STORE_MEMORY="${OBJECT_STORE_MEMORY:-${RAY_object_store_memory:-$((mem_total_kb * 1024 * 30 / 100))}}"

# The object store lives in /dev/shm. Docker's default /dev/shm is 64 MiB: start the container with
# --shm-size larger than the object store, or Ray falls back to slower disk-backed memory.
shm_bytes="$(df -k --output=size /dev/shm 2>/dev/null | tail -n 1 | tr -d ' ' || true)"
if [[ -n "${shm_bytes}" && "${shm_bytes}" =~ ^[0-9]+$ ]] && ((shm_bytes * 1024 < OBJECT_STORE_MEMORY)); then
    echo "warning: /dev/shm ($((shm_bytes / 1024 / 1024)) GiB) is smaller than the object store" \
        "($((OBJECT_STORE_MEMORY / 1024 / 1024 / 1024)) GiB); raise docker run --shm-size." >&2
fi

# ray_start ARGS...: `ray start` with the node type's ARGS plus the shared settings above.
ray_start() {
    local args=("$@" --object-store-memory="${OBJECT_STORE_MEMORY}")
    [[ -n "${SPILL_DIR}" ]] && args+=(--object-spilling-directory="${SPILL_DIR}")
    [[ -n "${NODE_IP}" ]] && args+=(--node-ip-address="${NODE_IP}")
    [[ "${RAY_BLOCK}" == "1" ]] && args+=(--block)
    echo "+ ray start ${args[*]}"
    ray start "${args[@]}"
}
