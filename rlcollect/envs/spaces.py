"""Gymnasium spaces -> tensor shapes, dtypes and uniform random samples."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

SUPPORTED_SPACES = (gym.spaces.Box, gym.spaces.Discrete)


def check_supported(space: gym.Space, role: str) -> None:
    if not isinstance(space, SUPPORTED_SPACES):
        names = ", ".join(cls.__name__ for cls in SUPPORTED_SPACES)
        raise TypeError(
            f"{role} space {space!r} is not supported: rlcollect handles {names} spaces. "
            "Flatten it with a gymnasium wrapper (e.g. gymnasium.wrappers.FlattenObservation)."
        )


def numpy_dtype(space: gym.Space) -> np.dtype:
    """Dtype of one sample: Discrete -> int64, Box -> the space's own dtype."""
    if isinstance(space, gym.spaces.Discrete):
        return np.dtype(np.int64)
    return np.dtype(space.dtype)


def torch_dtype(space: gym.Space) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=numpy_dtype(space))).dtype


def sample_shape(space: gym.Space) -> tuple[int, ...]:
    """Shape of one sample: () for Discrete, the Box's shape otherwise."""
    return () if isinstance(space, gym.spaces.Discrete) else tuple(space.shape)


def random_actions(space: gym.Space, batch_shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Uniform random actions drawn from torch's RNG (so torch.manual_seed makes them reproducible).

    Unbounded Box dimensions are sampled from a standard normal, as gymnasium does.
    """
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.start), int(space.start + space.n), batch_shape, device=device)
    shape = (*batch_shape, *space.shape)
    dtype = torch_dtype(space)
    low = torch.as_tensor(space.low, device=device)
    high = torch.as_tensor(space.high, device=device)
    bounded = torch.isfinite(low) & torch.isfinite(high)
    uniform = low.nan_to_num(0.0) + torch.rand(shape, device=device) * (high - low).nan_to_num(0.0)
    sample = torch.where(bounded, uniform, torch.randn(shape, device=device))
    return sample.to(dtype)
