"""The Megatron-style rank grid and the checks of a layout against a model: pure arithmetic, no torch, so the
config checks can use it before anything starts.

The rank layout is Megatron's: tensor-parallel ranks are adjacent (the fastest links), then data parallel,
then pipeline stages (``rank = (pp * dp_size + dp) * tp_size + tp``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MegatronLayout:
    """Where one rank sits in the (pp, dp, tp) grid."""

    world_size: int
    tp_size: int
    pp_size: int
    rank: int

    @property
    def dp_size(self) -> int:
        return self.world_size // (self.tp_size * self.pp_size)

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def dp_rank(self) -> int:
        return (self.rank // self.tp_size) % self.dp_size

    @property
    def pp_rank(self) -> int:
        return self.rank // (self.tp_size * self.dp_size)

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    @property
    def collects(self) -> bool:
        """The one rank per data-parallel replica whose results the driver gathers."""
        return self.tp_rank == 0 and self.is_last_stage


def megatron_fit_errors(
    role: str,
    *,
    workers: int,
    tp_size: int,
    pp_size: int,
    num_heads: int,
    num_kv_heads: int,
    num_layers: int,
    tied_embeddings: bool = False,
    has_tp_plan: bool = True,
    model_type: str = "",
) -> list[str]:
    """Why this tp/pp layout cannot run this model on ``workers`` ranks (empty when it can)."""
    errors = []
    key = f"{role}.parallel_config.megatron"
    if tp_size < 1 or pp_size < 1:
        return [f"{key}: tp_size ({tp_size}) and pp_size ({pp_size}) must be at least 1."]
    if num_heads % tp_size or num_kv_heads % tp_size:
        errors.append(
            f"{key}.tp_size={tp_size} must divide the model's {num_heads} attention heads and "
            f"{num_kv_heads} key/value heads. Pick a common divisor, e.g. "
            f"{max(d for d in range(1, num_kv_heads + 1) if num_heads % d == 0 and num_kv_heads % d == 0)}."
        )
    if pp_size > num_layers:
        errors.append(
            f"{key}.pp_size={pp_size} exceeds the model's {num_layers} layers: every pipeline stage "
            f"needs at least one layer. Use pp_size <= {num_layers}."
        )
    if workers % (tp_size * pp_size):
        errors.append(
            f"{role}: tp_size x pp_size = {tp_size} x {pp_size} = {tp_size * pp_size} must divide the "
            f"role's {workers} workers (dp x tp x pp = workers). Resize the pool or the layout."
        )
    if tp_size > 1 and not has_tp_plan:
        errors.append(
            f"{key}.tp_size={tp_size}: the '{model_type}' model declares no tensor-parallel plan "
            f"(base_model_tp_plan); use tp_size=1 or strategy=fsdp for it."
        )
    if tied_embeddings and pp_size > 1:
        errors.append(
            f"{key}.pp_size={pp_size}: the model ties its input and output embeddings, which would "
            f"live on different pipeline stages; pipeline parallel supports untied models only. "
            f"Use tp_size instead, or strategy=fsdp."
        )
    return errors
