#!/usr/bin/env bash
# Start the Ray head node of a hybridrl cluster (see docs/CLUSTER.md).
#
#   bash examples/cluster/start_head.sh
#   NUM_CPUS=32 DASHBOARD_HOST=0.0.0.0 bash examples/cluster/start_head.sh
#
# Every setting is an environment variable with a default:
#   RAY_PORT             GCS port workers join on                       (6379)
#   DASHBOARD_HOST       address the dashboard / job API listens on     (127.0.0.1: reach it with an SSH tunnel)
#   DASHBOARD_PORT       dashboard and `ray job submit` port            (8265)
#   CLIENT_PORT          Ray client server port                         (10001)
#   NUM_CPUS             logical CPUs this node offers                  (all cores, `nproc`)
#   HEAD_NUM_GPUS        GPUs this node offers to workers               (0: the head only runs the driver)
#   HEAD_LABEL           custom resource marking the head               (head)
#   OBJECT_STORE_MEMORY  object store bytes (RAY_object_store_memory is accepted as an alias)
#                        (30% of MemTotal, the seed's advice)
#   SPILL_DIR            where full object stores spill (empty: Ray's temp dir under /tmp/ray)
#   NODE_IP              --node-ip-address, when the node has several networks (empty: Ray picks)
#   RAY_BLOCK            1 = stay in the foreground (`--block`), e.g. as a container's command  (0)
set -euo pipefail

RAY_PORT="${RAY_PORT:-6379}"
DASHBOARD_HOST="${DASHBOARD_HOST:-127.0.0.1}"
DASHBOARD_PORT="${DASHBOARD_PORT:-8265}"
CLIENT_PORT="${CLIENT_PORT:-10001}"
NUM_CPUS="${NUM_CPUS:-$(nproc)}"
HEAD_NUM_GPUS="${HEAD_NUM_GPUS:-0}"
HEAD_LABEL="${HEAD_LABEL:-head}"

# shellcheck source=examples/cluster/ray_node.sh
source "$(dirname "${BASH_SOURCE[0]}")/ray_node.sh"

args=(
    --head
    --port="${RAY_PORT}"
    --dashboard-host="${DASHBOARD_HOST}"
    --dashboard-port="${DASHBOARD_PORT}"
    --ray-client-server-port="${CLIENT_PORT}"
    --resources="{\"${HEAD_LABEL}\": 1}"
    --num-cpus="${NUM_CPUS}"
    --num-gpus="${HEAD_NUM_GPUS}"
)
ray_start "${args[@]}"
