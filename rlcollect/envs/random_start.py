"""RandomStart: an env that begins its seeded episodes at a random phase (rlpyt's
decorrelation, held by the env itself).

At its first reset, and at every reset given a seed, the wrapped env takes a number of
uniformly random actions drawn in ``0..max_steps`` (resetting whenever an episode ends) and
returns the observation reached. The count comes from an RNG seeded with the reset's seed
and the actions from the env's action space (GymEnv seeds sub-env i's space with
``seed + i``), so an env's start depends on its seed alone, not on which process or
collector steps it: the samplers' envs start alike in one process or in workers.
ActionServerCollector's ``max_decorrelation_steps`` draws per worker instead.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from rlcollect.validation import check_non_negative_int


class RandomStart(gym.Wrapper):
    """``env`` whose first and seeded resets are followed by 0..``max_steps`` random steps."""

    def __init__(self, env: gym.Env, max_steps: int) -> None:
        super().__init__(env)
        self.max_steps = check_non_negative_int("max_decorrelation_steps", max_steps)
        self._started = False

    def reset(self, *, seed=None, options=None):
        observation, info = self.env.reset(seed=seed, options=options)
        if self._started and seed is None:
            return observation, info
        self._started = True
        steps = int(np.random.default_rng(seed).integers(0, self.max_steps + 1))
        for _ in range(steps):
            observation, _, terminated, truncated, info = self.env.step(self.env.action_space.sample())
            if terminated or truncated:
                observation, info = self.env.reset()
        return observation, info
