"""RayWeightSyncScheme: an update is one ``ray.put`` of the weights; every actor pulls it.

    driver                                       Ray actor i (RayCollector)
    sender.send(weights)
      payload = {name: ndarray} (CPU, detached)
      ref = ray.put(payload)  ──── once ────▶    object store (one copy per node)
      deliver(version, ref)   ── actor.receive_weights(model_id, version, ref) ──▶
                                                 Ray resolves ref: receiver.receive(version, payload)
                                                 copied into the actor's model in place

Ray runs the tasks one submitter sends to an actor in submission order, so a batch
requested after ``send`` returns is collected with the new weights; ``send`` does not wait
for the actors (an actor that failed to apply them reports it with its next batch).

Weights travel as numpy arrays where numpy has the dtype (Ray stores those zero-copy, and
actors on one node read the same shared copy), as torch tensors otherwise (bfloat16 ...).
This module imports Ray only when a sender sends, so it can be configured without Ray.
"""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import torch
from torch import nn

from rlcollect.weight_sync import strategies
from rlcollect.weight_sync.schemes import WeightReceiver, WeightSender, WeightSyncScheme

Deliver = Callable[[int, object], None]  # (version, ObjectRef) -> None


def tensor_to_wire(tensor: torch.Tensor):
    """A CPU numpy array sharing ``tensor``'s memory, or the CPU tensor when numpy lacks its dtype."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    try:
        return tensor.numpy()
    except TypeError:  # bfloat16 and other dtypes numpy does not have
        return tensor


def tensor_from_wire(value, *, copy: bool = False) -> torch.Tensor:
    """The tensor ``tensor_to_wire`` sent. Arrays Ray returns from its object store are
    read-only: ``copy=False`` only for tensors that are read, never written."""
    if isinstance(value, torch.Tensor):
        return value.clone() if copy else value
    if copy:
        return torch.from_numpy(np.array(value))
    with warnings.catch_warnings():  # read-only array: we only read it
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(value)


def weights_to_wire(weights) -> dict:
    """Parameters and buffers (a module, state_dict or TensorDict) as ``{dotted name: array}``."""
    flat = strategies.as_tensordict(weights).flatten_keys(".")
    return {key: tensor_to_wire(value) for key, value in flat.items()}


class RayWeightSyncScheme(WeightSyncScheme):
    """Weights go through the Ray object store: one ``ray.put`` per update, pulled by every
    actor of a RayCollector and copied into its policy (parameters and buffers) in place,
    before its next batch.

    Args:
        strategy: how an actor applies the weights: "tensordict" (in-place copy into the
            module's parameters and buffers) or "state_dict" (``load_state_dict``, strict).
    """

    def __init__(self, strategy: str = "tensordict") -> None:
        self.strategy = strategies.check_strategy(strategy)

    def make_sender(self, model: nn.Module, num_workers: int, mp_context=None) -> "RayWeightSender":
        if mp_context is not None:
            raise TypeError("RayWeightSyncScheme synchronises the actors of a RayCollector; worker processes "
                            "use SharedMemWeightSyncScheme or MultiProcessWeightSyncScheme")
        return RayWeightSender(model, self.strategy)

    def __repr__(self) -> str:
        return f"RayWeightSyncScheme(strategy={self.strategy!r})"


class RayWeightSender(WeightSender):
    """Driver side: puts the weights in the object store and hands the reference to
    ``deliver`` (bound by the collector to its actors)."""

    def __init__(self, model: nn.Module, strategy: str) -> None:
        self._model, self._strategy = model, strategy
        self._deliver: Deliver | None = None
        self.version = 0
        self.last: tuple[int, object] | None = None  # (version, ObjectRef) of the latest update: for a new actor

    def bind(self, deliver: Deliver) -> None:
        """``deliver(version, ref)`` sends the reference to every actor."""
        self._deliver = deliver

    def endpoint(self, worker_id: int) -> "RayWeightEndpoint":
        return RayWeightEndpoint(self._strategy)

    def send(self, weights=None, liveness=None) -> None:
        if self._deliver is None:
            raise RuntimeError("RayWeightSender is not bound to any actor (closed, or not built by a RayCollector)")
        import ray

        ref = ray.put(weights_to_wire(self._model if weights is None else weights))  # the one copy
        self.version += 1
        self.last = (self.version, ref)
        self._deliver(self.version, ref)

    def close(self) -> None:
        self._deliver, self.last = None, None


class RayWeightEndpoint:
    """Picklable: sent to each actor at creation, builds its receiver."""

    def __init__(self, strategy: str) -> None:
        self.strategy = strategy

    def make_receiver(self, model: nn.Module) -> "RayWeightReceiver":
        return RayWeightReceiver(model, self.strategy)


class RayWeightReceiver(WeightReceiver):
    """Actor side: ``receive`` stores what arrived, ``poll`` copies it into the model."""

    def __init__(self, model: nn.Module, strategy: str) -> None:
        self._model, self._strategy = model, strategy
        self._pending: tuple[int, dict] | None = None
        self.version = 0

    def receive(self, version: int, payload: dict) -> None:
        self._pending = (version, payload)

    def poll(self) -> bool:
        if self._pending is None:
            return False
        version, payload = self._pending
        self._pending = None
        tensors = {key: tensor_from_wire(value) for key, value in payload.items()}
        strategies.apply(self._model, tensors if self._strategy == "state_dict" else strategies.as_tensordict(tensors),
                         self._strategy)
        self.version = version
        return True
