"""Staging arrays: where an env's step lands, read by the collector without a copy.

The env side of the per-step loop is a small protocol (``StagedEnv``) that GymEnv and the
action server's RemoteEnv both implement around a ``Staging``:

    stage_step(actions) ─▶ staged["next", ...]      what the step produced
                           staged["observation"]    what the next step consumes: the reset
                           staged["is_init"]        observation where an env finished
    reset_some(indices)    reset those envs into the carrier slots (is_init = True)
    waiting                a bool array, or None: envs that finished and wait for a reset;
                           stage_step(actions, auto_reset=False) leaves them unstepped
    mark_init(indices)     make the next step of those envs a trajectory start (no reset)

The arrays are numpy (gymnasium writes into them); ``staged`` holds torch tensors aliasing
them on the CPU, or device copies refreshed after each write on another device.

Info entries (``info_keys``) are one scalar per env, of the dtype of the first value seen
(``info_dtype``): bool stays bool, any integer is int64, a float is float32 or float64 as
reported (a Python float is float64). A step that does not report the entry stores 0 / False.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.envs.spaces import allocate, tree_map
from rlcollect.errors import ConfigError
from rlcollect.keys import NEXT_KEYS

ARRAY_NAMES = ("observation", "is_init", "next_observation", "reward", "terminated", "truncated", "done", "info",
               "waiting")


INFO_DTYPES = (np.dtype(bool), np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64))


def info_dtype(key: str, value: Any) -> np.dtype:
    """The stored dtype of the info entry ``key`` whose first value is ``value`` (one of
    INFO_DTYPES); a ConfigError for a value that is not one bool, integer or float."""
    array = np.asarray(value)
    kind = array.dtype.kind
    if array.shape != () or kind not in "biuf":
        raise ConfigError(f"info_keys: {key!r} is reported as {type(value).__name__} {array.dtype} of shape "
                          f"{array.shape}; an info key stores one bool, integer or float per step")
    if kind == "f":
        return np.dtype(np.float64 if array.dtype.itemsize > 4 else np.float32)
    return np.dtype(bool) if kind == "b" else np.dtype(np.int64)


def allocate_arrays(observation_space: gym.Space, num_envs: int,
                    info_keys: Sequence[str] | Mapping[str, np.dtype] = ()) -> dict:
    """Zeroed staging arrays for ``num_envs`` envs (the observations nested as their space;
    ``info`` holds one array per info key, of its dtype where ``info_keys`` maps names to
    dtypes, else float32; ``waiting`` marks the finished envs that steps leave alone until
    they are reset: the collector's reset_policy="wait")."""
    info_dtypes = info_keys if isinstance(info_keys, Mapping) else dict.fromkeys(info_keys, np.float32)
    return {
        "info": {key: np.zeros(num_envs, dtype) for key, dtype in info_dtypes.items()},
        "observation": allocate(observation_space, (num_envs,)),
        "is_init": np.zeros(num_envs, bool),
        "next_observation": allocate(observation_space, (num_envs,)),
        "reward": np.zeros(num_envs, np.float32),
        "terminated": np.zeros(num_envs, bool),
        "truncated": np.zeros(num_envs, bool),
        "done": np.zeros(num_envs, bool),
        "waiting": np.zeros(num_envs, bool),
    }


class Staging:
    """The staging arrays of ``num_envs`` envs and their tensor views (``staged``).

    Args:
        arrays: ``ARRAY_NAMES`` -> array ``[num_envs, ...]`` (``allocate_arrays``, or rows of
            a shared-memory buffer).
        batched: False for a single env: ``staged`` then has batch size ``[]``.
        device: where ``staged``'s tensors live.
    """

    def __init__(self, arrays: dict, *, batched: bool, device: torch.device) -> None:
        self.arrays = arrays
        self.num_envs = len(arrays["done"])
        self.batched = batched
        self._init_pending = False  # is_init has a True entry to clear at the next step
        self.bind(device)

    def bind(self, device: torch.device) -> None:
        """Expose the arrays as tensors on ``device`` (aliases on CPU)."""
        device = torch.device(device)
        self.device = torch.device("cpu") if device.type == "cpu" else device  # "cpu:0" too: aliases, not copies
        cpu = tree_map(torch.from_numpy, self.arrays)
        if self.device.type != "cpu":
            self._cpu, self._device_tensors = cpu, tree_map(lambda t: t.to(self.device), cpu)
        else:
            self._cpu, self._device_tensors = None, cpu
        view = (lambda t: t) if self.batched else (lambda t: tree_map(lambda leaf: leaf[0], t))
        tensors = self._device_tensors
        self.staged = TensorDict(
            {
                "observation": view(tensors["observation"]),
                "is_init": view(tensors["is_init"]),
                "next": {**{key: view(tensors["next_observation" if key == "observation" else key])
                            for key in NEXT_KEYS},
                         **{key: view(value) for key, value in tensors["info"].items()}},
            },
            batch_size=[self.num_envs] if self.batched else [],
            device=self.device,
        )

    def replace_arrays(self, arrays: dict) -> None:
        """Stage into ``arrays`` from now on (same names, nesting, shapes and dtypes)."""
        def check(own, given):
            if given.shape != own.shape or given.dtype != own.dtype:
                raise ValueError(f"staging array: expected {own.shape} {own.dtype}, got {given.shape} {given.dtype}")
        for name in ARRAY_NAMES:
            tree_map(check, self.arrays[name], arrays[name])
        self.arrays = {name: arrays[name] for name in ARRAY_NAMES}
        self.bind(self.device)

    def begin_step(self) -> None:
        """Clear the is_init flags set since the last step (the step about to be staged
        continues those trajectories)."""
        if self._init_pending:
            self.arrays["is_init"][:] = False
            self._init_pending = False

    def mark_init(self, indices) -> None:
        self.arrays["is_init"][indices] = True
        self._init_pending = True
        self.refresh()

    def refresh(self) -> None:
        """Copy the arrays to the device tensors (a no-op on the CPU)."""
        if self._cpu is not None:
            tree_map(lambda device_tensor, cpu: device_tensor.copy_(cpu, non_blocking=True), self._device_tensors,
                     self._cpu)


@runtime_checkable
class StagedEnv(Protocol):
    """What a collector needs of an env (GymEnv, the action server's RemoteEnv)."""

    num_envs: int | None
    batch_size: torch.Size
    device: torch.device
    observation_space: gym.Space
    action_space: gym.Space
    staged: TensorDict

    def stage_step(self, actions, auto_reset: bool = True) -> np.ndarray | None:
        """Step every env with ``actions`` (numpy or tensor) into ``staged``; the done mask
        (valid until the next step) when some env finished, else None."""

    def reset(self) -> TensorDict:
        """Reset every env; the carrier (``observation``, ``is_init``)."""

    def reset_some(self, indices) -> None:
        """Reset the given envs into the carrier slots (``is_init`` set)."""

    def mark_init(self, indices) -> None:
        """Make the next step of these envs a trajectory start (no reset)."""

    def set_seed(self, seed: int | None) -> int | None: ...

    def random_action(self) -> torch.Tensor: ...

    def to(self, device) -> "StagedEnv": ...

    def close(self) -> None: ...
