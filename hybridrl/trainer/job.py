"""One training job end to end on the driver: build the model directory and datasets, connect to Ray, start
the worker groups, resume, train, export, shut everything down.

Kept apart from ``main_ppo`` (the command line) so that a config error is answered before Ray, torch and
transformers load.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from hybridrl.algorithms.roles import ROLLOUT, active_roles, engine_section
from hybridrl.checkpoint.manager import CheckpointManager, read_state, resolve_resume
from hybridrl.cluster import ray_cluster
from hybridrl.cluster.errors import system_failure
from hybridrl.cluster.pools import ResourcePoolManager
from hybridrl.cluster.role_clients import RoleClients, make_clients
from hybridrl.cluster.worker_group import WorkerGroup
from hybridrl.config.choices import AgentLoopName, Strategy
from hybridrl.config.errors import ConfigError
from hybridrl.config.loader import to_yaml
from hybridrl.config.schema import Config, TrainedRoleConfig
from hybridrl.data.dataset import PromptDataset, build_datasets
from hybridrl.data.tasks import TASKS
from hybridrl.generation.agent_loop import check_agent_tokenizer
from hybridrl.logging_utils import quiet_libraries
from hybridrl.models.loader import load_tokenizer
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.observability.monitor import RunMonitor
from hybridrl.observability.perf_metrics import StepPerf
from hybridrl.observability.tracking import Tracker
from hybridrl.observability.tracking.breakdown import format_breakdown
from hybridrl.observability.tracking.tracker import read_rows
from hybridrl.planning.memory import run_plan
from hybridrl.rewards.registry import REWARD_FNS
from hybridrl.rewards.scorer import RewardScorer
from hybridrl.tools.config import ToolSpec, load_tool_config
from hybridrl.tools.interactions import InteractionSpec, load_interaction_config
from hybridrl.trainer.checkpointing import Checkpointing
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.trainer.rewarding import RewardStep
from hybridrl.trainer.run_lock import hold_run_lock
from hybridrl.trainer.run_record import RunRecord

T = TypeVar("T")

logger = logging.getLogger("hybridrl")


def prepare_model(cfg: Config, output_dir: Path) -> tuple[str, str]:
    """The model and tokenizer directories the workers load (the tiny model is built here)."""
    model_cfg = cfg.actor_rollout_ref.model
    if model_cfg.path is None:
        # A built-in task that uses tools adds its words to the tiny model's vocabulary.
        tokens = TASKS[cfg.data.task].tokens if cfg.data.train_files is None and cfg.data.task in TASKS else ()
        path = ensure_tiny_model(output_dir / "tiny_model", **asdict(model_cfg.tiny), extra_tokens=tokens)
    else:
        path = str(Path(model_cfg.path).expanduser().resolve())
    tokenizer_path = str(Path(model_cfg.tokenizer_path).expanduser().resolve()) if model_cfg.tokenizer_path else path
    return path, tokenizer_path


def describe_strategy(cfg: Config, role: str, workers: int) -> str:
    """One line for the log: the role's strategy and layout."""
    if role == ROLLOUT:
        rollout = cfg.actor_rollout_ref.rollout
        return f"generation only ({rollout.name}, overlap={'on' if rollout.overlap else 'off'})"
    section = engine_section(cfg, role)
    if isinstance(section, TrainedRoleConfig) and section.strategy == Strategy.megatron:
        m = section.parallel_config.megatron
        layout = f"megatron tp={m.tp_size} pp={m.pp_size} dp={workers // (m.tp_size * m.pp_size)}"
        return (
            layout
            + (" sequence-parallel" if m.sequence_parallel and m.tp_size > 1 else "")
            + (f" {m.pp_schedule}" if m.pp_size > 1 else "")
        )
    return f"fsdp {section.fsdp.sharding_strategy}"  # the reward model is always FSDP


def load_tools(cfg: Config) -> list[ToolSpec]:
    """The multi-turn rollouts' tools, read (and their classes imported) in the driver so that a bad tool file
    is one line before Ray starts; the generating workers read the same file."""
    return _multi_turn_file(cfg, cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path, load_tool_config)


def load_interactions(cfg: Config) -> list[InteractionSpec]:
    """The multi-turn rollouts' simulated users, read in the driver for the same reason as the tools."""
    return _multi_turn_file(
        cfg, cfg.actor_rollout_ref.rollout.multi_turn.interaction_config_path, load_interaction_config
    )


def _multi_turn_file(cfg: Config, path: str | None, read: Callable[[str], list[T]]) -> list[T]:
    """``read(path)`` on a multi-turn run with that file set; its ValueError (one line naming the file and its
    key) becomes the run's config error."""
    if not (cfg.actor_rollout_ref.rollout.multi_turn.enable and path):
        return []
    try:
        return read(path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_datasets(cfg: Config, dataset: PromptDataset, val_dataset: PromptDataset | None) -> None:
    """What only the loaded data can tell, answered before Ray starts (workers take ~20 s to come up)."""
    per_round = cfg.data.gen_batch_size if cfg.algorithm.filter_groups.enable and cfg.data.gen_batch_size else 0
    if len(dataset) < per_round:
        raise ConfigError(
            f"data.gen_batch_size={per_round} is larger than the {len(dataset)} training prompts; lower it or give "
            f"more data."
        )
    if len(dataset) < cfg.data.train_batch_size:
        raise ConfigError(
            f"data.train_batch_size={cfg.data.train_batch_size} is larger than the {len(dataset)} training prompts; "
            f"lower it or give more data."
        )
    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    agents = {e.agent_name or str(cfg.actor_rollout_ref.rollout.agent.default_agent_loop) for e in dataset.examples}
    if AgentLoopName.tool_agent in agents and not multi_turn.enable:
        raise ConfigError(
            "The prompts ask for the tool_agent loop (their agent_name, or rollout.agent.default_agent_loop) but "
            "actor_rollout_ref.rollout.multi_turn.enable=false: set it to true and multi_turn.tool_config_path."
        )
    if multi_turn.enable and AgentLoopName.tool_agent in agents and not multi_turn.tool_config_path:
        raise ConfigError(
            "actor_rollout_ref.rollout.multi_turn.tool_config_path is not set, so the tool_agent rows have no tools: "
            "give a verl-format tool YAML (e.g. examples/tools/lookup_tool_config.yaml for data.task=lookup)."
        )
    named = {str(((e.extra_info or {}).get("interaction_kwargs") or {}).get("name")) for e in dataset.examples}
    named -= {"None"}
    known = {spec.name for spec in load_interactions(cfg)}
    if known and named - known:
        raise ConfigError(
            f"The prompts' extra_info.interaction_kwargs.name {sorted(named - known)} is not an interaction of "
            f"actor_rollout_ref.rollout.multi_turn.interaction_config_path (it has {sorted(known)}): name one of those."
        )
    if cfg.custom_reward_function.path or (cfg.reward_model.enable and not cfg.reward_model.use_rule_reward):
        return
    key = cfg.data.reward_fn_key
    sources = {getattr(e, key) for d in (dataset, val_dataset) if d is not None for e in d.examples}
    missing = sorted(str(s) for s in sources if s not in REWARD_FNS)
    if missing:
        raise ConfigError(
            f"No reward function for data_source {missing} (built in: {sorted(REWARD_FNS)}): set "
            f"custom_reward_function.path=<file.py> with a compute_score(data_source, solution_str, ground_truth, "
            f"extra_info) function, as in verl."
        )


def steps_from_epochs(cfg: Config, prompts: int) -> Config:
    """verl's ``trainer.total_epochs``: that many passes over the training prompts, a full batch each step
    (the incomplete last batch of an epoch is dropped, as verl's loader does), unless
    ``total_training_steps`` is given."""
    trainer = cfg.trainer
    if trainer.total_epochs is None or trainer.total_training_steps is not None:
        return cfg
    per_epoch = prompts // cfg.data.train_batch_size
    logger.info(
        "trainer.total_epochs=%d: %d steps (%d prompts, %d per step)",
        trainer.total_epochs,
        trainer.total_epochs * per_epoch,
        prompts,
        cfg.data.train_batch_size,
    )
    return replace(cfg, trainer=replace(trainer, total_steps=trainer.total_epochs * per_epoch))


def build_groups(
    cfg: Config,
    manager: ResourcePoolManager,
    model_path: str,
    tokenizer_path: str,
    monitor: RunMonitor | None = None,
) -> list[WorkerGroup]:
    """One WorkerGroup per used pool, hosting every role mapped to it (colocated roles)."""
    logger.info(
        "Reserving %s for pools %s", manager.total(), {p.name: manager.roles_of(p.name) for p in manager.used_pools()}
    )
    ray_cfg = cfg.trainer.ray
    groups: list[WorkerGroup] = []
    try:
        for pool in manager.used_pools():
            group = WorkerGroup(
                pool,
                manager.roles_of(pool.name),
                cfg,
                model_path,
                tokenizer_path,
                ray_cfg.start_timeout_s,
                ray_cfg.call_timeout_s,
                monitor,
                ray_cfg.liveness_timeout_s,
            )
            groups.append(group)
            for role in group.roles:
                logger.info(
                    "Role %s: %s on %d workers", role, describe_strategy(cfg, role, group.world_size), group.world_size
                )
    except BaseException:
        for group in groups:
            group.shutdown()
        raise
    return groups


def planned_peaks(cfg: Config, model_path: str, groups: list[WorkerGroup]) -> dict[str, float]:
    """Each group's planned peak per rank, logged at the start: what ``perf/<group>/peak_vs_plan`` divides by."""
    info = [i for group in groups for i in group.node_info]
    try:
        plan = run_plan(cfg, model_path, info[0]["device_type"] if info else "cpu")
    except Exception as exc:  # a model the planner cannot read, or a layout it misjudges: never the run's end
        logger.warning("Memory plan: none (%s: %s); perf/<group>/peak_vs_plan is left out", type(exc).__name__, exc)
        return {}
    peaks = {}
    for group in groups:
        for planned in plan.groups:
            if set(planned.roles) == set(group.roles):
                peaks[group.name] = planned.peak.bytes
                logger.info(
                    "Memory plan: group %s peaks at %.2f GB per rank in %s (hybridrl plan has every phase)",
                    group.name,
                    planned.peak.bytes / 1e9,
                    planned.peak.name,
                )
    return peaks


def record_placement(groups: list[WorkerGroup], output_dir: Path) -> None:
    """Where each rank of each group landed: ``placement.json`` and one log line per group."""
    placement = {group.name: {"pool": group.pool.name, "ranks": group.node_info} for group in groups}
    (output_dir / "placement.json").write_text(json.dumps(placement, indent=1))
    for group in groups:
        nodes = sorted({info["node_id"][:8] if info.get("node_id") else info["ip"] for info in group.node_info})
        logger.info(
            "Group %s on pool '%s': %d ranks on node(s) %s",
            group.name,
            group.pool.name,
            group.world_size,
            ", ".join(nodes),
        )


def resume(cfg: Config, resume_from: Path | None, groups: list[WorkerGroup]) -> dict[str, Any] | None:
    """Load the checkpoint at ``resume_from`` into every group; its driver state, or None."""
    if resume_from is None:
        return None
    state = read_state(resume_from)
    logger.info("Resuming from %s (step %d of %d)", resume_from, state["step"], cfg.trainer.total_steps)
    if state["step"] >= cfg.trainer.total_steps:
        trainer = cfg.trainer  # named as the user set it (verl's spellings first)
        said = f"trainer.total_steps={trainer.total_steps}"
        if trainer.total_training_steps is not None:
            said = f"trainer.total_training_steps={trainer.total_training_steps}"
        elif trainer.total_epochs is not None:
            said = f"trainer.total_epochs={trainer.total_epochs} ({trainer.total_steps} steps)"
        logger.info(
            "This run already reached %s: nothing to train. Raise %s to continue, or "
            "trainer.resume_mode=disable to start over.",
            said,
            said.split("=")[0],
        )
    for group in groups:
        group.load_checkpoint(str(resume_from))
    return state


def learning_summary(history: list[dict[str, float]], window: int) -> dict[str, float]:
    """First vs last ``window`` steps' mean score, and the best such mean on the way: a run that peaked and
    fell back is told apart from one that ended at its best."""
    scores = [m["critic/score/mean"] for m in history if m.get("critic/score/mean") is not None]
    if not scores:
        nan = float("nan")
        return {"first_mean": nan, "last_mean": nan, "gain": nan, "peak_mean": nan, "peak_step": 0, "window": 0}
    window = max(1, min(window, len(scores) // 2 or 1))
    means = [sum(scores[i - window : i]) / window for i in range(window, len(scores) + 1)]
    peak = max(range(len(means)), key=means.__getitem__)
    return {
        "first_mean": means[0],
        "last_mean": means[-1],
        "gain": means[-1] - means[0],
        "peak_mean": means[peak],
        "peak_step": peak + window,  # the window's last step
        "window": window,
    }


def run(cfg: Config) -> dict[str, Any]:
    """Run one training job end to end; returns the run directory and the learning summary. ``cfg`` has
    passed pre-flight (``hybridrl.preflight.check``; ``main_ppo`` loads it with ``load_and_check``)."""
    quiet_libraries()
    started = time.perf_counter()
    output_dir = Path(cfg.trainer.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with hold_run_lock(output_dir):
        return _run(cfg, output_dir, started)


@dataclass
class RunParts:
    """What every leg of a run shares: built once on the driver, before and around the worker groups."""

    cfg: Config
    record: RunRecord
    output_dir: Path
    model_path: str
    tokenizer_path: str
    dataset: PromptDataset
    val_dataset: PromptDataset | None
    scorer: RewardScorer
    pools: ResourcePoolManager
    monitor: RunMonitor
    checkpoints: CheckpointManager


def _run(cfg: Config, output_dir: Path, started: float) -> dict[str, Any]:
    model_path, tokenizer_path = prepare_model(cfg, output_dir)
    tokenizer = load_tokenizer(tokenizer_path, cfg.actor_rollout_ref.model.trust_remote_code)
    if cfg.actor_rollout_ref.rollout.multi_turn.enable:
        try:
            check_agent_tokenizer(cfg.actor_rollout_ref.rollout.multi_turn, tokenizer)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    dataset, val_dataset = build_datasets(cfg.data, tokenizer, [spec.schema for spec in load_tools(cfg)])
    check_datasets(cfg, dataset, val_dataset)
    cfg = steps_from_epochs(cfg, len(dataset))
    (output_dir / "config.yaml").write_text(to_yaml(cfg))
    checkpoints = CheckpointManager(Path(cfg.trainer.default_local_dir), cfg.trainer.max_ckpt_to_keep)
    checkpoints.remove_stale_temporaries()
    resume_from = resolve_resume(cfg.trainer.resume_mode, cfg.trainer.resume_from_path, checkpoints)
    record = RunRecord.resumed(read_state(resume_from) if resume_from is not None else None, started)
    pools = ResourcePoolManager.from_config(cfg.resource_pool, roles=active_roles(cfg))
    # Every clean-up runs, whatever failed first (a tracker on a full disk must not leave workers behind).
    with contextlib.ExitStack() as cleanup:
        scorer = RewardScorer.from_config(cfg)  # imports a custom reward file: its errors come before Ray
        cleanup.callback(scorer.close)
        cluster = ray_cluster.connect(cfg.trainer.ray, cpus_needed=pools.total().get("CPU", 1))
        cleanup.callback(ray_cluster.disconnect)
        monitor = RunMonitor(
            output_dir / "trace.json" if cfg.trainer.trace else None,
            cfg.trainer.straggler_factor,
            cfg.trainer.straggler_min_seconds,
            continue_trace=resume_from is not None,  # a resumed run's timeline goes on in the same file
        )
        cleanup.callback(monitor.close)
        parts = RunParts(
            cfg,
            record,
            output_dir,
            model_path,
            tokenizer_path,
            dataset,
            val_dataset,
            scorer,
            pools.for_cluster(cluster.gpus, cluster.resources.get("CPU", 1.0)),
            monitor,
            checkpoints,
        )
        restarts = 0
        while True:
            try:
                history, hf_dir = _train_leg(parts, resume_from, restarts)
                break
            except Exception as exc:
                if not system_failure(exc) or restarts >= cfg.trainer.max_restarts:
                    raise
                restarts += 1
                resume_from = checkpoints.last_committed or resume_from  # this run's newest, else where it began
                logger.error(
                    "Recovering (%d of trainer.max_restarts=%d) from %s: %s. Restarting the worker groups from %s.",
                    restarts,
                    cfg.trainer.max_restarts,
                    type(exc).__name__,
                    exc,
                    resume_from or "the start (no checkpoint yet)",
                )
    summary: dict[str, Any] = dict(learning_summary(history, cfg.trainer.learning_check_window))
    summary["wall_s"] = record.wall_s()  # every leg's, resumed ones included
    summary["legs"] = record.legs
    summary["restarts"] = restarts
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return {"output_dir": str(output_dir), "actor_hf": hf_dir, "summary": summary, "history": history}


def _train_leg(parts: RunParts, resume_from: Path | None, restarts: int) -> tuple[list[dict[str, float]], str | None]:
    """Start the worker groups, load ``resume_from`` (or start fresh), train to the end, export; the groups
    are shut down however it ends. A recovered run runs this again from its last checkpoint."""
    cfg, output_dir = parts.cfg, parts.output_dir
    with contextlib.ExitStack() as cleanup:
        groups = build_groups(cfg, parts.pools, parts.model_path, parts.tokenizer_path, parts.monitor)
        for group in groups:
            cleanup.callback(group.shutdown)
        roles: RoleClients = make_clients(groups)
        record_placement(groups, output_dir)
        perf = StepPerf.create(cfg, parts.model_path, [info for group in groups for info in group.node_info])
        parts.monitor.planned_peak_bytes = planned_peaks(cfg, parts.model_path, groups)
        state = resume(cfg, resume_from, groups)
        start_step = int(state["step"]) if state else 0
        parts.record.begin_leg(start_step)
        parts.monitor.mark(
            f"leg {len(parts.record.legs)}: " + (f"resumed after step {start_step}" if state else "start")
        )
        past = read_rows(output_dir / "metrics.jsonl", start_step) if state else []
        tracker = Tracker(list(cfg.trainer.logger), output_dir, cfg, resume_step=start_step if state else None)
        cleanup.callback(tracker.close)
        trainer = PPOTrainer(
            cfg,
            roles,
            parts.dataset,
            tracker,
            RewardStep(
                cfg.reward_model,
                parts.scorer,
                roles.reward_model,
                reward_fn_key=cfg.data.reward_fn_key,
                max_response_length=cfg.data.max_response_length,
            ),
            monitor=parts.monitor,
            perf=perf,
            checkpointing=Checkpointing(parts.checkpoints, roles.groups(), cfg.trainer, start_step)
            if cfg.trainer.save_freq > 0
            else None,
            val_dataset=parts.val_dataset,
            output_dir=output_dir,
            restarts=restarts,
            record=parts.record,
        )
        if state:
            trainer.load_state_dict(state)
            trainer.history = past
        history = trainer.fit(start_step)
        (output_dir / "breakdown.txt").write_text(format_breakdown(history, skip_first=1) + "\n")
        tracker.close()
        hf_dir = None
        if cfg.trainer.save_hf:
            hf_dir = str(output_dir / "actor_hf")
            roles.actor_rollout.save_hf(hf_dir, cfg.trainer.hf_max_shard_mb * 2**20)
            logger.info("Saved the trained actor (Hugging Face format) to %s", hf_dir)
    return history, hf_dir
