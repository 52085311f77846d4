"""MultiProcessWeightSyncScheme: each update is sent over one pipe per worker and acknowledged.

torch's multiprocessing pickler sends CPU tensors as shared-memory handles, so what the
pipe carries is a copy of the weights in shared memory (made per update) and the worker
copies from it into its own model.
"""
from __future__ import annotations

import time
from typing import Callable

from torch import nn

from rlcollect.weight_sync import strategies
from rlcollect.weight_sync.schemes import WeightReceiver, WeightSender, WeightSyncScheme

ACK_POLL_SECONDS = 0.05


class MultiProcessWeightSyncScheme(WeightSyncScheme):
    """Send the weights (``strategy="state_dict"`` or ``"tensordict"``) through a pipe to
    each worker; ``send`` returns once every worker acknowledged applying them.

    A busy worker reads its pipe at the start of its next batch, so with an asynchronous
    collector ``send`` can wait up to one batch.
    """

    def __init__(self, strategy: str = "tensordict", ack_timeout: float = 120.0) -> None:
        self.strategy = strategies.check_strategy(strategy)
        self.ack_timeout = ack_timeout

    def make_sender(self, model: nn.Module, num_workers: int, mp_context) -> WeightSender:
        return _PipeSender(model, num_workers, mp_context, self.strategy, self.ack_timeout)


class _PipeSender(WeightSender):
    def __init__(self, model, num_workers, mp_context, strategy, ack_timeout) -> None:
        self._model, self._strategy, self._ack_timeout = model, strategy, ack_timeout
        self._mp_context = mp_context
        pipes = [mp_context.Pipe() for _ in range(num_workers)]
        self._connections = [main_end for main_end, _ in pipes]
        self._worker_ends = [worker_end for _, worker_end in pipes]
        self.version = 0

    def endpoint(self, worker_id: int):
        return _PipeEndpoint(self._worker_ends[worker_id], self._strategy, self.version)

    def renew_endpoint(self, worker_id: int):
        """A new pipe: the old one may hold an update the failed worker never acknowledged."""
        self._connections[worker_id].close()
        self._worker_ends[worker_id].close()
        self._connections[worker_id], self._worker_ends[worker_id] = self._mp_context.Pipe()
        return self.endpoint(worker_id)

    def send(self, weights=None, liveness: Callable[[], None] | None = None) -> None:
        payload = strategies.extract(self._model if weights is None else weights, self._strategy)
        self.version += 1
        for connection in self._connections:
            connection.send((self.version, payload))
        deadline = time.monotonic() + self._ack_timeout
        for worker_id, connection in enumerate(self._connections):
            while not connection.poll(ACK_POLL_SECONDS):
                if liveness is not None:
                    liveness()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker {worker_id} did not acknowledge weights version "
                                       f"{self.version} within {self._ack_timeout} s")
            acknowledged = connection.recv()
            if acknowledged != self.version:
                raise RuntimeError(f"worker {worker_id} acknowledged weights version {acknowledged}, "
                                   f"expected {self.version}")

    def close(self) -> None:
        for connection in (*self._connections, *self._worker_ends):
            connection.close()


class _PipeEndpoint:
    def __init__(self, connection, strategy: str, version: int = 0) -> None:
        self.connection, self.strategy, self.version = connection, strategy, version

    def make_receiver(self, model: nn.Module) -> WeightReceiver:
        return _PipeReceiver(model, self.connection, self.strategy, self.version)


class _PipeReceiver(WeightReceiver):
    def __init__(self, model, connection, strategy, version: int = 0) -> None:
        self._model, self._connection, self._strategy = model, connection, strategy
        self.version = version  # a replacement worker starts from the trainer's current weights

    def poll(self) -> bool:
        applied = False
        while self._connection.poll():
            self.version, payload = self._connection.recv()
            strategies.apply(self._model, payload, self._strategy)
            self._connection.send(self.version)
            applied = True
        return applied

    def connections(self):
        return [self._connection]
