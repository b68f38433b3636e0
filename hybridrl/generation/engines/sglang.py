"""Generation with SGLang's offline ``Engine`` inside the actor's worker processes (verl's "hybrid engine").

Placement: the actor's ranks form replicas of ``rollout.tensor_model_parallel_size`` consecutive ranks.
The first rank of each replica (its leader) starts one SGLang ``Engine`` with ``tp_size`` equal to the
replica's size; SGLang spawns one scheduler process per tensor-parallel rank, and the leader points
them at the replica's own GPUs (``CUDA_VISIBLE_DEVICES`` set, for the spawn only, to the replica's
physical GPUs in rank order), so SGLang's tensor-parallel rank i shares the GPU of the replica's rank i
and generation needs no devices of its own. SGLang's offline ``Engine`` owns its tensor-parallel ranks as
processes it spawns (a variant with one fragment per training process, EngineFragment, was proposed in
sglang #2747/#2749 and is not part of the ``Engine`` API used here), which is why one process per replica
owns the engine; verl's in-process SGLang rollout, before it moved to server processes, had this shape.

The other ranks of a replica talk to SGLang through their leader over a gloo group of the replica:
- prompts: each rank's left-padded rows are gathered on the leader, generated in one batch, and each
  rank gets its own rows' tokens and log-probs back. Where the worker gives every rank of a replica the
  same rows (the layout vLLM's tensor parallelism needs), the leader generates them once.
- weights: every rank holds each full tensor on its own GPU during a hand-over (the training engine
  gathers it); each rank shares it as a CUDA IPC handle, the leader passes the replica's handles to
  ``update_weights_from_tensor``, and SGLang's rank i reads rank i's copy (on its own GPU) and keeps its
  shard. Handles travel in buckets of ``_BUCKET_BYTES``; every rank keeps its bucket alive until SGLang
  has read it.
- memory: with ``free_cache_engine`` the leader releases SGLang's weights (backed up to host memory) and
  KV cache while training, and every rank of the replica waits until its GPU's share is free.

A failure on a leader is raised on every rank of its replica (none is left waiting in a collective).
Needs SGLang >= 0.5.3 on CUDA GPUs (``enable_weights_cpu_backup``), and a replica within one node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.config.schema import RolloutConfig, SamplingConfig
from hybridrl.engine.dist import free_port
from hybridrl.generation.engines.base import (
    EngineSite,
    GenerationRequest,
    pad_responses,
    prompt_token_lists,
    rollout_batch,
    sampling_values,
)

logger = logging.getLogger(__name__)

_NEEDS = (
    "actor_rollout_ref.rollout.name=sglang needs SGLang on a CUDA GPU (pip install 'sglang[all]'); "
    "on CPU use rollout.name=hf or vllm"
)
# Tensors one hand-over bucket holds on every rank beyond the training state: one IPC round per bucket.
_BUCKET_BYTES = 512 << 20
# A replica's ranks wait in a collective while their leader generates the whole replica's batch.
_REPLICA_TIMEOUT = datetime.timedelta(hours=4)
# SGLang's memory-saver tags: what ``release`` frees, and what each ``resume`` brings back.
_WEIGHTS, _KV_CACHE = "weights", "kv_cache"
# Bytes per step of a tensor's fingerprint: bounds the int64 scratch it takes on the device (32 MiB).
_FINGERPRINT_CHUNK = 1 << 22


def replica_ranks(rank: int, world_size: int, tp: int) -> list[int]:
    """The ranks of ``rank``'s generation replica: ``tp`` consecutive ranks, the first one its leader."""
    if tp < 1 or world_size % tp:
        raise ValueError(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size ({tp}) must be >= 1 and divide the actor's "
            f"ranks ({world_size}); set it to a divisor of {world_size}."
        )
    first = rank // tp * tp
    return list(range(first, first + tp))


def physical_gpu(index: int, visible: str | None) -> str:
    """The physical GPU behind this process's CUDA device ``index`` (an entry of ``CUDA_VISIBLE_DEVICES``,
    an index or a UUID, as the spawned engine processes must name it)."""
    if not visible:
        return str(index)
    return visible.split(",")[index].strip()


def engine_kwargs(cfg: RolloutConfig, site: EngineSite) -> dict[str, Any]:
    """SGLang ``ServerArgs`` for one replica: our rollout settings under SGLang's names."""
    return dict(
        model_path=site.model_path,
        tp_size=cfg.tensor_model_parallel_size,
        dtype=str(site.dtype).removeprefix("torch."),
        mem_fraction_static=cfg.gpu_memory_utilization,
        max_running_requests=cfg.max_num_seqs,
        chunked_prefill_size=cfg.max_num_batched_tokens if cfg.enable_chunked_prefill else -1,
        disable_radix_cache=not cfg.enable_prefix_caching,
        disable_cuda_graph=cfg.enforce_eager,
        enable_memory_saver=cfg.free_cache_engine,
        load_format=cfg.load_format,
        context_length=site.max_model_len,
        skip_tokenizer_init=True,  # token ids in and out; the worker's tokenizer decodes
        random_seed=site.seed,
        trust_remote_code=site.trust_remote_code,
        # Scheduler i on the i-th visible GPU: the leader makes the replica's GPUs the visible ones.
        base_gpu_id=0,
        gpu_id_step=1,
    )


def sampling_params(
    *,
    max_new_tokens: int,
    sampling: SamplingConfig,
    stop: Sequence[int],
    seed: int | None,
) -> dict[str, Any]:
    """SGLang sampling parameters of one request (SGLang's top_k -1 is off). ``seed`` (SGLang's ``sampling_seed``) is left out where SGLang has none; SGLang honours it only
    when started with ``enable_deterministic_inference``."""
    params: dict[str, Any] = dict(
        max_new_tokens=max_new_tokens,
        **sampling_values(sampling, top_k_off=-1),
        stop_token_ids=list(stop),
    )
    if seed is not None:
        params["sampling_seed"] = seed
    return params


def replica_requests(
    per_rank: Sequence[tuple[list[list[int]], list[int]]],
) -> tuple[list[list[int]], list[int], list[slice]]:
    """What a leader submits for its replica's ``(prompts, seeds)`` (one pair per rank), and which results
    each rank takes back. Ranks that hold the same prompts share one generation (the leader's seeds)."""
    first_prompts, first_seeds = per_rank[0]
    if all(prompts == first_prompts for prompts, _ in per_rank):
        return first_prompts, first_seeds, [slice(0, len(first_prompts))] * len(per_rank)
    prompts: list[list[int]] = []
    seeds: list[int] = []
    slices = []
    for rank_prompts, rank_seeds in per_rank:
        slices.append(slice(len(prompts), len(prompts) + len(rank_prompts)))
        prompts += rank_prompts
        seeds += rank_seeds
    return prompts, seeds, slices


def tokens_and_log_probs(output: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    """The sampled tokens of one SGLang output and their log-probs, from ``output_token_logprobs``
    (``(log_prob, token_id, text)`` per step; it includes a final stop token, as the trainer scores it)."""
    steps = output["meta_info"]["output_token_logprobs"]
    return [int(step[1]) for step in steps], [float(step[0]) for step in steps]


def tensor_fingerprint(tensor: torch.Tensor) -> tuple[int, int]:
    """Two wrapping 64-bit sums over a tensor's bytes (plain, and weighted by position), computed where the
    tensor lives: exact, independent of the reduction order, and no copy to the host."""
    data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    total = torch.zeros((), dtype=torch.int64, device=data.device)
    weighted = torch.zeros_like(total)
    for start in range(0, data.numel(), _FINGERPRINT_CHUNK):
        chunk = data[start : start + _FINGERPRINT_CHUNK].to(torch.int64)
        position = torch.arange(start, start + chunk.numel(), device=data.device) % 65_521 + 1
        total += chunk.sum()
        weighted += (chunk * position).sum()
    return int(total), int(weighted)


def weights_digest_of(fingerprints: Mapping[str, tuple[int, int]]) -> str:
    digest = hashlib.sha256()
    for name in sorted(fingerprints):
        digest.update(f"{name}:{fingerprints[name][0]}:{fingerprints[name][1]};".encode())
    return digest.hexdigest()


@contextlib.contextmanager
def _visible_devices(devices: Sequence[str]) -> Iterator[None]:
    """``CUDA_VISIBLE_DEVICES`` for processes spawned inside (this process's CUDA context keeps its own)."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


class ReplicaGroup:
    """One generation replica's ranks and the collectives its leader drives, on a gloo group of the
    replica (prompts, IPC handles and results are small Python objects). Every rank of the actor builds
    its one together, since torch.distributed creates groups collectively."""

    def __init__(self, rank: int, world_size: int, tp: int) -> None:
        self.ranks = replica_ranks(rank, world_size, tp)
        self.rank = rank
        self.leader = self.ranks[0]
        self.is_leader = rank == self.leader
        self.group = _replica_group(rank, world_size, tp) if tp > 1 else None

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` on the leader (rank order); ``[]`` elsewhere."""
        if self.group is None:
            return [obj]
        out: list[Any] | None = [None] * len(self.ranks) if self.is_leader else None
        dist.gather_object(obj, out, dst=self.leader, group=self.group)
        return out or []

    def on_leader(self, action: Callable[[], Any], *, per_rank: bool = False) -> Any:
        """Run ``action`` on the leader; with ``per_rank`` it returns one item per rank of the replica and
        each rank gets its own (else every rank gets None). The leader's failure is raised on every rank of
        the replica, so none waits in a collective that will not come."""
        if self.group is None:
            out = action()
            return out[0] if per_rank else None
        items: list[Any] = [None] * len(self.ranks)
        error: Exception | None = None
        if self.is_leader:
            try:
                out = action()
                if per_rank:
                    items = out
            except Exception as exc:
                error = exc
        message = None if error is None else f"{type(error).__name__}: {error}"
        received: list[Any] = [None]
        inputs = [(message, item) for item in items] if self.is_leader else None
        dist.scatter_object_list(received, inputs, src=self.leader, group=self.group)
        failure, item = received[0]
        if error is not None:
            raise error
        if failure is not None:
            raise RuntimeError(f"SGLang on rank {self.leader} (this replica's leader) failed: {failure}")
        return item


class SGLangRolloutEngine:
    def __init__(
        self,
        cfg: RolloutConfig,
        site: EngineSite,
    ) -> None:
        # Checked before any setting is read: the one-line answer comes first.
        try:
            import sglang  # noqa: PLC0415, F401  # optional dependency, CUDA only
        except ImportError:
            raise RuntimeError(f"{_NEEDS} (sglang is not installed)") from None
        if site.device.type != "cuda" or not torch.cuda.is_available():
            raise RuntimeError(f"{_NEEDS} (this worker's device is {site.device})")
        # Heavy SGLang modules: only once SGLang can run.
        from sglang.srt.entrypoints.engine import Engine  # noqa: PLC0415  # optional dependency
        from sglang.srt.model_executor.model_runner import LocalSerializedTensor  # noqa: PLC0415
        from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: PLC0415
        from sglang.srt.server_args import ServerArgs  # noqa: PLC0415
        from sglang.srt.utils import MultiprocessingSerializer  # noqa: PLC0415

        # Share CUDA tensors by device UUID, not index: this process and SGLang's see different index maps.
        _patch_torch_reductions()
        self._serialize = MultiprocessingSerializer.serialize
        self._local_tensor = LocalSerializedTensor

        self.replica = ReplicaGroup(site.rank, site.world_size, cfg.tensor_model_parallel_size)
        self.device = site.device
        self.pad_token_id = site.pad_token_id
        self.eos_token_id = site.eos_token_id
        self.frees = cfg.free_cache_engine
        self.released: set[str] = set()
        self.fingerprints: dict[str, tuple[int, int]] = {}
        self.seeded = _accepts(SamplingParams, sampling_seed=0)

        kwargs = engine_kwargs(cfg, site)
        kwargs.update(_runtime_kwargs(cfg, {f.name for f in dataclasses.fields(ServerArgs)}))
        index = site.device.index if site.device.index is not None else torch.cuda.current_device()
        placement = self.replica.gather(
            (socket.gethostname(), physical_gpu(index, os.environ.get("CUDA_VISIBLE_DEVICES")))
        )
        self.engine: Any = None
        self.replica.on_leader(lambda: self._start(Engine, kwargs, placement))

    def _start(self, engine_cls: Any, kwargs: dict[str, Any], placement: list[tuple[str, str]]) -> None:
        """The leader starts the replica's engine, its schedulers on the replica's GPUs in rank order."""
        hosts = sorted({host for host, _ in placement})
        if len(hosts) > 1:
            raise RuntimeError(
                f"actor_rollout_ref.rollout.tensor_model_parallel_size ({len(self.replica.ranks)}) spans nodes {hosts}: "
                "an SGLang replica must fit on one node; use a divisor of the GPUs per node"
            )
        gpus = [gpu for _, gpu in placement]
        logger.info("rank %d starts SGLang for ranks %s on GPUs %s", self.replica.rank, self.replica.ranks, gpus)
        with _visible_devices(gpus):
            self.engine = engine_cls(**kwargs)

    # -- weights -------------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Hand the trainer's full tensors to SGLang in buckets (every rank of the replica together), then
        drop the prefix cache, computed with the old weights."""
        self.fingerprints = {}
        bucket: list[tuple[str, torch.Tensor]] = []
        size = 0
        for name, tensor in weights:
            tensor = tensor.detach().to(self.device)
            self.fingerprints[name] = tensor_fingerprint(tensor)
            bucket.append((name, tensor))
            size += tensor.numel() * tensor.element_size()
            if size >= _BUCKET_BYTES:
                self._send(bucket, last=False)
                bucket, size = [], 0
        self._send(bucket, last=True)

    def _send(self, bucket: list[tuple[str, torch.Tensor]], *, last: bool) -> None:
        # SGLang's processes read the memory directly: the kernels writing it must be done.
        torch.cuda.current_stream(self.device).synchronize()
        handles = self.replica.gather([(name, self._serialize(tensor)) for name, tensor in bucket])

        def update() -> None:
            names = [[name for name, _ in rank_handles] for rank_handles in handles]
            if any(rank_names != names[0] for rank_names in names):
                raise RuntimeError(f"Weight hand-over out of step: the replica's ranks sent {names}")
            if names[0]:
                named = [
                    (name, self._local_tensor(values=[rank_handles[i][1] for rank_handles in handles]))
                    for i, name in enumerate(names[0])
                ]
                self.engine.update_weights_from_tensor(named_tensors=named, load_format=None, flush_cache=False)
            if last:
                self.engine.flush_cache()

        self.replica.on_leader(update)  # returns once SGLang has read every rank's tensors: the bucket may go

    def weights_digest(self) -> str:
        """A digest of the weights last handed over, as sent (SGLang keeps its copy in its own processes and
        offers no full read-back); the digest of nothing before the first hand-over."""
        return weights_digest_of(self.fingerprints)

    # -- memory --------------------------------------------------------------------------------
    def release(self) -> None:
        """GPU: SGLang's weights (to host memory) and KV cache freed until ``resume``; every rank returns
        once its own GPU's share is free."""
        freeing = sorted({_WEIGHTS, _KV_CACHE} - self.released)
        if self.frees and freeing:
            self.replica.on_leader(lambda: self.engine.release_memory_occupation(tags=freeing))
            self.released |= set(freeing)

    def resume(self, keep_weights: bool = True) -> None:
        """Bring back the weights for a hand-over (``keep_weights=False``: the KV cache stays freed until
        the generation that follows), or everything before generating."""
        tags = {_WEIGHTS, _KV_CACHE} if keep_weights else {_WEIGHTS}
        waking = sorted(tags & self.released)
        if waking:
            self.replica.on_leader(lambda: self.engine.resume_memory_occupation(tags=waking))
            self.released -= set(waking)

    # -- generation ----------------------------------------------------------------------------
    def generate(self, request: GenerationRequest) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = request.input_ids, request.attention_mask  # (B, P), left-padded
        max_new_tokens, sampling = request.max_new_tokens, request.sampling
        prompts = prompt_token_lists(input_ids, attention_mask)
        per_rank = self.replica.gather((prompts, request.seeds()))

        def run() -> list[tuple[list[list[int]], list[list[float]]]]:
            flat, seeds, slices = replica_requests(per_rank)
            params = [
                sampling_params(
                    max_new_tokens=max_new_tokens,
                    sampling=sampling,
                    stop=request.stops(self.eos_token_id),
                    seed=s if self.seeded else None,
                )
                for s in seeds
            ]
            # Log-probs as SGLang reports them: log softmax(logits / temperature) of each sampled token,
            # after temperature and before top-k/top-p renormalisation (the trainer's scoring); greedy rows
            # get temperature 1's. SGLANG_RETURN_ORIGINAL_LOGPROB=1 would switch them to temperature 1's.
            outputs = self.engine.generate(input_ids=flat, sampling_params=params, return_logprob=True) if flat else []
            rows = [tokens_and_log_probs(out) for out in ([outputs] if isinstance(outputs, dict) else outputs)]
            return [([t for t, _ in rows[s]], [lp for _, lp in rows[s]]) for s in slices]

        tokens, log_probs = self.replica.on_leader(run, per_rank=True)
        responses, rollout_log_probs = pad_responses(tokens, log_probs, max_new_tokens, self.pad_token_id)
        return rollout_batch(
            input_ids,
            attention_mask,
            responses.to(input_ids.device),
            rollout_log_probs.to(input_ids.device),
            eos_token_id=request.stops(self.eos_token_id),
            pad_token_id=self.pad_token_id,
        )


def _runtime_kwargs(cfg: RolloutConfig, server_fields: set[str]) -> dict[str, Any]:
    """The ``ServerArgs`` that depend on the SGLang release and the machine rather than on our settings."""
    kwargs: dict[str, Any] = {}
    if cfg.free_cache_engine:
        if "enable_weights_cpu_backup" not in server_fields:
            raise RuntimeError(
                "actor_rollout_ref.rollout.free_cache_engine=true with SGLang needs sglang>=0.5.3 (weights backed "
                "up while released); upgrade sglang or set free_cache_engine=false"
            )
        kwargs["enable_weights_cpu_backup"] = True
    # Each leader on a node picks its own ports (SGLang's random pick can collide between leaders).
    kwargs.update(port=free_port(), nccl_port=free_port())
    # Training ranks sharing the GPUs leave them unevenly free, and SGLang's balance check would refuse to
    # start; the variable's name changed across SGLang releases.
    os.environ.setdefault("SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "true")
    os.environ.setdefault("SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK", "true")
    os.environ.setdefault("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "0")
    return kwargs


def _replica_group(rank: int, world_size: int, tp: int) -> Any:
    """This rank's replica as a gloo group (prompts, handles and results are small Python objects). Every
    rank creates every replica's group, in the same order, as torch.distributed requires."""
    if not dist.is_initialized():
        raise RuntimeError(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} needs the actor's process group initialised"
        )
    mine = None
    for first in range(0, world_size, tp):
        group = dist.new_group(list(range(first, first + tp)), backend="gloo", timeout=_REPLICA_TIMEOUT)
        if first <= rank < first + tp:
            mine = group
    return mine


def _accepts(cls: Any, **kwargs: Any) -> bool:
    try:
        cls(**kwargs)
    except TypeError:
        return False
    return True


def _patch_torch_reductions() -> None:
    try:
        from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions  # noqa: PLC0415  # newer SGLang
    except ImportError:
        from sglang.srt.patch_torch import monkey_patch_torch_reductions  # noqa: PLC0415  # older SGLang
    monkey_patch_torch_reductions()
