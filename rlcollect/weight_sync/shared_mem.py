"""SharedMemWeightSyncScheme: one shared-memory copy of the weights and a version counter."""
from __future__ import annotations

import torch
from torch import nn

from rlcollect.weight_sync import strategies
from rlcollect.weight_sync.schemes import WeightReceiver, WeightSender, WeightSyncScheme


class SharedMemWeightSyncScheme(WeightSyncScheme):
    """The weights live in shared memory. An update is one copy into it plus a version
    bump, under a lock; each worker, at the start of its next batch, sees the new version
    and copies the weights into its model. No message, no round trip."""

    def make_sender(self, model: nn.Module, num_workers: int, mp_context) -> WeightSender:
        return _SharedMemSender(model, mp_context)


class _SharedMemSender(WeightSender):
    def __init__(self, model, mp_context) -> None:
        self._model = model
        self._shared = strategies.as_tensordict(model).detach().to("cpu").clone().share_memory_()
        self._version = mp_context.Value("q", 0)
        self.version = 0

    def endpoint(self, worker_id: int):
        return _SharedMemEndpoint(self._shared, self._version)

    @torch.no_grad()
    def send(self, weights=None, liveness=None) -> None:
        source = strategies.as_tensordict(self._model if weights is None else weights)
        with self._version.get_lock():
            self._shared.update_(source)
            self._version.value += 1
            self.version = self._version.value

    def close(self) -> None:
        self._version = None  # releases the counter's lock (a named semaphore under spawn)


class _SharedMemEndpoint:
    def __init__(self, shared, version) -> None:
        self.shared, self.version = shared, version

    def make_receiver(self, model: nn.Module) -> WeightReceiver:
        return _SharedMemReceiver(model, self.shared, self.version)


class _SharedMemReceiver(WeightReceiver):
    def __init__(self, model, shared, version) -> None:
        self._local = strategies.as_tensordict(model)
        self._shared, self._shared_version = shared, version
        self.version = 0

    def poll(self) -> bool:
        if self._shared_version.value == self.version:
            return False
        with self._shared_version.get_lock():
            self._local.update_(self._shared)
            self.version = self._shared_version.value
        return True
