"""Device roles of a collector, resolved once at construction, and the policy copy on
policy_device a collector keeps when the policy's weights live elsewhere."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch
from tensordict import TensorDictBase

DeviceLike = str | torch.device | None


def as_device(value: str | torch.device) -> torch.device:
    """``value`` as a torch.device; "cuda" as the current CUDA device ("cuda:0"), the device
    that tensors put on "cuda" report, so that the two compare equal."""
    device = torch.device(value)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def policy_param_device(policy) -> torch.device | None:
    """The device of a module policy's first parameter or buffer (None: no tensors, or not a module)."""
    if isinstance(policy, torch.nn.Module):
        for tensor in (*policy.parameters(), *policy.buffers()):
            return tensor.device
    return None


def policy_on_device(policy, device: torch.device) -> tuple:
    """``(policy, source)``: the policy as is (source None), or a copy on ``device`` when its
    weights live elsewhere (source: the original, which ``load_policy_weights`` refreshes
    the copy from). None stays None; anything not callable is a TypeError."""
    if policy is None:
        return None, None
    if not callable(policy):
        raise TypeError(f"policy must be callable TensorDict -> TensorDict, got {type(policy).__name__}")
    param_device = policy_param_device(policy)
    if param_device is not None and param_device != device:
        return copy.deepcopy(policy).to(device), policy
    return policy, None


def load_policy_weights(policy, source, weights=None, inplace: bool = False) -> None:
    """Load ``weights`` (an nn.Module, a state_dict, or a TensorDict of parameters) into a
    module ``policy``; None: copy from ``source`` (a no-op without one). A policy that is
    not a module has no weights: left alone. A TensorDict's tensors become the policy's
    parameters, unless ``inplace`` (they are copied into the existing ones)."""
    if not isinstance(policy, torch.nn.Module):
        return
    if weights is None:
        if source is None:
            return
        weights = source
    if isinstance(weights, torch.nn.Module):
        weights = weights.state_dict()
    if isinstance(weights, TensorDictBase):
        weights.to_module(policy, inplace=inplace)
    else:
        policy.load_state_dict(weights)


def _noop() -> None:
    return None


def sync_function(destination: torch.device, no_cuda_sync: bool) -> Callable[[], None]:
    """What to call after copying to ``destination``: a CUDA sync for CUDA, else nothing."""
    if no_cuda_sync or destination.type != "cuda":
        return _noop
    return lambda: torch.cuda.synchronize(destination)


@dataclass(frozen=True)
class CollectorDevices:
    """``device`` sets the three roles at once; each can be overridden alone.

    policy_device: where the policy runs; defaults to the policy's parameters' device.
    env_device: where the env's tensors live; defaults to the env's own device.
    storing_device: where batches are stored; defaults to env_device.
    """

    policy: torch.device
    env: torch.device
    storing: torch.device

    @classmethod
    def resolve(
        cls,
        *,
        device: DeviceLike,
        policy_device: DeviceLike,
        env_device: DeviceLike,
        storing_device: DeviceLike,
        policy_param_device: torch.device | None,
        env_own_device: torch.device,
    ) -> "CollectorDevices":
        def pick(*candidates) -> torch.device:
            return as_device(next(c for c in candidates if c is not None))

        env = pick(env_device, device, env_own_device)
        return cls(
            policy=pick(policy_device, device, policy_param_device, env),
            env=env,
            storing=pick(storing_device, device, env),
        )
