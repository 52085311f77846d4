"""The process group of a distributed collector: a rendezvous store and a gloo group whose
listeners bind one address (127.0.0.1 by default), never every interface.

torch's TCPStore, given "127.0.0.1", still listens on every interface; handed a socket
already bound and listening (``master_listen_fd``), it serves on that socket alone. gloo's
pair listeners bind the address of the device the group is built with
(``ProcessGroupGloo.create_device(hostname=...)``). The group is a ProcessGroupGloo object,
not torch.distributed's default group, so a trainer can hold several and nothing global
changes in its process.
"""
from __future__ import annotations

import datetime
import math
import pickle
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rlcollect.errors import ConfigError

# point-to-point tags: commands and weights go out from the trainer, batches and answers come back
COMMAND_TAG, WEIGHTS_TAG, HEADER_TAG, DATA_TAG, ANSWER_TAG = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class GroupSpec:
    """Where workers meet the trainer (rank 0): the store's address and port, the group's
    size (1 + workers), its backend and the timeout of every wait on it."""

    address: str
    port: int
    world_size: int
    backend: str = "gloo"
    timeout_s: float = 60.0

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.timeout_s)


class Rendezvous:
    """The trainer's side: a TCPStore served on a socket bound to ``address`` only (port 0:
    a free one); ``close()`` stops listening."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0, world_size: int = 2, backend: str = "gloo",
                 timeout_s: float = 60.0) -> None:
        try:
            self._socket = socket.create_server((address, port), backlog=max(128, 2 * world_size))
        except OSError as error:  # the port in use, an address not this machine's, a name that does not resolve
            raise ConfigError(f"collector.master_addr={address} collector.master_port={port}: the trainer cannot "
                              f"listen there ({error.strerror or error}); port 0 takes a free one") from None
        port = self._socket.getsockname()[1]
        self.spec = GroupSpec(address, port, world_size, backend, timeout_s)
        self.store = dist.TCPStore(address, port, world_size, True, self.spec.timeout, wait_for_workers=False,
                                   master_listen_fd=self._socket.fileno())
        self._socket.detach()  # the store owns the listening socket now, and closes it with itself

    def close(self) -> None:
        self.store = None


def connect_store(spec: GroupSpec) -> dist.TCPStore:
    """A worker's client of the trainer's store."""
    return dist.TCPStore(spec.address, spec.port, spec.world_size, False, spec.timeout)


def make_group(spec: GroupSpec, store: dist.TCPStore, rank: int):
    """This process's member of the group (rank 0: the trainer), its listeners bound to
    ``spec.address``."""
    if spec.backend != "gloo":
        raise ValueError(f"backend={spec.backend!r}: batches and weights travel point to point over gloo (CPU "
                         "tensors); nccl and mpi are not supported by DistributedCollector yet")
    options = dist.ProcessGroupGloo._Options()
    options._timeout = spec.timeout
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=spec.address)]
    return dist.ProcessGroupGloo(store, rank, spec.world_size, options)


def send_object(group, value, dst: int, tag: int) -> None:
    """A small Python object, pickled: its length, then its bytes."""
    payload = torch.frombuffer(bytearray(pickle.dumps(value)), dtype=torch.uint8)
    group.send([torch.tensor([payload.numel()], dtype=torch.int64)], dst, tag).wait()
    if payload.numel():
        group.send([payload], dst, tag).wait()


def recv_object(group, src: int, tag: int):
    size = torch.zeros(1, dtype=torch.int64)
    group.recv([size], src, tag).wait()
    payload = torch.empty(int(size), dtype=torch.uint8)
    if payload.numel():
        group.recv([payload], src, tag).wait()
    return pickle.loads(payload.numpy().tobytes())


class FlatLayout:
    """Tensors of fixed shapes and dtypes laid out in one byte buffer, so that a batch (or
    the weights) travels as a single message: ``views(buffer)`` are the tensors, aliasing it."""

    ALIGN = 16

    def __init__(self, entries: list[tuple[list[int], torch.dtype]]) -> None:
        self.entries, self.offsets, offset = list(entries), [], 0
        for shape, dtype in self.entries:
            self.offsets.append(offset)
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            offset += -(-size // self.ALIGN) * self.ALIGN
        self.nbytes = offset

    def buffer(self) -> torch.Tensor:
        return torch.zeros(self.nbytes, dtype=torch.uint8)

    def views(self, buffer: torch.Tensor) -> list[torch.Tensor]:
        views = []
        for (shape, dtype), offset in zip(self.entries, self.offsets):
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            views.append(buffer[offset:offset + size].view(dtype).view(shape))
        return views
