"""The training configuration, typed: one frozen dataclass per section, every default and its one-line
documentation right beside the field, enums for closed sets of values.

This package is the one home of each key's type, default and meaning. The shipped ``ppo_trainer.yaml``
is rendered from it (``hybridrl.config.render``; a test keeps the two equal), and ``docs/CONFIG.md`` is
the long form. Components receive their own section (``ActorConfig``, ``FSDPConfig``, ...), never the
whole tree or a loose dict. The loaded config is read-only: code derives values from it (e.g. per-worker
batch sizes) instead of writing them back. Sets that grow by registration (advantage estimators, policy
losses, tasks, reward functions) are plain strings checked against their registries by ``hybridrl.preflight``.

Each section with range rules checks its own single values (``problems(at)``, ``at`` its dotted path); a
check that reads two sections sits on their nearest common parent, and ``Config.problems()`` gathers them all.
One module per concern; every name is re-exported here, so callers import from ``hybridrl.config.schema``.
"""

from hybridrl.config.schema.algorithm import (
    AlgorithmConfig,
    FilterGroupsConfig,
    KLControlConfig,
    RolloutCorrectionConfig,
)
from hybridrl.config.schema.async_training import AsyncTrainingConfig
from hybridrl.config.schema.data import DataConfig, file_list
from hybridrl.config.schema.engine import FSDPConfig, MegatronConfig, OptimConfig, ParallelConfig
from hybridrl.config.schema.fields import doc, section
from hybridrl.config.schema.model import CriticModelConfig, ModelConfig, TinyModelConfig
from hybridrl.config.schema.reward import (
    CustomRewardFunctionConfig,
    OverlongBufferConfig,
    RewardConfig,
    RewardModelConfig,
    RewardModelModelConfig,
)
from hybridrl.config.schema.roles import (
    ActorConfig,
    ActorRolloutRefConfig,
    CriticConfig,
    PolicyLossConfig,
    RefConfig,
    TrainedRoleConfig,
)
from hybridrl.config.schema.rollout import (
    AgentConfig,
    MultiTurnConfig,
    RolloutConfig,
    SamplingConfig,
    ValKwargsConfig,
)
from hybridrl.config.schema.root import Config
from hybridrl.config.schema.trainer import RayConfig, ResourcePoolConfig, TrainerConfig

__all__ = [
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AlgorithmConfig",
    "AsyncTrainingConfig",
    "Config",
    "CriticConfig",
    "CriticModelConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FSDPConfig",
    "FilterGroupsConfig",
    "KLControlConfig",
    "MegatronConfig",
    "ModelConfig",
    "OptimConfig",
    "OverlongBufferConfig",
    "ParallelConfig",
    "PolicyLossConfig",
    "RayConfig",
    "RefConfig",
    "ResourcePoolConfig",
    "RewardConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "MultiTurnConfig",
    "AgentConfig",
    "RolloutCorrectionConfig",
    "SamplingConfig",
    "TinyModelConfig",
    "TrainedRoleConfig",
    "TrainerConfig",
    "ValKwargsConfig",
    "doc",
    "file_list",
    "section",
]
