import multiprocessing
import os
import signal
import threading

import pytest
import torch
from tensordict import TensorDict

from rlcollect.trajectories import TrajectoryPool, split_trajectories


def batch_of(traj_ids, done):
    traj_ids, done = torch.tensor(traj_ids), torch.tensor(done)
    return TensorDict({"observation": torch.arange(traj_ids.numel()).reshape(traj_ids.shape).float(),
                       "collector": {"traj_ids": traj_ids}, "next": {"done": done}}, batch_size=traj_ids.shape)


def test_padded_split_from_traj_ids():
    batch = batch_of([[0, 0, 2, 2, 2], [1, 3, 3, 4, 4]],
                     [[False, True, False, False, False], [True, False, True, False, False]])
    padded = split_trajectories(batch)
    assert padded.batch_size == (5, 3)
    assert padded["collector", "mask"].tolist() == [
        [True, True, False], [True, True, True], [True, False, False], [True, True, False], [True, True, False]]
    assert padded["observation"].tolist() == [[0, 1, 0], [2, 3, 4], [5, 0, 0], [6, 7, 0], [8, 9, 0]]
    assert padded["collector", "traj_ids"][:, 0].tolist() == [0, 2, 1, 3, 4]


def test_split_from_done_when_no_traj_ids():
    batch = batch_of([[0, 0, 0]], [[True, False, False]]).exclude(("collector", "traj_ids"))
    padded = split_trajectories(batch)
    assert padded["collector", "mask"].tolist() == [[True, False], [True, True]]
    assert padded["observation"].tolist() == [[0, 0], [1, 2]]


def test_nested_split_is_ragged_without_padding():
    batch = batch_of([[0, 0, 1]], [[False, True, False]])
    nested = split_trajectories(batch, as_nested=True)
    assert [t.batch_size[0] for t in nested.tensordicts] == [2, 1]
    assert ("collector", "mask") not in nested.keys(True)
    assert nested.tensordicts[1]["observation"].tolist() == [2.0]


def test_trajectory_pool_never_repeats_after_reload():
    pool = TrajectoryPool()
    assert pool.take(3).tolist() == [0, 1, 2]
    other = TrajectoryPool()
    other.load_state_dict(pool.state_dict())
    assert other.take(2).tolist() == [3, 4]


def _hold_the_lock_and_wait(pool, held):
    pool._counter.get_lock().acquire()  # as a worker inside take_range when it is killed
    held.set()
    threading.Event().wait()


@pytest.mark.timeout(60)
def test_a_worker_killed_while_it_holds_the_id_lock_leaves_no_process_waiting_for_good():
    """A worker killed with SIGKILL while it holds the shared counter's lock: the state reads
    at once, and the next id is handed out once the lock is known to be orphaned."""
    context = multiprocessing.get_context("fork")
    pool = TrajectoryPool(7, mp_context=context)
    pool.ORPHANED_AFTER = 0.2
    held = context.Event()
    holder = context.Process(target=_hold_the_lock_and_wait, args=(pool, held))
    holder.start()
    assert held.wait(30)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    assert holder.exitcode == -signal.SIGKILL
    assert pool.state_dict() == {"next_id": 7}  # no wait on the dead holder
    assert pool.take_range(3) == 7 and pool.take_range(1) == 10
    assert pool._counter.get_lock().acquire(timeout=1)  # released again after each take
