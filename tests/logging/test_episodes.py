import torch
from tensordict import TensorDict

from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.logging.episodes import EpisodeTracker
from rlcollect.testing import counting_env_factories


def test_returns_count_steps_from_earlier_batches():
    collector = Collector(GymEnv(counting_env_factories([3, 5]), num_envs=2), frames_per_batch=4)
    tracker = EpisodeTracker()
    iterator = iter(collector)
    results = [tracker.update(next(iterator)) for _ in range(4)]  # batches of steps 1-2, 3-4, 5-6, 7-8
    # env 0 finishes at steps 3 and 6, env 1 at step 5 (CountingEnv rewards are all 1)
    assert results == [([], []), ([3.0], [3]), ([3.0, 5.0], [3, 5]), ([], [])]


def test_padded_layout_uses_the_mask():
    batch = TensorDict({"collector": {"traj_ids": torch.tensor([[0, 0], [1, 1]]), "mask": torch.tensor([[True, True], [True, False]])},
                        "next": {"reward": torch.ones(2, 2), "done": torch.tensor([[False, True], [True, False]])}}, [2, 2])
    assert EpisodeTracker().update(batch) == ([2.0, 1.0], [2, 1])
