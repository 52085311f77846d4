"""Batches on Ray's wire: numpy arrays (pickled out-of-band, zero-copy in the object store)."""
from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.weight_sync.ray import tensor_from_wire, tensor_to_wire


def batch_to_wire(batch: TensorDictBase) -> tuple[list[int], dict]:
    """``(batch_size, {key: array})``: numpy arrays pickle out-of-band, torch tensors do not."""
    return list(batch.batch_size), {key: tensor_to_wire(value) for key, value in batch.items(True, True)}


def batch_from_wire(wire) -> TensorDict:
    batch_size, leaves = wire
    batch = TensorDict({}, batch_size=batch_size)
    for key, value in leaves.items():
        batch.set(key, tensor_from_wire(value, copy=True))
    return batch


def stack_from_wire(wires: list) -> TensorDict:
    """Stack actor batches along a new leading dim (one copy, straight from the arrays)."""
    batch_size, first = wires[0]
    batch = TensorDict({}, batch_size=[len(wires), *batch_size])
    for key, value in first.items():
        parts = [leaves[key] for _, leaves in wires]
        if isinstance(value, torch.Tensor):
            batch.set(key, torch.stack(parts))
        else:
            batch.set(key, torch.from_numpy(np.stack(parts)))
    return batch
