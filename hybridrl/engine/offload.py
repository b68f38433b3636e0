"""Offload of idle colocated roles: parameters and optimizer state live in host memory between the
phases that use them (verl's ``param_offload`` / ``optimizer_offload``).

Colocated on one GPU, a 7B actor's fp32 parameters, gradients and Adam state (16 B/parameter, sharded)
sit next to the reference model, the critic and the generation engine's KV cache; moving each idle
part to the host frees its device memory for the phase that runs. On CPU there is nothing to free:
the options are accepted and say so once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import torch
from torch import nn

logger = logging.getLogger(__name__)

HOST = torch.device("cpu")


def move_module(module: nn.Module, device: torch.device) -> None:
    """Parameters, gradients and buffers of ``module`` (FSDP2 shards included) to ``device``, copied."""
    # nn.Module._apply is what .to() runs; calling it with copy=True moves even between equal devices,
    # so a round trip is a real one wherever it runs. FSDP2 re-registers its sharded parameters after it.
    module._apply(lambda t: t.to(device, non_blocking=device.type == "cpu", copy=True))
    if device.type == "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()  # non-blocking device-to-host copies must land before the host reads them


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """The optimizer's tensors (Adam moments; DTensor shards included) to ``device``, copied. The
    ``step`` counters stay where the optimizer keeps them (the CPU, for non-capturable Adam)."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value) and key != "step":
                state[key] = value.to(device, copy=True)


class Offloader:
    """Keeps a role's parameters and/or optimizer state on the host except inside ``resident``.

    ``span(name)`` times each move (a worker's span recorder: the moves show up as
    ``timing_s/offload`` and ``timing_s/reload``)."""

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        device: torch.device,
        *,
        params: bool,
        optimizer_state: bool,
        what: str,
        span: Callable[[str], contextlib.AbstractContextManager] | None = None,
    ) -> None:
        self.module, self.optimizer, self.device = module, optimizer, device
        self.params = params
        self.optimizer_state = optimizer_state and optimizer is not None
        self.span = span or (lambda name: contextlib.nullcontext())
        if (params or optimizer_state) and device == HOST:
            logger.info("%s: offload options have no effect when the role runs on the host (%s).", what, device)
            self.params = self.optimizer_state = False
        self.offloaded_params = False
        self.offloaded_optimizer = False

    def offload(self) -> None:
        if not (self.params or self.optimizer_state):
            return
        with self.span("offload"):
            if self.params and not self.offloaded_params:
                move_module(self.module, HOST)
                self.offloaded_params = True
            if self.optimizer_state and not self.offloaded_optimizer:
                assert self.optimizer is not None
                move_optimizer_state(self.optimizer, HOST)
                self.offloaded_optimizer = True
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def reload(self, optimizer: bool) -> None:
        if not (self.offloaded_params or (optimizer and self.offloaded_optimizer)):
            return
        with self.span("reload"):
            if self.offloaded_params:
                move_module(self.module, self.device)
                self.offloaded_params = False
            if optimizer and self.offloaded_optimizer:
                assert self.optimizer is not None
                move_optimizer_state(self.optimizer, self.device)
                self.offloaded_optimizer = False

    @contextlib.contextmanager
    def resident(self, optimizer: bool = False) -> Iterator[None]:
        """The parameters (and with ``optimizer`` the optimizer state) on the device inside."""
        self.reload(optimizer)
        try:
            yield
        finally:
            self.offload()
