# Importing these registers their reward functions under their data_source names.
from hybridrl.rewards import gsm8k, math_verify  # noqa: F401  (registry first: they use it)
from hybridrl.rewards.custom import CustomRewardError, load_reward_fn
from hybridrl.rewards.registry import REWARD_FNS, get_reward_fn, register_reward, score_batch

__all__ = ["REWARD_FNS", "CustomRewardError", "get_reward_fn", "load_reward_fn", "register_reward", "score_batch"]
