"""Partially observable classic-control tasks: the velocities removed from the observation,
so that a policy has to infer them from the history (a task for a recurrent policy).

    GymEnv(lambda: MaskVelocityWrapper(gym.make("CartPole-v1")))   # observation [2]: x, theta
"""
from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np

# env id -> the observation indices that are velocities
VELOCITY_INDICES = {
    "CartPole-v1": (1, 3),  # x, x_dot, theta, theta_dot
    "Pendulum-v1": (2,),  # cos theta, sin theta, theta_dot
    "Acrobot-v1": (4, 5),  # cos/sin theta1, cos/sin theta2, theta1_dot, theta2_dot
    "MountainCar-v0": (1,),  # position, velocity
    "MountainCarContinuous-v0": (1,),
}


class MaskVelocityWrapper(gym.ObservationWrapper):
    """Removes the velocity entries of a flat Box observation (its shape shrinks).

    Args:
        env: the env to wrap.
        velocity_indices: the observation indices to remove; None looks them up by the
            env's id in ``VELOCITY_INDICES``.
    """

    def __init__(self, env: gym.Env, velocity_indices: Sequence[int] | None = None) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise TypeError(f"MaskVelocityWrapper needs a flat Box observation space, got {space!r}")
        if velocity_indices is None:
            env_id = env.spec.id if env.spec is not None else None
            if env_id not in VELOCITY_INDICES:
                raise ValueError(f"MaskVelocityWrapper knows the velocities of {sorted(VELOCITY_INDICES)}, "
                                 f"not of env id {env_id!r}: pass velocity_indices=")
            velocity_indices = VELOCITY_INDICES[env_id]
        size = space.shape[0]
        if not velocity_indices or any(not 0 <= index < size for index in velocity_indices):
            raise ValueError(f"velocity_indices must be indices of the {size}-entry observation, "
                             f"got {velocity_indices!r}")
        self.kept_indices = np.setdiff1d(np.arange(size), velocity_indices)
        self.observation_space = gym.spaces.Box(space.low[self.kept_indices], space.high[self.kept_indices],
                                                dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.kept_indices]


MASKED_CARTPOLE_ID = "rlcollect/CartPoleNoVelocity-v1"


def make_masked(env_id: str, **make_kwargs) -> MaskVelocityWrapper:
    """``gym.make(env_id)`` with its velocities masked (the registered entry point)."""
    return MaskVelocityWrapper(gym.make(env_id, **make_kwargs))


def register_masked_envs() -> None:
    """Register ``rlcollect/CartPoleNoVelocity-v1`` (CartPole-v1 observing x and theta only,
    its 500-step limit kept); idempotent."""
    if MASKED_CARTPOLE_ID not in gym.registry:
        gym.register(MASKED_CARTPOLE_ID, entry_point=make_masked, kwargs={"env_id": "CartPole-v1"})
