"""A memory-mapped replay storage resumed from a checkpoint its files were written past.

A checkpoint holds a LazyMemmapStorage's position (cursor, filled, write_count), not its
data: the files outlast the run. A run killed (SIGKILL) after a checkpoint leaves files
written on after it; the resume reopens them (``LazyMemmapStorage.load``, as
``make_storage(..., reopen=True)`` does) and loads the checkpoint's state. The buffer it gets
back is the checkpoint's as far as it still exists: the steps written after the checkpoint
(whose trajectory ids the resumed collector issues again, and whose priorities the
checkpoint does not have) are never sampled, nor are the checkpoint's steps they overwrote.

Each test simulates the crash at library level: write, take the state (the checkpoint),
write more (the killed run's later part), reopen the files and load the state.
"""
import functools
import logging

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from rlcollect import Collector
from rlcollect.buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SliceSamplerWithoutReplacement,
)
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv

TRAJ_IDS = ("collector", "traj_ids")
RUN = "run"  # which run wrote an element: 0 before the checkpoint, 1 the killed run after it, 2 the resumed run
BEFORE, KILLED, RESUMED = 0, 1, 2


def steps(first, stop, run, rows=None, traj_len=4):
    """Steps ``first .. stop - 1``: ``value`` is the step (plus 100 per row), the trajectory id
    ``step // traj_len`` (plus 10 per row): the same ids in every run, as a resumed collector
    issues them again from the checkpoint's counter."""
    step = torch.arange(first, stop)
    if rows is not None:
        step = step.expand(rows, -1) + 0
    row = torch.zeros_like(step) if rows is None else torch.arange(rows)[:, None].expand_as(step)
    return TensorDict({"value": step + 100 * row, TRAJ_IDS: step // traj_len + 10 * row,
                       RUN: torch.full_like(step, run)}, batch_size=step.shape)


def crash_and_resume(tmp_path, max_size, before, killed, *, ndim=1):
    """Write ``before`` (a list of writes), checkpoint, write ``killed``, then reopen the files
    and load the checkpoint's state as a resume does; returns the resumed buffer."""
    rb = ReplayBuffer(LazyMemmapStorage(max_size, scratch_dir=tmp_path / "replay", ndim=ndim))
    for write in before:
        rb.extend(write)
    torch.save(rb.state_dict(), tmp_path / "checkpoint.pt")  # a memmap storage's state: its position only
    for write in killed:
        rb.extend(write)
    resumed = ReplayBuffer(LazyMemmapStorage.load(tmp_path / "replay"))  # as make_storage(reopen=True)
    resumed.load_state_dict(torch.load(tmp_path / "checkpoint.pt", weights_only=True))
    return resumed


def every_element_in_time_order(rb):
    """Every stored element once, each row oldest first (one epoch of 1-step slices, unshuffled)."""
    sampler = SliceSamplerWithoutReplacement(slice_len=1, traj_key=TRAJ_IDS, shuffle=False)
    return sampler.sample(rb.storage, len(rb))


def position(storage):
    return storage.cursor, storage.filled, storage.write_count


@pytest.mark.timeout(60)
def test_ndim1_full_ring_drops_what_the_killed_run_wrote_and_what_it_overwrote(tmp_path, caplog):
    # capacity 10: the checkpoint holds steps 2..11 (slots 2..9, 0, 1; cursor 2); the killed
    # run wrote steps 12..15 with trajectory id 3 into slots 2..5
    rb = crash_and_resume(tmp_path, 10, [steps(0, 4, BEFORE), steps(4, 8, BEFORE), steps(8, 12, BEFORE)],
                          [steps(12, 16, KILLED)])
    assert position(rb.storage) == (6, 6, 12)  # the checkpoint's steps 6..11, moved to slots 0..5
    assert torch.equal(rb[:]["value"], torch.arange(6, 12))
    [line] = [record.getMessage() for record in caplog.records]  # one warning
    assert "4 transitions in its files were written after the checkpoint (16 written, the checkpoint's 12)" in line
    assert "the 4 of the checkpoint's they had overwritten" in line and "other 6" in line
    rb.extend(steps(12, 14, RESUMED))  # the resumed collector writes ids 3 again, in slots the killed run wrote
    sample = every_element_in_time_order(rb)
    assert sample["value"].tolist() == list(range(6, 14))
    assert sample[TRAJ_IDS].tolist() == [1, 1, 2, 2, 2, 2, 3, 3]
    assert sample[RUN].tolist() == [BEFORE] * 6 + [RESUMED] * 2
    torch.manual_seed(0)  # the default RandomSampler: uniform over exactly these elements
    drawn = rb.sample(400)
    assert set(drawn["value"].tolist()) == set(range(6, 14)) and KILLED not in drawn[RUN].tolist()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("killed, kept, told", [
    # into the free slots 4..6: nothing of the checkpoint overwritten
    ([steps(4, 7, KILLED)], list(range(0, 4)), "3 transitions in its files were written after the checkpoint "
                                               "(7 written, the checkpoint's 4): dropped, with the 0 "),
    # wraps to slots 0, 1: the checkpoint's steps 0, 1 are gone
    ([steps(4, 12, KILLED)], list(range(2, 4)), "8 transitions in its files were written after the checkpoint "
                                                "(12 written, the checkpoint's 4): dropped, with the 2 "),
    # a whole capacity and more: the files hold the last 10 of them, nothing of the checkpoint's
    ([steps(4, 10, KILLED), steps(10, 30, KILLED)], [], "10 transitions in its files were written after the "
                                                        "checkpoint (30 written, the checkpoint's 4): dropped, with "
                                                        "the 4 "),
])
def test_ndim1_ring_not_full_at_the_checkpoint(tmp_path, caplog, killed, kept, told):
    rb = crash_and_resume(tmp_path, 10, [steps(0, 4, BEFORE)], killed)
    [line] = [record.getMessage() for record in caplog.records]
    assert told in line and line.endswith(f"the buffer resumes with the checkpoint's other {len(kept)}")
    assert position(rb.storage) == (len(kept), len(kept), 4)
    assert rb[:]["value"].tolist() == kept
    rb.extend(steps(4, 9, RESUMED))
    sample = every_element_in_time_order(rb)
    assert sample["value"].tolist() == kept + list(range(4, 9))
    assert sample[RUN].tolist() == [BEFORE] * len(kept) + [RESUMED] * 5
    assert sample[TRAJ_IDS].tolist() == [value // 4 for value in kept + list(range(4, 9))]


@pytest.mark.timeout(60)
def test_ndim2_rows_drop_the_same_time_steps(tmp_path):
    # 2 rows of capacity 5: the checkpoint holds steps 1..5 of each row (cursor 1); the killed
    # run wrote steps 6, 7 into time indices 1, 2 of both rows (4 transitions)
    rb = crash_and_resume(tmp_path, 10, [steps(0, 3, BEFORE, rows=2), steps(3, 6, BEFORE, rows=2)],
                          [steps(6, 8, KILLED, rows=2)], ndim=2)
    assert position(rb.storage) == (3, 3, 12)  # steps 3, 4, 5 of each row, at time indices 0..2
    assert rb[:]["value"].tolist() == [[3, 4, 5], [103, 104, 105]]
    rb.extend(steps(6, 7, RESUMED, rows=2))  # ids 1 and 11 again, as the killed run wrote them
    sample = every_element_in_time_order(rb)
    assert sample["value"].tolist() == [3, 4, 5, 6, 103, 104, 105, 106]
    assert sample[TRAJ_IDS].tolist() == [0, 1, 1, 1, 10, 11, 11, 11]
    assert sample[RUN].tolist() == [BEFORE, BEFORE, BEFORE, RESUMED] * 2
    rb.extend(steps(7, 10, RESUMED, rows=2))  # full again: steps 5..9, as the run would have held without the crash
    assert rb[:]["value"][:, torch.arange(rb.storage.time_offset, rb.storage.time_offset + 5) % 5].tolist() == \
        [list(range(5, 10)), list(range(105, 110))]
    assert KILLED not in rb[:][RUN].reshape(-1).tolist()


@pytest.mark.timeout(60)
def test_files_not_written_past_the_checkpoint_load_as_before(tmp_path, caplog):
    rb = crash_and_resume(tmp_path, 10, [steps(0, 8, BEFORE), steps(8, 12, BEFORE)], [])
    assert position(rb.storage) == (2, 10, 12)
    assert torch.equal(rb[:]["value"], torch.arange(2, 12)) and not caplog.records


@pytest.mark.timeout(60)
def test_priorities_move_with_the_elements_kept(tmp_path):
    def prioritized():
        return PrioritizedSampler(10, alpha=1.0, beta=0.5, eps=0.0)

    rb = ReplayBuffer(LazyMemmapStorage(10, scratch_dir=tmp_path / "replay"), prioritized())
    rb.extend(steps(0, 12, BEFORE))  # slots 0, 1: steps 10, 11; slots 2..9: steps 2..9
    rb.update_priority(torch.arange(10), rb.storage.get(torch.arange(10))["value"].double() + 1)  # step + 1
    state = rb.state_dict()
    rb.extend(steps(12, 15, KILLED))  # slots 2..4
    rb.update_priority(torch.arange(2, 5), 1000.0)  # the killed run's priorities: not in the checkpoint
    resumed = ReplayBuffer(LazyMemmapStorage.load(tmp_path / "replay"), prioritized())
    resumed.load_state_dict(state)
    values = resumed.storage.get(torch.arange(len(resumed.storage)))["value"]
    assert values.tolist() == list(range(5, 12))
    expected = (values.double() + 1) / (values.double() + 1).sum()
    assert torch.allclose(resumed.sampler.probabilities(resumed.storage), expected)
    resumed.extend(steps(12, 13, RESUMED))  # a new element gets the largest priority given (12, not 1000)
    assert resumed.sampler.probabilities(resumed.storage)[7].item() == pytest.approx(12 / (sum(range(6, 13)) + 12))


# ---------------------------------------------------------------------- observations stored once
def stacked_batches(num_batches, lengths=(9, 13), stack=4):
    """Collector batches [2, 6] of CountingEnvs in FrameStackObservation (episodes of 9 and 13
    steps: most end in a later write than they start, so the first write after the checkpoint
    continues runs the checkpoint's last write left pending)."""
    def make(length):
        return gym.wrappers.FrameStackObservation(CountingEnv(length), stack, padding_type="reset")

    env = GymEnv([functools.partial(make, length) for length in lengths], num_envs=2)
    collected = iter(Collector(env, frames_per_batch=12))
    return [next(collected) for _ in range(num_batches)]


def time_ordered(storage):
    """What the storage holds, each row oldest first: [steps] (ndim=1) or [rows, steps]."""
    if storage.ndim == 1:
        return storage.read()
    order = (storage.time_offset + torch.arange(storage.filled)) % storage.filled
    return storage.read()[:, order]


def assert_same(expected, actual):
    assert actual.batch_size == expected.batch_size
    keys = set(expected.keys(include_nested=True, leaves_only=True))
    assert set(actual.keys(include_nested=True, leaves_only=True)) == keys
    for key in keys:
        assert torch.equal(actual[key], expected[key]), key


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ndim", [1, 2])
@pytest.mark.parametrize("checkpoint_after", [2, 4])  # writes of 12: the ring has room for the next one, or is full
def test_frames_named_in_dropped_slots_are_kept(tmp_path, caplog, ndim, checkpoint_after):
    def layout(batches):
        return [batch if ndim == 2 else batch.reshape(-1) for batch in batches]

    writes = layout(stacked_batches(checkpoint_after + 1))
    resumed_writes = layout(stacked_batches(3, lengths=(5, 11)))  # the resumed collector's: other observations
    max_size = 40  # ndim=1: 40 steps; ndim=2: 2 rows of 20
    storage = LazyMemmapStorage(max_size, scratch_dir=tmp_path / "replay", ndim=ndim, dedup_observations=True,
                                frame_stack=4)
    for write in writes[:checkpoint_after]:
        storage.extend(write)
    state = storage.state_dict()
    held = time_ordered(storage)  # what the checkpoint's buffer holds
    storage.extend(writes[checkpoint_after])  # the killed run: continues the pending runs into slots it dropped
    resumed = LazyMemmapStorage.load(tmp_path / "replay")
    resumed.load_state_dict(state)
    kept = resumed.filled
    assert kept == min(state["filled"], max_size // ndim - 12 // ndim)
    assert (resumed.cursor, resumed.write_count) == (kept, 12 * checkpoint_after)
    assert_same(held[..., held.batch_size[-1] - kept:], time_ordered(resumed))
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    # the resumed run writes on, over the slots the killed run wrote: the kept elements stay exact
    plain = LazyTensorStorage(max_size, ndim=ndim)
    plain.extend(held[..., held.batch_size[-1] - kept:])
    for write in resumed_writes:
        plain.extend(write)
        resumed.extend(write)
        assert_same(time_ordered(plain), time_ordered(resumed))
        every = torch.arange(len(plain))
        assert_same(plain.get(plain.index_from_time_order(every)), resumed.get(resumed.index_from_time_order(every)))
