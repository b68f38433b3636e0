"""Rendezvous: a store's port is bound by the process that hosts it from the moment its address exists, so
no other socket can take it before the group forms, and many groups can form at once."""

from __future__ import annotations

import errno
import socket

import pytest
import torch
import torch.distributed as dist

from hybridrl.engine.dist import connect_store, host_store
from hybridrl.generation.weight_channel import WeightChannel
from hybridrl.testing.launch import run_ranks


def test_a_hosted_store_holds_its_port_and_is_its_own_first_member():
    address, port = host_store(timeout_s=30)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(OSError) as taken:
        sock.bind(("", port))
    assert taken.value.errno == errno.EADDRINUSE
    hosted = connect_store(address, port, timeout_s=30)  # the host's own rendezvous takes the store itself
    client = connect_store(address, port, timeout_s=30)  # anyone else connects to it
    assert hosted is not client
    hosted.set("k", "v")
    assert client.get("k") == b"v"


def pairs_open_channels_at_once(rank: int, world_size: int, rounds: int) -> None:
    """Each round, every even rank hosts a store and opens a channel with the next rank, all pairs at once."""
    for round_ in range(rounds):
        addresses: list[tuple[str, int] | None] = [None] * world_size
        dist.all_gather_object(addresses, host_store(timeout_s=60) if rank % 2 == 0 else None)
        host = rank - rank % 2
        address = addresses[host]
        assert address is not None
        channel = WeightChannel(address[0], address[1], rank % 2, 2, torch.device("cpu"), timeout_s=60)
        tensor = torch.full((4,), float(10 * round_ + host))
        if rank % 2 == 0:
            channel.send(iter([("t", tensor)]))
        else:
            ((name, got),) = list(channel.receive())
            assert name == "t" and torch.equal(got, tensor)


def test_many_channels_form_at_once():
    run_ranks(pairs_open_channels_at_once, 4, 5)
