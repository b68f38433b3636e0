import pytest

from hybridrl.data.dataset import EpochSampler, PromptDataset
from hybridrl.data.tasks import make_task
from hybridrl.models.tiny import build_tokenizer


def test_tasks_are_deterministic():
    a = make_task("copy", num_digits=4).examples(20, seed=5)
    b = make_task("copy", num_digits=4).examples(20, seed=5)
    assert a == b and a[0].prompt.endswith("=") and len(a[0].prompt) == 5


def test_unknown_task_and_bad_kwargs():
    with pytest.raises(ValueError, match="valid tasks"):
        make_task("nope")
    with pytest.raises(ValueError, match="task_kwargs"):
        make_task("copy", digits=3)


def test_collate_left_pads_and_keeps_columns():
    tok = build_tokenizer()
    ds = PromptDataset(make_task("copy", num_digits=3).examples(4, seed=0), tok, max_prompt_length=8)
    batch = ds.collate([0, 1])
    assert batch.tensors["input_ids"].shape == (2, 4)
    assert list(batch.non_tensors["index"]) == [0, 1]
    assert tok.decode(batch.tensors["input_ids"][0]) == ds.examples[0].prompt


def test_overlong_prompt_is_an_error():
    tok = build_tokenizer()
    ds = PromptDataset(make_task("copy", num_digits=6).examples(2, seed=0), tok, max_prompt_length=4)
    with pytest.raises(ValueError, match=r"more than data.max_prompt_length=4"):
        ds.collate([0])


def test_sampler_epochs_and_state():
    s = EpochSampler(size=10, batch_size=4, shuffle=True, seed=1)
    first = [s.next_indices() for _ in range(2)]
    assert len(set(first[0]) | set(first[1])) == 8
    state = s.state_dict()
    nxt = s.next_indices()  # tail of 2 dropped: new epoch
    assert s.epoch == 1
    t = EpochSampler(size=10, batch_size=4, shuffle=True, seed=1)
    t.load_state_dict(state)
    assert t.next_indices() == nxt
