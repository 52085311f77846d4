"""Every collector takes the same env sources (the one env-source rule, envs/sources.py
``make_env``): a gymnasium id, a GymEnv of any size or unbatched, a gymnasium VectorEnv, or a
zero-argument callable returning a gymnasium.Env or a GymEnv."""
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import ActionServerCollector, AlternatingCollector, Collector, GymEnv, MultiSyncCollector, PoolCollector
from rlcollect.testing import CountingEnv

SOURCES = {
    "gymnasium id": "CartPole-v1",
    "callable -> gymnasium.Env": functools.partial(CountingEnv, 3),
    "callable -> GymEnv": functools.partial(GymEnv, functools.partial(CountingEnv, 3), 2),
}
SINGLE = functools.partial(GymEnv, functools.partial(CountingEnv, 3))  # a callable -> an unbatched GymEnv


@pytest.mark.parametrize("name", list(SOURCES))
def test_collector_takes_every_source(name):
    collector = Collector(SOURCES[name], frames_per_batch=8, total_frames=8)
    [batch] = list(collector)
    assert batch.numel() == 8 and "observation" in batch.keys()


@pytest.mark.parametrize("cls", [MultiSyncCollector, ActionServerCollector])
@pytest.mark.parametrize("name", list(SOURCES))
def test_worker_collectors_take_every_source(no_leftovers, cls, name):
    envs_per_worker = 2
    collector = cls(SOURCES[name], num_workers=2, envs_per_worker=envs_per_worker, frames_per_batch=8,
                    total_frames=8, start_method="fork", seed=0)
    no_leftovers(collector)
    [batch] = list(collector)
    assert batch.numel() == 8
    assert batch.batch_size[:-1].numel() == 4  # 2 workers x 2 envs


def test_collector_takes_a_gymnasium_vector_env():
    vector = gym.vector.SyncVectorEnv([functools.partial(CountingEnv, 3)] * 2)
    [batch] = list(Collector(vector, frames_per_batch=8, total_frames=8, seed=0))
    assert list(batch.batch_size) == [2, 4]
    assert batch["next", "observation"][0, :, 0].tolist() == [1.0, 2.0, 3.0, 1.0]  # reset at once after the end


@pytest.mark.parametrize("cls", [MultiSyncCollector, ActionServerCollector, AlternatingCollector, PoolCollector])
def test_worker_collectors_take_a_callable_returning_an_unbatched_gym_env(no_leftovers, cls):
    """One env per worker from a callable returning GymEnv(..., num_envs=None): a batch of one
    (GymEnv.as_batch), where these collectors refused it before."""
    collector = cls(SINGLE, num_workers=2, envs_per_worker=1, frames_per_batch=8, total_frames=8,
                    start_method="fork", seed=0)
    no_leftovers(collector)
    [batch] = list(collector)
    assert batch.numel() == 8
    counts = batch["next", "observation"][..., 0]
    if cls is PoolCollector:  # one flat dim of steps in arrival order: either env may have stepped more
        assert set(counts.tolist()) <= {1.0, 2.0, 3.0} and counts.tolist().count(1.0) >= 2
    else:
        assert counts.reshape(2, 4).tolist() == [[1.0, 2.0, 3.0, 1.0]] * 2


ONE_CARTPOLE = functools.partial(GymEnv, "CartPole-v1")  # a user's factory: one unbatched CartPole per call


@pytest.mark.parametrize("cls", [ActionServerCollector, AlternatingCollector])
def test_a_callable_returning_one_env_is_called_once_per_env_of_each_worker(no_leftovers, cls):
    """rlpyt's env factories build one env per call: with envs_per_worker=2 each worker calls
    it twice and batches the envs, where these collectors refused it before; env i of the run
    (worker w's envs are 2w, 2w + 1) is seeded seed + i."""
    collector = cls(ONE_CARTPOLE, num_workers=2, envs_per_worker=2, frames_per_batch=16, total_frames=16,
                    start_method="fork", seed=7)
    no_leftovers(collector)
    [batch] = list(collector)
    assert batch.batch_size == (4, 4)
    assert batch["observation"].shape == (4, 4, 4) and batch["action"].shape == (4, 4)
    reference = gym.make("CartPole-v1")
    first = np.stack([reference.reset(seed=7 + env)[0] for env in range(4)])
    assert torch.equal(batch["observation"][:, 0], torch.from_numpy(first))
    assert batch["is_init"][:, 0].all()
