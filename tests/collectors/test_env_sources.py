"""Every collector takes the same env sources: a gymnasium id, a GymEnv, or a zero-argument
callable returning a gymnasium.Env or a GymEnv (envs/sources.py)."""
import functools

import pytest

from rlcollect import ActionServerCollector, Collector, GymEnv, MultiSyncCollector
from rlcollect.testing import CountingEnv

SOURCES = {
    "gymnasium id": "CartPole-v1",
    "callable -> gymnasium.Env": functools.partial(CountingEnv, 3),
    "callable -> GymEnv": functools.partial(GymEnv, functools.partial(CountingEnv, 3), 2),
}


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
