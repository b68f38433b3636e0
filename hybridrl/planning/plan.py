"""``hybridrl plan``: the run's command line in, the memory plan, its verdict and the changes that make it fit
out; no Ray, no weights."""

from __future__ import annotations

import psutil

from hybridrl.cluster.pools import ResourcePoolManager
from hybridrl.config.loader import load_config
from hybridrl.config.schema import Config
from hybridrl.planning.fixes import Fix, fixes, planner
from hybridrl.planning.memory import GB, Device, Plan
from hybridrl.planning.shape import model_shape


def device_for(cfg: Config, gpu_memory_gb: float | None) -> Device:
    """A GPU of ``gpu_memory_gb`` per rank, or without one this host's memory shared by the run's workers."""
    if gpu_memory_gb is not None:
        return Device("cuda", gpu_memory_gb * GB)
    workers = ResourcePoolManager.from_config(cfg.resource_pool).total().get("GPU", 1.0)
    return Device("cpu", psutil.virtual_memory().total / max(workers, 1.0))


def make_plan(overrides: list[str], yaml_path: str | None, gpu_memory_gb: float | None) -> tuple[Plan, list[Fix]]:
    """The run's plan and, when it does not fit, the changes that make it fit (cheapest first)."""
    # The config's own checks, not the pre-flight's: the plan is for a run elsewhere, whose weights and engine
    # need not be on this machine.
    cfg = load_config(overrides, yaml_path=yaml_path)
    shape = model_shape(cfg.actor_rollout_ref.model)
    plan_of = planner(shape, device_for(cfg, gpu_memory_gb))
    plan = plan_of(cfg)
    return plan, ([] if plan.fits else fixes(overrides, yaml_path, plan_of, shape))
