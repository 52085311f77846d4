"""Gymnasium spaces -> tensor shapes, dtypes, staging arrays and uniform random samples.

Observations map onto nested keys (docs/data-layout.md): a Box is one tensor of its own
dtype and shape (uint8 images stay uint8), a Discrete an int64 scalar, MultiDiscrete and
MultiBinary int64 ``[n]``; a Dict nests its entries under their names, a Tuple under
"0", "1", ... Actions: Discrete (int64 scalar), MultiDiscrete / MultiBinary (int64 ``[n]``)
and Box (its dtype and shape).

Nested staging arrays are plain dicts of numpy arrays (``tree_map`` walks them).
"""
from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from rlcollect.errors import UnsupportedSpaceError

LEAF_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
NESTED_SPACES = (gym.spaces.Dict, gym.spaces.Tuple)
ACTION_SPACES = LEAF_SPACES


def check_supported(space: gym.Space, role: str) -> None:
    """Observations: Box, Discrete, MultiDiscrete, MultiBinary, and Dict / Tuple of them;
    actions: the first four. Any other space is an UnsupportedSpaceError (a ConfigError and
    a TypeError) naming it."""
    allowed = LEAF_SPACES + (NESTED_SPACES if role == "observation" else ())
    if isinstance(space, NESTED_SPACES) and role == "observation":
        for child in subspaces(space).values():
            check_supported(child, role)
        return
    if not isinstance(space, allowed):
        names = ", ".join(cls.__name__ for cls in allowed)
        raise UnsupportedSpaceError(f"{role} space {space!r} is not supported: rlcollect handles {names} spaces. "
                        "Convert it with a gymnasium wrapper (e.g. gymnasium.wrappers.FlattenObservation).")


def subspaces(space: gym.Space) -> dict[str, gym.Space]:
    """The entries of a Dict (by name) or a Tuple (by position, as "0", "1", ...)."""
    if isinstance(space, gym.spaces.Dict):
        return dict(space.spaces)
    return {str(i): child for i, child in enumerate(space.spaces)}


def is_nested(space: gym.Space) -> bool:
    return isinstance(space, NESTED_SPACES)


def numpy_dtype(space: gym.Space) -> np.dtype:
    """Dtype of one sample of a leaf space: Discrete, MultiDiscrete, MultiBinary -> int64,
    Box -> the space's own dtype."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return np.dtype(np.int64)
    return np.dtype(space.dtype)


def torch_dtype(space: gym.Space) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=numpy_dtype(space))).dtype


def sample_shape(space: gym.Space) -> tuple[int, ...]:
    """Shape of one sample of a leaf space: () for Discrete, the space's shape otherwise."""
    return () if isinstance(space, gym.spaces.Discrete) else tuple(space.shape)


def sample_shapes(space: gym.Space) -> tuple[int, ...] | dict:
    """``sample_shape`` of a leaf space, or ``{name: ...}`` nested as a Dict / Tuple space is."""
    if is_nested(space):
        return {name: sample_shapes(child) for name, child in subspaces(space).items()}
    return sample_shape(space)


def torch_dtypes(space: gym.Space) -> torch.dtype | dict:
    """``torch_dtype`` of a leaf space, or ``{name: ...}`` nested as a Dict / Tuple space is."""
    if is_nested(space):
        return {name: torch_dtypes(child) for name, child in subspaces(space).items()}
    return torch_dtype(space)


def allocate(space: gym.Space, leading: tuple[int, ...]) -> Any:
    """Zeroed arrays ``[*leading, *sample]`` for ``space``: one array, or a dict for a
    Dict / Tuple space (nested as the space is)."""
    if is_nested(space):
        return {name: allocate(child, leading) for name, child in subspaces(space).items()}
    return np.zeros((*leading, *sample_shape(space)), numpy_dtype(space))


def tree_map(fn: Callable, *trees):
    """``fn`` applied leaf by leaf to arrays nested in dicts of the same structure."""
    if isinstance(trees[0], dict):
        return {name: tree_map(fn, *(tree[name] for tree in trees)) for name in trees[0]}
    return fn(*trees)


def tree_leaves(tree) -> list:
    return [leaf for value in tree.values() for leaf in tree_leaves(value)] if isinstance(tree, dict) else [tree]


def writer(space: gym.Space) -> Callable[[Any, int, Any], None]:
    """``write(arrays, i, sample)``: put one env's sample (as gymnasium returns it: an
    array, an int, a dict or a tuple) into row ``i`` of ``arrays``."""
    if not is_nested(space):
        def write_leaf(arrays, i, sample) -> None:
            arrays[i] = sample
        return write_leaf
    children = {name: writer(child) for name, child in subspaces(space).items()}
    by_position = isinstance(space, gym.spaces.Tuple)

    def write_nested(arrays, i, sample) -> None:
        for name, write in children.items():
            write(arrays[name], i, sample[int(name)] if by_position else sample[name])
    return write_nested


def random_actions(space: gym.Space, batch_shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Uniform random actions drawn from torch's RNG (so torch.manual_seed makes them reproducible).

    Unbounded Box dimensions are sampled from a standard normal, as gymnasium does.
    """
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.start), int(space.start + space.n), batch_shape, device=device)
    if isinstance(space, gym.spaces.MultiBinary):
        return torch.randint(0, 2, (*batch_shape, *space.shape), device=device)
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = torch.as_tensor(space.nvec, device=device)
        start = torch.as_tensor(space.start, device=device)
        return (torch.rand((*batch_shape, *space.shape), device=device) * nvec).floor().to(torch.int64) + start
    shape = (*batch_shape, *space.shape)
    dtype = torch_dtype(space)
    low = torch.as_tensor(space.low, device=device)
    high = torch.as_tensor(space.high, device=device)
    bounded = torch.isfinite(low) & torch.isfinite(high)
    uniform = low.nan_to_num(0.0) + torch.rand(shape, device=device) * (high - low).nan_to_num(0.0)
    sample = torch.where(bounded, uniform, torch.randn(shape, device=device))
    return sample.to(dtype)
