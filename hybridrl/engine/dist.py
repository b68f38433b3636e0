"""torch.distributed set-up for one worker group: backend by device, env:// rendezvous."""

from __future__ import annotations

import datetime
import logging
import os
import socket
import sys

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


def pick_device(device: str) -> torch.device:
    """``auto`` means the worker's GPU when Ray gave it one, else the CPU."""
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("trainer.device=cuda but this worker sees no CUDA device; use trainer.device=auto.")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def node_ip() -> str:
    """This node's address as Ray sees it; loopback for plain multi-process ranks (``run_ranks``), which
    must not pay for importing Ray."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return str(ray.util.get_node_ip_address())
    return "127.0.0.1"


def init_process_group(
    rank: int, world_size: int, master_addr: str, master_port: int, device: torch.device, timeout_s: float = 600.0
) -> None:
    os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(rank), WORLD_SIZE=str(world_size))
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend=backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
    )
    logger.debug("rank %d/%d joined %s group at %s:%d", rank, world_size, backend, master_addr, master_port)


def destroy_process_group() -> None:
    # An undestroyed gloo group can abort the process at exit (SIGABRT): always tear it down.
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
