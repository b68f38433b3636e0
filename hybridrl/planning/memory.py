"""The memory model: each worker group's bytes per rank in every phase of a step, from the config and the
model's shape alone. One model for ``hybridrl plan`` and bench/memory.py (which sets it beside measured peaks).

Per rank of a group of W workers, with P parameters and b bytes per element of each copy:

- runtime: what a worker holds before any model (the CUDA context and communication buffers on a GPU; the
  imported libraries on a CPU).
- each trained role (actor, critic): its fp32 masters P*4/S, where S is what the strategy shards over
  (FSDP FULL_SHARD and SHARD_GRAD_OP: W; HYBRID_SHARD: the shard group; NO_SHARD: 1; Megatron: tp x pp);
  AdamW's two moments of what it trains (the whole model, or the LoRA adapters) 2*T*4/S; in its update the
  gradients T*4/S too. Each frozen role (reference, reward model) its weights P*b/S. ``param_offload`` and
  ``optimizer_offload`` keep those in host memory outside the phases that use them; FSDP's ``cpu_offload``
  keeps them there throughout.
- the generation engine on the actor's workers (or on a rollout pool's): the hf engine a whole copy P*b_gen
  and the KV cache of the rows it generates at once; vLLM and SGLang on a GPU the share of the device that
  ``gpu_memory_utilization`` gives them. On a GPU, ``free_cache_engine`` frees it outside generation.
- a forward or backward: one layer gathered (FSDP: its parameters and gradients; SHARD_GRAD_OP keeps the
  whole model gathered), the activations autograd keeps for one micro-batch
  (``ModelShape.activation_bytes_per_token`` times its tokens: the token budget with ``use_dynamic_bsz``,
  else micro-batch x (prompt + response); under Ulysses 1/sp of those rows' tokens, a budget being per rank),
  and the vocabulary logits of that micro-batch (none with ``use_fused_kernels`` or Ulysses, which score
  tokens from hidden states in chunks).
- the hand-over: one tensor at a time, in the generation dtype plus its fp32 gather; to a rollout pool also the
  channel's buckets (a sender two of ``update_weights_bucket_megabytes``, a generation worker two per
  sender); the Hugging Face export:
  a rank's pending file twice (safetensors serialises a copy) and the tensor in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hybridrl.algorithms.roles import ROLLOUT, active_roles, ulysses_size
from hybridrl.cluster.pools import ResourcePoolManager
from hybridrl.config.choices import DType, Precision, RolloutName, ShardingStrategy, Strategy
from hybridrl.config.schema import Config, FSDPConfig, TrainedRoleConfig
from hybridrl.planning.shape import ModelShape, read_shape

GB = 1e9
_BYTES = {DType.float32: 4, DType.bfloat16: 2, DType.float16: 2}
#: A GPU worker's memory before any model: the CUDA context, NCCL's and cuBLAS's buffers, the allocator's
#: slack (measured 1.2-1.6 GB on an H200 with torch 2.11).
GPU_RUNTIME_BYTES = 1.6 * GB
#: A CPU worker's resident memory after importing torch, transformers and Ray (0.7-0.9 GB measured).
CPU_RUNTIME_BYTES = 0.9 * GB


@dataclass(frozen=True)
class Device:
    """Where each rank runs: ``cuda`` or ``cpu``, the memory a rank may use, and its runtime's share."""

    kind: str
    memory_bytes: float
    runtime_bytes: float | None = None

    @property
    def gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def runtime(self) -> float:
        if self.runtime_bytes is not None:
            return self.runtime_bytes
        return GPU_RUNTIME_BYTES if self.gpu else CPU_RUNTIME_BYTES


@dataclass(frozen=True)
class Phase:
    """One phase's peak per rank, and what makes it up (name -> bytes)."""

    name: str
    parts: dict[str, float]

    @property
    def bytes(self) -> float:
        return sum(self.parts.values())


@dataclass(frozen=True)
class GroupPlan:
    """A pool's workers (the roles that share their processes) and each phase's peak per rank."""

    pool: str
    roles: tuple[str, ...]
    world_size: int
    phases: list[Phase] = field(default_factory=list)

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.bytes)


@dataclass(frozen=True)
class Plan:
    groups: list[GroupPlan]
    device: Device

    @property
    def peak(self) -> tuple[GroupPlan, Phase]:
        group = max(self.groups, key=lambda g: g.peak.bytes)
        return group, group.peak

    @property
    def fits(self) -> bool:
        return self.peak[1].bytes <= self.device.memory_bytes


@dataclass(frozen=True)
class _Role:
    """One role's state on each rank of its group, in bytes."""

    name: str
    weights: float  # masters (trained) or frozen weights
    optimizer: float  # AdamW's moments (0 when frozen)
    gradients: float  # in its update only
    working: float  # gathered for a forward/backward beyond the shard
    offload_weights: bool
    offload_optimizer: bool
    always_offloaded: bool


def _shards(strategy: Strategy, fsdp: FSDPConfig, megatron_tp_pp: int, world_size: int) -> int:
    if strategy == Strategy.megatron:
        return megatron_tp_pp
    if fsdp.sharding_strategy == ShardingStrategy.NO_SHARD:
        return 1
    if fsdp.sharding_strategy == ShardingStrategy.HYBRID_SHARD:
        return min(fsdp.shard_group_size or world_size, world_size)
    return world_size


def _compute_bytes(precision: Precision) -> int:
    return 4 if precision == Precision.fp32 else 2


def _working(fsdp: FSDPConfig, strategy: Strategy, shape: ModelShape, params: int, compute: int, shards: int) -> float:
    """What a forward/backward gathers beyond the rank's shard: one layer (parameters and fp32 gradients),
    or the whole model with SHARD_GRAD_OP."""
    if strategy == Strategy.megatron or shards == 1:
        return 0.0
    if fsdp.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP:
        return params * compute + shape.layer_params * 4
    return shape.layer_params * (compute + 4)


def _trained(name: str, role: TrainedRoleConfig, shape: ModelShape, params: int, trained: int, world: int) -> _Role:
    megatron = role.parallel_config.megatron
    shards = _shards(role.strategy, role.fsdp, megatron.tp_size * megatron.pp_size, world)
    master = _BYTES.get(role.fsdp.model_dtype, 4)
    return _Role(
        name=name,
        weights=params * master / shards,
        optimizer=2 * trained * 4 / shards,
        gradients=trained * 4 / shards,
        working=_working(role.fsdp, role.strategy, shape, params, _compute_bytes(role.precision), shards),
        offload_weights=role.fsdp.param_offload,
        offload_optimizer=role.fsdp.optimizer_offload,
        always_offloaded=role.fsdp.cpu_offload,
    )


def _frozen(
    name: str,
    fsdp: FSDPConfig,
    strategy: Strategy,
    shape: ModelShape,
    params: int,
    world: int,
    tp_pp: int,
    device: Device,
    param_offload: bool,
) -> _Role:
    shards = _shards(strategy, fsdp, tp_pp, world)
    weight_bytes = _BYTES.get(fsdp.model_dtype, 2 if device.gpu else 4)
    return _Role(
        name=name,
        weights=params * weight_bytes / shards,
        optimizer=0.0,
        gradients=0.0,
        working=_working(fsdp, strategy, shape, params, weight_bytes, shards),
        offload_weights=param_offload,
        offload_optimizer=False,
        always_offloaded=fsdp.cpu_offload,
    )


def _tokens(dynamic: bool, budget: int, micro_batch: int, sequence: int, sp: int = 1) -> int:
    """Tokens one rank runs per micro-batch: a token budget is per rank (under Ulysses each of the ``sp`` ranks
    of a group holds 1/sp of the micro-batch's tokens, verl's meaning), a row count covers whole rows."""
    return budget if dynamic else -(-micro_batch * sequence // sp)


def _ulysses(cfg: Config, name: str) -> int:
    """The Ulysses group size of a planned role (``actor`` is the actor_rollout role's engine)."""
    return ulysses_size(cfg, "actor_rollout" if name == "actor" else name)[1]


def plan_memory(cfg: Config, shape: ModelShape, device: Device, hf_max_shard_bytes: int | None = None) -> Plan:
    """Each pool's per-rank bytes in every phase of a step (see the module docstring)."""
    roles = active_roles(cfg)
    pools = ResourcePoolManager.from_config(cfg.resource_pool, roles)
    shard_bytes = hf_max_shard_bytes if hf_max_shard_bytes is not None else cfg.trainer.hf_max_shard_mb * 2**20
    groups = []
    actor_workers = next(p.num_workers for p in pools.used_pools() if pools.mapping.get("actor_rollout") == p.name)
    for pool in pools.used_pools():
        here = tuple(role for role in roles if pools.mapping.get(role) == pool.name)
        generates = ("actor_rollout" in here and ROLLOUT not in roles) or ROLLOUT in here
        group = _Group(cfg, shape, device, pool.num_workers, _states(cfg, shape, device, here, pool.num_workers))
        if generates:
            group.engine = _engine(cfg, shape, device, group.gen_bytes, pool.num_workers)
        if ROLLOUT in roles and ("actor_rollout" in here or ROLLOUT in here):
            group.channel = _channel(cfg, shape, group.gen_bytes, actor_workers, sender="actor_rollout" in here)
        groups.append(GroupPlan(pool.name, here, pool.num_workers, group.phases(shard_bytes)))
    return Plan(groups, device)


def _states(cfg: Config, shape: ModelShape, device: Device, roles: tuple[str, ...], world: int) -> dict[str, _Role]:
    """The state of each role that has a model on these workers."""
    arr = cfg.actor_rollout_ref
    actor, lora = arr.actor, arr.model.lora_rank
    state: dict[str, _Role] = {}
    if "actor_rollout" in roles:
        trained = shape.lora_params(lora) if lora else shape.params
        state["actor"] = _trained("actor", actor, shape, shape.params + (trained if lora else 0), trained, world)
    if "ref" in roles:
        tp_pp = actor.parallel_config.megatron.tp_size * actor.parallel_config.megatron.pp_size
        offload = arr.ref.param_offload
        state["ref"] = _frozen("ref", actor.fsdp, actor.strategy, shape, shape.params, world, tp_pp, device, offload)
    if "critic" in roles:
        params = shape.value_model_params
        state["critic"] = _trained("critic", cfg.critic, shape, params, params, world)
    if "reward_model" in roles:
        rm, params = cfg.reward_model, shape.value_model_params
        state["reward_model"] = _frozen(
            "reward_model", rm.fsdp, Strategy.fsdp, shape, params, world, 1, device, rm.fsdp.param_offload
        )
    return state


@dataclass
class _Group:
    """One pool's workers while planning: the roles' states, the generation engine, the phases they make."""

    cfg: Config
    shape: ModelShape
    device: Device
    world: int
    state: dict[str, _Role]
    engine: dict[str, float] = field(default_factory=dict)
    channel: dict[str, float] = field(default_factory=dict)  # a rollout pool's hand-over: buckets held

    @property
    def gen_bytes(self) -> int:
        precision = self.cfg.actor_rollout_ref.actor.precision
        return _BYTES.get(
            self.cfg.actor_rollout_ref.rollout.dtype, 2 if self.device.gpu or precision == Precision.bf16 else 4
        )

    def resident(self, phase: str, using: str | None = None, updating: str | None = None) -> dict[str, float]:
        """What stays in device memory through ``phase``: offloaded state only in the phases that use it."""
        parts = {"runtime": self.device.runtime}
        for name, role in self.state.items():
            if not role.always_offloaded and (not role.offload_weights or name == using):
                parts[f"{name} weights"] = role.weights
            if role.optimizer and not role.always_offloaded and (not role.offload_optimizer or name == updating):
                parts[f"{name} optimizer"] = role.optimizer
        released = self.device.gpu and self.cfg.actor_rollout_ref.rollout.free_cache_engine
        if self.engine and (not released or phase in ("hand-over", "generate")):
            parts["generation weights"] = self.engine["weights"]
        return parts

    def phases(self, shard_bytes: int) -> list[Phase]:
        cfg, shape, state = self.cfg, self.shape, self.state
        sequence = cfg.data.max_prompt_length + cfg.data.max_response_length
        tensor = shape.largest_tensor
        out = []
        if "actor" in state:
            pages = state["actor"].weights  # the file pages of the slices it reads, mapped while it reads them
            out.append(Phase("load", {**self.resident("load", "actor"), "file pages": pages, "one tensor": tensor * 4}))
        if self.engine or self.channel:
            bucket = tensor * (self.gen_bytes + 4)
            parts = {**self.resident("hand-over", "actor"), "one tensor": bucket, **self.channel}
            out.append(Phase("hand-over", parts))
        if self.engine:
            out.append(Phase("generate", {**self.resident("generate"), "KV cache": self.engine["kv"]}))
        for name, phase, tokens in _forwards(cfg, state, sequence):
            parts = {**self.resident(phase, name), "gathered layer": state[name].working}
            out.append(Phase(phase, {**parts, **_activations(shape, cfg, name, tokens, update=False)}))
        for name in ("actor", "critic"):
            if name in state:
                role, phase = state[name], f"update {name}"
                parts = {
                    **self.resident(phase, name, name),
                    "gradients": role.gradients,
                    "gathered layer": role.working,
                }
                tokens = _update_tokens(cfg, name, sequence)
                out.append(Phase(phase, {**parts, **_activations(shape, cfg, name, tokens, update=True)}))
        if "actor" in state:
            pending = min(shard_bytes, state["actor"].weights + tensor * 4)
            parts = {**self.resident("export", "actor"), "pending file x2": 2 * pending, "one tensor": tensor * 4}
            out.append(Phase("export", parts))
        return out


def _engine(cfg: Config, shape: ModelShape, device: Device, gen_b: int, world: int) -> dict[str, float]:
    """The generation engine's weights and KV cache per rank."""
    rollout, data = cfg.actor_rollout_ref.rollout, cfg.data
    sequence = data.max_prompt_length + data.max_response_length
    tp = rollout.tensor_model_parallel_size if rollout.name != RolloutName.hf else 1
    if device.gpu and rollout.name != RolloutName.hf:
        # vLLM and SGLang take their share of the device for weights, KV cache and activations.
        share = rollout.gpu_memory_utilization * (device.memory_bytes + device.runtime)
        weights = shape.params * gen_b / tp
        return {"weights": weights, "kv": max(share - weights, 0.0)}
    rows = max(1, data.train_batch_size * rollout.n // max(world // tp, 1))
    if rollout.name == RolloutName.hf:
        rows = min(rows, max(1, rollout.max_tokens_per_generate // sequence))
    else:  # vLLM on a CPU sizes its cache to what the run asks, within a quarter of the host's memory
        rows = rollout.max_num_seqs
    kv = rows * sequence * shape.kv_bytes_per_token(gen_b) / tp
    if not device.gpu and rollout.name != RolloutName.hf:
        kv = min(2 * kv, device.memory_bytes / 4)
    return {"weights": shape.params * gen_b / tp, "kv": kv}


def _channel(cfg: Config, shape: ModelShape, gen_b: int, actor_workers: int, sender: bool) -> dict[str, float]:
    """The buckets a rollout pool's hand-over holds (``generation.weight_channel``): a sender two of its own
    (one going, one filling), a generation worker two from each sender (one waiting to load, one arriving);
    never more than the model."""
    rollout = cfg.actor_rollout_ref.rollout
    senders = min(rollout.weight_senders or actor_workers, actor_workers)
    bucket = rollout.update_weights_bucket_megabytes * 2**20
    model = shape.params * gen_b
    if sender:
        return {"send buckets": min(2 * bucket, model / senders)}
    return {"received buckets": min(2 * senders * bucket, model)}


def _forwards(cfg: Config, state: dict[str, _Role], sequence: int) -> list[tuple[str, str, int]]:
    """(role, phase, tokens per micro-batch) of each forward-only pass of a step."""
    rollout, ref, critic = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref, cfg.critic
    out = []
    if "actor" in state:
        out.append(
            (
                "actor",
                "log-probs",
                _tokens(
                    rollout.log_prob_use_dynamic_bsz,
                    rollout.log_prob_max_token_len_per_gpu,
                    rollout.log_prob_micro_batch_size_per_gpu,
                    sequence,
                    _ulysses(cfg, "actor"),
                ),
            )
        )
    if "ref" in state:
        out.append(
            (
                "ref",
                "ref",
                _tokens(
                    ref.log_prob_use_dynamic_bsz,
                    ref.log_prob_max_token_len_per_gpu,
                    ref.log_prob_micro_batch_size_per_gpu,
                    sequence,
                    _ulysses(cfg, "ref"),
                ),
            )
        )
    if "critic" in state:
        out.append(
            (
                "critic",
                "values",
                _tokens(
                    critic.use_dynamic_bsz,
                    critic.forward_max_token_len_per_gpu,
                    critic.forward_micro_batch_size_per_gpu,
                    sequence,
                    _ulysses(cfg, "critic"),
                ),
            )
        )
    if "reward_model" in state:
        rm = cfg.reward_model
        out.append(("reward_model", "reward model", rm.micro_batch_size_per_gpu * rm.max_length))
    return out


def _update_tokens(cfg: Config, name: str, sequence: int) -> int:
    role = cfg.actor_rollout_ref.actor if name == "actor" else cfg.critic
    return _tokens(
        role.use_dynamic_bsz,
        role.ppo_max_token_len_per_gpu,
        role.ppo_micro_batch_size_per_gpu,
        sequence,
        _ulysses(cfg, name),
    )


def _activations(shape: ModelShape, cfg: Config, name: str, tokens: int, update: bool) -> dict[str, float]:
    """A micro-batch's activations (all layers' in an update, one layer's in a forward without autograd) on
    one rank (``tokens``: this rank's, 1/sp of the micro-batch's under Ulysses) and its vocabulary logits
    (only the policy's roles have a vocabulary head; none with fused kernels, nor under Ulysses, which scores
    tokens from the hidden states)."""
    arr = cfg.actor_rollout_ref
    if name in ("actor", "ref"):
        precision, checkpointed, fused = (
            arr.actor.precision,
            arr.model.enable_gradient_checkpointing,
            arr.model.use_fused_kernels,
        )
    elif name == "critic":
        precision, checkpointed, fused = cfg.critic.precision, cfg.critic.model.enable_gradient_checkpointing, True
    else:
        precision, checkpointed, fused = cfg.reward_model.precision, False, True
    act = _compute_bytes(precision)
    if update:
        activations = tokens * shape.activation_bytes_per_token(act, checkpointed)
    else:
        activations = tokens * (6 * shape.hidden + 2 * shape.kv_dim + 4 * shape.ffn) * act
    # Logits at the positions that predict response tokens only (logits_to_keep): in the compute dtype, their
    # fp32 log-softmax and, in an update, its gradient.
    data = cfg.data
    scored = tokens * data.max_response_length / (data.max_prompt_length + data.max_response_length)
    logits = 0 if fused or _ulysses(cfg, name) > 1 else scored * shape.vocab * (act + (8 if update else 4))
    return {"activations": activations, "logits": logits}


def run_plan(cfg: Config, model_path: str, device_kind: str) -> Plan:
    """The plan a run logs at its start and sets its measured peaks against (``perf/<group>/peak_vs_plan``):
    peaks only, the device's size is not asked. A GPU's allocator peak leaves the CUDA context out (runtime
    0); a CPU's resident set holds the imported libraries (the runtime term)."""
    device = Device(device_kind, float("inf"), 0.0 if device_kind == "cuda" else None)
    return plan_memory(cfg, read_shape(model_path), device)
