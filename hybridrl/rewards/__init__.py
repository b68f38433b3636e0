from hybridrl.rewards.registry import REWARD_FNS, get_reward_fn, register_reward, score_batch

# Importing these registers their reward functions under their data_source names.
from hybridrl.rewards import gsm8k, math_verify  # noqa: E402,F401  (registry first: they use it)
from hybridrl.rewards.custom import CustomRewardError, load_reward_fn  # noqa: E402

__all__ = ["REWARD_FNS", "CustomRewardError", "get_reward_fn", "load_reward_fn", "register_reward",
           "score_batch"]
