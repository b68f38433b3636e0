"""Generation on a worker: a rollout engine plus what sampling with it needs (tokenizer, replica layout,
seeds). Hosted by the actor's workers (the hybrid engine: ``ActorRolloutRole``) or by generation-only
workers on a pool of their own (``RolloutRole``)."""

from __future__ import annotations

import logging

import numpy as np
import torch

from hybridrl.config.choices import RolloutMode
from hybridrl.config.schema import ModelConfig, RolloutConfig
from hybridrl.engine.context import DataLayout, WorkerContext
from hybridrl.generation.agent_loop import AgentLoop, AgentRow
from hybridrl.generation.engines.base import EarlyReturn, EngineSite, GenerationRequest
from hybridrl.generation.engines.factory import build_rollout_engine
from hybridrl.generation.weight_channel import ChannelPlan, WeightChannel
from hybridrl.models.loader import empty_causal_lm, load_tokenizer
from hybridrl.protocol import Batch
from hybridrl.seeds import rank_sampling_seed
from hybridrl.tools.config import load_tool_config
from hybridrl.tools.interactions import load_interaction_config

logger = logging.getLogger(__name__)

#: The columns a generation takes: the prompts, and for multi-turn rollouts each row's ``AgentRow``.
GEN_KEYS = ["input_ids", "attention_mask", "position_ids"]
AGENT_ROW = "agent_row"
STOPPED = "stopped"
GROUP_ID = "group_id"


def generation_inputs(batch: Batch, multi_turn: bool) -> Batch:
    """What the generating workers get of ``batch``: its prompt columns (they leave it), and for multi-turn
    rollouts each row's agent loop, tools' and interaction's kwargs (from ``extra_info``) and chat messages."""
    gen_in = batch.pop(tensor_keys=GEN_KEYS)
    if multi_turn:
        nt = batch.non_tensors
        extras = [extra or {} for extra in nt["extra_info"]]
        rows = [
            AgentRow(agent, extra.get("tools_kwargs") or {}, list(messages), extra.get("interaction_kwargs") or {})
            for agent, extra, messages in zip(nt["agent_name"], extras, nt["raw_prompt"], strict=True)
        ]
        gen_in.union(Batch.from_dict(non_tensors={AGENT_ROW: rows}))
    return gen_in


class Generation:
    def __init__(
        self,
        model: ModelConfig,
        rollout: RolloutConfig,
        ctx: WorkerContext,
        *,
        dtype: torch.dtype,
        max_prompt_length: int,
        max_response_length: int,
        seed: int,
    ) -> None:
        """The engine starts empty (or on random weights) in ``dtype``; the first hand-over fills it.
        ``skeleton`` (the model with parameters on the meta device) names the weights for exports."""
        self.ctx = ctx
        self.cfg = rollout
        self.dtype = dtype
        self.max_response_length = max_response_length
        self.tokenizer = load_tokenizer(ctx.tokenizer_path, model.trust_remote_code)
        self.skeleton, _ = empty_causal_lm(ctx.model_path, model.trust_remote_code, dtype)
        site = EngineSite(
            model_path=ctx.model_path,
            trust_remote_code=model.trust_remote_code,
            dtype=dtype,
            device=ctx.device,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.skeleton.generation_config.eos_token_id or self.tokenizer.eos_token_id,
            max_model_len=max_prompt_length + max_response_length,
            rank=ctx.rank,
            world_size=ctx.world_size,
            seed=seed,
        )
        self.eos_token_id = site.eos_token_id
        self._interrupted = -1  # the generation call an interruption names (partial rollouts)
        self.engine = build_rollout_engine(rollout, site)
        multi_turn = rollout.multi_turn
        self.agent_loop = (
            AgentLoop(
                multi_turn,
                load_tool_config(multi_turn.tool_config_path) if multi_turn.tool_config_path else [],
                self.engine,
                self.tokenizer,
                max_response_length=max_response_length,
                pad_token_id=self.tokenizer.pad_token_id,
                default_agent=rollout.agent.default_agent_loop,
                turn_by_turn=rollout.mode == RolloutMode.sync,
                interactions=(
                    load_interaction_config(multi_turn.interaction_config_path)
                    if multi_turn.interaction_config_path
                    else ()
                ),
            )
            if multi_turn.enable
            else None
        )

    def layout(self) -> DataLayout:
        """Generation replicas span ``rollout.tensor_model_parallel_size`` consecutive ranks (1 for hf: every
        rank generates on its own copy); the ranks of one replica get the same rows."""
        tp = self.cfg.tensor_model_parallel_size
        return DataLayout(self.ctx.rank // tp, self.ctx.world_size // tp, self.ctx.rank % tp == 0)

    def interrupt(self, call: int) -> None:
        """Stop call ``call`` at its next token (from another thread: ``RolloutRole.interrupt``)."""
        self._interrupted = call

    def _early_return(self, batch: Batch) -> EarlyReturn | None:
        """Fully asynchronous training's partial rollouts (``trainer/rollouter.py``): ``meta["call"]`` numbers
        the call, which returns once ``meta["groups_wanted"]`` groups (``GROUP_ID``) are finished, or when
        ``interrupt`` names it; the unfinished responses go on in a later call."""
        call = batch.meta.get("call")
        if call is None or GROUP_ID not in batch.tensors.keys():
            return None
        return EarlyReturn(
            tuple(batch.tensors[GROUP_ID].tolist()),
            int(batch.meta["groups_wanted"]),
            lambda: self._interrupted == call,
        )

    def generate(self, batch: Batch) -> Batch:
        """Responses for ``batch``'s prompts; the engine must hold the weights (resumed)."""
        # The ranks of one tensor-parallel replica sample the same rows with the same seed.
        seed = rank_sampling_seed(int(batch.meta.get("seed", 0)), self.layout().replica)
        # meta["sampling"] (a SamplingConfig) overrides the rollout settings: validation's val_kwargs,
        # ReMax's greedy pass.
        sampling = batch.meta.get("sampling") or self.cfg.sampling()
        with self.ctx.recorder.span("generate_worker"):
            input_ids = batch.tensors["input_ids"].to(self.ctx.device)
            attention_mask = batch.tensors["attention_mask"].to(self.ctx.device)
            columns: dict = {}
            if self.agent_loop is not None and AGENT_ROW in batch.non_tensors:
                rows = list(batch.non_tensors[AGENT_ROW])
                out, stats = self.agent_loop.run(input_ids, attention_mask, rows, sampling, seed)
                columns = stats.columns()
            else:
                request = GenerationRequest(
                    input_ids,
                    attention_mask,
                    max_new_tokens=int(batch.meta.get("max_new_tokens", self.max_response_length)),
                    sampling=sampling,
                    seed=seed,
                    early_return=self._early_return(batch),
                )
                out = self.engine.generate(request)
                if "call" in batch.meta:  # partial rollouts: did each response reach a stop token?
                    columns[STOPPED] = _stopped(out, request.stops(self.eos_token_id))
        texts = self.tokenizer.batch_decode(out["responses"], skip_special_tokens=True)
        return Batch.from_dict(
            tensors={k: v.cpu() for k, v in out.items()}, non_tensors={"response_text": texts, **columns}
        )


def _stopped(out: dict[str, torch.Tensor], stops: list[int]) -> np.ndarray:
    """Per row: the response's last token is a stop token (it is finished), rather than the call having ended
    first (its length, an early return)."""
    lengths = out["response_mask"].sum(-1)  # (B,)
    last = out["responses"].gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)
    ended = torch.isin(last, torch.tensor(stops, dtype=last.dtype, device=last.device)) & (lengths > 0)
    return ended.cpu().numpy()


def open_channel(ctx: WorkerContext, plan: ChannelPlan, rank: int) -> WeightChannel:
    """This worker's end of the weight channel between the actor's sending ranks and the generation workers."""
    channel = WeightChannel(
        plan.address,
        plan.port,
        rank,
        plan.size,
        ctx.device,
        plan.timeout_s,
        senders=plan.senders,
        bucket_bytes=plan.bucket_bytes,
    )
    logger.info("Weight channel %s:%d open as rank %d of %d", plan.address, plan.port, rank, plan.size)
    return channel
