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
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.envs.spaces import allocate, tree_map
from rlcollect.keys import NEXT_KEYS

ARRAY_NAMES = ("observation", "is_init", "next_observation", "reward", "terminated", "truncated", "done", "info",
               "waiting")


def allocate_arrays(observation_space: gym.Space, num_envs: int, info_keys: Sequence[str] = ()) -> dict:
    """Zeroed staging arrays for ``num_envs`` envs (the observations nested as their space;
    ``info`` holds one float32 array per info key; ``waiting`` marks the finished envs that
    steps leave alone until they are reset: the collector's reset_policy="wait")."""
    return {
        "info": {key: np.zeros(num_envs, np.float32) for key in info_keys},
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
        self.device = torch.device(device)
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
