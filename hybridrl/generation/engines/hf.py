"""Generation with Hugging Face ``generate`` on an unsharded copy of the actor's weights.

FSDP-sharded modules all-gather inside every forward, so ranks that stop generating at different
times would deadlock; generating on a plain module after an explicit, timed weight hand-over keeps
ranks independent during rollout (the same reason verl hands weights to vLLM).

The dependency-free default engine: no paged KV cache and no continuous batching, so a rank's rows go
through ``generate`` in chunks of at most ``max_tokens_per_generate`` prompt+response tokens, which
bounds the KV cache one call holds (an inference engine schedules that itself).

GPU mode (``static_cache``, from ``rollout.enforce_eager=false`` on CUDA): transformers' static KV cache,
with which ``generate`` compiles the decode step itself (``torch.compile``, CUDA graphs). A decode step of
a small model is launch-bound on a GPU (the H200 measured 28-72 ms per step against a 0.64 ms bandwidth
bound at 1.5B); the compiled step replays one graph. The first call per (rows, length) shape compiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from transformers import DynamicCache, LogitsProcessor, LogitsProcessorList, PreTrainedModel

from hybridrl.config.schema import SamplingConfig
from hybridrl.engine.base import state_digest
from hybridrl.engine.offload import HOST, move_module
from hybridrl.engine.prompt_sharing import prompt_groups
from hybridrl.generation.engines.base import EarlyReturn, GenerationRequest, position_ids_from, rollout_batch
from hybridrl.models.loader import cache_keyword
from hybridrl.models.weights import materialize


class _SampledLogProbs(LogitsProcessor):
    """Records the log-probability of each sampled token under the temperature-scaled distribution
    (the one the trainer scores with): per step one (B,) log-normaliser, and the step's logits kept by
    reference (never copied) until the next step says which token was sampled from them.

    ``generate`` runs custom processors before its temperature/top-k/top-p warpers, which return new
    tensors, so ``scores`` here are the model's logits and stay unchanged; the token sampled from step t's
    scores is the last input id at step t+1. A full (B, V) log-softmax per step cost 10-15% of a decode
    step at a 152k vocabulary on CPU."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.last: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, V) logits, (B,) log-normaliser
        self.columns: list[torch.Tensor] = []

    def _take(self, tokens: torch.Tensor) -> None:
        if self.last is not None:
            scores, normaliser = self.last
            picked = scores.gather(1, tokens[:, None]).squeeze(1).float()
            self.columns.append(picked / self.temperature - normaliser)
            self.last = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._take(input_ids[:, -1])
        scaled = scores.float() if self.temperature == 1.0 else scores.float() / self.temperature
        self.last = (scores, torch.logsumexp(scaled, dim=-1))
        return scores

    def finish(self, responses: torch.Tensor) -> torch.Tensor:
        """(B, R) log-probs of ``responses``, the tokens generated."""
        self._take(responses[:, -1])
        return (
            torch.stack(self.columns, dim=1)
            if self.columns
            else responses.new_zeros(responses.shape, dtype=torch.float)
        )


def _filtered(scores: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """(B, V) logits at the temperature, top-k and top-p applied (-inf outside)."""
    logits = scores.float() / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(logits, min(sampling.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        ordered_probs = torch.softmax(ordered, dim=-1)
        mass_before = ordered_probs.cumsum(-1) - ordered_probs
        dropped = torch.zeros_like(logits, dtype=torch.bool).scatter(1, order, mass_before > sampling.top_p)
        logits = logits.masked_fill(dropped, -math.inf)
    return logits


class _RowSeededSampler(LogitsProcessor):
    """Draws each row's next token from its own seeded stream and hands ``generate`` a one-hot choice (which
    its greedy search then takes), so a row samples the same tokens whatever rows share the call. ``generate``'s
    own sampling draws every row from one global stream: a row's tokens would depend on its neighbours, and
    the agent loop batches whichever samples are ready. Runs after ``_SampledLogProbs``, which reads the
    model's logits before this replaces them."""

    def __init__(self, sampling: SamplingConfig, seeds: list[int], device: torch.device) -> None:
        self.sampling = sampling
        self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(_filtered(scores, self.sampling), dim=-1)
        picked = torch.stack(
            [torch.multinomial(row, 1, generator=gen) for row, gen in zip(probs, self.generators, strict=True)]
        )  # (B, 1)
        return torch.full_like(scores, -math.inf).scatter(1, picked, 0.0)  # type: ignore[return-value]


class HFRolloutEngine:
    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        eos_token_id: int | list[int] | None,
        *,
        free_cache: bool = False,
        max_tokens_per_generate: int | None = None,
        static_cache: bool = False,
    ) -> None:
        """``free_cache``: move the weights to host memory between rollouts (only where the model lives on
        an accelerator: on the host there is nothing to free). ``max_tokens_per_generate``: prompt +
        response tokens of the rows one ``generate`` call holds (None = every row at once).
        ``static_cache``: the GPU mode (module docstring); shared-prompt prefill is off in it (a static cache
        is filled by ``generate`` itself)."""
        self.model = model.eval()
        self.model.requires_grad_(False)
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.device = next(model.parameters()).device
        self.free_cache = free_cache and self.device != HOST
        self.max_tokens_per_generate = max_tokens_per_generate
        self.static_cache = static_cache
        self.released = False

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy each ``(name, tensor)`` into the model as it arrives (cast to the model's dtype), so the
        sender can free it at once; every parameter must arrive, and no unknown name."""
        targets = dict(self.model.state_dict(keep_vars=True))
        params = {name for name, _ in self.model.named_parameters()}  # a tied weight under its first name
        unexpected = []
        for name, tensor in weights:
            target = targets.get(name)
            if target is None:
                unexpected.append(name)
                continue
            target.data.copy_(tensor)
            params.discard(name)
        if unexpected or params:
            raise RuntimeError(
                f"Weight hand-over mismatch: the trainer sent unknown {sorted(unexpected)[:4]} and did not "
                f"send {sorted(params)[:4]}: the training and generation models differ."
            )

    def release(self) -> None:
        """Free the engine's device memory until ``resume`` (its weights wait in host memory)."""
        if self.free_cache and not self.released:
            move_module(self.model, HOST)
            torch.cuda.empty_cache()
            self.released = True

    def resume(self, keep_weights: bool = True) -> None:
        """Back on the device; ``keep_weights=False`` (a hand-over follows) allocates without copying."""
        if self.released:
            if keep_weights:
                move_module(self.model, self.device)
            else:
                materialize(self.model, self.device)
            self.released = False

    def weights_digest(self) -> str:
        return state_digest(self.model.state_dict())

    def rows_per_call(self, prompt_len: int, max_new_tokens: int, rows: int) -> int:
        if self.max_tokens_per_generate is None:
            return max(rows, 1)
        return max(1, self.max_tokens_per_generate // (prompt_len + max_new_tokens))

    @torch.no_grad()
    def generate(self, request: GenerationRequest) -> dict[str, torch.Tensor]:
        """Sample responses for left-padded prompts; outputs are padded to ``max_new_tokens``."""
        input_ids, attention_mask = request.input_ids, request.attention_mask  # (B, P)
        max_new_tokens, sampling = request.max_new_tokens, request.sampling
        step = self.rows_per_call(input_ids.shape[1], max_new_tokens, input_ids.shape[0])
        top_k = sampling.top_k if sampling.top_k > 0 else None
        row_seeded = sampling.do_sample and request.row_seeds is not None
        kwargs = (
            dict(do_sample=True, temperature=sampling.temperature, top_k=top_k, top_p=sampling.top_p)
            if sampling.do_sample and not row_seeded
            else dict(do_sample=False, temperature=None, top_k=None, top_p=None)
        )
        temperature = sampling.temperature if sampling.do_sample else 1.0
        seeds = request.seeds() if row_seeded else []
        stops = request.stops(self.eos_token_id) or None
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(request.seed)
        if request.early_return is not None:
            return self._generate_pruned(request)
        try:
            parts = [
                self._generate_rows(
                    input_ids[i : i + step],
                    attention_mask[i : i + step],
                    max_new_tokens,
                    temperature,
                    kwargs,
                    stops,
                    _RowSeededSampler(sampling, seeds[i : i + step], input_ids.device) if row_seeded else None,
                )
                for i in range(0, input_ids.shape[0], step)
            ]
        finally:
            torch.random.set_rng_state(generator_state)
        responses = torch.cat([p[0] for p in parts])  # (B, R)
        log_probs = torch.cat([p[1] for p in parts])  # (B, R)
        return rollout_batch(
            input_ids,
            attention_mask,
            responses,
            log_probs,
            eos_token_id=stops,
            pad_token_id=self.pad_token_id,
        )

    @torch.no_grad()
    def _generate_pruned(self, request: GenerationRequest) -> dict[str, torch.Tensor]:
        """A decode loop of our own for calls that may return early (``EarlyReturn``, fully asynchronous
        training's partial rollouts): finished rows leave the key/value cache as they finish, so a step costs
        what the unfinished rows cost (``generate`` computes every row until the call ends: with long-tailed
        lengths most of its work is padding), and the call stops at the next token once the wanted groups are
        finished or an interruption arrives. One seeded stream samples the whole call. It is eager (no
        static-cache GPU mode) and holds one cache for all the call's rows (no ``max_tokens_per_generate``
        chunks): a fully asynchronous run bounds those rows by its quota, (1 + staleness) windows of groups."""
        early = request.early_return
        assert early is not None
        ids, mask = request.input_ids, request.attention_mask  # (B, P)
        rows, width, device = ids.shape[0], request.max_new_tokens, ids.device
        sampling = request.sampling
        temperature = sampling.temperature if sampling.do_sample else 1.0
        stops = torch.tensor(request.stops(self.eos_token_id), dtype=torch.long, device=device)
        groups = torch.tensor(early.group_ids, dtype=torch.long, device=device) if early.group_ids else None
        generator = torch.Generator(device=device).manual_seed(request.seed)
        responses = torch.full((rows, width), self.pad_token_id, dtype=torch.long, device=device)
        log_probs = torch.zeros((rows, width), dtype=torch.float32, device=device)
        generated = torch.zeros(rows, dtype=torch.long, device=device)
        done = torch.zeros(rows, dtype=torch.bool, device=device)
        keyword = cache_keyword(self.model) or "past_key_values"
        cache = DynamicCache()
        positions = position_ids_from(mask)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{keyword: cache},
        ).logits[:, -1]
        in_cache = torch.arange(rows, device=device)  # the rows the cache holds, by their index in the call
        next_position = positions[:, -1] + 1
        for t in range(width):
            if sampling.do_sample:
                picked = torch.multinomial(torch.softmax(_filtered(logits, sampling), -1), 1, generator=generator)
            else:
                picked = logits.argmax(-1, keepdim=True)
            picked = picked.squeeze(1)  # (A,)
            scaled = logits.float() / temperature
            live = ~done[in_cache]
            rows_live = in_cache[live]
            responses[rows_live, t] = picked[live]
            log_probs[rows_live, t] = (scaled.gather(1, picked[:, None]).squeeze(1) - torch.logsumexp(scaled, -1))[live]
            generated[rows_live] = t + 1
            done[rows_live] |= torch.isin(picked[live], stops)
            if t + 1 == width or bool(done.all()) or early.interrupted() or _enough(done, groups, early):
                break
            keep = ~done[in_cache]
            if int((~keep).sum()) * 8 >= len(keep):  # an eighth of the cache is finished rows: drop them
                kept = keep.nonzero().squeeze(1)
                cache.batch_select_indices(kept)
                in_cache, mask, next_position, picked = in_cache[kept], mask[kept], next_position[kept], picked[kept]
            mask = torch.cat([mask, mask.new_ones((len(in_cache), 1))], dim=1)
            logits = self.model(
                input_ids=picked[:, None],
                attention_mask=mask,
                position_ids=next_position[:, None],
                use_cache=True,
                **{keyword: cache},
            ).logits[:, -1]
            next_position = next_position + 1
        return rollout_batch(
            ids,
            request.attention_mask,
            responses,
            log_probs,
            eos_token_id=stops.tolist(),
            pad_token_id=self.pad_token_id,
            generated=generated,
        )

    def _shared_prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[str, DynamicCache] | None:
        """The key/value cache of every prompt but its last token, each distinct prompt computed once and
        repeated to its rows (``rollout.n`` samples share one prompt: W1's prefill was 30% of ``generate``);
        ``generate`` then starts from it (passed under the returned keyword). None where no two rows share
        a prompt."""
        keyword = cache_keyword(self.model)
        positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
        groups = prompt_groups(input_ids, attention_mask, positions, input_ids.shape[1])
        if groups is None or keyword is None or input_ids.shape[1] < 2:
            return None
        cache = DynamicCache()
        first = groups.first
        self.model(
            input_ids=input_ids[first, :-1],
            attention_mask=attention_mask[first, :-1],
            position_ids=positions[first, :-1],
            use_cache=True,
            logits_to_keep=1,
            **{keyword: cache},
        )
        cache.batch_select_indices(groups.inverse)
        return keyword, cache

    def _generate_rows(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        max_new_tokens: int,
        temperature: float,
        sampling: dict,
        stops: list[int] | None,
        sampler: _RowSeededSampler | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One ``generate`` call: (B, R) responses and their log-probs (at ``temperature``), right-padded to
        ``max_new_tokens``, each ending at its first token of ``stops``; ``sampler`` draws the tokens where rows
        have seeds of their own."""
        recorder = _SampledLogProbs(temperature)
        prefilled = None if self.static_cache else self._shared_prefill(input_ids, attention_mask)
        cache = {"cache_implementation": "static"} if self.static_cache else {}
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            min_new_tokens=0,
            pad_token_id=self.pad_token_id,
            eos_token_id=stops,
            use_cache=True,
            logits_processor=LogitsProcessorList([recorder] if sampler is None else [recorder, sampler]),
            **({} if prefilled is None else {prefilled[0]: prefilled[1]}),
            **cache,
            **sampling,
        )
        responses = out[:, input_ids.shape[1] :]  # (B, <=R)
        log_probs = recorder.finish(responses)
        missing = max_new_tokens - responses.shape[1]
        if missing > 0:
            responses = torch.cat([responses, responses.new_full((responses.shape[0], missing), self.pad_token_id)], 1)
            log_probs = torch.cat([log_probs, log_probs.new_zeros((log_probs.shape[0], missing))], 1)
        return responses, log_probs


def _enough(done: torch.Tensor, groups: torch.Tensor | None, early: EarlyReturn) -> bool:
    """The call's wanted groups are finished (``EarlyReturn``)."""
    if groups is None:
        return False
    open_groups = torch.unique(groups[~done]).numel()
    return torch.unique(groups).numel() - open_groups >= early.groups_wanted
