import pytest

from hybridrl.algorithms.roles import active_roles
from hybridrl.config.loader import ConfigError, load_config
from hybridrl.preflight.checks import load_and_check


@pytest.mark.parametrize(
    "overrides,roles",
    [
        ([], ["actor_rollout", "ref"]),  # the default run: GRPO, KL in the reward
        (["algorithm.adv_estimator=gae"], ["actor_rollout", "critic", "ref"]),
        (["algorithm.adv_estimator=grpo"], ["actor_rollout", "ref"]),
        (["algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=false"], ["actor_rollout"]),
        (
            [
                "algorithm.adv_estimator=rloo",
                "algorithm.use_kl_in_reward=false",
                "actor_rollout_ref.actor.use_kl_loss=true",
            ],
            ["actor_rollout", "ref"],
        ),
        (["algorithm.adv_estimator=remax", "algorithm.use_kl_in_reward=false"], ["actor_rollout"]),
    ],
)
def test_roles_follow_the_algorithm(overrides, roles):
    assert active_roles(load_config(overrides)) == roles


def test_roles_not_needed_need_no_pool():
    cfg = load_and_check(
        [
            "algorithm.adv_estimator=grpo",
            "algorithm.use_kl_in_reward=false",
            "resource_pool.pools.small={GPU: 1}",
            "resource_pool.mapping.critic=small",
        ]
    )
    assert active_roles(cfg) == ["actor_rollout"]


@pytest.mark.parametrize(
    "overrides,match",
    [
        (
            ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"],
            r"adv_estimator=grpo compares the samples of one prompt, so actor_rollout_ref.rollout.n \(1\) must be at least 2",
        ),
        (["algorithm.adv_estimator=rloo", "actor_rollout_ref.rollout.n=1"], r"rloo.*rollout.n \(1\)"),
        (
            ["algorithm.adv_estimator=gae", "critic.enable=false"],
            r"adv_estimator=gae needs a critic \(values\), but critic.enable=false",
        ),
        (
            ["algorithm.adv_estimator=grpo", "critic.enable=true"],
            r"critic.enable=true, but algorithm.adv_estimator=grpo",
        ),
        (
            ["algorithm.adv_estimator=gae", "algorithm.filter_groups.enable=true", "actor_rollout_ref.rollout.n=1"],
            r"filter_groups.*rollout.n >= 2 \(got 1\)",
        ),
        (
            ["actor_rollout_ref.actor.policy_loss.loss_mode=ppo2"],
            r"loss_mode='ppo2' is not valid; choose one of: cispo, geo_mean, gspo, vanilla",
        ),
        (["actor_rollout_ref.actor.clip_ratio_c=1.0"], r"clip_ratio_c=1.0 must be > 1"),
        (["actor_rollout_ref.actor.kl_loss_type=k9"], r"kl_loss_type='k9' is not valid"),
        (
            ["algorithm.adv_estimator=dapo"],
            r"adv_estimator='dapo' is not valid; choose one of: gae, grpo, reinforce_plus_plus",
        ),
    ],
)
def test_options_that_do_not_fit_are_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_and_check(overrides)


def test_every_estimator_loads():
    for name in ["gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"]:
        load_and_check([f"algorithm.adv_estimator={name}"])
