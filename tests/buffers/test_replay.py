import itertools
import multiprocessing
import os
import signal

import pytest
import torch
from tensordict import TensorDict

from rlcollect import Collector, TrajectoryPool
from rlcollect.buffers import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    ReplayBufferEnsemble,
    SliceSampler,
)
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv, counting_env_factories

TRAJ_IDS = ("collector", "traj_ids")
BUFFER_ID = ("collector", "buffer_id")


def counting_batches(num_batches, frames_per_batch=12, lengths=(3, 4)):
    env = GymEnv(counting_env_factories(list(lengths)), num_envs=2)
    batches = iter(Collector(env, frames_per_batch=frames_per_batch))
    return [next(batches) for _ in range(num_batches)]


def values(start, stop, writer=-1):
    return TensorDict({"value": torch.arange(start, stop),
                       "writer": torch.full((stop - start,), writer)}, [stop - start])


# ---------------------------------------------------------------------- one process
def test_add_extend_len_write_count_and_reading_in_write_order():
    rb = ReplayBuffer(LazyTensorStorage(8))
    rb.add(values(0, 1)[0])
    rb.extend(values(1, 6))
    assert len(rb) == 6 and rb.write_count == 6
    rb.extend(values(6, 11))
    assert len(rb) == 8 and rb.write_count == 11
    assert torch.equal(rb[:]["value"], torch.arange(3, 11))
    assert rb[0]["value"] == 3 and rb[-1]["value"] == 10
    assert torch.equal(rb[torch.tensor([0, 2])]["value"], torch.tensor([3, 5]))


def test_add_one_step_to_each_row_of_an_ndim2_buffer():
    rb = ReplayBuffer(LazyTensorStorage(10, ndim=2))
    batch = counting_batches(1)[0]  # [2, 6]
    for t in range(3):
        rb.add(batch[:, t])
    assert rb.storage.shape == (2, 5) and len(rb) == 6
    assert torch.equal(rb[:]["observation"], batch["observation"][:, :3])


def test_sample_uses_a_random_sampler_by_default_and_applies_the_transform():
    rb = ReplayBuffer(LazyTensorStorage(20), batch_size=5,
                      transform=lambda data: data.set("value", data["value"] * 10))
    rb.extend(values(0, 4))
    assert isinstance(rb.sampler, RandomSampler)
    sample = rb.sample()
    assert sample.batch_size == (5,)
    assert set(sample["value"].tolist()) <= {0, 10, 20, 30}
    assert rb.sample(3).batch_size == (3,)
    assert torch.equal(rb[:]["value"], torch.arange(4))  # the transform touches samples only


def test_sample_needs_a_batch_size():
    rb = ReplayBuffer(LazyTensorStorage(20))
    rb.extend(values(0, 4))
    with pytest.raises(ValueError, match="needs a batch_size"):
        rb.sample()
    with pytest.raises(ValueError, match="batch_size must be None or a positive int"):
        rb.sample(0)


def test_iterating_yields_samples_forever():
    rb = ReplayBuffer(LazyTensorStorage(20), batch_size=3)
    rb.extend(values(0, 4))
    torch.manual_seed(0)
    samples = list(itertools.islice(rb, 5))
    assert [sample.batch_size for sample in samples] == [(3,)] * 5
    torch.manual_seed(0)
    assert all(torch.equal(sample["value"], rb.sample()["value"]) for sample in samples)  # sample() after sample()
    with pytest.raises(ValueError, match="iterating a ReplayBuffer needs its batch_size"):
        iter(ReplayBuffer(LazyTensorStorage(20)))


def test_update_priority_reaches_a_prioritized_sampler():
    rb = ReplayBuffer(LazyTensorStorage(4), PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0), batch_size=8)
    rb.extend(values(0, 4))
    rb.update_priority(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 1.0, 2.0, 4.0]))
    assert rb.sampler.probabilities(rb.storage).tolist() == [0.125, 0.125, 0.25, 0.5]
    sample = rb.sample()
    assert torch.equal(sample["value"], sample["index"])
    with pytest.raises(TypeError, match="update_priority needs a PrioritizedSampler.*RandomSampler"):
        ReplayBuffer(LazyTensorStorage(4)).update_priority(torch.tensor([0]), 1.0)


def test_state_dict_keeps_the_priorities():
    rb = ReplayBuffer(LazyTensorStorage(4), PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0))
    rb.extend(values(0, 4))
    rb.update_priority(torch.tensor([0, 3]), torch.tensor([3.0, 2.0]))
    restored = ReplayBuffer(LazyTensorStorage(4), PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0))
    restored.load_state_dict(rb.state_dict(include_storage=True))
    assert restored.sampler.probabilities(restored.storage).tolist() == [3 / 7, 1 / 7, 1 / 7, 2 / 7]
    assert restored.sampler.max_priority == 3.0


def test_construction_validates_its_arguments():
    with pytest.raises(TypeError, match="storage must be"):
        ReplayBuffer([])
    with pytest.raises(TypeError, match="sampler must be"):
        ReplayBuffer(LazyTensorStorage(4), sampler="random")
    with pytest.raises(ValueError, match="batch_size"):
        ReplayBuffer(LazyTensorStorage(4), batch_size=-1)


def collector_batches(num_envs, pool, lengths=(5, 6), num_batches=2, frames_per_batch=12):
    """Batches of one Collector drawing traj ids from ``pool`` (shared, as in MultiSync)."""
    if num_envs is None:
        env = GymEnv(lambda: CountingEnv(lengths[0]))
    else:
        env = GymEnv(counting_env_factories(list(lengths)), num_envs=num_envs)
    batches = iter(Collector(env, frames_per_batch=frames_per_batch, traj_pool=pool))
    return [next(batches) for _ in range(num_batches)]


def seed_table_layout(layout):
    """Two writes in one of the seed table's layouts, from B=2 collectors (P=2 envs each,
    or single envs) sharing one trajectory-id pool; and the ndim that stores them."""
    pool = TrajectoryPool()
    single = layout in ("[T]", "[B, T]", "[B*(T//B)]")
    workers = [collector_batches(None if single else 2, pool, lengths)
               for lengths in ((5, 6), (4, 7))]
    if layout in ("[T]", "[P, T]"):  # Collector, MultiAsync
        return workers[0], 1 if single else 2
    pairs = list(zip(*workers))  # per iteration: (worker 0 batch, worker 1 batch)
    if layout in ("[B, T]", "[B, P, T]"):  # MultiSync stack
        return [torch.stack(pair) for pair in pairs], 2 if single else 3
    if layout in ("[B*(T//B)]", "[B*P, T]"):  # MultiSync cat 0
        return [torch.cat(pair, 0) for pair in pairs], 1 if single else 2
    return [torch.cat(pair, -1) for pair in pairs], 2  # "[P, T*B]": MultiSync cat -1


@pytest.mark.parametrize("layout, storage_shape", [
    ("[T]", [48]), ("[P, T]", [2, 24]),
    ("[B, T]", [2, 24]), ("[B, P, T]", [2, 2, 12]),
    ("[B*(T//B)]", [48]), ("[B*P, T]", [4, 12]), ("[P, T*B]", [2, 24]),
])
def test_extend_and_slice_sample_every_collector_layout_of_the_seed_table(layout, storage_shape):
    writes, ndim = seed_table_layout(layout)
    rb = ReplayBuffer(LazyTensorStorage(48, ndim=ndim), SliceSampler(slice_len=4, strict_length=True), batch_size=32)
    for data in writes:
        rb.extend(data)
    assert list(rb.storage.shape) == storage_shape
    assert len(rb) == rb.write_count == sum(data.numel() for data in writes)
    sample = rb.sample()
    assert sample.batch_size == (32,)
    for piece in sample.split(4):
        assert piece[TRAJ_IDS].unique().numel() == 1
        observation = piece["observation"].squeeze(-1)
        assert torch.equal(observation, observation[0] + torch.arange(4.0))


def test_a_buffer_of_another_ndim_rejects_the_layout():
    writes, ndim = seed_table_layout("[B, P, T]")
    with pytest.raises(ValueError, match=r"ndim=2.*got \[2, 2, 6\]"):
        ReplayBuffer(LazyTensorStorage(48, ndim=2)).extend(writes[0])


def test_state_dict_restores_the_position_and_optionally_the_data():
    rb = ReplayBuffer(LazyTensorStorage(10))
    rb.extend(values(0, 7))
    rb.extend(values(7, 12))
    assert rb.state_dict() == {"storage": {"cursor": 2, "filled": 10, "write_count": 12}}
    restored = ReplayBuffer(LazyTensorStorage(10))
    restored.load_state_dict(rb.state_dict(include_storage=True))
    assert restored.write_count == 12 and len(restored) == 10
    assert torch.equal(restored[:]["value"], torch.arange(2, 12))
    restored.extend(values(12, 13))
    assert torch.equal(restored[:]["value"], torch.arange(3, 13))


# ---------------------------------------------------------------------- ensemble
def filled_buffer(start, stop, writer, **kwargs):
    rb = ReplayBuffer(LazyTensorStorage(100), **kwargs)
    rb.extend(values(start, stop, writer))
    return rb


def test_ensemble_splits_each_sample_evenly_across_its_members():
    ensemble = ReplayBufferEnsemble(filled_buffer(0, 10, 0), filled_buffer(100, 110, 1), batch_size=8)
    sample = ensemble.sample()
    assert sample.batch_size == (8,)
    assert torch.equal(sample[BUFFER_ID], torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    assert torch.equal(sample["writer"], sample[BUFFER_ID])  # each row's id names its member
    assert bool((sample["value"][:4] < 10).all()) and bool((sample["value"][4:] >= 100).all())
    assert len(ensemble) == 20 and ensemble.write_count == 20
    with pytest.raises(ValueError, match="multiple of the 2 buffers"):
        ensemble.sample(5)


def test_ensemble_with_slice_samplers_concatenates_flat_slices():
    members = [ReplayBuffer(LazyTensorStorage(100, ndim=2), SliceSampler(slice_len=3)) for _ in range(2)]
    for member, lengths in zip(members, [(3, 4), (5, 6)]):
        for batch in counting_batches(2, lengths=lengths):
            member.extend(batch)
    sample = ReplayBufferEnsemble(*members, batch_size=24).sample()
    assert sample.batch_dims == 1 and sample.shape[0] <= 24
    assert int(sample["is_init"].sum()) == 8  # 4 slices from each member
    assert set(sample[BUFFER_ID].tolist()) == {0, 1}


def test_ensemble_can_draw_one_member_per_sample():
    ensemble = ReplayBufferEnsemble(filled_buffer(0, 10, 0), filled_buffer(100, 110, 1),
                                    sample_from_all=False, batch_size=6)
    members = set()
    for _ in range(20):
        sample = ensemble.sample()
        assert sample.batch_size == (6,) and sample[BUFFER_ID].unique().numel() == 1
        members.add(int(sample[BUFFER_ID][0]))
    assert members == {0, 1}
    only_second = ReplayBufferEnsemble(filled_buffer(0, 10, 0), filled_buffer(100, 110, 1),
                                       sample_from_all=False, weights=[0.0, 1.0])
    assert bool((only_second.sample(5)["writer"] == 1).all())
    with pytest.raises(ValueError, match="sample_from_all=False only"):
        ReplayBufferEnsemble(filled_buffer(0, 10, 0), weights=[1.0])
    with pytest.raises(ValueError, match="at least one ReplayBuffer"):
        ReplayBufferEnsemble()


# ---------------------------------------------------------------------- shared with worker processes
ROWS_PER_EXTEND = 10
EXTENDS_PER_WORKER = 40


def extend_from_worker(rb, writer, barrier):
    barrier.wait(timeout=30)  # both workers write at the same time
    for k in range(EXTENDS_PER_WORKER):
        start = (writer * EXTENDS_PER_WORKER + k) * ROWS_PER_EXTEND
        rb.extend(values(start, start + ROWS_PER_EXTEND, writer))


def run_two_writers(rb, context):
    rb.init_from(values(0, 1)).share(context)
    barrier = context.Barrier(3)
    workers = [context.Process(target=extend_from_worker, args=(rb, writer, barrier)) for writer in range(2)]
    for worker in workers:
        worker.start()
    try:
        barrier.wait(timeout=30)
        total = 2 * EXTENDS_PER_WORKER * ROWS_PER_EXTEND
        while any(worker.is_alive() for worker in workers):
            if len(rb):  # sampling while the workers write: only written, whole extends
                sample = rb.sample(16)
                assert bool(((sample["value"] >= 0) & (sample["value"] < total)).all())
                assert torch.equal(sample["writer"], sample["value"] // (EXTENDS_PER_WORKER * ROWS_PER_EXTEND))
    finally:
        for worker in workers:
            worker.join(timeout=30)
    assert [worker.exitcode for worker in workers] == [0, 0]
    return total


def assert_every_element_written_once(rb, total):
    assert rb.write_count == total and len(rb) == total
    stored = rb[:]["value"]
    assert torch.equal(stored.sort().values, torch.arange(total))  # none lost, none duplicated
    blocks = stored.view(-1, ROWS_PER_EXTEND)  # each extend landed whole, in one piece
    assert torch.equal(blocks - blocks[:, :1], torch.arange(ROWS_PER_EXTEND).expand_as(blocks))
    assert bool((blocks[:, 0] % ROWS_PER_EXTEND == 0).all())


@pytest.mark.timeout(60)
def test_two_forked_processes_extend_one_shared_buffer():
    rb = ReplayBuffer(LazyTensorStorage(1000))
    total = run_two_writers(rb, multiprocessing.get_context("fork"))
    assert_every_element_written_once(rb, total)


@pytest.mark.timeout(60)
def test_two_forked_processes_extend_one_shared_memmap_buffer(tmp_path):
    rb = ReplayBuffer(LazyMemmapStorage(1000, scratch_dir=tmp_path / "rb"))
    total = run_two_writers(rb, multiprocessing.get_context("fork"))
    assert_every_element_written_once(rb, total)
    reopened = LazyMemmapStorage.load(tmp_path / "rb")
    assert reopened.write_count == total and torch.equal(reopened.read()["value"], rb[:]["value"])


@pytest.mark.timeout(60)
def test_two_spawned_processes_extend_one_shared_buffer():
    rb = ReplayBuffer(LazyTensorStorage(1000), SliceSampler(slice_len=2, traj_key="writer"))
    total = run_two_writers(rb, multiprocessing.get_context("spawn"))
    assert_every_element_written_once(rb, total)


def die_inside_a_write(rb, rows):
    """Write ``rows`` into the shared buffer and be SIGKILLed after the data is copied, before
    the write is accounted for: a worker killed in the middle of its write, holding the lock."""
    rb.storage.position.advance = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
    rb.extend(rows)


def hold_the_lock_and_die(rb):
    with rb.lock:
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_writer_killed_inside_its_write_leaves_neither_a_held_lock_nor_half_written_steps(start_method):
    context = multiprocessing.get_context(start_method)
    rb = ReplayBuffer(LazyTensorStorage(8), PrioritizedSampler(max_capacity=8, alpha=0.6, beta=0.4))
    rb.extend(values(0, 10))  # full ring: positions 2..7 hold 2..7, positions 0, 1 hold 8, 9; cursor 2
    rb.share(context)
    writer = context.Process(target=die_inside_a_write, args=(rb, values(100, 103)))  # overwrites positions 2, 3, 4
    writer.start()
    writer.join(30)
    assert writer.exitcode == -signal.SIGKILL and rb.lock.holder == writer.pid  # died holding the lock
    # the next reader takes the lock over and drops the three steps the dead write had overwritten
    assert rb[:]["value"].tolist() == [5, 6, 7, 8, 9]
    assert (rb.storage.cursor, len(rb), rb.write_count, rb.storage.position.generation) == (5, 5, 10, 1)
    assert rb.lock.holder == 0
    assert sorted(rb.sample(64)["value"].unique().tolist()) == [5, 6, 7, 8, 9]  # priorities start over
    rb.extend(values(20, 21))  # and writes go on where the kept steps end
    assert rb[:]["value"].tolist() == [5, 6, 7, 8, 9, 20]


@pytest.mark.timeout(60)
def test_a_process_killed_holding_the_lock_outside_a_write_changes_nothing():
    context = multiprocessing.get_context("fork")
    rb = ReplayBuffer(LazyTensorStorage(8))
    rb.extend(values(0, 6))
    rb.share(context)
    holder = context.Process(target=hold_the_lock_and_die, args=(rb,))
    holder.start()
    holder.join(30)
    rb.extend(values(6, 7))  # the lock is taken over; nothing was being written, nothing is dropped
    assert rb[:]["value"].tolist() == list(range(7)) and rb.storage.position.generation == 0


def test_sharing_an_uninitialized_buffer_raises():
    with pytest.raises(RuntimeError, match="init_from"):
        ReplayBuffer(LazyTensorStorage(10)).share(multiprocessing.get_context("fork"))
