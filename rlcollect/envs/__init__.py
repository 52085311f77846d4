"""Gymnasium envs as TensorDicts."""
from rlcollect.envs.gym_env import GymEnv, make_gym_env

__all__ = ["GymEnv", "make_gym_env"]
