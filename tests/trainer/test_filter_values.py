"""DAPO's filter metric (``algorithm.filter_groups.metric``): the sequence's reward, or a value the reward
function returned in its dict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridrl.protocol import Batch
from hybridrl.trainer.rollouts import REWARD_EXTRA, filter_values


def _batch() -> Batch:
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.5], [0.0, 0.0]])
    return Batch.from_dict(
        tensors={"token_level_scores": scores},
        non_tensors={REWARD_EXTRA + "acc": np.array([1.0, 0.0, 0.0])},
    )


@pytest.mark.parametrize("metric", [None, "seq_reward", "seq_final_reward", "score"])
def test_the_sequence_reward_names(metric):
    assert filter_values(_batch(), metric).tolist() == [1.0, 0.5, 0.0]


def test_a_key_of_the_reward_functions_dict():
    assert filter_values(_batch(), "acc").tolist() == [1.0, 0.0, 0.0]


def test_a_key_the_reward_function_does_not_return_names_those_it_does():
    with pytest.raises(ValueError, match=r"metric=pred: the reward function returned no 'pred' .*\['acc'\]"):
        filter_values(_batch(), "pred")
