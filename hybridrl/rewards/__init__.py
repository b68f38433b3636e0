from hybridrl.rewards.registry import REWARD_FNS, get_reward_fn, register_reward, score_batch

__all__ = ["REWARD_FNS", "get_reward_fn", "register_reward", "score_batch"]
