#!/usr/bin/env bash
# Start a Ray worker node and join it to the head (see docs/CLUSTER.md).
#
#   HEAD=10.0.0.1 bash examples/cluster/start_worker.sh                               # 8-GPU node in gpu_group
#   HEAD=10.0.0.1 GPU_GROUP_LABEL=critic_group bash examples/cluster/start_worker.sh  # a node of the critic group
#   HEAD=10.0.0.1 NUM_GPUS=0 CPU_LABEL=cpu_intensive bash examples/cluster/start_worker.sh  # a CPU-only node
#
# The custom resources a node advertises decide which pools can land on it: a pool that asks for
# `gpu_group: 8` only goes to nodes started with a gpu_group resource.
#
# Every setting is an environment variable with a default:
#   HEAD                 head node address (required)
#   RAY_PORT             head GCS port                                   (6379)
#   NUM_GPUS             GPUs this node offers                           (counted with nvidia-smi; 0 without it)
#   NUM_CPUS             logical CPUs this node offers                   (all cores, `nproc`)
#   WORKER_LABEL         custom resource marking every worker node       (worker)
#   GPU_GROUP_LABEL      label of this node's GPU group, empty for none  (gpu_group)
#   GPU_GROUP_COUNT      amount of that label                            (NUM_GPUS, the seed: 8)
#   CPU_LABEL            label of a CPU node group, empty for none       (empty; e.g. cpu_intensive)
#   CPU_LABEL_COUNT      amount of that label                            (1)
#   OBJECT_STORE_MEMORY  object store bytes (RAY_object_store_memory is accepted as an alias)
#                        (30% of MemTotal, the seed's advice)
#   SPILL_DIR            where a full object store spills (empty: Ray's temp dir under /tmp/ray)
#   NODE_IP              --node-ip-address, when the node has several networks (empty: Ray picks)
#   RAY_BLOCK            1 = stay in the foreground (`--block`), e.g. as a container's command  (0)
set -euo pipefail

HEAD="${HEAD:?set HEAD to the head node address, e.g. HEAD=10.0.0.1}"
RAY_PORT="${RAY_PORT:-6379}"
if [[ -z "${NUM_GPUS:-}" ]]; then
    NUM_GPUS=0
    if command -v nvidia-smi >/dev/null 2>&1; then
        NUM_GPUS="$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU' || true)"
    fi
fi
NUM_CPUS="${NUM_CPUS:-$(nproc)}"
WORKER_LABEL="${WORKER_LABEL:-worker}"
GPU_GROUP_LABEL="${GPU_GROUP_LABEL-gpu_group}"
GPU_GROUP_COUNT="${GPU_GROUP_COUNT:-${NUM_GPUS}}"
CPU_LABEL="${CPU_LABEL:-}"
CPU_LABEL_COUNT="${CPU_LABEL_COUNT:-1}"

# shellcheck source=examples/cluster/ray_node.sh
source "$(dirname "${BASH_SOURCE[0]}")/ray_node.sh"

# Custom resources, as JSON: {"worker": 1, "gpu_group": 8} on the seed's GPU nodes.
resources="\"${WORKER_LABEL}\": 1"
if [[ -n "${GPU_GROUP_LABEL}" && "${NUM_GPUS}" -gt 0 ]]; then
    resources+=", \"${GPU_GROUP_LABEL}\": ${GPU_GROUP_COUNT}"
fi
if [[ -n "${CPU_LABEL}" ]]; then
    resources+=", \"${CPU_LABEL}\": ${CPU_LABEL_COUNT}"
fi

args=(
    --address="${HEAD}:${RAY_PORT}"
    --resources="{${resources}}"
    --num-cpus="${NUM_CPUS}"
    --num-gpus="${NUM_GPUS}"
)
ray_start "${args[@]}"
