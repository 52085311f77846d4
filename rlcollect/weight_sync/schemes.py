"""Weight-sync schemes: what to synchronise and how, from the trainer to worker copies.

A scheme is configuration. For each model, the collector asks the scheme for a
``WeightSender`` in the main process; the sender hands each worker an endpoint (passed to
the worker at start-up) from which the worker builds its ``WeightReceiver``.

    main process                              worker i
    scheme.make_sender(model, n, ctx)
      sender.endpoint(i) ──── at spawn ────▶  endpoint.make_receiver(model_copy)
      sender.send(weights) ── transport ──▶  receiver.poll()  (at each batch start)

Every ``send`` bumps the sender's version; a receiver's version tells which update its
model holds, and is what batches carry as ("collector", "policy_version"). The concrete
schemes import this module and it imports none of them; backends.py builds one by name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from multiprocessing.connection import Connection
from typing import Callable

from torch import nn

from rlcollect.moved import MovedAttribute


class WeightReceiver(ABC):
    """Worker side: applies the updates that arrived, when asked."""

    version: int = 0

    @abstractmethod
    def poll(self) -> bool:
        """Apply any pending update (non-blocking); True when the weights changed."""

    def connections(self) -> list[Connection]:
        """Pipes the worker should wake up on while idle (empty for shared memory)."""
        return []


class WeightSender(ABC):
    """Main-process side: pushes a model's weights to every worker."""

    version: int = 0

    @abstractmethod
    def endpoint(self, worker_id: int):
        """A picklable handle, passed to worker ``worker_id`` at start-up, that builds its receiver."""

    def renew_endpoint(self, worker_id: int):
        """The endpoint for a worker that replaces a failed one at ``worker_id`` (what the
        failed one had may hold unread updates); it starts at the current version."""
        return self.endpoint(worker_id)

    @abstractmethod
    def send(self, weights=None, liveness: Callable[[], None] | None = None) -> None:
        """Push ``weights`` (None: the model's current ones). When it returns, every
        worker applies them before its next batch. ``liveness`` is called while waiting
        on workers and raises if one died."""

    def close(self) -> None:
        """Release the transport."""


class WeightSyncScheme(ABC):
    """Configuration of how one model's weights reach the workers."""

    # deprecated: rlcollect.weight_sync.scheme_from_backend (rlcollect/moved.py)
    from_backend = MovedAttribute("rlcollect.weight_sync.WeightSyncScheme.from_backend")

    @abstractmethod
    def make_sender(self, model: nn.Module, num_workers: int, mp_context) -> WeightSender:
        """Create the transport for ``num_workers`` workers and the main-process sender."""


# ---------------------------------------------------------------------------- none
class NoWeightSyncScheme(WeightSyncScheme):
    """Workers keep the weights they started with; updates are no-ops."""

    def make_sender(self, model, num_workers, mp_context) -> WeightSender:
        return _NoSender()


class _NoSender(WeightSender):
    def endpoint(self, worker_id):
        return _NoEndpoint()

    def send(self, weights=None, liveness=None) -> None:
        return None


class _NoEndpoint:
    def make_receiver(self, model) -> WeightReceiver:
        return _NoReceiver()


class _NoReceiver(WeightReceiver):
    def poll(self) -> bool:
        return False
