"""NO_SHARD's gradient reduction goes bucket by bucket: every gradient once, in order, one dtype a bucket, no
bucket past DDP's size unless one gradient alone is larger."""

from __future__ import annotations

import torch

from hybridrl.engine.fsdp.engine import _BUCKET_BYTES, _buckets


def test_buckets_cover_every_gradient_in_order_within_the_size():
    per_bucket = _BUCKET_BYTES // 4  # fp32 elements in one bucket
    grads = [
        torch.zeros(per_bucket // 2),
        torch.zeros(per_bucket // 2),  # fills the first bucket exactly
        torch.zeros(3),
        torch.zeros(2, dtype=torch.bfloat16),  # another dtype: a bucket of its own
        torch.zeros(per_bucket + 1),  # larger than a bucket: alone
        torch.zeros(5),
    ]
    buckets = list(_buckets(grads))
    assert [[id(g) for g in b] for b in buckets] == [
        [id(grads[0]), id(grads[1])],
        [id(grads[2])],
        [id(grads[3])],
        [id(grads[4])],
        [id(grads[5])],
    ]
    for bucket in buckets:
        assert len({g.dtype for g in bucket}) == 1
        assert len(bucket) == 1 or sum(g.numel() * g.element_size() for g in bucket) <= _BUCKET_BYTES
    assert list(_buckets([])) == []
