"""The RewardModel role: a frozen sequence classifier that scores (prompt, response) texts.

Re-tokenization. The reward model's tokenizer may differ from the policy's, so the role never
reuses the policy's token ids: it scores ``prompt_text + response_text`` (the prompt exactly as the
policy saw it, chat template included, followed by the decoded response), tokenized by the RM's own
tokenizer without adding special tokens (a chat-templated prompt already carries its BOS/markers).
verl instead re-applies the *RM's* chat template to the conversation when the tokenizers differ;
concatenating the raw text is correct when the RM was trained on the same format as the policy's
prompts, and is the simplest choice that is right for a shared template.

Sequences are right-padded and truncated from the left to ``reward_model.max_length`` tokens (the
end of the text, i.e. the response, is what is scored). The score is the scalar logit at the last
real token: HF's ``...ForSequenceClassification`` picks the rightmost non-pad token, using
``config.pad_token_id`` (set from the tokenizer by the loader). Caveat: when the tokenizer has no
pad token the loader uses EOS as pad, and a text ending in EOS is then scored at the token before it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hybridrl.config.schema import Config, RewardModelConfig
from hybridrl.engine.context import WorkerContext
from hybridrl.engine.dtypes import weights_dtype
from hybridrl.engine.packing import pack_rows
from hybridrl.generation.engines.base import position_ids_from
from hybridrl.models.reward_model import empty_reward_model
from hybridrl.protocol import Batch
from hybridrl.workers.context import EngineRole, build_engine
from hybridrl.workers.forward import MicroBatching


class RewardModelRole(EngineRole):
    def __init__(self, cfg: RewardModelConfig, ctx: WorkerContext, *, seed: int) -> None:
        """``seed``: the classification head's, when the checkpoint has none (equal on every rank)."""
        self.cfg = cfg
        self.ctx = ctx
        self.max_length = cfg.max_length
        self.micro = MicroBatching(cfg.micro_batch_size_per_gpu)
        self.remove_padding = cfg.model.use_remove_padding
        model, self.tokenizer, weights = empty_reward_model(
            str(cfg.model.path),  # validated at load; a missing path names itself ('None')
            cfg.model.trust_remote_code,
            tokenizer_path=cfg.model.tokenizer_path,
            seed=seed,
            dtype=weights_dtype(cfg.fsdp.model_dtype, trained=False, device=ctx.device),
        )
        self.engine, self.offload = build_engine(
            model, weights, cfg, ctx, train=False, what="reward model", param_offload=cfg.fsdp.param_offload
        )
        if self.remove_padding and not isinstance(getattr(model, "score", None), torch.nn.Module):
            raise ValueError(
                f"reward_model.model.use_remove_padding: {type(model).__name__} has no 'score' head to read "
                f"each packed sequence's last token from; set reward_model.model.use_remove_padding=false."
            )
        self.offload.offload()

    @classmethod
    def from_config(cls, cfg: Config, ctx: WorkerContext) -> RewardModelRole:
        return cls(cfg.reward_model, ctx, seed=cfg.trainer.seed)

    def tokenize(self, prompts: list[str], responses: list[str]) -> dict[str, torch.Tensor]:
        """``input_ids``/``attention_mask`` of ``prompt + response``: right-padded, left-truncated."""
        texts = [str(p) + str(r) for p, r in zip(prompts, responses, strict=True)]
        enc = self.tokenizer(
            texts,
            add_special_tokens=False,
            padding="longest",
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )
        lengths = enc["attention_mask"].sum(-1)
        if (lengths == 0).any():
            empty = torch.nonzero(lengths == 0).flatten().tolist()
            raise ValueError(f"Rows {empty} have an empty prompt_text + response_text: nothing to score.")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.remove_padding:
            return self._packed_forward(input_ids, attention_mask)
        with self.engine.autocast():
            logits = self.engine.model(
                input_ids=input_ids.to(self.ctx.device),
                attention_mask=attention_mask.to(self.ctx.device),
                use_cache=False,
            ).logits
        return logits.squeeze(-1).float().cpu()  # (B,)

    def _packed_forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Scores of packed rows: the whole model runs (so FSDP's hooks gather every parameter), and the
        score head's per-token output is read at each row's last real token. (The classifier's own
        pooling would read one token of the one packed row.)"""
        rows = pack_rows(input_ids, attention_mask, position_ids_from(attention_mask))
        per_token: list[torch.Tensor] = []
        head = self.engine.model.get_submodule("score")  # checked in __init__
        hook = head.register_forward_hook(lambda _m, _i, out: per_token.append(out))
        try:
            with self.engine.autocast():
                self.engine.model(
                    input_ids=rows.input_ids.to(self.ctx.device),
                    position_ids=rows.position_ids.to(self.ctx.device),
                    use_cache=False,
                )
        finally:
            hook.remove()
        scores = per_token[0].reshape(-1)
        return scores[rows.last_token_index().to(scores.device)].float().cpu()  # (B,)

    def _sync(self, n_steps: int, failed: bool) -> tuple[int, bool]:
        """The most micro-batches any rank has, and whether any rank failed to prepare its inputs."""
        if self.ctx.world_size <= 1 or not dist.is_initialized():
            return n_steps, failed
        flags = torch.tensor([n_steps, int(failed)], dtype=torch.int64, device=self.ctx.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.ctx.mesh.get_group())
        return int(flags[0]), bool(flags[1])

    @torch.no_grad()
    def compute_rm_score(self, batch: Batch) -> Batch:
        """``rm_scores`` [B] float32 from the non-tensor columns ``prompt_text`` and ``response_text``.

        Called on every rank of the group together (each with its own shard); shards may differ in
        size, even be empty.
        """
        encoded: list[dict[str, torch.Tensor]] = []
        error: Exception | None = None
        try:
            for key in ("prompt_text", "response_text"):
                if key not in batch.non_tensors:
                    raise KeyError(
                        f"compute_rm_score needs non-tensor column '{key}'; the batch has {sorted(batch.non_tensors)}."
                    )
            for mb in self.micro.split(batch, self.engine)[0]:
                encoded.append(
                    self.tokenize(list(mb.non_tensors["prompt_text"]), list(mb.non_tensors["response_text"]))
                )
        except Exception as exc:  # re-raised below, after the other ranks hear of it
            error = exc
        # Agree on the step count (and on failure) before any forward: FSDP's all-gathers need every
        # rank in every forward, so a rank with fewer micro-batches runs throw-away forwards, and a
        # rank's bad input makes every rank raise instead of leaving the others waiting.
        steps, any_failed = self._sync(len(encoded), error is not None)
        if error is not None:
            raise error
        if any_failed:
            raise RuntimeError("compute_rm_score failed on another rank (see its error).")
        dummy = torch.full((1, 1), self.tokenizer.pad_token_id, dtype=torch.long)
        scores = []
        with self.offload.resident():
            for i in range(steps):
                if i < len(encoded):
                    scores.append(self._forward(encoded[i]["input_ids"], encoded[i]["attention_mask"]))
                else:
                    self._forward(dummy, torch.ones_like(dummy))
        rm_scores = torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float32)
        return Batch.from_dict(tensors={"rm_scores": rm_scores})
