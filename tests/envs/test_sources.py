"""make_env: a gymnasium id, a GymEnv, or a zero-argument callable returning a gymnasium.Env
or a GymEnv, as a StagedEnv (envs/sources.py)."""
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import GymEnv, make_env
from rlcollect.testing import CountingEnv

SOURCES = {
    "gymnasium id": "CartPole-v1",
    "callable -> gymnasium.Env": functools.partial(CountingEnv, 3),
    "callable -> GymEnv": functools.partial(GymEnv, functools.partial(CountingEnv, 3), 2),
}


def test_make_env_turns_each_source_into_a_staged_env():
    assert make_env("CartPole-v1").batch_size == torch.Size([])
    assert make_env("CartPole-v1", 3, seed=0).batch_size == torch.Size([3])
    built = GymEnv(CountingEnv, 2)
    assert make_env(built) is built
    assert make_env(functools.partial(CountingEnv, 3), 4).num_envs == 4
    assert make_env(SOURCES["callable -> GymEnv"]).num_envs == 2
    with pytest.raises(ValueError, match="expected num_envs=3"):
        make_env(SOURCES["callable -> GymEnv"], 3)
    with pytest.raises(TypeError, match="not a gymnasium.Env or a GymEnv"):
        make_env(lambda: 42)


class OneCartPole:
    """A user's env factory as rlpyt calls it: one unbatched GymEnv of CartPole per call."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return GymEnv("CartPole-v1")


def cartpole_first_observations(seeds):
    env = gym.make("CartPole-v1")
    return torch.tensor(np.stack([env.reset(seed=seed)[0] for seed in seeds]))


def test_a_callable_returning_one_unbatched_gym_env_is_called_once_per_env_and_batched():
    factory = OneCartPole()
    env = make_env(factory, 3, seed=5)
    assert factory.calls == 3 and env.num_envs == 3 and env.batch_size == torch.Size([3])
    assert torch.equal(env.reset()["observation"], cartpole_first_observations([5, 6, 7]))  # env i: seed + i
    assert make_env(OneCartPole(), 1).num_envs == 1  # a batch of one, as before
    assert make_env(OneCartPole()).num_envs is None  # no size asked: the env as it is
    with pytest.raises(TypeError, match="env kwargs \\['info_keys'\\] apply to a gymnasium id"):
        make_env(factory, 3, info_keys=["x"])
    assert factory.calls == 4  # refused after its first env


def test_envs_batched_one_per_call_keep_their_own_seeds_and_must_match():
    seeds = iter([3, 9])
    env = make_env(lambda: GymEnv("CartPole-v1", seed=next(seeds)), 2)  # seeded by the factory, not by make_env
    assert torch.equal(env.reset()["observation"], cartpole_first_observations([3, 9]))
    kinds = iter(["CartPole-v1", "Acrobot-v1"])
    with pytest.raises(ValueError, match="envs to batch must have the same spaces: env 1"):
        make_env(lambda: GymEnv(next(kinds)), 2)
    kinds = iter([GymEnv("CartPole-v1"), GymEnv("CartPole-v1", 2)])
    with pytest.raises(ValueError, match=r"single, open GymEnvs \(num_envs=None\); env 1 is GymEnv\('CartPole-v1', "
                                         "num_envs=2"):
        make_env(lambda: next(kinds), 2)
