"""A training engine: one model under a parallel strategy, its optimizer, precision and stepping.

Roles (actor, critic, reference, reward model) hold an engine and never touch the strategy directly, so a
new strategy is a new engine class plus a branch in ``hybridrl.engine.factory``, not a copy of each worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
import torch.distributed as dist
from torch import nn

from hybridrl.algorithms.token_logprobs import TokenScores, TokenScoring, hidden_token_log_probs, token_log_probs
from hybridrl.config.choices import Precision
from hybridrl.config.schema import OptimConfig
from hybridrl.engine.lr_schedule import LRSchedule
from hybridrl.engine.packing import ModelOutput, PackedOutput, pack_batch
from hybridrl.engine.precision import DynamicLossScaler
from hybridrl.engine.prompt_sharing import PromptGroups, prompt_groups, shared_prompt_output
from hybridrl.models import lora
from hybridrl.models.loader import cache_keyword, checkpoints_activations
from hybridrl.models.weights import tied_aliases

if TYPE_CHECKING:
    from hybridrl.protocol import Batch

logger = logging.getLogger(__name__)


class WeightShard(NamedTuple):
    """Rows ``row .. row + len(tensor)`` of the ``rows``-row weight ``name`` that one rank holds."""

    name: str
    tensor: torch.Tensor
    row: int
    rows: int


#: What ``forward_backward`` minimises on each micro-batch: the model's output and the micro-batch in, the
#: loss and its metrics out.
LossFn = Callable[[ModelOutput, "Batch"], tuple[torch.Tensor, dict[str, float]]]


def optimizer_groups(params: Sequence[torch.Tensor]) -> list[dict[str, Any]]:
    """AdamW's parameter groups, one per tensor type, each run by the multi-tensor kernels (one launch per
    update stage for the whole group; torch picks them by itself only on CUDA, and on CPU loops over the
    parameters, one dispatch per tensor and stage: the same arithmetic, bitwise the same updates). One
    multi-tensor call cannot mix DTensors with plain tensors, as Megatron-style tensor parallelism has
    (sharded and replicated weights): split by type, each group still runs as one. The groups differ only in
    their parameters (checkpoints of other layouts restore into them: ``checkpoint.shards``)."""
    by_type: dict[type, list[torch.Tensor]] = {}
    for param in params:
        by_type.setdefault(type(param), []).append(param)
    return [{"params": group} for group in by_type.values()]


class TrainEngine:
    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        precision: Precision = Precision.fp32,
        optim_cfg: OptimConfig | None = None,
        state_dict_fn: Callable[[nn.Module], dict] | None = None,
        loss_scaler: DynamicLossScaler | None = None,
        remove_padding: bool = False,
        fused_kernels: bool = False,
        share_prompts: bool = False,
    ) -> None:
        """``remove_padding``: the model sees each micro-batch's real tokens packed into one sequence
        (``hybridrl.engine.packing``) and returns a ``PackedOutput``. ``fused_kernels``: passes that say
        how they score tokens get the scores from the output head's hidden states, never the logits.
        ``share_prompts``: rows with the same prompt run it once (``hybridrl.engine.prompt_sharing``)."""
        self.model = model
        self.remove_padding = remove_padding
        parameters = inspect.signature(model.forward).parameters
        # A causal LM that can compute logits at chosen positions only: prompt positions' are never read.
        self._keeps_logits = "logits_to_keep" in parameters
        self._cache_keyword = cache_keyword(model)
        # Fused scoring replaces the output head's forward: not where the model changes the logits after it.
        config = getattr(model, "config", None)
        self.fused_kernels = fused_kernels and getattr(config, "final_logit_softcapping", None) is None
        if fused_kernels and not self.fused_kernels:
            logger.warning(
                "use_fused_kernels: %s caps its logits after the head; computing logits.", type(model).__name__
            )
        self.loss_scaler = loss_scaler
        self.device = device
        self.share_prompts = self._prompt_sharing(share_prompts)
        self.precision = precision
        self._state_dict_fn = state_dict_fn or (lambda m: m.state_dict())
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_schedule: LRSchedule | None = None
        self.lr_step = 0  # training steps the schedule has advanced (checkpointed)
        self.skipped_steps = 0
        # The one weights version: bumped whenever the weights change (``weights_changed``: an optimizer
        # step, a checkpoint load), so that the hand-over to generation (``generation.weight_sync``) can
        # skip weights the generation side already holds.
        self.weights_version = 0
        if optim_cfg is not None:
            trained = [p for p in model.parameters() if p.requires_grad]
            self.optimizer = torch.optim.AdamW(
                optimizer_groups(trained),
                lr=optim_cfg.lr,
                betas=(optim_cfg.betas[0], optim_cfg.betas[1]),
                weight_decay=optim_cfg.weight_decay,
                eps=optim_cfg.eps,
                foreach=True,
            )
        else:
            model.requires_grad_(False)

    def _prompt_sharing(self, wanted: bool) -> bool:
        """Whether rows that share a prompt run it once; where the model cannot, say why (once, at start)."""
        if not wanted:
            return False
        why = None
        if self.device.type == "cuda":
            # Measured on an H200 (docs/TUNING.md, "Shared prompts"): the second model call per micro-batch
            # and the cache copies cost more than the prompt tokens saved (0.66x the padded update).
            why = "on a GPU the cached prompt's second model call costs more than it saves (TUNING.md)"
        elif self.remove_padding:
            why = "use_remove_padding packs the rows instead"
        elif self._cache_keyword is None:
            why = f"{type(self.model).__name__}.forward takes no key/value cache"
        elif checkpoints_activations(self.model):
            # transformers drops the cache inside a checkpointed layer: the responses would not see the prompt.
            why = "activation checkpointing (enable_gradient_checkpointing) drops the prompt's cache"
        if why is not None:
            logger.info("use_prefix_grouper: every row runs its own prompt: %s.", why)
        return why is None

    # -- data layout: which rows this rank gets, and whether the driver gathers its results ----------
    @property
    def dp_rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def dp_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    @property
    def collects(self) -> bool:
        return True

    @property
    def sequence_parallel_size(self) -> int:
        """Ranks that split each sequence (Ulysses): a token budget per rank covers this many times the tokens."""
        return 1

    # -- forward / backward over micro-batches ------------------------------------------------------
    def model_output(self, batch: Batch, scoring: TokenScoring | None = None) -> ModelOutput:
        """Logits (causal LM) or values (value model) for every position of ``batch``, or for each of its
        real tokens (``PackedOutput``) with ``remove_padding``. A causal LM computes logits only at the
        positions that predict a response token; with ``fused_kernels`` and a ``scoring`` it returns those
        tokens' ``TokenScores`` instead, computed from the hidden states without the logits."""
        t = batch.tensors
        if self.share_prompts and "responses" in t:
            prompt_len = t["input_ids"].shape[1] - t["responses"].shape[1]
            groups = prompt_groups(t["input_ids"], t["attention_mask"], t["position_ids"], prompt_len)
            if groups is not None:
                return self._shared_prompt_output(t, groups, scoring)
        rows = pack_batch(batch) if self.remove_padding else None
        if rows is not None:
            inputs = {"input_ids": rows.input_ids, "attention_mask": None, "position_ids": rows.position_ids}
        else:
            inputs = {k: t[k] for k in ("input_ids", "attention_mask", "position_ids")}
        keep: torch.Tensor | None = None
        if self._keeps_logits and "responses" in t:
            if rows is not None:
                keep = rows.response_index
            else:  # the R positions P-1 .. P+R-2 that predict the R response columns
                length, resp_len = t["input_ids"].shape[1], t["responses"].shape[1]
                keep = torch.arange(length - resp_len - 1, length - 1, device=t["input_ids"].device)
            inputs["logits_to_keep"] = keep
        if scoring is not None and keep is not None and self.fused_kernels:
            labels = t["responses"] if rows is None else t["responses"].reshape(-1)[rows.response_flat].unsqueeze(0)
            with self._scoring_head(labels, scoring):
                scores = self.model(**inputs).logits  # (rows or 1, positions, 2): log-prob, entropy
            log_probs, entropy = scores[..., 0], scores[..., 1]
            if rows is not None:
                log_probs, entropy = rows.unpack_responses(log_probs), rows.unpack_responses(entropy)
            return TokenScores(log_probs, entropy if scoring.with_entropy else None)
        out = self.model(**inputs)
        out = getattr(out, "logits", out)
        return out if rows is None else PackedOutput(out, rows, at_responses=keep is not None)

    def _shared_prompt_output(
        self, t: dict[str, torch.Tensor], groups: PromptGroups, scoring: TokenScoring | None
    ) -> ModelOutput:
        """``model_output`` at the response positions (B, R, ...), each distinct prompt run once."""
        fused = scoring is not None and self.fused_kernels and self._keeps_logits

        def run(inputs: dict[str, Any], labels: torch.Tensor | None) -> torch.Tensor:
            positions = 1 if labels is None else labels.shape[1]
            if self._keeps_logits:
                inputs = {**inputs, "logits_to_keep": positions}
            if fused and labels is not None:
                assert scoring is not None
                with self._scoring_head(labels, scoring):
                    return self.model(**inputs, use_cache=True).logits
            out = self.model(**inputs, use_cache=True)
            return getattr(out, "logits", out)[:, -positions:]

        assert self._cache_keyword is not None
        head, rest = shared_prompt_output(run, t, groups, self._cache_keyword)
        if not fused:
            return head if rest is None else torch.cat([head, rest], dim=1)
        assert scoring is not None
        # The first response token's logits (one position per row) scored here; the rest came fused.
        log_probs, entropy = token_log_probs(
            head,
            t["responses"][:, :1],
            scoring.temperature,
            with_entropy=scoring.with_entropy,
            entropy_grad=scoring.entropy_grad,
        )
        if rest is not None:
            log_probs = torch.cat([log_probs, rest[..., 0]], dim=1)
            if entropy is not None:
                entropy = torch.cat([entropy, rest[..., 1]], dim=1)
        return TokenScores(log_probs, entropy)

    @contextlib.contextmanager
    def _scoring_head(self, labels: torch.Tensor, scoring: TokenScoring) -> Iterator[None]:
        """The output head scores ``labels`` from its hidden states (``hidden_token_log_probs``) for one
        forward. Inside the model's forward, so that FSDP has gathered the head's weight, as for logits."""
        head: Any = cast(Any, self.model).get_output_embeddings()  # a Hugging Face causal LM's nn.Linear head

        def scored(hidden: torch.Tensor) -> torch.Tensor:
            log_probs, entropy = hidden_token_log_probs(hidden, head.weight, head.bias, labels, scoring)
            return torch.stack([log_probs, entropy if entropy is not None else torch.zeros_like(log_probs)], -1)

        head.forward = scored
        try:
            yield
        finally:
            del head.forward

    def forward_micro_batches(
        self, micro: list[Batch], head: Callable[[ModelOutput, Batch], Any], scoring: TokenScoring | None = None
    ) -> list[Any]:
        """``head(output, micro_batch)`` for each micro-batch, without gradients (log-probs, values);
        ``scoring``: how ``head`` scores response tokens (see ``model_output``)."""
        results = []
        with torch.no_grad():
            for mb in micro:
                mb = mb.to(self.device)
                with self.autocast():
                    results.append(head(self.model_output(mb, scoring), mb))
        return results

    def forward_backward(
        self, micro: list[Batch], loss_fn: LossFn, *, average: bool = True, scoring: TokenScoring | None = None
    ) -> list[dict]:
        """Accumulate the gradients of the mean (``average``) or the sum of ``loss_fn`` over the
        micro-batches (a sum when the caller weighs each micro-batch itself); return their metrics."""
        rows = []
        for mb in micro:
            mb = mb.to(self.device)
            with self.autocast():
                loss, row = loss_fn(self.model_output(mb, scoring), mb)
            self.backward(loss / len(micro) if average else loss)
            rows.append(row)
        return rows

    def sum_over_replicas(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over the data-parallel replicas (the ranks whose gradients are averaged)."""
        if self.dp_size > 1:
            value = value.to(self.device)
            dist.all_reduce(value, group=self._dp_group())
        return value

    def max_over_group(self, value: int) -> int:
        """The largest ``value`` over every rank of the group: e.g. how many micro-batches each rank runs,
        since FSDP's all-gathers need every rank in every forward."""
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return value
        flag = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def _dp_group(self) -> Any:
        return None  # FSDP averages gradients over every rank of the group: the default group

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision in (Precision.bf16, Precision.fp16):
            dtype = torch.bfloat16 if self.precision == Precision.bf16 else torch.float16
            return torch.autocast(device_type=self.device.type, dtype=dtype)
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        """Backward, with the loss scaled when training in fp16."""
        (self.loss_scaler.scale_loss(loss) if self.loss_scaler is not None else loss).backward()

    def zero_grad(self) -> None:
        assert self.optimizer is not None, "this engine has no optimizer (a frozen model)"
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, grad_clip: float) -> float:
        """Clip and apply the accumulated gradients; a non-finite gradient skips the step."""
        assert self.optimizer is not None, "this engine has no optimizer (a frozen model)"
        params = [p for p in self.model.parameters() if p.grad is not None]
        self.reduce_gradients(params)
        if self.loss_scaler is not None:
            self.loss_scaler.unscale_(params)
        grad_norm = self.clip_gradients(params, grad_clip)
        overflow = not math.isfinite(grad_norm)
        if overflow:
            self.skipped_steps += 1
            if self.loss_scaler is None:  # with fp16 loss scaling an overflow now and then is expected
                logger.warning("Non-finite gradient norm (%s): skipping this optimizer step.", grad_norm)
        else:
            self.optimizer.step()
            self.weights_changed()
        if self.loss_scaler is not None:
            self.loss_scaler.update(overflow)
        self.zero_grad()
        return grad_norm

    def reduce_gradients(self, params: list[nn.Parameter]) -> None:
        """Combine the replicas' gradients before clipping, where the parallel layout does not do it in
        backward itself (FSDP2 and the Megatron-style engine do)."""

    def weights_changed(self) -> None:
        """The weights are new (a step, a load): the next hand-over to generation sends them."""
        self.weights_version += 1

    def clip_gradients(self, params: list[nn.Parameter], max_norm: float) -> float:
        """Clip in place; return the total gradient norm before clipping."""
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
        if hasattr(grad_norm, "full_tensor"):  # DTensor under FSDP2
            grad_norm = grad_norm.full_tensor()
        return float(grad_norm)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"] if self.optimizer else 0.0

    # -- learning-rate schedule: one step per training step (verl's), whatever the optimizer steps ---------
    def set_lr_schedule(self, schedule: LRSchedule) -> None:
        assert self.optimizer is not None, "this engine has no optimizer (a frozen model)"
        self.lr_schedule = schedule
        self._base_lrs = [group["lr"] for group in self.optimizer.param_groups]
        self.set_lr_step(self.lr_step)

    def set_lr_step(self, step: int) -> None:
        """Put the schedule at ``step`` (a resume): the config's lr stays the base, whatever was saved."""
        self.lr_step = step
        if self.lr_schedule is not None and self.optimizer is not None:
            factor = self.lr_schedule.factor(step)
            for group, base in zip(self.optimizer.param_groups, self._base_lrs):
                group["lr"] = base * factor

    def advance_lr(self) -> None:
        """After a training step's update: the next step's learning rate."""
        self.set_lr_step(self.lr_step + 1)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model on every rank (export, digests): not for the hand-over, see ``iter_full_weights``."""
        return self._state_dict_fn(self.model)

    def iter_full_weights(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, full tensor)`` one at a time, on every rank of the group together, each cast to
        ``dtype`` before its gather: a rank holds at most one full tensor beyond its shards (the
        streamed hand-over to a generation engine). Tied weights come once, under their first name."""
        adapted = lora.scalings(self.model)
        if adapted:  # the plain model's weights: W + scale * B @ A, merged in fp32 (``lora.merged_weights``)
            yield from lora.merged_weights(self._gathered(dtype, keep=lora.merge_input), adapted, dtype)
        else:
            yield from self._gathered(dtype)

    def iter_weight_shards(self, dtype: torch.dtype | None = None) -> Iterator[WeightShard] | None:
        """This rank's own rows of every weight, cast to ``dtype``, with nothing gathered (the multi-sender
        hand-over to a rollout pool); None where the engine cannot say (then ``iter_full_weights``)."""
        return None

    def _gathered(
        self, dtype: torch.dtype | None, keep: Callable[[str], bool] = lambda name: False
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Each full tensor, cast to ``dtype`` before its gather unless ``keep(name)``."""
        state = self.model.state_dict(keep_vars=True)
        aliases = tied_aliases(state)
        for name, param in state.items():
            if name in aliases:
                continue
            tensor = param.detach()
            if dtype is not None and tensor.is_floating_point() and not keep(name):
                tensor = tensor.to(dtype)
            yield name, tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor

    def state_digest(self) -> str:
        """A hash of the full weights: equal on every rank when replicas agree."""
        return state_digest(self.full_state_dict())


def state_digest(state: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()
