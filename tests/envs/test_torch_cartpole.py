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


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_a_list_of_seeds_gives_each_group_of_envs_the_resets_of_a_solo_env_so_seeded(device):
    """TorchCartPole(6, seed=[3, 7, 11]): envs 2g, 2g + 1 reset (at the start and whenever
    they finish) as TorchCartPole(2, seed=[3, 7, 11][g]) does, step for step (each
    generator draws several steps' states at once: on CUDA the values depend on how many);
    the number of seeds must divide num_envs; one seed again gives one generator; a new
    seed drops the states drawn before it."""
    batched = TorchCartPole(6, device, seed=[3, 7, 11])
    solos = [TorchCartPole(2, device, seed=seed) for seed in (3, 7, 11)]
    actions = torch.Generator().manual_seed(0)
    finished = 0
    for env in (batched, *solos):
        env.reset()
    for _ in range(300):
        action = torch.randint(0, 2, (6,), generator=actions).to(device)
        finished += int(batched.stage_step(action).sum())
        for group, solo in enumerate(solos):
            solo.stage_step(action[2 * group:2 * group + 2])
        assert torch.equal(batched.staged["observation"], torch.cat([solo.staged["observation"] for solo in solos]))
    assert finished >= 6  # every group reset several times
    with pytest.raises(ValueError, match="2 seeds, one per group of envs, must divide num_envs=5"):
        TorchCartPole(5, seed=[1, 2])
    batched.set_seed(4)
    batched.reset()
    alone = TorchCartPole(6, device, seed=4)
    alone.reset()
    assert torch.equal(batched.staged["observation"], alone.staged["observation"])
    solos[0].set_seed(3)  # 300 steps in: part of a block drawn
    solos[0].reset()
    assert torch.equal(solos[0].staged["observation"], TorchCartPole(2, device, seed=3).reset()["observation"])
