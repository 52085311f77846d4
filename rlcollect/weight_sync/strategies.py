"""How weights are taken out of a model and put back: as a state_dict or as a TensorDict."""
from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rlcollect.choices import WEIGHT_SYNC_STRATEGIES as STRATEGIES


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"weight-sync strategy must be one of {STRATEGIES}, got {strategy!r}")
    return strategy


def as_tensordict(weights) -> TensorDictBase:
    """Parameters and buffers as a (nested) TensorDict, from a module, a state_dict or a TensorDict."""
    if isinstance(weights, nn.Module):
        return TensorDict.from_module(weights, as_module=False).data
    if isinstance(weights, TensorDictBase):
        return weights
    if isinstance(weights, Mapping):
        return TensorDict(dict(weights), batch_size=[]).unflatten_keys(".")
    raise TypeError(f"weights must be an nn.Module, a state_dict or a TensorDict, got {type(weights).__name__}")


def extract(weights, strategy: str):
    """What travels: a copy, as a state_dict or a TensorDict of parameters and buffers. A
    copy, because sending tensors between processes moves their storage to shared memory:
    the trainer's own tensors must stay private."""
    if strategy == "state_dict":
        if isinstance(weights, nn.Module):
            return {key: value.detach().clone() for key, value in weights.state_dict().items()}
        return {key: value.detach().clone() for key, value in as_tensordict(weights).flatten_keys(".").items()}
    return as_tensordict(weights).detach().clone()  # from_module weights require grad: send data only


@torch.no_grad()
def apply(model: nn.Module, weights, strategy: str) -> None:
    """Copy ``weights`` into ``model``'s parameters and buffers, in place."""
    if strategy == "state_dict":
        model.load_state_dict(weights)
    else:
        TensorDict.from_module(model, as_module=False).update_(weights)
