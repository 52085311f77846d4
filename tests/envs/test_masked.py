import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv

from rlcollect.envs import GymEnv
from rlcollect.envs.masked import MaskVelocityWrapper


def test_cartpole_velocities_are_removed():
    full, masked = gym.make("CartPole-v1"), MaskVelocityWrapper(gym.make("CartPole-v1"))
    assert masked.observation_space.shape == (2,) and masked.observation_space.dtype == np.float32
    np.testing.assert_array_equal(masked.observation_space.high, full.observation_space.high[[0, 2]])
    full_observation, _ = full.reset(seed=3)
    observation, _ = masked.reset(seed=3)
    np.testing.assert_array_equal(observation, full_observation[[0, 2]])
    full_observation, *_ = full.step(1)
    observation, *_ = masked.step(1)
    np.testing.assert_array_equal(observation, full_observation[[0, 2]])
    assert masked.observation_space.contains(observation)


def test_plugs_into_gym_env_as_a_factory():
    env = GymEnv(lambda: MaskVelocityWrapper(gym.make("CartPole-v1")), num_envs=2, seed=0)
    carrier = env.reset()
    assert env.observation_space.shape == (2,) and carrier["observation"].shape == (2, 2)
    td, carrier = env.step_and_maybe_reset(env.rand_action(carrier))
    assert td["next", "observation"].shape == (2, 2) and td["next", "observation"].dtype == torch.float32


def test_unknown_env_or_bad_indices_raise():
    with pytest.raises(ValueError, match="pass velocity_indices="):
        MaskVelocityWrapper(CartPoleEnv())  # no registered id to look up
    assert MaskVelocityWrapper(CartPoleEnv(), velocity_indices=[1, 3]).observation_space.shape == (2,)
    with pytest.raises(ValueError, match="velocity_indices must be indices"):
        MaskVelocityWrapper(gym.make("CartPole-v1"), velocity_indices=[4])
