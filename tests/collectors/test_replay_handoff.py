"""Collectors writing straight into a ReplayBuffer, and background collection."""
import functools
import time

import pytest
import torch
from processes import wait_for

from rlcollect.buffers import LazyTensorStorage, MultiStep, ReplayBuffer, SliceSampler
from rlcollect.collectors import Collector
from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv, WorkerIdEnv, counting_env_factories

pytestmark = pytest.mark.timeout(120)
TRAJ_IDS = ("collector", "traj_ids")


def test_direct_writes_yield_none_and_apply_postproc_first():
    rb = ReplayBuffer(LazyTensorStorage(100))
    collector = Collector(GymEnv(counting_env_factories([3, 4]), num_envs=2), frames_per_batch=8, total_frames=16,
                          replay_buffer=rb, postproc=lambda b: b.set("tag", torch.ones(b.shape)))
    assert list(collector) == [None, None]
    assert rb.write_count == 16 == collector.frames
    stored = rb[:]
    assert (stored["tag"] == 1).all()
    # flat layout: each env's steps stay contiguous within a write
    assert stored["observation"][:4, 0].tolist() == [0, 1, 2, 0]


def test_a_write_transform_sees_env_rows_before_they_are_flattened():
    """MultiStep as the buffer's write transform: n-step transitions never run from one env's
    row into the next one's, though the storage is flat."""
    rb = ReplayBuffer(LazyTensorStorage(100), write_transform=MultiStep(gamma=0.5, n_steps=2))
    collector = Collector(GymEnv(counting_env_factories([3, 4]), num_envs=2), frames_per_batch=8, total_frames=8,
                          replay_buffer=rb)
    list(collector)
    stored = rb[:]
    # env 0 ends at its third step, env 1 at its fourth; each row's last step is the batch's end
    assert stored["next", "steps_to_next_obs"].reshape(-1).tolist() == [2, 2, 1, 1, 2, 2, 2, 1]
    assert stored["next", "reward"].reshape(-1).tolist() == [1.5, 1.5, 1.0, 1.0, 1.5, 1.5, 1.5, 1.0]
    assert stored["next", "observation"][:, 0].tolist() == [2, 3, 3, 1, 2, 3, 4, 4]
    assert stored["observation"][:, 0].tolist() == [0, 1, 2, 0, 0, 1, 2, 3]  # untouched


def test_worker_processes_apply_the_write_transform_of_the_shared_buffer():
    rb = ReplayBuffer(LazyTensorStorage(100), write_transform=MultiStep(gamma=0.5, n_steps=2))
    collector = MultiSyncCollector(functools.partial(CountingEnv, 3), num_workers=2, frames_per_batch=8,
                                   total_frames=8, replay_buffer=rb, start_method="fork")
    try:
        assert list(collector) == [None]
    finally:
        collector.shutdown()
    steps = rb[:]["next", "steps_to_next_obs"].reshape(2, 4)  # one contiguous write per worker
    assert steps.tolist() == [[2, 2, 1, 1], [2, 2, 1, 1]]


def test_ndim_2_storage_keeps_env_rows():
    rb = ReplayBuffer(LazyTensorStorage(40, ndim=2))
    collector = Collector(GymEnv(counting_env_factories([3, 4]), num_envs=2), frames_per_batch=8, total_frames=16,
                          replay_buffer=rb)
    list(collector)
    rows = rb[:]
    assert rows.batch_size == (2, 8)
    assert rows["observation"][1, :, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]  # env 1's row, across two writes


def test_trajs_per_batch_writes_only_complete_trajectories():
    extends = []
    rb = ReplayBuffer(LazyTensorStorage(1000))
    original = rb.extend
    rb.extend = lambda data: (extends.append(data.clone()), original(data))
    collector = Collector(GymEnv(counting_env_factories([3, 5]), num_envs=2), frames_per_batch=8, total_frames=64,
                          replay_buffer=rb, trajs_per_batch=2)
    list(collector)
    assert extends
    for data in extends:
        assert data["next", "done"][-1]  # every write ends a trajectory ...
        ids = data[TRAJ_IDS]
        for traj_id in ids.unique().tolist():  # ... and holds whole trajectories only
            steps = data[ids == traj_id]
            assert steps["observation"][:, 0].tolist() == list(range(steps.shape[0]))
            assert steps["next", "done"][-1] and not steps["next", "done"][:-1].any()
        assert ids.unique().numel() >= 2
    with pytest.raises(ValueError, match="traj_format applies to trajs_per_batch without a replay buffer"):
        Collector(GymEnv("CartPole-v1"), frames_per_batch=4, trajs_per_batch=1, traj_format="padded",
                  replay_buffer=ReplayBuffer(LazyTensorStorage(10)))


def test_two_workers_writing_one_buffer_lose_and_mix_nothing():
    rb = ReplayBuffer(LazyTensorStorage(10_000), SliceSampler(slice_len=4), batch_size=64)
    # episodes of 4 steps, 8 steps per worker batch: no trajectory is ever left pending
    envs = [functools.partial(GymEnv, functools.partial(WorkerIdEnv, i, 4)) for i in range(2)]
    collector = MultiAsyncCollector(envs, frames_per_batch=8, total_frames=160, replay_buffer=rb, trajs_per_batch=1,
                                    start_method="fork")
    try:
        assert all(batch is None for batch in collector)
        written = rb[:]
        assert rb.write_count == written.shape[0] >= 160  # batches in flight at the end are written too
        keys = list(zip(written[TRAJ_IDS].tolist(), written["observation"][:, 1].tolist()))
        assert len(keys) == len(set(keys))  # no step duplicated
        for _ in range(20):
            sample = rb.sample()
            starts = torch.nonzero(sample["is_init"]).squeeze(-1).tolist() + [sample.shape[0]]
            for begin, end in zip(starts[:-1], starts[1:]):
                piece = sample[begin:end]
                assert piece[TRAJ_IDS].unique().numel() == 1 and piece["observation"][:, 0].unique().numel() == 1
                steps = piece["observation"][:, 1]
                assert torch.equal(steps, torch.arange(steps[0], steps[0] + steps.numel()))
    finally:
        collector.shutdown()


def test_multiprocess_writes_need_a_flat_storage():
    with pytest.raises(ValueError, match="ndim=1"):
        MultiSyncCollector([functools.partial(GymEnv, "CartPole-v1", 2)] * 2, frames_per_batch=8,
                           replay_buffer=ReplayBuffer(LazyTensorStorage(100, ndim=2)), start_method="fork")


@pytest.mark.parametrize("kind", ["single", "multisync"])
def test_background_start_pause_and_async_shutdown(kind):
    rb = ReplayBuffer(LazyTensorStorage(100_000))
    if kind == "single":
        collector = Collector(GymEnv(lambda: CountingEnv(5)), frames_per_batch=10, replay_buffer=rb)
    else:
        collector = MultiSyncCollector([functools.partial(GymEnv, functools.partial(CountingEnv, 5))] * 2,
                                       frames_per_batch=10, replay_buffer=rb, start_method="fork")
    collector.start()
    wait_for(lambda: rb.write_count >= 100)
    collector.update_policy_weights_()
    with collector.pause():
        paused_at = rb.write_count
        time.sleep(0.3)
        assert rb.write_count == paused_at  # nothing written while paused
    wait_for(lambda: rb.write_count > paused_at)  # and collection resumes
    collector.async_shutdown(timeout=10)
    assert not collector.running
    stopped_at = rb.write_count
    time.sleep(0.1)
    assert rb.write_count == stopped_at


def test_background_collection_stops_at_total_frames_and_surfaces_errors():
    from rlcollect.testing import ErrorAfterEnv

    rb = ReplayBuffer(LazyTensorStorage(1000))
    collector = Collector(GymEnv(lambda: CountingEnv(5)), frames_per_batch=10, total_frames=50, replay_buffer=rb)
    collector.start()
    wait_for(lambda: not collector.running)
    assert rb.write_count == 50
    collector.async_shutdown()
    failing = Collector(GymEnv(lambda: ErrorAfterEnv(error_after=15)), frames_per_batch=10, replay_buffer=rb)
    failing.start()
    wait_for(lambda: not failing.running)
    with pytest.raises(RuntimeError, match="background collection failed.*step 16 fails by design"):
        failing.async_shutdown()


def test_split_trajs_and_a_replay_buffer_exclude_each_other():
    with pytest.raises(ValueError, match="flat layout"):
        Collector(GymEnv("CartPole-v1"), frames_per_batch=4, split_trajs=True,
                  replay_buffer=ReplayBuffer(LazyTensorStorage(10)))
