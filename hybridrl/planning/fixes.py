"""What to change when a plan does not fit: each candidate is a set of overrides on the run's command line,
planned again; the ones that fit are offered cheapest first, each with its new peak.

The order is the cost each change adds to a step, smallest first: scoring tokens from hidden states instead of
full logits costs nothing; smaller micro-batches cost a little per-launch efficiency; activation checkpointing
recomputes each layer's forward (~+30% of the update); Ulysses sequence parallelism adds two all-to-alls per
layer and shrinks the data-parallel replicas; offloading copies state over PCIe every step, and
FSDP's CPU offload also runs the optimizer step on the CPU; LoRA trains a different (smaller) set of
parameters, so it comes last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hybridrl.algorithms.roles import active_roles, critic_enabled
from hybridrl.cluster.pools import ResourcePoolManager
from hybridrl.config.choices import RolloutName, ShardingStrategy, Strategy
from hybridrl.config.loader import load_config
from hybridrl.config.schema import Config
from hybridrl.planning.memory import Device, Plan, plan_memory
from hybridrl.planning.shape import ModelShape

_ACTOR = "actor_rollout_ref.actor"
_MODEL = "actor_rollout_ref.model"
_ROLLOUT = "actor_rollout_ref.rollout"
_REF = "actor_rollout_ref.ref"


@dataclass(frozen=True)
class Fix:
    """Overrides that make the run fit, what they cost, and the plan with them."""

    overrides: tuple[str, ...]
    cost: str
    plan: Plan


def _halved(value: int) -> int:
    return max(1, value // 2)


def _ulysses_candidates(cfg: Config, shape: ModelShape | None) -> list[tuple[list[str], str]]:
    """Each Ulysses group size the actor's workers and the model's heads allow (verl's rules, checked before
    launch: ``hybridrl.models.ulysses``), with the packed rows it needs; the critic's too where there is one."""
    actor = cfg.actor_rollout_ref.actor
    if shape is None or actor.strategy != Strategy.fsdp or actor.ulysses_sequence_parallel_size > 1:
        return []
    roles = active_roles(cfg)
    pools = ResourcePoolManager.from_config(cfg.resource_pool, roles)
    workers = next(p.num_workers for p in pools.used_pools() if pools.mapping.get("actor_rollout") == p.name)
    out = []
    for size in (2, 4, 8):
        kv_ok = shape.kv_heads % size == 0 or size % shape.kv_heads == 0
        if workers % size or shape.heads % size or not kv_ok:
            continue
        changes = [f"{_MODEL}.use_remove_padding=true", f"{_ACTOR}.ulysses_sequence_parallel_size={size}"]
        if critic_enabled(cfg) and cfg.critic.strategy == Strategy.fsdp:
            changes += ["critic.model.use_remove_padding=true", f"critic.ulysses_sequence_parallel_size={size}"]
        out.append((changes, f"each sequence over {size} workers: 2 all-to-alls per layer, {size}x fewer replicas"))
    return out


def _candidates(cfg: Config, shape: ModelShape | None = None) -> list[tuple[list[str], str]]:
    """Each change that could lower a peak, in the order of what it costs a step."""
    arr, critic = cfg.actor_rollout_ref, critic_enabled(cfg)
    actor = arr.actor
    out: list[tuple[list[str], str]] = []
    if not arr.model.use_fused_kernels and actor.strategy == Strategy.fsdp:
        out.append(([f"{_MODEL}.use_fused_kernels=true"], "none: log-probs from hidden states in chunks"))
    micro = []
    if actor.use_dynamic_bsz:
        micro.append(f"{_ACTOR}.ppo_max_token_len_per_gpu={_halved(actor.ppo_max_token_len_per_gpu)}")
    else:
        micro.append(f"{_ACTOR}.ppo_micro_batch_size_per_gpu={_halved(actor.ppo_micro_batch_size_per_gpu)}")
    micro.append(
        f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu={_halved(arr.rollout.log_prob_micro_batch_size_per_gpu)}"
    )
    micro.append(f"{_REF}.log_prob_micro_batch_size_per_gpu={_halved(arr.ref.log_prob_micro_batch_size_per_gpu)}")
    if critic:
        micro.append(f"critic.ppo_micro_batch_size_per_gpu={_halved(cfg.critic.ppo_micro_batch_size_per_gpu)}")
        micro.append(f"critic.forward_micro_batch_size_per_gpu={_halved(cfg.critic.forward_micro_batch_size_per_gpu)}")
    out.append((micro, "more, smaller micro-batches (launch overhead per micro-batch)"))
    checkpointing = [] if arr.model.enable_gradient_checkpointing else [f"{_MODEL}.enable_gradient_checkpointing=true"]
    if critic and not cfg.critic.model.enable_gradient_checkpointing:
        checkpointing.append("critic.model.enable_gradient_checkpointing=true")
    if checkpointing:
        out.append((checkpointing, "activation checkpointing: each layer's forward again in the backward (~+30%)"))
    out += _ulysses_candidates(cfg, shape)
    if arr.rollout.name != RolloutName.hf and arr.rollout.gpu_memory_utilization > 0.3:
        lower = round(arr.rollout.gpu_memory_utilization - 0.1, 2)
        out.append(([f"{_ROLLOUT}.gpu_memory_utilization={lower}"], "a smaller KV cache: fewer sequences at once"))
    if actor.fsdp.sharding_strategy != ShardingStrategy.FULL_SHARD and actor.strategy == Strategy.fsdp:
        out.append(([f"{_ACTOR}.fsdp.sharding_strategy=FULL_SHARD"], "more all-gathers (every layer, every pass)"))
    offload = [] if actor.fsdp.optimizer_offload else [f"{_ACTOR}.fsdp.optimizer_offload=true"]
    if critic and not cfg.critic.fsdp.optimizer_offload:
        offload.append("critic.fsdp.optimizer_offload=true")
    if offload:
        out.append((offload, "optimizer state over PCIe around each update"))
    params = [] if actor.fsdp.param_offload else [f"{_ACTOR}.fsdp.param_offload=true"]
    if not arr.ref.param_offload:
        params.append(f"{_REF}.param_offload=true")
    if critic and not cfg.critic.fsdp.param_offload:
        params.append("critic.fsdp.param_offload=true")
    if params:
        out.append((params, "weights over PCIe around each phase"))
    if actor.strategy == Strategy.fsdp and not actor.fsdp.cpu_offload:
        cpu = [f"{_ACTOR}.fsdp.cpu_offload=true"] + (["critic.fsdp.cpu_offload=true"] if critic else [])
        out.append((cpu, "weights, gradients and the optimizer step on the CPU throughout (a slow update)"))
    if arr.model.lora_rank == 0 and actor.strategy == Strategy.fsdp:
        out.append(([f"{_MODEL}.lora_rank=64", f"{_MODEL}.lora_alpha=64"], "trains LoRA adapters, not the model"))
    return out


def fixes(
    overrides: list[str],
    yaml_path: str | None,
    plan_of: Callable[[Config], Plan],
    shape: ModelShape | None = None,
) -> list[Fix]:
    """The changes that make ``plan_of`` fit: each candidate alone, cheapest first; where none alone fits,
    the candidates accumulated in that order up to the first set that fits. ``shape``: the model's, for the
    changes that depend on its heads (Ulysses)."""
    candidates = _candidates(load_config(overrides, yaml_path=yaml_path), shape)
    found = []
    for changes, cost in candidates:
        alone = plan_of(load_config([*overrides, *changes], yaml_path=yaml_path))
        if alone.fits:
            found.append(Fix(tuple(changes), cost, alone))
    if found:
        return found
    together = list(overrides)
    for changes, _ in candidates:
        together += changes
        plan = plan_of(load_config(together, yaml_path=yaml_path))
        if plan.fits:
            return [Fix(tuple(together[len(overrides) :]), "all of the above, together", plan)]
    return []


def planner(shape: ModelShape, device: Device) -> Callable[[Config], Plan]:
    return lambda cfg: plan_memory(cfg, shape, device)
