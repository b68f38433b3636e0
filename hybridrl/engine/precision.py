"""Dynamic loss scaling for fp16 training (the seed's ``gradient_scale``).

torch's GradScaler checks gradients per device and does not cover FSDP2's DTensor gradients on every
backend, so the few lines of the classic algorithm live here: scale the loss, unscale the gradients,
skip the step and halve the scale on overflow, double it after ``growth_interval`` clean steps.
"""

from __future__ import annotations

import torch


class DynamicLossScaler:
    def __init__(
        self,
        init_scale: float = 512.0,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 200,
        min_scale: float = 1.0,
    ) -> None:
        if init_scale <= 0:
            raise ValueError(f"gradient_scale={init_scale} must be positive.")
        self.scale = float(init_scale)
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval, self.min_scale = growth_interval, min_scale
        self._clean_steps = 0

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale

    @torch.no_grad()
    def unscale_(self, params: list[torch.nn.Parameter]) -> None:
        inv = 1.0 / self.scale
        for p in params:
            if p.grad is not None:
                p.grad.mul_(inv)

    def update(self, overflow: bool) -> None:
        if overflow:
            self.scale = max(self.min_scale, self.scale * self.backoff_factor)
            self._clean_steps = 0
            return
        self._clean_steps += 1
        if self._clean_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self._clean_steps = 0

    def state_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "clean_steps": self._clean_steps}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.scale, self._clean_steps = float(state["scale"]), int(state["clean_steps"])
