"""The cluster and the run: resource pools, the Ray cluster, and the trainer's steps, logging, checkpoints,
validation and recovery."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybridrl.config.choices import Device, Tracker
from hybridrl.config.schema.fields import at_least, doc, positive, section, values_of


@dataclass(frozen=True)
class ResourcePoolConfig:
    pools: dict[str, dict[str, Any]] = doc(
        {"global_pool": {"GPU": 2}},
        "name -> resources; GPU n = n workers with a GPU each (without GPUs: n CPU workers, with a notice); "
        "custom labels (gpu_group: 8) pick nodes; strategy: PACK|SPREAD|...",
    )
    mapping: dict[str, str] = doc(
        {"actor_rollout": "global_pool", "critic": "global_pool", "ref": "global_pool", "reward_model": "global_pool"},
        "role -> pool; roles on one pool share its worker processes (reward_model only with reward_model.enable); "
        "rollout: <pool> gives generation workers of their own (the actor's then only train)",
    )


@dataclass(frozen=True)
class RayConfig:
    address: str | None = doc(None, 'null = start a local cluster; "auto" or host:port = join an existing one')
    num_cpus: int | None = doc(None, "local cluster CPUs; null = enough for every worker (may oversubscribe)")
    include_dashboard: bool = doc(True, "start the Ray dashboard with a local cluster; its address is printed")
    dashboard_host: str = doc("127.0.0.1", "the dashboard listens here only; 0.0.0.0 exposes it to the network")
    metrics_export: bool = doc(
        False,
        "a local cluster's Prometheus metrics endpoint on each node (Ray binds it to every interface, without "
        "authentication); off unless asked",
    )
    env_vars: dict[str, str] = doc({}, "extra environment variables for every worker (e.g. NCCL_DEBUG: INFO)")
    working_dir: str | None = doc(None, "a directory Ray ships to every worker (runtime_env working_dir); null = none")
    object_store_memory: int | None = doc(None, "bytes for the local object store; null = Ray's default")
    connect_timeout_s: float = doc(30.0, "max wait for the head at address to answer before giving up")
    start_timeout_s: float = doc(120.0, "max wait for placement groups and worker start-up")
    call_timeout_s: float = doc(
        600.0,
        "timeout of one torch.distributed collective on the workers; with liveness_timeout_s=0 also the max "
        "wait for one worker-group call",
    )
    liveness_timeout_s: float = doc(
        60.0,
        "a rank that leaves the driver's liveness question unanswered this long while a call waits on it is "
        "named as stuck (a stopped or wedged process); 0 = off, only call_timeout_s",
    )

    def problems(self, at: str) -> list[str]:
        problems = positive(at, **values_of(self, "connect_timeout_s start_timeout_s call_timeout_s"))
        problems += at_least(0, at, liveness_timeout_s=self.liveness_timeout_s)
        if self.num_cpus is not None and self.num_cpus < 1:
            problems.append(f"{at}.num_cpus={self.num_cpus} must be >= 1, or null (enough for every worker).")
        if self.object_store_memory is not None and self.object_store_memory < 78 * 2**20:
            problems.append(
                f"{at}.object_store_memory={self.object_store_memory} bytes is below Ray's minimum (78 MiB); "
                f"give more, or null for Ray's default."
            )
        if not self.dashboard_host or any(c.isspace() for c in self.dashboard_host):
            problems.append(f"{at}.dashboard_host={self.dashboard_host!r} is not a host address (e.g. 127.0.0.1).")
        return problems


@dataclass(frozen=True)
class TrainerConfig:
    project_name: str = doc("hybridrl", "")
    experiment_name: str = doc("default", "")
    output_dir: str = doc("outputs/${trainer.project_name}/${trainer.experiment_name}", "run directory")
    total_steps: int = doc(150, "training steps (one batch of prompts each)")
    total_epochs: int | None = doc(
        None, "verl's: train this many passes over the data instead (drop-last batches); null = total_steps"
    )
    total_training_steps: int | None = doc(None, "verl's name for total_steps; wins over it and total_epochs")
    n_gpus_per_node: int | None = doc(
        None, "verl's: with nnodes, sizes resource_pool.pools.global_pool to nnodes x n_gpus_per_node GPUs"
    )
    nnodes: int | None = doc(None, "verl's: nodes for global_pool (n_gpus_per_node each; 8 if unset, as verl)")
    seed: int = doc(1, "seed of sampling, shuffling and initialisation on every worker")
    device: Device = doc(Device.auto, "auto (cuda if available, else cpu) | cpu | cuda")
    logger: list[Tracker] = doc(
        [Tracker.console, Tracker.jsonl, Tracker.tensorboard],
        "console (progress bar + step lines), jsonl (metrics.jsonl), tensorboard, wandb, mlflow",
    )
    progress_bar: bool = doc(True, "show a progress bar on the console")
    trace: bool = doc(True, "write <output_dir>/trace.json: a Perfetto/Chrome timeline of every phase on every rank")
    breakdown_interval: int = doc(
        50, "print the phase breakdown table every this many steps (and at the end); 0 = only at the end"
    )
    straggler_factor: float = doc(2.0, "warn when a rank's call takes this many times the median of its group's ranks")
    straggler_min_seconds: float = doc(0.05, "...and at least this long (shorter calls are noise)")
    cluster_stats_interval: int = doc(
        1, "record Ray object-store usage and spilling every this many steps (one GCS query, ~40 ms)"
    )
    balance_batch: bool = doc(
        True, "reorder each step's sequences so every data-parallel worker gets about as many tokens"
    )
    save_hf: bool = doc(True, "write the trained actor to <output_dir>/actor_hf at the end")
    hf_max_shard_mb: int = doc(
        5000,
        "largest weights file of that export (MiB); every rank writes its share, holding at most twice this "
        "plus one tensor while it writes",
    )
    save_freq: int = doc(50, "checkpoint every this many steps and at the last step; -1 = never")
    default_local_dir: str = doc(
        "${trainer.output_dir}/checkpoints",
        "verl's key: the checkpoint directory (global_step_<N>/actor, .../critic, latest_checkpointed_iteration.txt)",
    )
    max_ckpt_to_keep: int | None = doc(None, "newest checkpoints kept in default_local_dir; null = all (as verl)")
    resume_mode: str = doc(
        "auto", "auto (latest checkpoint in default_local_dir, if any) | disable | resume_path | a checkpoint path"
    )
    resume_from_path: str | None = doc(None, "the global_step_<k> directory for resume_mode=resume_path")
    critic_warmup: int = doc(0, "the actor is not updated before this step (the critic learns alone until then)")
    max_restarts: int = doc(
        3,
        "when a worker dies, its node leaves or a rank stops answering: restart the worker groups from the last "
        "checkpoint this many times in the same run (0 = stop at the first such failure)",
    )
    test_freq: int = doc(50, "validate every this many steps (and at the end); -1 = never")
    val_before_train: bool = doc(True, "validate once before the first step (when there are validation prompts)")
    val_generations_to_log: int = doc(5, "sample generations saved per validation to <output_dir>/val_generations/")
    learning_check_window: int = doc(5, 'steps averaged at the start and end for the closing "did it learn" line')
    ray: RayConfig = section(RayConfig)

    def problems(self, at: str) -> list[str]:
        return self._count_problems(at) + self._schedule_problems(at) + self.ray.problems(f"{at}.ray")

    def _count_problems(self, at: str) -> list[str]:
        """Counts, sizes and intervals. A set total_training_steps is the step count (the loader copies it to
        total_steps), so it is the key checked; verl's other sizing keys pass when null or 0 (the loader reads
        a 0 n_gpus_per_node or nnodes as unset)."""
        steps = self.total_training_steps
        problems = positive(
            at,
            **({"total_steps": self.total_steps} if steps is None else {"total_training_steps": steps}),
            learning_check_window=self.learning_check_window,
            total_epochs=self.total_epochs or 1,
            n_gpus_per_node=self.n_gpus_per_node or 1,
            nnodes=self.nnodes or 1,
            hf_max_shard_mb=self.hf_max_shard_mb,
        )
        problems += at_least(
            0,
            at,
            **values_of(
                self, "breakdown_interval cluster_stats_interval max_restarts critic_warmup straggler_min_seconds"
            ),
        )
        if self.straggler_factor <= 1:
            problems.append(f"{at}.straggler_factor={self.straggler_factor} must be > 1 (a multiple of the median).")
        if self.val_generations_to_log < 0:
            problems.append(f"{at}.val_generations_to_log must be >= 0.")
        return problems

    def _schedule_problems(self, at: str) -> list[str]:
        """When checkpoints and validation happen, and where a resumed run starts from."""
        problems = []
        if self.save_freq == 0 or self.save_freq < -1:
            problems.append(
                f"{at}.save_freq={self.save_freq}: use a positive number of steps, or -1 for no checkpoints."
            )
        if self.test_freq == 0 or self.test_freq < -1:
            problems.append(
                f"{at}.test_freq={self.test_freq}: use a positive number of steps, or -1 for no validation."
            )
        if self.max_ckpt_to_keep is not None and self.max_ckpt_to_keep < 1:
            problems.append(
                f"{at}.max_ckpt_to_keep={self.max_ckpt_to_keep} must be >= 1, or null to keep every checkpoint."
            )
        if self.resume_mode == "resume_path" and not self.resume_from_path:
            problems.append(f"{at}.resume_mode=resume_path needs {at}.resume_from_path=<checkpoint dir>.")
        return problems
