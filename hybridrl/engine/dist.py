"""torch.distributed set-up for one worker group: backend by device, rendezvous on a store the first rank
hosts on a port it bound itself."""

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
    """A port free now, for servers that take a port number and bind it themselves (SGLang's). Our own
    rendezvous use ``host_store`` instead: a port picked here can be taken before its owner binds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


# Stores this process hosts, by the address it published, until the rendezvous that uses them takes them.
_HOSTED: dict[tuple[str, int], dist.TCPStore] = {}


def host_store(timeout_s: float = 600.0) -> tuple[str, int]:
    """Host a TCPStore on a port this process binds itself (port 0) and keeps; returns the address to
    publish. Picking a free port and binding it later raced with every other socket on the machine."""
    store = dist.TCPStore(
        node_ip(), 0, None, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    address = (node_ip(), store.port)
    _HOSTED[address] = store
    return address


def connect_store(address: str, port: int, timeout_s: float = 600.0) -> dist.TCPStore:
    """The store at ``address:port``: the hosted one itself in the process that hosts it, a client elsewhere."""
    hosted = _HOSTED.pop((address, port), None)
    if hosted is not None:
        return hosted
    return dist.TCPStore(address, port, None, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))


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
    """Join the group whose store is at ``master_addr:master_port`` (``host_store`` on its first rank)."""
    store = connect_store(master_addr, master_port, timeout_s)
    # MASTER_ADDR/PORT for libraries that read them (vLLM's in-process engine); the group uses the store.
    os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(rank), WORLD_SIZE=str(world_size))
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend=backend, store=store, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
    )
    logger.debug("rank %d/%d joined %s group at %s:%d", rank, world_size, backend, master_addr, master_port)


def destroy_process_group() -> None:
    # An undestroyed gloo group can abort the process at exit (SIGABRT): always tear it down.
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
