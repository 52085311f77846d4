import pytest
import torch
from tensordict import TensorDict

from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.testing import counting_env_factories
from rlcollect.trajectories import EpisodeTracker


def test_returns_count_steps_from_earlier_batches():
    collector = Collector(GymEnv(counting_env_factories([3, 5]), num_envs=2), frames_per_batch=4)
    tracker = EpisodeTracker()
    iterator = iter(collector)
    results = [tracker.update(next(iterator)) for _ in range(4)]  # batches of steps 1-2, 3-4, 5-6, 7-8
    # env 0 finishes at steps 3 and 6, env 1 at step 5 (CountingEnv rewards are all 1)
    assert results == [([], []), ([3.0], [3]), ([3.0, 5.0], [3, 5]), ([], [])]


def test_padded_layout_uses_the_mask():
    collector = {"traj_ids": torch.tensor([[0, 0], [1, 1]]), "mask": torch.tensor([[True, True], [True, False]])}
    batch = TensorDict({"collector": collector,
                        "next": {"reward": torch.ones(2, 2), "done": torch.tensor([[False, True], [True, False]])}},
                       [2, 2])
    assert EpisodeTracker().update(batch) == ([2.0, 1.0], [2, 1])


def test_trajectory_info_is_exact_across_batch_boundaries():
    collector = Collector(GymEnv(counting_env_factories([3, 5]), num_envs=2), frames_per_batch=4)
    tracker = EpisodeTracker(gamma=0.5, sum_keys=[("next", "observation")])
    iterator = iter(collector)
    infos = [info for _ in range(3) for info in tracker.infos(next(iterator))]  # steps 1-6
    assert [(info.length, info.episode_return) for info in infos] == [(3, 3.0), (3, 3.0), (5, 5.0)]
    assert [info.discounted_return for info in infos] == [1.75, 1.75, 1 + 0.5 + 0.25 + 0.125 + 0.0625]
    # CountingEnv's next observation counts 1, 2, ..., length: the totals sum it over the trajectory
    assert [info.totals for info in infos] == [{"next/observation": 6.0}, {"next/observation": 6.0},
                                               {"next/observation": 15.0}]
    assert len({info.traj_id for info in infos}) == 3


def test_sum_keys_must_be_in_the_batch():
    batch = next(iter(Collector(GymEnv(counting_env_factories([3])), frames_per_batch=4)))
    with pytest.raises(KeyError, match="sum_keys"):
        EpisodeTracker(sum_keys=["cost"]).infos(batch)
