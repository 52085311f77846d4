"""make_env: a gymnasium id, a GymEnv, or a zero-argument callable returning a gymnasium.Env
or a GymEnv, as a StagedEnv (envs/sources.py)."""
import functools

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
