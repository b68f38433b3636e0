"""One worker process: joins its group's torch.distributed group and hosts the roles mapped to it.

A plain class, testable without Ray; ``hybridrl.cluster.worker_group`` wraps it as a Ray actor.
Roles on the same pool live in the same process (colocated) and share its device and mesh.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import torch
from torch.distributed.device_mesh import init_device_mesh

from hybridrl.checkpoint.dcp_io import load_engine, save_engine
from hybridrl.checkpoint.manager import role_dir
from hybridrl.checkpoint.shards import load_rng, save_rng
from hybridrl.config.choices import Device
from hybridrl.config.schema import Config
from hybridrl.engine import dist as hdist
from hybridrl.engine.context import DataLayout, WorkerContext
from hybridrl.logging_utils import quiet_libraries
from hybridrl.observability.perf.utilization import ProcessSampler
from hybridrl.observability.tracing import CallResult, Span, SpanRecorder, synchronize
from hybridrl.protocol import Batch
from hybridrl.workers.actor_rollout import ActorRolloutRole
from hybridrl.workers.context import EngineRole, Role
from hybridrl.workers.critic import CriticRole
from hybridrl.workers.host_memory import return_freed_memory, trim_freed_memory
from hybridrl.workers.ref import RefRole
from hybridrl.workers.reward_model import RewardModelRole
from hybridrl.workers.rollout import RolloutRole

logger = logging.getLogger(__name__)

#: The concurrency group of the calls that run beside a worker's current call (every other call runs one at
#: a time, in order): ``WorkerGroup`` gives each worker one thread for it.
CONTROL = "control"

# How each role is built from the whole config: the role picks its own sections.
ROLE_FACTORIES: dict[str, Callable[[Config, WorkerContext], Role]] = {
    "actor_rollout": ActorRolloutRole.from_config,
    "critic": CriticRole.from_config,
    "ref": RefRole.from_config,
    "reward_model": RewardModelRole.from_config,
    "rollout": RolloutRole.from_config,
}


class Worker:
    def __init__(
        self,
        rank: int,
        world_size: int,
        roles: list[str],
        cfg: Config,
        model_path: str,
        tokenizer_path: str,
        num_threads: int = 1,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.role_names = list(roles)
        self.cfg = cfg
        self.model_path = model_path
        self.tokenizer_path = tokenizer_path
        self.roles: dict[str, Role] = {}
        self.recorder = SpanRecorder()
        self.device: torch.device | None = None
        torch.set_num_threads(max(1, num_threads))
        return_freed_memory()
        quiet_libraries()

    def node_info(self) -> dict[str, Any]:
        info = {
            "pid": os.getpid(),
            "ip": hdist.node_ip(),
            "rank": self.rank,
            "device_type": "cuda" if torch.cuda.is_available() and self.cfg.trainer.device != Device.cpu else "cpu",
            "device_name": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch_threads": torch.get_num_threads(),
        }
        # Outside Ray (multi-process tests) there is no runtime context.
        info["node_id"] = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        return info

    @ray.method(concurrency_group=CONTROL)
    def alive(self) -> None:
        """The driver's liveness question (``cluster.liveness``): answered beside the current call, so only a
        stopped or wedged process leaves it unanswered."""

    @ray.method(concurrency_group=CONTROL)
    def interrupt_generation(self, call: int) -> None:
        """Stop generation call ``call`` at its next token (fully asynchronous training's partial rollouts: a
        weight sync is waiting). Runs beside the call (its own concurrency group); a call already over ignores it."""
        self._method("rollout", "interrupt")(call)

    def host_store(self) -> tuple[str, int]:
        """A rendezvous store this worker hosts and keeps bound (its group's, or a weight channel's)."""
        return hdist.host_store()

    def setup(
        self, master_addr: str, master_port: int, timeout_s: float = 600.0, ranks_per_node: int | None = None
    ) -> None:
        device = hdist.pick_device(self.cfg.trainer.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        hdist.init_process_group(self.rank, self.world_size, master_addr, master_port, device, timeout_s)
        mesh = init_device_mesh(device.type, (self.world_size,), mesh_dim_names=("dp",))
        self.device = device
        self.recorder.device = device
        ctx = WorkerContext(
            self.rank,
            self.world_size,
            device,
            mesh,
            self.model_path,
            self.tokenizer_path,
            self.recorder,
            ranks_per_node,
        )
        # Every rank seeds the same way so that initialisation (value heads) is identical everywhere.
        torch.manual_seed(self.cfg.trainer.seed)
        for name in self.role_names:
            self.roles[name] = ROLE_FACTORIES[name](self.cfg, ctx)

    def _method(self, role: str, method: str) -> Any:
        if role not in self.roles:
            raise KeyError(f"Worker rank {self.rank} hosts roles {self.role_names}, not '{role}'.")
        target = getattr(self.roles[role], method, None)
        if target is None or method.startswith("_"):
            public = [
                m for m in dir(self.roles[role]) if not m.startswith("_") and callable(getattr(self.roles[role], m))
            ]
            raise AttributeError(f"Role '{role}' has no method '{method}'; it has: {public}.")
        return target

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> CallResult:
        """Run ``role.method`` as one timed span; every rank of the group runs it together."""
        target = self._method(role, method)
        # Batches travel compact, ids and masks in narrow integer dtypes (``Batch.compact``): the role sees int64.
        args = tuple(a.widened() if isinstance(a, Batch) else a for a in args)
        result = self._timed(f"{role}.{method}", target, *args, **kwargs)
        if isinstance(result.value, Batch):
            result.value = result.value.compact()
        return result

    def call_each(self, calls: list[tuple[str, str]], batch: Batch) -> CallResult:
        """Several roles' passes over the same rows as one call (a step's colocated old-log-prob, reference
        and value passes): one dispatch and one barrier, the rows sent once, the outputs back as one
        batch. Each pass is a sub-span named ``role.method``."""
        targets = [self._method(role, method) for role, method in calls]
        rows = batch.widened()

        def run() -> Batch | None:
            out: Batch | None = None
            for (role, method), target in zip(calls, targets, strict=True):
                with self.recorder.span(f"{role}.{method}"):
                    part = target(rows)
                if part is not None:  # None: an early pipeline stage, whose last stage holds the result
                    out = part if out is None else out.union(part)
            return out

        result = self._timed("+".join(f"{role}.{method}" for role, method in calls), run)
        if isinstance(result.value, Batch):
            result.value = result.value.compact()
        return result

    def dp_layout(self, role: str, method: str) -> DataLayout:
        """Which rows this rank gets for ``role.method`` (the role's engine decides: tensor-parallel peers
        and pipeline stages share a replica's rows)."""
        return self.roles[role].dp_layout(method)

    def execute(self, fn: Any, *args: Any, **kwargs: Any) -> CallResult:
        """Run ``fn(worker, *args)`` here: diagnostics and tests on every rank, timed like a role call."""
        return self._timed(getattr(fn, "__name__", "execute"), fn, self, *args, **kwargs)

    def _timed(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> CallResult:
        # Start together, so each rank's span measures its own work rather than dispatch skew.
        if torch.distributed.is_initialized():
            torch.distributed.barrier()
        sampler = ProcessSampler()
        sampler.start()
        self.recorder.drain()
        start = time.time()
        try:
            value = fn(*args, **kwargs)
            synchronize(self.device)
        finally:
            trim_freed_memory()  # the phase's freed host memory (beyond 256 MB) goes back before the next phase
        span = Span(name, start, time.time())
        return CallResult(value, span, self.recorder.drain(), sampler.stop())

    def save_checkpoint(self, directory: str) -> CallResult:
        """Write the trainable roles' model and optimizer shards (each shard once over the group) and
        this rank's RNG states under ``directory``."""
        return self._timed("save_checkpoint", self._save_checkpoint, Path(directory))

    def load_checkpoint(self, directory: str) -> CallResult:
        return self._timed("load_checkpoint", self._load_checkpoint, Path(directory))

    def _trainable(self) -> dict[str, EngineRole]:
        return {
            name: role
            for name, role in self.roles.items()
            if isinstance(role, EngineRole) and role.engine.optimizer is not None
        }

    def _save_checkpoint(self, directory: Path) -> None:
        for name, role in self._trainable().items():
            assert role.engine.optimizer is not None
            with role.offload.resident(optimizer=True):
                save_engine(role.engine.model, role.engine.optimizer, role_dir(directory, name), role.engine.lr_step)
        actor = self.roles.get("actor_rollout")
        if isinstance(actor, ActorRolloutRole) and self.rank == 0:
            actor.save_hf_metadata(str(role_dir(directory, "actor_rollout") / "hf"))
        save_rng(directory / "rng", f"{'+'.join(self.role_names)}_rank_{self.rank}")

    def _load_checkpoint(self, directory: Path) -> None:
        for name, role in self._trainable().items():
            assert role.engine.optimizer is not None
            with role.offload.resident(optimizer=True):
                lr_step = load_engine(
                    role.engine.model, role.engine.optimizer, role_dir(directory, name), self.rank, self.world_size
                )
            role.engine.set_lr_step(lr_step)  # the config's lr is the base; the saved one is not
            role.engine.weights_changed()  # new weights: the next generate hands them over
        if not load_rng(directory / "rng", f"{'+'.join(self.role_names)}_rank_{self.rank}"):
            logger.warning(
                "Checkpoint %s has no RNG state for rank %d (written by fewer workers or other role placements): "
                "this rank keeps its seeded RNG, so the run resumes, but not bitwise as it would have continued.",
                directory,
                self.rank,
            )

    def teardown(self) -> None:
        self.roles.clear()
        hdist.destroy_process_group()
