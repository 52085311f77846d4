"""Device roles of a collector, resolved once at construction."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

DeviceLike = str | torch.device | None


def policy_param_device(policy) -> torch.device | None:
    """The device of a module policy's first parameter or buffer (None: no tensors, or not a module)."""
    if isinstance(policy, torch.nn.Module):
        for tensor in (*policy.parameters(), *policy.buffers()):
            return tensor.device
    return None


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
            return torch.device(next(c for c in candidates if c is not None))

        env = pick(env_device, device, env_own_device)
        return cls(
            policy=pick(policy_device, device, policy_param_device, env),
            env=env,
            storing=pick(storing_device, device, env),
        )
