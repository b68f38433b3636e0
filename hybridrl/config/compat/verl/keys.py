"""verl's configuration keys, and what hybridrl does with each one it does not take under the same name.

verl users bring command lines and YAML files written for verl's ``ppo_trainer.yaml``. Every leaf key of
that file either works here with verl's meaning (hybridrl's schema has it under the same name) or has a
rule (``VERL_ANSWERS``, read from the data file ``answers.yaml`` beside this module). A rule is one of three kinds, told by its one-line answer:

- ``use X``: with a rename in ``RENAMES``, verl's spelling of hybridrl's key X: the value moves there
  (through a value map where the spellings differ). Without one, X differs in meaning (a per-worker
  count, a shared setting), so the key is taken only at its off value (below) and otherwise refused.
- ``not supported yet: ...``: a feature hybridrl does not have. The key is accepted at its off value,
  verl's default or null/false (``critic.model.lora_rank=0``, ``use_torch_compile=false``), which leaves the
  feature off in verl too; any other value is refused with the answer.
- ``not needed in hybridrl: ...``: a key with no job here by design (``_target_``, ``use_legacy_worker_impl``);
  accepted whatever its value, and logged once.

``VERL_KEYS`` and ``VERL_DEFAULTS`` are the key list and defaults of ``VERL_RELEASE``, read from the data
file ``defaults.yaml`` beside this module (its ``# release:`` line names the release);
``tests/config/test_verl_keys.py`` checks that every key is covered and every rule used. docs/CONFIG.md
("Coming from verl") shows the rules as a table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

__all__ = [
    "RENAMES",
    "SCRIPT_DEFAULTS",
    "SCRIPT_KEYS",
    "SHARED",
    "VERL_ANSWERS",
    "VERL_DEFAULTS",
    "VERL_KEYS",
    "VERL_RELEASE",
    "Outcome",
    "RuleKind",
    "VerlRule",
    "verl_answer",
    "verl_rule",
]

_RELEASE_LINE = "# release:"


def _read_defaults() -> tuple[str, dict[str, Any]]:
    """The release named in ``defaults.yaml`` and its keys with verl's default values, in file order."""
    text = resources.files("hybridrl.config.compat.verl").joinpath("defaults.yaml").read_text(encoding="utf-8")
    release = next(line[len(_RELEASE_LINE) :].strip() for line in text.splitlines() if line.startswith(_RELEASE_LINE))
    return release, dict(yaml.safe_load(text))


VERL_RELEASE, VERL_DEFAULTS = _read_defaults()
# (pattern, answer), first match wins: the data file answers.yaml beside this module (its header says how
# patterns match).
VERL_ANSWERS: tuple[tuple[str, str], ...] = tuple(
    yaml.safe_load(
        resources.files("hybridrl.config.compat.verl").joinpath("answers.yaml").read_text(encoding="utf-8")
    ).items()
)
VERL_KEYS: tuple[str, ...] = tuple(VERL_DEFAULTS)
# Keys verl's example scripts set that its ppo_trainer.yaml lacks: its ppo_megatron_trainer.yaml's layout
# keys and the ``+key=value`` additions of the DAPO recipes (verl's defaults: off).
SCRIPT_DEFAULTS: dict[str, Any] = {
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 1,
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": 1,
    "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size": None,
    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": 1,
    "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size": 1,
    "critic.megatron.tensor_model_parallel_size": 1,
    "critic.megatron.pipeline_model_parallel_size": 1,
    "reward_model.reward_kwargs.overlong_buffer_cfg.enable": False,
    "reward_model.reward_kwargs.overlong_buffer_cfg.len": 0,
    "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
    "reward_model.reward_kwargs.overlong_buffer_cfg.log": False,
    "reward_model.reward_kwargs.max_resp_len": None,
    "actor_rollout_ref.model.torch_dtype": None,
}
SCRIPT_KEYS: tuple[str, ...] = tuple(SCRIPT_DEFAULTS)

_FSDP_RESHARD = {True: "FULL_SHARD", False: "SHARD_GRAD_OP"}
_FSDP_PREFETCH = {True: False, False: True}  # verl's forward_prefetch=true is limit_all_gathers=false here
_DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "auto": "auto",
}
_STRATEGIES = {"fsdp": "fsdp", "fsdp2": "fsdp", "megatron": "megatron"}


def _fsdp_renames(verl: str, ours: str, role: str) -> dict[str, tuple[str, dict[Any, Any] | None]]:
    """verl's ``fsdp_config`` section of a role, onto hybridrl's ``fsdp`` section (and the role's strategy)."""
    return {
        f"{verl}.param_offload": (f"{ours}.param_offload", None),
        f"{verl}.optimizer_offload": (f"{ours}.optimizer_offload", None),
        f"{verl}.offload_policy": (f"{ours}.cpu_offload", None),
        f"{verl}.reshard_after_forward": (f"{ours}.sharding_strategy", _FSDP_RESHARD),
        f"{verl}.forward_prefetch": (f"{ours}.limit_all_gathers", _FSDP_PREFETCH),
        f"{verl}.model_dtype": (f"{ours}.model_dtype", _DTYPES),
        f"{verl}.strategy": (f"{role}.strategy", _STRATEGIES),
        f"{verl}.ulysses_sequence_parallel_size": (f"{role}.ulysses_sequence_parallel_size", None),
    }


_REF_ULYSSES = "actor_rollout_ref.ref.ulysses_sequence_parallel_size"
_BUCKET_MB = "update_weights_bucket_megabytes"

# verl key -> (hybridrl key, verl value -> hybridrl value or None for the same value): the value moves there.
RENAMES: dict[str, tuple[str, dict[Any, Any] | None]] = {
    **_fsdp_renames("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.actor.fsdp", "actor_rollout_ref.actor"),
    **_fsdp_renames("critic.model.fsdp_config", "critic.fsdp", "critic"),
    "actor_rollout_ref.actor.fsdp_config.entropy_checkpointing": (
        "actor_rollout_ref.actor.entropy_checkpointing",
        None,
    ),
    "actor_rollout_ref.actor.optim.clip_grad": ("actor_rollout_ref.actor.grad_clip", None),
    "actor_rollout_ref.actor.use_fused_kernels": ("actor_rollout_ref.model.use_fused_kernels", None),
    "actor_rollout_ref.actor.use_remove_padding": ("actor_rollout_ref.model.use_remove_padding", None),
    "actor_rollout_ref.ref.fsdp_config.param_offload": ("actor_rollout_ref.ref.param_offload", None),
    f"actor_rollout_ref.rollout.checkpoint_engine.{_BUCKET_MB}": (f"actor_rollout_ref.rollout.{_BUCKET_MB}", None),
    "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size": (_REF_ULYSSES, None),
    "critic.optim.clip_grad": ("critic.grad_clip", None),
    "reward_model.model.fsdp_config.param_offload": ("reward_model.fsdp.param_offload", None),
    "reward_model.model.fsdp_config.reshard_after_forward": ("reward_model.fsdp.sharding_strategy", _FSDP_RESHARD),
    "reward_model.model.fsdp_config.forward_prefetch": ("reward_model.fsdp.limit_all_gathers", _FSDP_PREFETCH),
    "reward_model.num_workers": ("reward.num_workers", None),
    "data.tokenizer": ("actor_rollout_ref.model.tokenizer_path", None),
    "data.trust_remote_code": ("actor_rollout_ref.model.trust_remote_code", None),
    "trainer.log_val_generations": ("trainer.val_generations_to_log", None),
    "trainer.max_actor_ckpt_to_keep": ("trainer.max_ckpt_to_keep", None),
    "trainer.max_critic_ckpt_to_keep": ("trainer.max_ckpt_to_keep", None),
    "trainer.ray_wait_register_center_timeout": ("trainer.ray.start_timeout_s", None),
    "ray_kwargs.ray_init.num_cpus": ("trainer.ray.num_cpus", None),
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": (
        "actor_rollout_ref.actor.parallel_config.megatron.tp_size",
        None,
    ),
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": (
        "actor_rollout_ref.actor.parallel_config.megatron.pp_size",
        None,
    ),
    "critic.megatron.tensor_model_parallel_size": ("critic.parallel_config.megatron.tp_size", None),
    "critic.megatron.pipeline_model_parallel_size": ("critic.parallel_config.megatron.pp_size", None),
    **{
        f"reward_model.reward_kwargs.overlong_buffer_cfg.{name}": (f"reward_model.overlong_buffer.{name}", None)
        for name in ("enable", "len", "penalty_factor", "log")
    },
    "actor_rollout_ref.model.torch_dtype": ("actor_rollout_ref.actor.fsdp.model_dtype", _DTYPES),
}


# verl key -> the hybridrl key whose value it must equal: a setting the reference shares with the actor here
# (verl gives the reference its own). Equal values are accepted (checked once the config is merged).
SHARED: dict[str, str] = {
    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": "actor_rollout_ref.actor.parallel_config.megatron.tp_size",
    "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size": (
        "actor_rollout_ref.actor.parallel_config.megatron.pp_size"
    ),
}


class RuleKind(enum.Enum):
    RENAME = "rename"  # verl's spelling of a hybridrl key
    OFF_ONLY = "off_only"  # accepted at its off value, else refused with the answer
    IGNORED = "ignored"  # no job here: accepted whatever the value


@dataclass(frozen=True)
class Outcome:
    """What the loader does with one verl key's value: move it to ``target`` (a rename), accept it (``None``
    target, ``refusal`` None), accept it if the merged config's ``equals`` key has the same value, or refuse
    it with ``refusal``, one line."""

    target: str | None = None
    value: Any = None
    refusal: str | None = None
    equals: str | None = None  # accepted if the merged config's value of this hybridrl key is ``value``


@dataclass(frozen=True)
class VerlRule:
    pattern: str
    answer: str

    @property
    def kind(self) -> RuleKind:
        if self.pattern in RENAMES:
            return RuleKind.RENAME
        if self.answer.startswith("not needed in hybridrl"):
            return RuleKind.IGNORED
        return RuleKind.OFF_ONLY

    def apply(self, key: str, value: Any) -> Outcome:
        """The outcome for ``key=value`` (``key`` matched this rule)."""
        kind = self.kind
        if kind == RuleKind.IGNORED:
            return Outcome()
        if kind == RuleKind.RENAME:
            target, values = RENAMES[self.pattern]
            if values is None:
                return Outcome(target, value)
            for verl_value, ours in values.items():
                if _same(value, verl_value):
                    return Outcome(target, ours)
            spelled = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)
            return Outcome(refusal=f"'{key}={value}' is not one of verl's values ({spelled}); {self.answer}")
        if is_off(key, value):
            return Outcome()
        if key in SHARED:
            return Outcome(value=value, equals=SHARED[key])
        return Outcome(refusal=f"'{key}={value}' is a verl setting that hybridrl does not take: {self.answer}")


def _same(value: Any, other: Any) -> bool:
    """verl's value equality across spellings: ``True``/``true``, ``1``/``1.0``, case-blind strings."""
    if isinstance(value, bool) or isinstance(other, bool):
        return str(value).lower() == str(other).lower()
    if isinstance(value, int | float) and isinstance(other, int | float):
        return float(value) == float(other)
    if isinstance(value, str) and isinstance(other, str):
        return value.lower() == other.lower()
    return bool(value == other)


def is_off(key: str, value: Any) -> bool:
    """A feature's off value: null, false, empty, or verl's own default for ``key`` (the value that leaves
    verl's feature off, e.g. ``ulysses_sequence_parallel_size=1``, ``fsdp_size=-1``)."""
    if value is None or value is False or (isinstance(value, str | list | dict) and not value):
        return True
    defaults = VERL_DEFAULTS if key in VERL_DEFAULTS else SCRIPT_DEFAULTS
    return key in defaults and _same(value, defaults[key])


VERL_RULES: tuple[VerlRule, ...] = tuple(VerlRule(pattern, answer) for pattern, answer in VERL_ANSWERS)


def verl_rule(key: str) -> VerlRule | None:
    """The first rule that matches ``key``, or None. Meant for keys hybridrl's schema does not have (a key
    it has works as in verl and needs no rule)."""
    for rule in VERL_RULES:
        pattern = rule.pattern
        if pattern.endswith(".*"):
            if key == pattern[:-2] or key.startswith(pattern[:-1]):
                return rule
        elif key == pattern:
            return rule
    return None


def verl_answer(key: str) -> str | None:
    """The answer of the first rule that matches ``key``, or None."""
    rule = verl_rule(key)
    return rule.answer if rule is not None else None
