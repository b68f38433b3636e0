"""Connect to a Ray cluster, or start a local one, and say what it has."""

from __future__ import annotations

import logging
import math
import os
import re
import socket
from dataclasses import dataclass
from typing import Any

import ray
from ray._private.internal_api import memory_summary  # no public API reports spilling

from hybridrl.cluster.errors import ClusterConnectError
from hybridrl.config.schema import RayConfig

logger = logging.getLogger(__name__)

# Ray starts a Python worker per CPU for a local cluster's first driver, before it knows the job's runtime
# environment, which every run sets (env_vars): none of them can host the run's actors, and each costs ~0.37
# CPU-seconds and a process (two idle ones beside a 1-worker run on 2 CPUs, measured 2026-12-07).
NO_IDLE_PRESTART = {"prestart_worker_first_driver": False}


@dataclass
class ClusterInfo:
    started_here: bool
    resources: dict[str, float]
    dashboard_url: str | None

    @property
    def gpus(self) -> float:
        return self.resources.get("GPU", 0.0)


def _fmt(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in sorted(resources.items()) if not k.startswith("node:") and "memory" not in k}
    parts = [f"{k}={v:g}" for k, v in shown.items()]
    for key in ("memory", "object_store_memory"):
        if key in resources:
            parts.append(f"{key}={resources[key] / 2**30:.1f}GiB")
    return ", ".join(parts)


def connect(ray_cfg: RayConfig, cpus_needed: float) -> ClusterInfo:
    """Join ``ray_cfg.address`` or start a local cluster big enough for every worker.

    A local cluster may be given more logical CPUs than the machine has cores: the workers of a tiny
    run mostly wait on each other, and this lets a 2-core laptop host 4 ranks.
    """
    runtime_env: dict[str, Any] = {"env_vars": _worker_env(dict(ray_cfg.env_vars or {}))}
    if ray_cfg.working_dir:
        runtime_env["working_dir"] = ray_cfg.working_dir
    if ray_cfg.address:
        _check_reachable(ray_cfg.address, ray_cfg.connect_timeout_s)
        ctx = ray.init(
            address=ray_cfg.address, runtime_env=runtime_env, logging_level=logging.WARNING, log_to_driver=True
        )
        started = False
    else:
        num_cpus = ray_cfg.num_cpus or max(os.cpu_count() or 1, math.ceil(cpus_needed))
        kwargs: dict[str, Any] = dict(
            # "local": always a new cluster of our own. With no address Ray joins the newest cluster that
            # `ray start` left on this machine (or RAY_ADDRESS), someone else's on a shared machine.
            address="local",
            num_cpus=num_cpus,
            include_dashboard=ray_cfg.include_dashboard,
            runtime_env=runtime_env,
            logging_level=logging.WARNING,
            log_to_driver=True,
            # Ray binds the metrics endpoint to every interface for any node address it accepts (it refuses
            # a loopback node address): the only way to keep it off the network is not to start it.
            _system_config={"enable_metrics_collection": bool(ray_cfg.metrics_export), **NO_IDLE_PRESTART},
        )
        if ray_cfg.include_dashboard:
            kwargs["dashboard_host"] = ray_cfg.dashboard_host
        if ray_cfg.object_store_memory:
            kwargs["object_store_memory"] = int(ray_cfg.object_store_memory)
        ctx = ray.init(**kwargs)
        started = True
    info = ClusterInfo(started, dict(ray.cluster_resources()), getattr(ctx, "dashboard_url", None) or None)
    logger.info("Ray cluster %s: %s", "started locally" if started else f"at {ray_cfg.address}", _fmt(info.resources))
    if info.dashboard_url:
        logger.info("Ray dashboard: http://%s", info.dashboard_url)
    return info


def _check_reachable(address: str, timeout_s: float) -> None:
    """One TCP connect to the head before ``ray.init``, whose own retries take about 14 minutes to give up
    on an address where nothing listens. ("auto" finds a local cluster by itself.)"""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterConnectError(
            f"trainer.ray.address={address} is not host:port (or ray://host:port, or auto); fix the address."
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterConnectError(
            f"Nothing answers at trainer.ray.address={address} within {timeout_s:.0f} s ({exc.strerror or exc}): "
            f"start the cluster there (ray start --head) or fix the address (trainer.ray.connect_timeout_s)."
        ) from None


def disconnect() -> None:
    if ray.is_initialized():
        ray.shutdown()  # ends a cluster this process started; only detaches from an existing one


def _worker_env(user_env: dict[str, str]) -> dict[str, str]:
    """Environment for every worker: quiet libraries, the driver's NCCL_*/GLOO_* settings
    (NCCL_DEBUG, NCCL_DEBUG_FILE, NCCL_SOCKET_IFNAME, ...) and ``trainer.ray.env_vars``."""
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "TRANSFORMERS_VERBOSITY": "error",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    for key, value in os.environ.items():
        if key.startswith(("NCCL_", "GLOO_", "TORCH_DISTRIBUTED", "TORCH_NCCL")):
            env[key] = value
    env.update({str(k): str(v) for k, v in user_env.items()})
    return env


def object_store_stats() -> dict[str, float]:
    """Object-store use and spilling across the cluster (one GCS query: call it every few steps)."""
    # The run's own cluster by its GCS address: without one, Ray looks for "the" local cluster and fails
    # when another Ray cluster runs on the same machine ("Found multiple active Ray instances").
    text = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    stats: dict[str, float] = {}
    used = re.search(r"Plasma memory usage (\d+) MiB, (\d+) objects", text)
    if used:
        stats["ray/object_store_used_mb"] = float(used.group(1))
        stats["ray/object_store_objects"] = float(used.group(2))
    spilled = re.search(r"Spilled (\d+) MiB, (\d+) objects", text)
    stats["ray/spilled_mb"] = float(spilled.group(1)) if spilled else 0.0
    stats["ray/spilled_objects"] = float(spilled.group(2)) if spilled else 0.0
    restored = re.search(r"Restored (\d+) MiB, (\d+) objects", text)
    stats["ray/restored_objects"] = float(restored.group(2)) if restored else 0.0
    return stats
