"""TorchEnv: what every torch env (envs/staging.py's protocol stepped in tensors on one
device: TorchCartPole, VmasEnv) shares.

A subclass sets ``num_envs``, ``device``, ``action_space``, the ``_is_init`` tensor of its
staging and ``_seed`` (the seed of the next reset of every env), and implements
``stage_step``, ``reset``, ``reset_some`` and ``to`` (docs/envs.md, "Torch envs").
"""
from __future__ import annotations

import numpy as np
import torch

from rlcollect.envs.spaces import random_actions


class TorchEnv:
    """Base of the torch envs: masks from indices, is_init marks, seeds, random actions."""

    steps_on_device = True  # stage_step returns the done mask as a tensor on self.device, always
    num_envs: int
    device: torch.device
    _is_init: torch.Tensor
    _seed: int | None = None

    def _mask(self, indices) -> torch.Tensor:
        """A boolean mask over the envs on the device, from a boolean mask (numpy or a
        tensor) or from indices."""
        if isinstance(indices, torch.Tensor) and indices.dtype == torch.bool:
            return indices.reshape(self.num_envs).to(self.device)
        if isinstance(indices, np.ndarray) and indices.dtype == bool:
            return torch.from_numpy(indices).to(self.device)
        mask = torch.zeros(self.num_envs, dtype=torch.bool)
        mask[torch.as_tensor(list(indices) if isinstance(indices, range) else indices, dtype=torch.long)] = True
        return mask.to(self.device)

    def mark_init(self, indices) -> None:
        """Make the next step of these envs a trajectory start (no reset)."""
        self._is_init.logical_or_(self._mask(indices))

    def set_seed(self, seed: int | None) -> int | None:
        """Seed the envs' resets with ``seed`` at the next reset of every env."""
        self._seed = seed
        return seed

    def random_action(self) -> torch.Tensor:
        return random_actions(self.action_space, (self.num_envs,), self.device)

    def close(self) -> None:
        """Nothing to release."""
