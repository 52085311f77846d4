"""SharedMemWeightSyncScheme: one shared-memory copy of the weights and a version counter."""
from __future__ import annotations

import time

import torch
from torch import nn

from rlcollect.weight_sync import strategies
from rlcollect.weight_sync.schemes import WeightReceiver, WeightSender, WeightSyncScheme


class SharedMemWeightSyncScheme(WeightSyncScheme):
    """The weights live in shared memory. An update is one copy into it plus a version
    bump; each worker, at the start of its next batch, sees the new version and copies the
    weights into its model. No message, no round trip.

    Workers take no lock (a sequence lock: the sender makes a sequence number odd while it
    writes; a worker copies, then retries if the number changed meanwhile), so a worker
    killed while it copies cannot leave a lock held that the trainer would wait on."""

    def make_sender(self, model: nn.Module, num_workers: int, mp_context) -> WeightSender:
        return _SharedMemSender(model, mp_context)


class _SharedMemSender(WeightSender):
    def __init__(self, model, mp_context) -> None:
        self._model = model
        self._shared = strategies.as_tensordict(model).detach().to("cpu").clone().share_memory_()
        self._counters = mp_context.RawArray("q", 2)  # [sequence (odd while writing), version]
        self._writer = mp_context.Lock()  # between the trainer's own threads; workers never take it
        self.version = 0

    def endpoint(self, worker_id: int):
        return _SharedMemEndpoint(self._shared, self._counters)

    @torch.no_grad()
    def send(self, weights=None, liveness=None) -> None:
        source = strategies.as_tensordict(self._model if weights is None else weights)
        with self._writer:
            self._counters[SEQUENCE] += 1  # odd: being written
            self._shared.update_(source)
            self._counters[VERSION] += 1
            self._counters[SEQUENCE] += 1  # even: stable
            self.version = self._counters[VERSION]

    def close(self) -> None:
        self._writer = None  # releases the lock (a named semaphore under spawn)


SEQUENCE, VERSION = 0, 1


class _SharedMemEndpoint:
    def __init__(self, shared, counters) -> None:
        self.shared, self.counters = shared, counters

    def make_receiver(self, model: nn.Module) -> WeightReceiver:
        return _SharedMemReceiver(model, self.shared, self.counters)


class _SharedMemReceiver(WeightReceiver):
    def __init__(self, model, shared, counters) -> None:
        self._local = strategies.as_tensordict(model)
        self._shared, self._counters = shared, counters
        self.version = 0

    def poll(self) -> bool:
        if self._counters[VERSION] == self.version:
            return False
        while True:
            sequence = self._counters[SEQUENCE]
            if sequence % 2:  # being written: wait for the sender to finish
                time.sleep(0)
                continue
            version = self._counters[VERSION]
            self._local.update_(self._shared)
            if self._counters[SEQUENCE] == sequence:  # no write began meanwhile: a consistent copy
                break
        self.version = version
        return True
