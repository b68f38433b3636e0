"""The whole tree: one section per top-level key, and the checks that relate two of them."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.schema.algorithm import AlgorithmConfig
from hybridrl.config.schema.async_training import AsyncTrainingConfig
from hybridrl.config.schema.data import DataConfig
from hybridrl.config.schema.fields import section
from hybridrl.config.schema.reward import CustomRewardFunctionConfig, RewardConfig, RewardModelConfig
from hybridrl.config.schema.roles import CRITIC_FOLLOWS_ACTOR, ActorRolloutRefConfig, CriticConfig
from hybridrl.config.schema.trainer import ResourcePoolConfig, TrainerConfig


@dataclass(frozen=True)
class Config:
    data: DataConfig = section(DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = section(ActorRolloutRefConfig)
    critic: CriticConfig = section(CriticConfig)
    algorithm: AlgorithmConfig = section(AlgorithmConfig)
    reward_model: RewardModelConfig = section(RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = section(
        CustomRewardFunctionConfig, "a user's reward function, used for every data_source (verl's keys)"
    )
    reward: RewardConfig = section(RewardConfig)
    resource_pool: ResourcePoolConfig = section(ResourcePoolConfig)
    trainer: TrainerConfig = section(TrainerConfig)
    async_training: AsyncTrainingConfig = section(
        AsyncTrainingConfig, "fully asynchronous training (verl's fully_async_policy recipe keys)"
    )

    def problems(self) -> list[str]:
        """Every single value out of its range, each section's own and those read against another section's,
        so that one launch reports them all."""
        return [
            *self.data.problems("data"),
            *self.actor_rollout_ref.problems("actor_rollout_ref"),
            *self._critic_problems(),
            *self.algorithm.problems("algorithm"),
            *self.reward_model.problems("reward_model"),
            *self.reward.problems("reward"),
            *self.trainer.problems("trainer"),
            *self.async_training.problems("async_training"),
            *self._overlong_buffer_problems(),
        ]

    def _critic_problems(self) -> list[str]:
        """The critic's own, less those of a value it shares with the actor (by default it follows the actor's):
        one bad value is reported once, under the actor's key."""
        actor = self.actor_rollout_ref.actor
        shared = tuple(
            f"critic.{key}=" for key in CRITIC_FOLLOWS_ACTOR if getattr(self.critic, key) == getattr(actor, key)
        )
        return [problem for problem in self.critic.problems("critic") if not problem.startswith(shared)]

    def _overlong_buffer_problems(self) -> list[str]:
        """DAPO's length-penalty buffer must fit in the response length it counts back from."""
        buffer, max_length = self.reward_model.overlong_buffer, self.data.max_response_length
        if buffer.enable and not 0 < buffer.len <= max_length:
            return [
                f"reward_model.overlong_buffer.len={buffer.len} must lie in (0, data.max_response_length={max_length}] "
                f"when overlong_buffer.enable=true."
            ]
        return []
