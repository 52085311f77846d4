"""TorchCartPole (envs/torch_cartpole.py): gymnasium's dynamics, in torch."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect.envs import TorchCartPole


def test_gymnasium_s_trajectory_from_the_same_state_and_actions():
    env = TorchCartPole(3, seed=0)
    env.reset()
    single = gym.make("CartPole-v1").unwrapped
    single.reset(seed=0)
    single.state = env.staged["observation"][1].double().numpy().copy()
    rng = np.random.default_rng(0)
    for step in range(40):
        action = int(rng.integers(0, 2))
        done = env.stage_step(torch.tensor([0, action, 1]))
        observation, reward, terminated, _, _ = single.step(action)
        np.testing.assert_allclose(env.staged["next", "observation"][1].numpy(), observation, rtol=1e-5, atol=1e-5)
        assert env.staged["next", "reward"][1].item() == reward == 1.0
        assert bool(env.staged["next", "terminated"][1]) == terminated
        if terminated:  # gymnasium's episode ends here; the torch env reset that row
            assert bool(done[1]) and bool(env.staged["is_init"][1]) and step > 5
            break
    else:
        pytest.fail("the episode never terminated")


def test_time_limit_is_a_truncation_and_steps_reset_with_the_env():
    env = TorchCartPole(2, max_episode_steps=3, seed=1)
    env.reset()
    flags = []
    for _ in range(6):
        env.stage_step(torch.tensor([0, 1]))
        flags.append(env.staged["next", "truncated"].tolist())
    # 3 steps from a near-upright start never terminate: truncated at steps 3 and 6
    assert flags == [[False, False], [False, False], [True, True]] * 2
