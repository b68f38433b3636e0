"""Render docs/CONFIG.md's "Coming from verl" section from the rules, so that the page and the loader never
disagree: ``python -m hybridrl.config.compat.verl.render`` prints it, and tests/config/test_verl_keys.py
fails when the page's section differs from this output."""

from __future__ import annotations

import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hybridrl.config.compat.verl.keys import (
    RENAMES,
    VERL_DEFAULTS,
    VERL_KEYS,
    VERL_RELEASE,
    VERL_RULES,
    RuleKind,
    VerlRule,
)
from hybridrl.config.schema import Config

INTRO = """\
## Coming from verl

verl's `ppo_trainer.yaml` at {release} has {total} leaf keys (its generated full config,
`verl/trainer/config/_generated_ppo_trainer.yaml`; the keys with verl's defaults are
`hybridrl/config/compat/verl/defaults.yaml`, read by `hybridrl/config/compat/verl/keys.py`). A verl command
line or YAML file runs here as written: {same} of the {total} keys work unchanged under the same name (each
has its row in the sections above), and the other {other} keys are answered by the {rules} rules below.
Every key a launch does not take is listed in one error before anything starts, each with its answer.

Same name, different behaviour (checked key by key against verl's config; the rest of the same-name keys
mean what they mean in verl):

- `actor_rollout_ref.actor.clip_ratio_low` / `clip_ratio_high` default to `null`, which means
  `clip_ratio`. verl sets both to 0.2, so there `clip_ratio` alone changes nothing; a command that sets
  `clip_ratio_high` (DAPO's clip-higher) clips the same in both.
- `reward_model.enable=true` adds the rule reward to the model's score (`reward_model.use_rule_reward`,
  default `true`); verl uses the model's score alone unless a custom reward function is given. Set
  `reward_model.use_rule_reward=false` for verl's behaviour.
- `strategy: fsdp` is FSDP2 here (verl's `fsdp` is FSDP1; its `fsdp2` means the same as `fsdp` here);
  `strategy: megatron` is hybridrl's own tensor/sequence/pipeline-parallel engine on DTensor, not Megatron-LM.
- Closed sets are smaller: `rollout.name` is `hf`, `vllm` or `sglang` (generating inside the actor's
  workers, in verl's sync and async modes alike); no `kl_penalty=full`, fewer advantage estimators and
  policy losses, no `data.truncation=middle`, no `npu` device, trackers console, jsonl, tensorboard, wandb
  and mlflow. A value outside the set is refused with the list.
- `data.seed` defaults to 1 (verl's `null` shuffles unseeded); `reward_model.max_length` defaults to 1024
  and cuts the start of longer texts (verl's `null`: no limit).
- The critic's `ppo_mini_batch_size` and `ppo_epochs` follow the actor's, as in verl; its micro-batch and
  forward sizes, `shuffle` and `use_dynamic_bsz` have their own defaults (verl copies the actor's), and
  `rollout/ref.log_prob_use_dynamic_bsz` and `log_prob_max_token_len_per_gpu` do not follow the actor's.
  Set them where a verl command relies on the copy. With `use_dynamic_bsz=true` the micro-batch sizes are
  not used (token budgets cut the micro-batches), as in verl.
- Sizes verl leaves to the user (`data.train_batch_size`, lengths, `ppo_mini_batch_size`) and
  `model.enable_gradient_checkpointing`, `model.use_remove_padding`, `data.filter_overlong_prompts`,
  `trainer.test_freq`, `trainer.save_freq`, `trainer.logger` have hybridrl's own defaults.

Outputs are where verl puts them: checkpoints in `trainer.default_local_dir` (default
`<trainer.output_dir>/checkpoints`, and `output_dir` defaults to `outputs/<project_name>/<experiment_name>`)
as `global_step_<N>/actor`, `global_step_<N>/critic` and `latest_checkpointed_iteration.txt`, every one kept
unless `trainer.max_ckpt_to_keep` says otherwise; `console` prints verl's `step:N - key:value - ...` line
each step; `metrics.jsonl` in the run directory is written whatever `trainer.logger` selects (it is what
`hybridrl report` and resume read), and a selected tracker whose package is missing (wandb, mlflow) is one
warning, not a stop.

How to read the table:

- A row's verl key is an exact key, or `prefix.*`: that key and every key under it (including keys set
  inside verl's dict-valued settings, such as `+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4`).
  Rows are tried top to bottom; the first that matches answers.
- **becomes `X`**: verl's spelling of hybridrl's `X`; the value moves there (through the value map shown,
  where the spellings differ), and the launch logs the translation once.
- **off at `v`**: a feature hybridrl does not have, or a key whose hybridrl counterpart means something
  else. It is accepted at verl's default `v`, `null` or `false` (the feature is then off in verl too, so
  the run is the same); any other value is refused with the answer.
- **ignored**: the key has no job here; accepted with any value and logged once.

| verl key | What hybridrl does | Answer |
|---|---|---|
"""


def _code(value: Any) -> str:
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return f"`{text}`".replace("|", "\\|")


def _handling(rule: VerlRule) -> str:
    kind = rule.kind
    if kind == RuleKind.RENAME:
        target, values = RENAMES[rule.pattern]
        if values is None:
            return f"becomes `{target}`"
        mapped = ", ".join(f"{_code(v)} → {_code(o)}" for v, o in values.items())
        return f"becomes `{target}` ({mapped})"
    if kind == RuleKind.IGNORED:
        return "ignored"
    if rule.pattern.endswith(".*"):
        return "off at verl's defaults"
    default = VERL_DEFAULTS.get(rule.pattern)
    if default not in (None, False, "", [], {}):
        return f"off at {_code(default)}"
    return "off at `null`/`false`"


def _answer(rule: VerlRule) -> str:
    return rule.answer.replace("|", "\\|")


def render_section() -> str:
    """docs/CONFIG.md's "Coming from verl" section (the page's last), from the key list and the rules."""
    schema = OmegaConf.structured(Config)
    same = sum(1 for key in VERL_KEYS if _is_schema_key(schema, key))
    intro = INTRO.format(
        release=VERL_RELEASE, total=len(VERL_KEYS), same=same, other=len(VERL_KEYS) - same, rules=len(VERL_RULES)
    )
    rows = [f"| `{rule.pattern}` | {_handling(rule)} | {_answer(rule)} |" for rule in VERL_RULES]
    return intro + "\n".join(rows) + "\n"


def _is_schema_key(schema: DictConfig, key: str) -> bool:
    """A leaf key of hybridrl's schema (a section is not)."""
    value = OmegaConf.select(schema, key, default=_ABSENT, throw_on_resolution_failure=False)
    return value is not _ABSENT and not isinstance(value, DictConfig)


_ABSENT = object()


if __name__ == "__main__":
    sys.stdout.write(render_section())
