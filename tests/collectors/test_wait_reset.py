"""reset_policy="wait" (rlpyt's wait-reset collectors): an env that finishes is not
stepped again in the batch; its remaining steps are padding (("collector", "mask") False,
reward 0) and it resets when the next batch starts."""
import functools

import gymnasium as gym
import pytest
import torch

from rlcollect.buffers import LazyTensorStorage, ReplayBuffer
from rlcollect.collectors import Collector
from rlcollect.collectors.action_server import ActionServerCollector, AlternatingCollector
from rlcollect.collectors.multi import MultiSyncCollector
from rlcollect.collectors.pool import PoolCollector
from rlcollect.envs import GymEnv, TorchCartPole
from rlcollect.modules.actor_critic import RecurrentActorCritic
from rlcollect.testing import CountingEnv, EchoEnv, echo_policy
from rlcollect.trajectories import EpisodeTracker

pytestmark = pytest.mark.timeout(120)
MASK, TRAJ_IDS = ("collector", "mask"), ("collector", "traj_ids")


def counting(*lengths):
    return GymEnv([functools.partial(CountingEnv, length) for length in lengths], len(lengths))


def test_a_finished_env_waits_unstepped_until_the_next_batch():
    collector = Collector(counting(2, 3, 5), frames_per_batch=12, reset_policy="wait")
    first, second = (batch.clone() for _, batch in zip(range(2), collector))
    assert first[MASK].tolist() == [[True, True, False, False], [True, True, True, False], [True] * 4]
    # the padding repeats the final observation (the env was not stepped: a CountingEnv would count on)
    assert first["observation"][..., 0].tolist() == [[0, 1, 2, 2], [0, 1, 2, 3], [0, 1, 2, 3]]
    assert first["next", "observation"][..., 0].tolist() == [[1, 2, 2, 2], [1, 2, 3, 3], [1, 2, 3, 4]]
    assert first["next", "reward"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert first["next", "done"].tolist() == [[False, True, True, True], [False, False, True, True], [False] * 4]
    assert first[TRAJ_IDS].tolist() == [[0] * 4, [1] * 4, [2] * 4]
    # the next batch: the waiting envs restart (new ids, is_init), env 2 goes on with its trajectory
    assert second["observation"][..., 0].tolist() == [[0, 1, 2, 2], [0, 1, 2, 3], [4, 5, 5, 5]]
    assert second["is_init"][:, 0].tolist() == [True, True, False]
    assert second[MASK].tolist() == [[True, True, False, False], [True, True, True, False], [True, False, False, False]]
    assert second[TRAJ_IDS].tolist() == [[3] * 4, [4] * 4, [2] * 4]
    assert collector.frames == 24  # every slot counts, padding included


def test_trajectory_infos_skip_the_padding():
    collector = Collector(counting(2, 3, 5), frames_per_batch=12, reset_policy="wait")
    tracker = EpisodeTracker(gamma=1.0)
    infos = [info for _, batch in zip(range(3), collector) for info in tracker.infos(batch)]
    assert [(info.traj_id, info.length, info.episode_return) for info in infos] == [
        (0, 2, 2.0), (1, 3, 3.0), (3, 2, 2.0), (4, 3, 3.0), (2, 5, 5.0), (5, 2, 2.0), (6, 3, 3.0)]


def test_max_frames_per_traj_cuts_and_the_cut_env_waits():
    collector = Collector(counting(9, 2), frames_per_batch=10, max_frames_per_traj=3, reset_policy="wait")
    first, second = (batch.clone() for _, batch in zip(range(2), collector))
    assert first[MASK].tolist() == [[True, True, True, False, False], [True, True, False, False, False]]
    assert first["next", "truncated"][0].tolist() == [False, False, True, False, False]
    assert first["observation"][0, :, 0].tolist() == [0, 1, 2, 3, 3]  # not stepped after the cut
    assert second["observation"][0, :3, 0].tolist() == [0, 1, 2] and second["is_init"][:, 0].all()


def test_set_truncated_with_wait_restarts_only_the_envs_still_running():
    collector = Collector(counting(2, 9), frames_per_batch=8, set_truncated=True, reset_policy="wait")
    first, second = (batch.clone() for _, batch in zip(range(2), collector))
    assert first["next", "truncated"][:, -1].tolist() == [True, True]
    # env 0 waited and is reset; env 1 runs on from where it was, as a new trajectory
    assert second["observation"][:, 0, 0].tolist() == [0, 4]
    assert second["is_init"][:, 0].tolist() == [True, True]
    assert second[TRAJ_IDS][:, 0].tolist() == [3, 2]


def test_rollout_collection_writes_the_mask_in_place():
    collector = Collector(counting(2, 3), frames_per_batch=8, reset_policy="wait")
    rollout = collector.batch.new_zeros([2, 5]).exclude(MASK)
    collector.collect(rollout=rollout)
    assert rollout[MASK][:, :4].tolist() == [[True, True, False, False], [True, True, True, False]]


@pytest.mark.parametrize("kwargs, message", [
    ({"reset_policy": "later"}, "reset_policy must be one of"),
    ({"reset_policy": "wait", "reset_when_done": False}, "needs reset_when_done=True"),
    ({"reset_policy": "wait", "split_trajs": True}, "split_trajs would take them as real"),
    ({"reset_policy": "wait", "trajs_per_batch": 2}, "trajs_per_batch would take them as real"),
    ({"reset_policy": "wait", "replay_buffer": ReplayBuffer(storage=LazyTensorStorage(10))},
     "replay_buffer would take them as real"),
])
def test_bad_wait_combinations_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Collector(counting(2), frames_per_batch=4, **kwargs)


@pytest.mark.parametrize("env", [lambda: GymEnv("CartPole-v1", 2, backend="sync"), lambda: TorchCartPole(2)])
def test_envs_that_cannot_wait_are_refused(env):
    with pytest.raises(ValueError, match="cannot .it needs a GymEnv with backend='list'"):
        Collector(env(), frames_per_batch=4, reset_policy="wait")


def test_the_pool_refuses_wait():
    with pytest.raises(ValueError, match="does not support reset_policy"):
        PoolCollector(CountingEnv, num_workers=2, envs_per_worker=1, batch_size=1, frames_per_batch=4,
                      reset_policy="wait")


def test_worker_collectors_wait_as_the_collector_does(no_leftovers):
    """The same seeded envs give the same batches in process, behind an action server (the
    workers leave waiting envs unstepped) and in MultiSync's workers."""
    echo = functools.partial(EchoEnv, (2, 3, 4, 5))
    reference = Collector(GymEnv(echo, 4, seed=0), echo_policy, frames_per_batch=20, reset_policy="wait")
    expected = [batch.clone() for _, batch in zip(range(3), reference)]
    for cls, extra in ((ActionServerCollector, {}), (AlternatingCollector, {"overlap": False}),
                       (MultiSyncCollector, {})):
        collector = cls(echo, echo_policy, num_workers=2, envs_per_worker=2, frames_per_batch=20, seed=0,
                        start_method="fork", reset_policy="wait", **extra)
        no_leftovers(collector)
        for want, got in zip(expected, (batch for _, batch in zip(range(3), collector))):
            got = got.reshape(4, 5) if got.batch_dims == 3 else got
            for key in ("observation", ("next", "observation"), MASK, ("next", "done"), ("next", "reward"),
                        "is_init"):
                assert torch.equal(want[key], got[key]), (cls.__name__, key)
        collector.shutdown()
    assert expected[0][MASK].sum(1).tolist() == [2, 3, 4, 5]


def test_a_recurrent_policys_state_restarts_from_zero_when_a_waiting_env_resets():
    torch.manual_seed(0)
    policy = RecurrentActorCritic(gym.spaces.Box(0.0, 100.0, (1,)), gym.spaces.Discrete(2), hidden_size=6)
    collector = Collector(counting(2, 5), policy, frames_per_batch=8, reset_policy="wait")
    data = torch.cat([batch.clone() for _, batch in zip(range(3), collector)], 1)  # [2, 12]
    state, next_state = data["recurrent_state"], data["next", "recurrent_state"]
    assert data["is_init"][0].tolist() == [True, False, False, False] * 3  # env 0 restarts at each batch
    assert (state[data["is_init"]] == 0).all() and (state[~data["is_init"]].abs().sum((-1, -2)) > 0).all()
    continuing = ~data["is_init"][:, 1:]  # elsewhere each step reads the state the previous one wrote
    assert torch.equal(state[:, 1:][continuing], next_state[:, :-1][continuing])
