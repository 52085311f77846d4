"""Observations stored once (dedup_observations, frame_stack): every read equals the plain storage's.

Each test writes the same collector batches into a plain storage and a deduplicating one
and compares what they return, leaf by leaf and bit by bit; CountingEnv's observation is its
step count, so next observations are also checked against their known values.
"""
import contextlib
import functools
import multiprocessing
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlcollect import Collector, TrajectoryPool
from rlcollect.buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    MultiStep,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    saved_in_place,
)
from rlcollect.buffers.frames import FREE
from rlcollect.collectors.multi import MultiSyncCollector
from rlcollect.envs import GymEnv
from rlcollect.errors import ConfigError
from rlcollect.testing import CountingEnv

OBS, NEXT_OBS, STEPS = "observation", ("next", "observation"), ("next", "steps_to_next_obs")
DONE, TRAJ_IDS = ("next", "done"), ("collector", "traj_ids")


def counting(length, stack, end="terminated", padding="reset"):
    env = CountingEnv(length, end=end)
    return env if stack == 1 else gym.wrappers.FrameStackObservation(env, stack, padding_type=padding)


def batches(num_batches, lengths=(3, 7), stack=1, frames_per_batch=12, n_step=1, pool=None, **env_kwargs):
    """Collector batches ``[P, T]`` of CountingEnvs (observation [1], or [stack, 1] stacks)."""
    env = GymEnv([functools.partial(counting, length, stack, **env_kwargs) for length in lengths],
                 num_envs=len(lengths))
    collected = iter(Collector(env, frames_per_batch=frames_per_batch, traj_pool=pool))
    transform = MultiStep(0.9, n_step) if n_step > 1 else (lambda batch: batch)
    return [transform(next(collected)) for _ in range(num_batches)]


def in_layout(batch, ndim):
    return batch.reshape(-1) if ndim == 1 else batch


def bits(tensor):
    """Floats as the integers of their bits: -0.0 and 0.0 differ, NaN equals itself."""
    sized = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16}
    return tensor.view(sized[tensor.dtype]) if tensor.dtype in sized else tensor


def assert_same(expected, actual):
    """Same keys, batch size, dtypes, shapes and bits."""
    assert actual.batch_size == expected.batch_size
    keys = set(expected.keys(include_nested=True, leaves_only=True))
    assert set(actual.keys(include_nested=True, leaves_only=True)) == keys
    for key in keys:
        assert actual[key].dtype == expected[key].dtype and actual[key].shape == expected[key].shape, key
        assert torch.equal(bits(actual[key]), bits(expected[key])), key


def assert_same_storage(plain, framed):
    assert (len(framed), framed.cursor, framed.write_count) == (len(plain), plain.cursor, plain.write_count)
    index = torch.arange(len(plain))
    assert_same(plain.get(index), framed.get(index))
    assert_same(plain.read(), framed.read())


def twins(max_size, ndim=1, stack=1, **kwargs):
    return (LazyTensorStorage(max_size, ndim=ndim),
            LazyTensorStorage(max_size, ndim=ndim, dedup_observations=True, frame_stack=stack, **kwargs))


def assert_counting_next_observations(sample, stack):
    """CountingEnv: within an episode the next observation counts m steps on; at its end it
    is the true final one (the episode length, which the count reached)."""
    obs, next_obs = sample[OBS].squeeze(-1), sample[NEXT_OBS].squeeze(-1)  # [n] or [n, stack]
    steps = sample.get(STEPS, torch.ones(sample.batch_size, dtype=torch.int64)).float()
    newest, next_newest = (obs, next_obs) if stack == 1 else (obs[:, -1], next_obs[:, -1])
    assert torch.equal(next_newest, newest + steps)
    if stack > 1:  # FrameStackObservation: each frame one count on, the reset frame repeated before it
        expected = (next_newest[:, None] + torch.arange(1 - stack, 1.0)).clamp(min=0)
        assert torch.equal(next_obs, expected)


# ---------------------------------------------------------------------- equal to the plain storage
@pytest.mark.parametrize("stack", [1, 4])
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("ndim", [1, 2])
@pytest.mark.parametrize("capacity", [5, 9, 40])  # rows of 5 and 9 wrap many times; 40 wraps twice
def test_every_read_equals_the_plain_storage(stack, n_step, ndim, capacity):
    writes = batches(8, lengths=(3, 7), stack=stack, n_step=n_step)  # [2, 6] each: episodes end inside writes
    plain, framed = twins(capacity * (1 if ndim == 1 else 2), ndim, stack)
    for batch in writes:
        plain.extend(in_layout(batch, ndim))
        framed.extend(in_layout(batch, ndim))
        assert_same_storage(plain, framed)
        assert_counting_next_observations(framed.get(torch.arange(len(framed))), stack)


def test_ndim3_multisync_stacks_equal_the_plain_storage():
    pool = TrajectoryPool()
    first, second = (batches(4, lengths=lengths, stack=4, pool=pool) for lengths in ((3, 7), (5, 2)))
    plain, framed = twins(2 * 2 * 7, ndim=3, stack=4)
    for one, two in zip(first, second):
        plain.extend(torch.stack([one, two]))  # [B=2, P=2, T=6]
        framed.extend(torch.stack([one, two]))
        assert_same_storage(plain, framed)


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_the_true_final_observation_is_kept_at_every_episode_end(end):
    plain, framed = twins(100, stack=4)
    for batch in batches(4, lengths=(2, 5), stack=4, end=end):
        plain.extend(batch.reshape(-1))
        framed.extend(batch.reshape(-1))
    stored = framed.read()
    assert_same(plain.read(), stored)
    final = stored[stored[DONE]]
    assert final.numel() > 0 and torch.equal(final[NEXT_OBS][:, -1, 0], final[OBS][:, -1, 0] + 1)


def test_gymnasium_frame_stacks_repeat_the_reset_frame_and_cost_spares_only_at_episode_ends():
    """FrameStackObservation (padding "reset") fills an episode's first stacks with its reset
    frame: [r, r, r, r], [r, r, r, f1], ... Stored oldest frame first, those stacks are the
    aligned frames of the episode's first steps, so only an episode's end takes spares (its
    last K frames); a write cut in the middle of an episode takes none once continued."""
    env = counting(3, 4)
    first, _ = env.reset(seed=0)
    second, *_ = env.step(0)
    assert first[:, 0].tolist() == [0, 0, 0, 0] and second[:, 0].tolist() == [0, 0, 0, 1]
    writes = batches(6, lengths=(6, 1000), stack=4)  # [2, 6] writes: env 0 ends an episode in each
    plain, framed = twins(200, stack=4)
    for batch in writes:
        plain.extend(batch.reshape(-1))
        framed.extend(batch.reshape(-1))
    assert_same_storage(plain, framed)
    episode_ends = int(framed.read()[DONE].sum())
    assert episode_ends == 6
    assert framed.spares_in_use()[OBS][0] == 4 * episode_ends + 4  # and env 1's run, that the last write left open


def test_zero_padded_stacks_are_still_exact():
    plain, framed = twins(30, stack=4)
    for batch in batches(5, lengths=(3, 4), stack=4, padding="zero"):
        plain.extend(batch.reshape(-1))
        framed.extend(batch.reshape(-1))
        assert_same_storage(plain, framed)


def test_frames_that_differ_only_in_their_bits_are_kept_apart():
    """-0.0 == 0.0 and NaN != NaN for ==, but a read must give the bits written."""
    observation = torch.tensor([[0.0], [-0.0], [float("nan")], [1.0]])
    next_observation = torch.tensor([[-0.0], [float("nan")], [1.0], [2.0]])
    data = TensorDict({OBS: observation, "next": {OBS: next_observation, "done": torch.zeros(4, dtype=torch.bool)},
                       "collector": {"traj_ids": torch.zeros(4, dtype=torch.int64)}}, [4])
    plain, framed = twins(10)
    plain.extend(data)
    framed.extend(data)
    assert_same_storage(plain, framed)


def test_nested_observations_each_stored_as_frames():
    steps = torch.arange(12.0)
    stacks = (steps[:, None] + torch.arange(-3.0, 1.0)).clamp(min=0)  # one episode, FrameStack-like
    pixels = stacks[:, :, None, None].expand(12, 4, 2, 3).to(torch.uint8)
    vector = torch.stack([steps, -steps], -1)
    data = TensorDict({OBS: {"pixels": pixels[:-1], "vector": vector[:-1]},
                       "next": {OBS: {"pixels": pixels[1:], "vector": vector[1:]},
                                "done": torch.zeros(11, dtype=torch.bool)}}, [11])
    plain, framed = twins(8, stack=4)
    for part in (data[:4], data[4:7], data[7:]):
        plain.extend(part)
        framed.extend(part)
        assert_same_storage(plain, framed)
    assert set(framed.spares_in_use()) == {(OBS, "pixels"), (OBS, "vector")}


# ---------------------------------------------------------------------- the ring's boundary
@pytest.mark.parametrize("stack", [1, 4])
@pytest.mark.parametrize("write_len", [1, 2, 3, 7, 13])  # 13: longer than the ring
def test_the_ring_never_overwrites_a_frame_a_stored_element_points_at(stack, write_len):
    """One long episode through a ring of 5: at every write the oldest elements are
    overwritten; each stored element's frames are at its own step or later ones (pointers go
    forward), so what stays is exactly what was written."""
    stream = batches(1, lengths=(1000,), stack=stack, frames_per_batch=60)[0][0]  # [60]
    plain, framed = twins(5, stack=stack)
    for start in range(0, 60, write_len):
        plain.extend(stream[start:start + write_len])
        framed.extend(stream[start:start + write_len])
        assert_same_storage(plain, framed)
        stored = framed.read()
        assert torch.equal(stored[OBS].reshape(len(framed), -1)[:, -1], stream[OBS].reshape(60, -1)[
            max(0, min(start + write_len, 60) - 5):min(start + write_len, 60), -1])
    assert framed.spares_in_use()[OBS][0] <= stack  # the open run's tail only


@pytest.mark.parametrize("stack", [1, 4])
def test_one_step_writes_keep_a_few_spares_and_a_bounded_bookkeeping(stack):
    """ReplayBuffer.add: each write is one step of each env. The run a write leaves open is
    pointed at the next write's frames, so spares and pending elements stay per env, never
    per stored step."""
    stream = batches(1, lengths=(1000, 1000), stack=stack, frames_per_batch=80)[0]  # [2, 40]
    plain, framed = ReplayBuffer(LazyTensorStorage(30)), ReplayBuffer(
        LazyTensorStorage(30, dedup_observations=True, frame_stack=stack))
    for t in range(40):
        for env in range(2):
            plain.add(stream[env, t])
            framed.add(stream[env, t])
    assert_same_storage(plain.storage, framed.storage)
    assert framed.storage.spares_in_use()[OBS][0] == 2 * stack
    pending = framed.storage._frames._pending[0]
    assert len(pending) == 2 and max(record.slots.numel() for record in pending.values()) <= stack


def test_scalar_integer_observations():
    observation = torch.tensor([0, 1, 2, 0, 1, 2, 3])  # a Discrete observation: int64, no feature dims
    data = TensorDict({OBS: observation, "next": {OBS: torch.tensor([1, 2, 9, 1, 2, 3, 4]),
                                                 "done": torch.tensor([0, 0, 1, 0, 0, 0, 0], dtype=torch.bool)},
                       "is_init": observation == 0}, [7])
    plain, framed = twins(5)
    for part in (data[:3], data[3:5], data[5:]):
        plain.extend(part)
        framed.extend(part)
        assert_same_storage(plain, framed)


# ---------------------------------------------------------------------- samplers
def sampler_cases():
    return [
        ("random", 1, RandomSampler),
        ("random", 2, RandomSampler),
        ("slice", 1, lambda: SliceSampler(slice_len=4)),
        ("slice", 2, lambda: SliceSampler(num_slices=4, traj_key=TRAJ_IDS)),
        ("slice_done", 1, lambda: SliceSampler(slice_len=3, traj_key="none", end_key=DONE, pad_output=True)),
        ("without_replacement", 1, lambda: SliceSamplerWithoutReplacement(slice_len=4)),
        ("without_replacement", 2, lambda: SliceSamplerWithoutReplacement(slice_len=3, shuffle=False)),
        ("prioritized", 1, lambda: PrioritizedSampler(max_capacity=40, alpha=0.7, beta=0.5)),
    ]


@pytest.mark.parametrize("name, ndim, make_sampler", sampler_cases(),
                         ids=[f"{name}-ndim{ndim}" for name, ndim, _ in sampler_cases()])
@pytest.mark.parametrize("stack, n_step", [(1, 1), (4, 1), (4, 3)])
def test_every_sampler_draws_the_same_samples(name, ndim, make_sampler, stack, n_step):
    plain_rb = ReplayBuffer(LazyTensorStorage(40, ndim=ndim), make_sampler(), batch_size=12)
    framed_rb = ReplayBuffer(LazyTensorStorage(40, ndim=ndim, dedup_observations=True, frame_stack=stack),
                             make_sampler(), batch_size=12)
    for step, batch in enumerate(batches(6, lengths=(4, 9), stack=stack, n_step=n_step)):
        plain_rb.extend(in_layout(batch, ndim))
        framed_rb.extend(in_layout(batch, ndim))
        for draw in range(3):
            torch.manual_seed(100 * step + draw)
            expected = plain_rb.sample()
            torch.manual_seed(100 * step + draw)
            sample = framed_rb.sample()
            assert_same(expected, sample)
            assert_counting_next_observations(sample, stack)
            if name == "prioritized":
                priority = torch.rand(12)
                plain_rb.update_priority(expected["index"], priority)
                framed_rb.update_priority(sample["index"], priority)


# ---------------------------------------------------------------------- bytes
def atari_template(num_steps=2):
    """What the Atari preset writes: uint8 [4, 84, 84] stacks (and a DQN step's other keys)."""
    return TensorDict({OBS: torch.zeros(num_steps, 4, 84, 84, dtype=torch.uint8),
                       "action": torch.zeros(num_steps, dtype=torch.int64),
                       "is_init": torch.zeros(num_steps, dtype=torch.bool),
                       "next": {OBS: torch.zeros(num_steps, 4, 84, 84, dtype=torch.uint8),
                                "reward": torch.zeros(num_steps), "done": torch.zeros(num_steps, dtype=torch.bool),
                                "terminated": torch.zeros(num_steps, dtype=torch.bool),
                                "truncated": torch.zeros(num_steps, dtype=torch.bool)},
                       "collector": {"traj_ids": torch.zeros(num_steps, dtype=torch.int64)}}, [num_steps])


def test_bytes_per_transition_of_the_atari_observation():
    """Counted from the storages' tensors: 2 x 28,224 bytes of observation per transition
    before; one 7,056-byte frame, 2 x 4 int64 pointers and max_size / 16 spare frames after."""
    others = 8 + 1 + 4 + 3 + 8  # action, is_init, reward, done/terminated/truncated, traj_ids
    plain = LazyTensorStorage(10_000).init_from(atari_template())
    framed = LazyTensorStorage(10_000, dedup_observations=True, frame_stack=4).init_from(atari_template())
    assert plain.nbytes == 10_000 * (2 * 4 * 84 * 84 + others)
    assert framed.nbytes == 10_000 * (84 * 84 + 2 * 4 * 8 + others) + 625 * (84 * 84 + 8)  # 625 = 10,000 / 16
    assert framed.spares_in_use() == {OBS: (0, 625)}
    per_transition = framed.nbytes / 10_000
    assert per_transition < 7_600 and 1_000_000 * per_transition < 8e9  # a 1M replay: 7.6 GB, from 56.5 GB
    sized = LazyTensorStorage(10_000, dedup_observations=True, frame_stack=4, spare_frames=100)
    assert sized.init_from(atari_template()).nbytes == 10_000 * (84 * 84 + 64 + others) + 100 * (84 * 84 + 8)


# ---------------------------------------------------------------------- spares
def test_spares_grow_when_needed_and_reads_stay_exact():
    plain, framed = twins(60, stack=4, spare_frames=1)
    for batch in batches(8, lengths=(2, 3), stack=4):
        plain.extend(batch.reshape(-1))
        framed.extend(batch.reshape(-1))
        assert_same_storage(plain, framed)
    in_use, size = framed.spares_in_use()[OBS]
    assert 1 < in_use <= size


def test_a_shared_storage_that_runs_out_of_spares_raises_and_changes_nothing():
    writes = batches(3, lengths=(2, 3), stack=4)
    plain, framed = twins(60, stack=4, spare_frames=24)
    framed.init_from(writes[0].reshape(-1)).share(multiprocessing.get_context("fork"))
    plain.extend(writes[0].reshape(-1))
    framed.extend(writes[0].reshape(-1))
    with pytest.raises(RuntimeError, match=r"needs \d+ more spare frames.*cannot grow them: give spare_frames="):
        framed.extend(writes[1].reshape(-1))
    assert_same_storage(plain, framed)  # the failed write left no trace
    assert framed.position.shared and framed.spares_in_use()[OBS][1] == 24


# ---------------------------------------------------------------------- state and memmap
@pytest.mark.parametrize("ndim", [1, 2])
@pytest.mark.parametrize("max_size", [20, 200], ids=["full", "not_full"])
@pytest.mark.parametrize("in_place", [False, True], ids=["copied", "in_place"])
def test_state_dict_round_trip_through_a_weights_only_checkpoint(tmp_path, ndim, max_size, in_place):
    writes = batches(6, lengths=(3, 8), stack=4)
    plain, framed = twins(max_size * ndim, ndim, stack=4)
    for batch in writes[:4]:
        plain.extend(in_layout(batch, ndim))
        framed.extend(in_layout(batch, ndim))
    with saved_in_place() if in_place else contextlib.nullcontext():  # (saved_in_place: the full storage as it is)
        live = framed.state_dict(include_data=True)
        torch.save(live, tmp_path / "buffer.pt")
    held = live["data"]["action"].data_ptr() == framed._data["action"].data_ptr()
    assert held == (in_place and max_size == 20)
    state = torch.load(tmp_path / "buffer.pt", weights_only=True)
    # the steps held (48 written: all of them, or the capacity's), the spares up to the last one named
    assert state["data"]["action"].shape == ((min(48, max_size),) if ndim == 1 else (2, min(24, max_size)))
    spares = framed._frames.spares[0]
    saved = int((spares["last_step"] != FREE).nonzero()[-1]) + 1
    assert state["frames"]["spares"][0]["last_step"].shape == (saved,)
    assert saved < spares.batch_size[0] or max_size == 20  # (here 48 of 64)
    resumed = LazyTensorStorage(max_size * ndim, ndim=ndim, dedup_observations=True, frame_stack=4)
    resumed.load_state_dict(state)
    assert_same_storage(plain, resumed)
    for batch in writes[4:]:  # the resumed buffer goes on as the original does
        plain.extend(in_layout(batch, ndim))
        resumed.extend(in_layout(batch, ndim))
        assert_same_storage(plain, resumed)
    with pytest.raises(ValueError, match="stored with dedup_observations=False"):
        LazyTensorStorage(20 * ndim, ndim=ndim, dedup_observations=True).load_state_dict(
            plain.state_dict(include_data=True))


def test_replay_buffer_state_dict_resumes_sampling_as_before():
    writes = batches(5, lengths=(3, 8), stack=4)
    rb = ReplayBuffer(LazyTensorStorage(30, dedup_observations=True, frame_stack=4), SliceSampler(slice_len=3),
                      batch_size=12)
    for batch in writes:
        rb.extend(batch.reshape(-1))
    resumed = ReplayBuffer(LazyTensorStorage(30, dedup_observations=True, frame_stack=4), SliceSampler(slice_len=3),
                           batch_size=12)
    resumed.load_state_dict(rb.state_dict(include_storage=True))
    for seed in range(3):
        torch.manual_seed(seed)
        expected = rb.sample()
        torch.manual_seed(seed)
        assert_same(expected, resumed.sample())


@pytest.mark.parametrize("ndim", [1, 2])
def test_memmap_storage_stores_frames_in_files_and_reopens_them(tmp_path, ndim):
    writes = batches(7, lengths=(3, 8), stack=4)
    plain = LazyTensorStorage(20 * ndim, ndim=ndim)
    framed = LazyMemmapStorage(20 * ndim, scratch_dir=tmp_path / "rb", ndim=ndim, dedup_observations=True,
                               frame_stack=4, spare_frames=2)  # grows: new spare files
    for batch in writes[:5]:
        plain.extend(in_layout(batch, ndim))
        framed.extend(in_layout(batch, ndim))
        assert_same_storage(plain, framed)
    reopened = LazyMemmapStorage.load(tmp_path / "rb")
    assert (reopened.dedup_observations, reopened.frame_stack) == (True, 4)
    assert_same_storage(plain, reopened)
    assert len(list((tmp_path / "rb" / "spares").iterdir())) == 1  # the grown copy replaced the first one
    for batch in writes[5:]:
        plain.extend(in_layout(batch, ndim))
        reopened.extend(in_layout(batch, ndim))
        assert_same_storage(plain, reopened)


# ---------------------------------------------------------------------- collectors writing into the buffer
@pytest.mark.parametrize("trajs_per_batch, ndim", [(None, 1), (None, 2), (2, 1)])  # whole trajectories: flat
def test_a_collector_writing_directly_stores_what_it_stores_in_a_plain_buffer(trajs_per_batch, ndim):
    rbs = [ReplayBuffer(LazyTensorStorage(60, ndim=ndim), write_transform=MultiStep(0.9, 2)),
           ReplayBuffer(LazyTensorStorage(60, ndim=ndim, dedup_observations=True, frame_stack=4),
                        write_transform=MultiStep(0.9, 2))]
    for rb in rbs:
        torch.manual_seed(0)  # the same random actions
        env = GymEnv([functools.partial(counting, length, 4) for length in (3, 11)], num_envs=2)
        assert all(batch is None for batch in Collector(env, frames_per_batch=8, total_frames=96, replay_buffer=rb,
                                                        trajs_per_batch=trajs_per_batch))
    assert_same_storage(*(rb.storage for rb in rbs))
    assert_counting_next_observations(rbs[1][:].reshape(-1), 4)


@pytest.mark.timeout(120)
def test_a_multi_process_collector_writes_frames_into_its_shared_buffer():
    """MultiSyncCollector allocates the buffer from a probe batch, shares it, and its workers
    write into it in an order nobody controls: every stored transition is still exact."""
    rb = ReplayBuffer(LazyTensorStorage(200, dedup_observations=True, frame_stack=4, spare_frames=120),
                      write_transform=MultiStep(0.9, 3), batch_size=32)  # 9-step episodes: 4 spares per 9 steps
    collector = MultiSyncCollector(functools.partial(counting, 9, 4), num_workers=2, frames_per_batch=16,
                                   total_frames=320, replay_buffer=rb, start_method="fork")
    try:
        assert all(batch is None for batch in collector)
    finally:
        collector.shutdown()
    assert rb.write_count == 320 and rb.storage.position.shared
    assert_counting_next_observations(rb[:], 4)
    assert_counting_next_observations(rb.sample(), 4)
    in_use, size = rb.storage.spares_in_use()[OBS]
    assert in_use <= 4 * (200 // 9 + 1 + 2) and size == 120  # episode ends, and the two open runs: never grown


# ---------------------------------------------------------------------- several writers
ROUNDS = 6


def write_twins(plain_rb, framed_rb, both, worker, pool, barrier):
    """Write this worker's collector batches into both buffers, each into both under one
    lock, so that the two see the same interleaving of the two workers' writes."""
    collected = batches(ROUNDS, lengths=(3 + worker, 20), stack=4, n_step=2, pool=pool)
    barrier.wait(timeout=30)
    for batch in collected:
        with both:
            plain_rb.extend_batch(batch)
            framed_rb.extend_batch(batch)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_interleaved_writes_of_two_processes_read_as_in_the_plain_storage(start_method):
    context = multiprocessing.get_context(start_method)
    template = batches(1, lengths=(3, 20), stack=4, n_step=2)[0].reshape(-1)
    plain_rb = ReplayBuffer(LazyTensorStorage(64)).init_from(template).share(context)
    framed_rb = ReplayBuffer(LazyTensorStorage(64, dedup_observations=True, frame_stack=4, spare_frames=256))
    framed_rb.init_from(template).share(context)
    both, barrier, pool = context.Lock(), context.Barrier(3), TrajectoryPool(mp_context=context)
    workers = [context.Process(target=write_twins, args=(plain_rb, framed_rb, both, worker, pool, barrier))
               for worker in range(2)]
    for worker in workers:
        worker.start()
    try:
        barrier.wait(timeout=60)
        while any(worker.is_alive() for worker in workers):
            with both:
                if len(framed_rb):
                    assert_same_storage(plain_rb.storage, framed_rb.storage)
    finally:
        for worker in workers:
            worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert framed_rb.write_count == 2 * ROUNDS * 12
    assert_same_storage(plain_rb.storage, framed_rb.storage)
    assert_counting_next_observations(framed_rb[:], 4)


def die_inside_a_write(rb, rows):
    rb.storage.position.advance = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
    rb.extend(rows)


@pytest.mark.timeout(60)
def test_a_writer_killed_inside_its_write_leaves_exact_frames():
    """The take-over drops the steps the dead write had begun to overwrite and moves the others
    to the front of the ring: the frames and pointers move with them."""
    context = multiprocessing.get_context("fork")
    stream = batches(1, lengths=(1000,), stack=4, frames_per_batch=30)[0][0]
    rbs = [ReplayBuffer(LazyTensorStorage(8)), ReplayBuffer(LazyTensorStorage(8, dedup_observations=True,
                                                                              frame_stack=4))]
    for rb in rbs:
        rb.extend(stream[:6])
        rb.extend(stream[6:10])  # full ring, cursor 2
        rb.share(context)
        writer = context.Process(target=die_inside_a_write, args=(rb, stream[10:13]))
        writer.start()
        writer.join(30)
        assert writer.exitcode == -signal.SIGKILL
        with rb.lock:  # taken over: the dead write's steps are dropped
            pass
    plain, framed = (rb.storage for rb in rbs)
    assert_same_storage(plain, framed)
    assert (len(framed), framed.position.generation) == (5, 1)
    assert framed.read()[OBS][:, -1, 0].tolist() == [5, 6, 7, 8, 9]  # 10, 11, 12 were being written over 2, 3, 4
    for rb in rbs:
        rb.extend(stream[13:20])
    assert_same_storage(plain, framed)


# ---------------------------------------------------------------------- arguments
def test_arguments_are_checked_at_construction():
    with pytest.raises(ConfigError, match="frame_stack=4 .* needs dedup_observations=True"):
        LazyTensorStorage(10, frame_stack=4)
    with pytest.raises(ConfigError, match="dedup_observations must be True or False"):
        LazyTensorStorage(10, dedup_observations="yes")
    with pytest.raises(ConfigError, match="spare_frames must be None or a positive int"):
        LazyTensorStorage(10, dedup_observations=True, spare_frames=0)


def test_data_without_an_observation_pair_or_stack_is_refused():
    with pytest.raises(ValueError, match="no such pair"):
        LazyTensorStorage(10, dedup_observations=True).extend(TensorDict({"value": torch.zeros(3)}, [3]))
    with pytest.raises(ValueError, match="frame_stack=4: no observation has 4 frames"):
        LazyTensorStorage(10, dedup_observations=True, frame_stack=4).extend(batches(1)[0].reshape(-1))


def test_observations_stored_as_frames_have_no_rows_view():
    plain, framed = twins(20)
    plain.extend(batches(1)[0].reshape(-1))
    framed.extend(batches(1)[0].reshape(-1))
    assert framed.keys() == plain.keys()  # the keys written, in their order; never the frames' own
    assert framed.rows_view(DONE).shape == (1, 12)
    with pytest.raises(KeyError, match="stored as frames"):
        framed.rows_view(OBS)


def test_pickled_storages_keep_their_frames():
    import pickle

    plain, framed = twins(20, stack=4)
    for batch in batches(3, lengths=(3, 8), stack=4):
        plain.extend(batch.reshape(-1))
        framed.extend(batch.reshape(-1))
    copy = pickle.loads(pickle.dumps(framed))
    assert_same_storage(plain, copy)
    assert np.isclose(copy.nbytes, framed.nbytes)
