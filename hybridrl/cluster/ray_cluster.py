"""Connect to a Ray cluster, or start a local one, and say what it has."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


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


def connect(ray_cfg: Any, cpus_needed: float) -> ClusterInfo:
    """Join ``ray_cfg.address`` or start a local cluster big enough for every worker.

    A local cluster may be given more logical CPUs than the machine has cores: the workers of a tiny
    run mostly wait on each other, and this lets a 2-core laptop host 4 ranks.
    """
    import ray

    runtime_env = {"env_vars": _worker_env()}
    if ray_cfg.address:
        ctx = ray.init(address=ray_cfg.address, runtime_env=runtime_env, logging_level=logging.WARNING,
                 log_to_driver=True)
        started = False
    else:
        num_cpus = ray_cfg.num_cpus or max(os.cpu_count() or 1, math.ceil(cpus_needed))
        kwargs: dict[str, Any] = dict(
            num_cpus=num_cpus, include_dashboard=ray_cfg.include_dashboard,
            runtime_env=runtime_env, logging_level=logging.WARNING, log_to_driver=True,
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


def disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()  # ends a cluster this process started; only detaches from an existing one


def _worker_env() -> dict[str, str]:
    env = {"TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error",
           "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    for key, value in os.environ.items():  # communication debugging reaches every worker
        if key.startswith("NCCL_") or key.startswith("GLOO_") or key.startswith("TORCH_DISTRIBUTED"):
            env[key] = value
    return env
