#!/usr/bin/env python
"""Submit a PPO run as a Ray job to a 3-node cluster started on this machine, with split placement.

A head and two worker nodes (each its own raylet) advertise different custom resources; the actor
pool asks for `actor_group`, the critic pool for `critic_group`. The job's driver connects with
`trainer.ray.address=auto`, and `placement.json` shows which node each rank landed on.

    .venv/bin/python examples/cluster/local_job_demo.py [OUTPUT_DIR]
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from ray.cluster_utils import Cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "outputs/hybridrl/job_demo").resolve()
    port = free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": True, "dashboard_port": port},
    )
    try:
        actor = cluster.add_node(num_cpus=2, resources={"worker": 1, "actor_group": 2})
        critic = cluster.add_node(num_cpus=1, resources={"worker": 1, "critic_group": 1})
        cluster.wait_for_nodes()
        print(f"cluster {cluster.address}: actor node {actor.node_id[:8]}, critic node {critic.node_id[:8]}")
        ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
        cmd = [
            ray_cli,
            "job",
            "submit",
            "--address",
            f"http://127.0.0.1:{port}",
            "--",
            sys.executable,
            "-m",
            "hybridrl.trainer.main_ppo",
            "trainer.ray.address=auto",
            f"trainer.output_dir={out}",
            "trainer.total_steps=3",
            "trainer.progress_bar=false",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "critic.ppo_micro_batch_size_per_gpu=16",
            "resource_pool.pools={actor_pool: {GPU: 2, actor_group: 2}, critic_pool: {GPU: 1, critic_group: 1}}",
            "resource_pool.mapping.actor_rollout=actor_pool",
            "resource_pool.mapping.ref=actor_pool",
            "resource_pool.mapping.critic=critic_pool",
        ]
        print("$", " ".join(cmd))
        for _ in range(30):  # the head's job agent may still be starting: Ray says "try again later"
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if "No available agent" not in proc.stderr + proc.stdout:
                break
            time.sleep(2)
        sys.stdout.write(proc.stdout[-4000:] + proc.stderr[-2000:])
        if proc.returncode == 0:
            placement = json.loads((out / "placement.json").read_text())
            for group, info in placement.items():
                nodes = sorted({rank["node_id"][:8] for rank in info["ranks"]})
                print(f"group {group} (pool {info['pool']}): node(s) {', '.join(nodes)}")
        return proc.returncode
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
