"""Fully asynchronous training's generator (``trainer/rollouter.py``): its quota, staleness bound and data
position, with the real rollout role and hf engine in this process (only the Ray transport is left out)."""

from __future__ import annotations

import torch

from hybridrl.config.loader import load_config
from hybridrl.data.dataset import EpochSampler, build_datasets
from hybridrl.engine.context import WorkerContext
from hybridrl.models.loader import load_causal_lm, load_tokenizer
from hybridrl.protocol import Batch
from hybridrl.trainer.async_samples import Sample, SampleGroup, finished_batch
from hybridrl.trainer.rollouter import Rollouter
from hybridrl.workers.rollout import RolloutRole
from tests.tiny_models import tiny

N = 2  # samples per prompt
STEP = 4  # prompts a step (require_batches x ppo_mini_batch_size)


class InProcessRollout:
    """``RolloutClient``'s calls on a rollout role in this process."""

    def __init__(self, role: RolloutRole) -> None:
        self.role = role

    def generate(self, batch: Batch) -> Batch:
        return self.role.generate(batch)

    def interrupt(self, call: int) -> None:
        self.role.interrupt(call)


def _rollouter(tmp_path, staleness: float, partial: bool = True) -> Rollouter:
    model_path = tiny(tmp_path / "model")
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_path}",
            "async_training.enable=true",
            f"async_training.staleness_threshold={staleness}",
            "async_training.trigger_parameter_sync_step=1",
            f"async_training.partial_rollout={str(partial).lower()}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={STEP}",
            f"actor_rollout_ref.rollout.n={N}",
            "data.max_response_length=12",
            "data.train_size=64",
        ]
    )
    role = RolloutRole.from_config(cfg, WorkerContext(0, 1, torch.device("cpu"), None, model_path, model_path))
    role.generation.engine.load_weights(load_causal_lm(model_path).state_dict().items())
    role.weights.has_weights = True
    dataset, _ = build_datasets(cfg.data, load_tokenizer(model_path))
    sampler = EpochSampler(len(dataset), cfg.data.train_batch_size, cfg.data.shuffle, cfg.data.seed)
    return Rollouter(cfg, InProcessRollout(role), dataset, sampler)  # type: ignore[arg-type]


def _indices(batch: Batch) -> list[int]:
    """The prompts of a step, one per group."""
    return [int(i) for i in batch.non_tensors["index"][::N]]


def test_staleness_zero_generates_one_step_at_a_time(tmp_path):
    rollouter = _rollouter(tmp_path, staleness=0.0, partial=False)
    rollouter.start()
    try:
        batch, metrics = rollouter.take()
        assert len(batch) == STEP * N
        assert list(batch.non_tensors["uid"][::N]) == [f"1.0.{i}" for i in range(STEP)]  # the first draw, in order
        assert rollouter.started == STEP  # the quota: (0 + 1 + 0) windows; nothing more before a sync
        assert metrics["fully_async/max_version_gap"] == 0.0
        rollouter.sync(lambda: None)
        batch, metrics = rollouter.take()
        assert list(batch.non_tensors["uid"][::N]) == [f"2.0.{i}" for i in range(STEP)]
        assert metrics["fully_async/min_sample_weight_version"] == 1.0  # generated after the sync
    finally:
        rollouter.stop()


def test_groups_more_than_the_bound_behind_are_dropped_and_generated_again(tmp_path):
    rollouter = _rollouter(tmp_path, staleness=1.0)
    rollouter.start()
    try:
        rollouter.sync(lambda: None)
        rollouter.sync(lambda: None)  # version 2: whatever started at version 0 is 2 behind, over the bound of 1
        batch, metrics = rollouter.take()
        assert metrics["fully_async/min_sample_weight_version"] >= 1.0
        assert metrics["fully_async/max_version_gap"] <= 1.0
        # (0 + 1 + 1) windows started at version 0, every one of them dropped before it could be trained
        assert metrics["fully_async/count/dropped_stale_samples"] == 2 * STEP * N
        assert len(batch) == STEP * N
    finally:
        rollouter.stop()


def test_a_checkpoint_resumes_without_losing_or_repeating_a_prompt(tmp_path):
    first = _rollouter(tmp_path, staleness=1.0)
    first.start()
    trained = []
    try:
        for _ in range(3):
            batch, _ = first.take()
            trained += _indices(batch)
            first.sync(lambda: None)
        state = first.state_dict()  # groups in flight and ready now are not trained yet: generated again
    finally:
        first.stop()
    second = _rollouter(tmp_path, staleness=1.0)
    second.load_state_dict(state)
    second.start()
    try:
        for _ in range(3):
            batch, _ = second.take()
            trained += _indices(batch)
            second.sync(lambda: None)
    finally:
        second.stop()
    # The first six draws' prompts in the sampler's order, each trained once, whatever order groups finished in.
    sampler = EpochSampler(64, STEP, True, first.cfg.data.seed)
    drawn = [i for _ in range(6) for i in sampler.next_indices()]
    assert len(trained) == len(set(trained)) == 6 * STEP
    assert set(trained) <= set(drawn + [i for _ in range(3) for i in sampler.next_indices()])
    assert set(drawn[: 3 * STEP]) <= set(trained)  # the oldest draws are complete


def test_a_steps_batch_has_the_layout_of_a_synchronous_generation(tmp_path):
    rollouter = _rollouter(tmp_path, staleness=0.0)
    samples = [Sample([5, 6], tokens=[7, 8, 1], log_probs=[-0.1, -0.2, -0.3], versions=[0, 0, 1], finished=True)]
    group = SampleGroup(1, 0, Batch.from_dict(non_tensors={"uid": ["1.0.0"]}), samples)
    batch = finished_batch([group], 0, 5, rollouter.dataset.tokenizer)
    t = batch.tensors
    assert t["input_ids"].tolist() == [[5, 6, 7, 8, 1, 0, 0]]
    assert t["response_mask"].tolist() == [[1, 1, 1, 0, 0]]
    assert t["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0, 0]]
    torch.testing.assert_close(t["rollout_log_probs"], torch.tensor([[-0.1, -0.2, -0.3, 0.0, 0.0]]))
    assert batch.non_tensors["uid"].tolist() == ["1.0.0"]
