#!/usr/bin/env bash
# Submit a hybridrl PPO run to a running cluster and follow its logs (see docs/CLUSTER.md).
#
#   bash examples/cluster/submit_job.sh                                  # on the head node, or through an SSH tunnel
#   HEAD=10.0.0.1 bash examples/cluster/submit_job.sh trainer.total_steps=20
#
# Extra arguments are dotted config overrides. Run it from anywhere: it submits the repository
# root as the job's working directory, so the driver finds CONFIG by its relative path.
#
# Every setting is an environment variable with a default:
#   HEAD            dashboard address (127.0.0.1: the dashboard listens there by default; from another
#                   machine open a tunnel first: ssh -N -L 8265:127.0.0.1:8265 user@head)
#   DASHBOARD_PORT  dashboard / job API port                              (8265)
#   CONFIG          YAML merged over the defaults                          (examples/cluster/split_placement.yaml)
#   SUBMISSION_ID   job id, for `ray job logs|status|stop`                (hybridrl-<date>-<time>)
#   FOLLOW          1 = follow the logs after submitting                  (1)
set -euo pipefail

HEAD="${HEAD:-127.0.0.1}"
DASHBOARD_PORT="${DASHBOARD_PORT:-8265}"
CONFIG="${CONFIG:-examples/cluster/split_placement.yaml}"
SUBMISSION_ID="${SUBMISSION_ID:-hybridrl-$(date +%Y%m%d-%H%M%S)}"
FOLLOW="${FOLLOW:-1}"
ADDRESS="http://${HEAD}:${DASHBOARD_PORT}"

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# --working-dir uploads the repository (files listed in .gitignore, such as .venv/ and outputs/,
# are left out). The driver runs on the head node with trainer.ray.address=auto; every node
# needs hybridrl and its dependencies installed (the docker image has them).
ray job submit \
    --address="${ADDRESS}" \
    --submission-id="${SUBMISSION_ID}" \
    --working-dir=. \
    --no-wait \
    -- python -m hybridrl.trainer.main_ppo --config "${CONFIG}" "$@"

echo "Submitted ${SUBMISSION_ID}. Later:"
echo "  ray job logs   --address=${ADDRESS} -f ${SUBMISSION_ID}"
echo "  ray job status --address=${ADDRESS} ${SUBMISSION_ID}"
echo "  ray job stop   --address=${ADDRESS} ${SUBMISSION_ID}"

if [[ "${FOLLOW}" == "1" ]]; then
    # Ctrl-C stops following, not the job.
    ray job logs --address="${ADDRESS}" --follow "${SUBMISSION_ID}"
fi
