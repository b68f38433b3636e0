"""Generation with Hugging Face ``generate`` on an unsharded copy of the actor's weights.

FSDP-sharded modules all-gather inside every forward, so ranks that stop generating at different
times would deadlock; generating on a plain module after an explicit, timed weight hand-over keeps
ranks independent during rollout (the same reason verl hands weights to vLLM).

The engine keeps the rollout interface an inference engine (vLLM, SGLang) has: ``load_weights`` from an
iterator of ``(name, tensor)`` (the trainer streams them one at a time), ``release``/``resume`` of its
memory between rollouts, and ``generate``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from hybridrl.models.weights import materialize
from hybridrl.parallel.offload import HOST, move_module


def response_mask_from(
    responses: torch.Tensor, eos_token_id: int | list[int] | None, pad_token_id: int
) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it."""
    # responses: (B, R)
    eos_ids = [] if eos_token_id is None else ([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id))
    is_eos = torch.zeros_like(responses, dtype=torch.bool)
    for eos in eos_ids:
        is_eos |= responses == eos
    # Count EOS tokens strictly before each position; positions after the first EOS see >= 1.
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    mask = (eos_before == 0).long()
    if not eos_ids:
        mask &= (responses != pad_token_id).long()
    return mask


def position_ids_from(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: the first real token of each row is position 0."""
    return (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0)


class HFRolloutEngine:
    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        eos_token_id: int | list[int] | None,
        *,
        free_cache: bool = False,
    ) -> None:
        """``free_cache``: move the weights to host memory between rollouts (only where the model lives on
        an accelerator: on the host there is nothing to free)."""
        self.model = model.eval()
        self.model.requires_grad_(False)
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.device = next(model.parameters()).device
        self.free_cache = free_cache and self.device != HOST
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

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        max_new_tokens: int,
        do_sample: bool,
        temperature: float,
        top_k: int,
        top_p: float,
        seed: int,
    ) -> dict[str, torch.Tensor]:
        """Sample responses for left-padded prompts; outputs are padded to ``max_new_tokens``."""
        # input_ids, attention_mask: (B, P)
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            sampling = (
                dict(do_sample=True, temperature=temperature, top_k=top_k if top_k > 0 else None, top_p=top_p)
                if do_sample
                else dict(do_sample=False, temperature=None, top_k=None, top_p=None)
            )
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max_new_tokens,
                min_new_tokens=0,
                pad_token_id=self.pad_token_id,
                eos_token_id=self.eos_token_id,
                use_cache=True,
                **sampling,
            )
        finally:
            torch.random.set_rng_state(generator_state)
        prompt_len = input_ids.shape[1]
        responses = out[:, prompt_len:]  # (B, <=R)
        if responses.shape[1] < max_new_tokens:
            pad = responses.new_full((responses.shape[0], max_new_tokens - responses.shape[1]), self.pad_token_id)
            responses = torch.cat([responses, pad], dim=1)  # (B, R)
        response_mask = response_mask_from(responses, self.eos_token_id, self.pad_token_id)
        responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, self.pad_token_id))
        full_mask = torch.cat([attention_mask, response_mask], dim=1)  # (B, P+R)
        return {
            "prompts": input_ids,
            "responses": responses,
            "input_ids": torch.cat([input_ids, responses], dim=1),
            "attention_mask": full_mask,
            "position_ids": position_ids_from(full_mask),
            "response_mask": response_mask,
        }
