import gc
import os

import pytest
import torch
from tensordict import TensorDict

from rlcollect.buffers import LazyMemmapStorage, LazyTensorStorage, saved_in_place
from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv, counting_env_factories


def counting_batches(num_batches, frames_per_batch=12, lengths=(3, 4)):
    """Collector batches ``[2, T]`` from two CountingEnvs of different episode lengths."""
    collector = Collector(GymEnv(counting_env_factories(list(lengths)), num_envs=2), frames_per_batch=frames_per_batch)
    batches = iter(collector)
    return [next(batches) for _ in range(num_batches)]


def single_env_batches(num_batches, frames_per_batch=6, length=4):
    collector = Collector(GymEnv(lambda: CountingEnv(length)), frames_per_batch=frames_per_batch)
    batches = iter(collector)
    return [next(batches) for _ in range(num_batches)]


def values(start, stop):
    """A flat TensorDict whose ``value`` runs from start to stop - 1."""
    value = torch.arange(start, stop)
    return TensorDict({"value": value, "nested": {"twice": 2 * value.float().unsqueeze(-1)}}, [stop - start])


# ---------------------------------------------------------------------- ndim 1
def test_ndim1_allocates_from_the_first_write_and_counts():
    storage = LazyTensorStorage(10)
    assert not storage.initialized and storage.shape is None and len(storage) == 0
    storage.extend(values(0, 4))
    assert storage.initialized and storage.shape == (10,)
    assert (len(storage), storage.cursor, storage.write_count) == (4, 4, 4)
    assert set(storage.keys()) == {"value", ("nested", "twice")}
    assert torch.equal(storage.read()["value"], torch.arange(4))
    assert storage.read()["nested", "twice"].shape == (4, 1)


def test_ndim1_ring_overwrites_the_oldest_and_keeps_the_newest():
    storage = LazyTensorStorage(10)
    for start in range(0, 28, 7):  # 28 values, in extends of 7
        storage.extend(values(start, start + 7))
    assert (len(storage), storage.cursor, storage.write_count) == (10, 8, 28)
    assert torch.equal(storage.read()["value"], torch.arange(18, 28))  # oldest first
    raw = storage.get(torch.arange(10))["value"]  # storage layout: the cursor splits newest | oldest
    assert torch.equal(raw, torch.tensor([20, 21, 22, 23, 24, 25, 26, 27, 18, 19]))
    assert torch.equal(storage.read()["nested", "twice"].squeeze(-1), 2 * torch.arange(18, 28).float())


def test_ndim1_single_env_collector_output():
    batches = single_env_batches(3)
    storage = LazyTensorStorage(100)
    for batch in batches:
        storage.extend(batch)
    assert storage.shape == (100,) and len(storage) == 18
    assert torch.equal(storage.read()["observation"].squeeze(-1), torch.tensor([0., 1, 2, 3] * 4 + [0., 1]))


def test_read_indexes_in_write_order():
    storage = LazyTensorStorage(10)
    storage.extend(values(0, 8))
    storage.extend(values(8, 13))
    assert storage.read(0)["value"] == 3  # oldest
    assert storage.read(-1)["value"] == 12
    assert torch.equal(storage.read(torch.tensor([1, 9]))["value"], torch.tensor([4, 12]))
    assert torch.equal(storage.read(slice(2, 5))["value"], torch.tensor([5, 6, 7]))


# ---------------------------------------------------------------------- ndim 2 and 3
def test_ndim2_each_env_row_stays_a_continuous_time_series():
    batches = counting_batches(3)  # [2, 6] each
    storage = LazyTensorStorage(20, ndim=2)
    storage.extend(batches[0])
    assert storage.shape == (2, 10) and (len(storage), storage.cursor, storage.write_count) == (12, 6, 12)
    storage.extend(batches[1])  # 6 steps: 4 fit, 2 wrap to the start of each row
    assert (len(storage), storage.cursor, storage.write_count) == (20, 2, 24)
    observation = storage.read()["observation"].squeeze(-1)  # storage layout [2, 10]
    time_series = torch.cat([b["observation"].squeeze(-1) for b in batches[:2]], dim=1)  # [2, 12]
    assert torch.equal(observation[:, 2:], time_series[:, 2:10])
    assert torch.equal(observation[:, :2], time_series[:, 10:12])
    assert torch.equal(observation[0], torch.tensor([1., 2, 2, 0, 1, 2, 0, 1, 2, 0]))
    assert torch.equal(observation[1], torch.tensor([2., 3, 2, 3, 0, 1, 2, 3, 0, 1]))


def test_ndim2_get_maps_element_indices_to_rows_and_time():
    batch = counting_batches(1)[0]  # [2, 6]
    storage = LazyTensorStorage(20, ndim=2)
    storage.extend(batch)  # filled = 6 of 10 steps per row
    got = storage.get(torch.tensor([0, 5, 6, 11]))  # row 0 t 0, row 0 t 5, row 1 t 0, row 1 t 5
    expected = torch.stack([batch["collector", "traj_ids"][r, t] for r, t in [(0, 0), (0, 5), (1, 0), (1, 5)]])
    assert torch.equal(got["collector", "traj_ids"], expected)


def test_ndim3_multisync_stack_layout():
    first, second = counting_batches(2), counting_batches(2, lengths=(5, 2))
    stacked = [torch.stack([a, b]) for a, b in zip(first, second)]  # [B=2, P=2, T=6]
    storage = LazyTensorStorage(48, ndim=3)
    for batch in stacked:
        storage.extend(batch)
    assert storage.shape == (2, 2, 12) and len(storage) == 48 and storage.cursor == 0
    observation = storage.read()["observation"].squeeze(-1)
    assert torch.equal(observation[1, 0], torch.tensor([0., 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]))
    assert torch.equal(observation[1, 1], torch.tensor([0., 1] * 6))


@pytest.mark.parametrize("ndim, shape, message", [
    (1, (2, 6), r"ndim=1.*\[N\].*got \[2, 6\]"),
    (2, (12,), r"ndim=2.*\[R0, T\].*got \[12\]"),
    (3, (2, 6), r"ndim=3.*got \[2, 6\]"),
])
def test_a_write_of_the_wrong_number_of_dims_raises(ndim, shape, message):
    data = TensorDict({"value": torch.zeros(shape)}, shape)
    with pytest.raises(ValueError, match=message):
        LazyTensorStorage(24, ndim=ndim).extend(data)


def test_a_write_that_does_not_fit_the_allocated_rows_raises():
    storage = LazyTensorStorage(20, ndim=2)
    storage.extend(TensorDict({"value": torch.zeros(2, 3)}, [2, 3]))
    with pytest.raises(ValueError, match=r"ndim=2.*leading dims \[2\].*got \[3, 3\].*\[2, 10\]"):
        storage.extend(TensorDict({"value": torch.zeros(3, 3)}, [3, 3]))
    with pytest.raises(ValueError, match="smaller than the 30 rows"):
        LazyTensorStorage(20, ndim=2).extend(TensorDict({"value": torch.zeros(30, 1)}, [30, 1]))


def test_a_write_with_other_keys_or_feature_shapes_raises():
    storage = LazyTensorStorage(10)
    storage.extend(values(0, 2))
    with pytest.raises(KeyError, match="missing.*nested"):
        storage.extend(TensorDict({"value": torch.zeros(2, dtype=torch.int64)}, [2]))
    with pytest.raises(ValueError, match=r"feature shape \[3\].*holds \[1\]"):
        storage.extend(TensorDict({"value": torch.zeros(2, dtype=torch.int64),
                                   "nested": {"twice": torch.zeros(2, 3)}}, [2]))
    assert storage.write_count == 2  # nothing written by the failed calls


@pytest.mark.parametrize("bad", [dict(max_size=0), dict(max_size=10, ndim=0), dict(max_size=2.5)])
def test_construction_validates_its_arguments(bad):
    with pytest.raises(ValueError, match="must be a positive int"):
        LazyTensorStorage(**bad)


# ---------------------------------------------------------------------- init_from and sharing
def test_init_from_allocates_from_a_template_without_writing():
    template = counting_batches(1)[0]
    storage = LazyTensorStorage(100, ndim=2).init_from(template)
    assert storage.initialized and storage.shape == (2, 50) and len(storage) == 0 and storage.write_count == 0
    assert storage.read()["observation"].shape == (2, 0, 1)
    with pytest.raises(RuntimeError, match="already initialized"):
        storage.init_from(template)
    with pytest.raises(ValueError, match="ndim=2.*template"):
        LazyTensorStorage(100, ndim=2).init_from(template.reshape(-1))


def test_share_needs_an_initialized_storage_and_moves_tensors_to_shared_memory():
    import multiprocessing

    storage = LazyTensorStorage(10)
    with pytest.raises(RuntimeError, match="init_from"):
        storage.share(multiprocessing.get_context("fork"))
    storage.init_from(values(0, 1)).share(multiprocessing.get_context("fork"))
    assert storage.position.shared
    assert all(tensor.is_shared() for tensor in storage._data.values(include_nested=True, leaves_only=True))
    storage.extend(values(0, 3))
    assert torch.equal(storage.read()["value"], torch.arange(3))


def test_state_dict_round_trip_with_data():
    storage = LazyTensorStorage(10)
    storage.extend(values(0, 8))
    storage.extend(values(8, 13))
    state = storage.state_dict(include_data=True)
    assert (state["cursor"], state["filled"], state["write_count"]) == (3, 10, 13)
    copy = LazyTensorStorage(10)
    copy.load_state_dict(state)
    assert (copy.cursor, len(copy), copy.write_count) == (3, 10, 13)
    assert torch.equal(copy.read()["value"], torch.arange(3, 13))


def test_inside_saved_in_place_a_full_storage_hands_out_its_tensors_and_any_other_a_copy(tmp_path):
    def shares(storage) -> bool:
        state = storage.state_dict(include_data=True)
        return state["data"]["value"].data_ptr() == storage._data["value"].data_ptr()

    full, not_full, memmap = LazyTensorStorage(10), LazyTensorStorage(20), LazyMemmapStorage(10)
    for storage in (full, not_full, memmap):
        storage.extend(values(0, 13))
    with saved_in_place():
        assert [shares(full), shares(not_full), shares(memmap)] == [True, False, False]
        torch.save(full.state_dict(include_data=True), tmp_path / "state.pt")
    assert not shares(full)  # outside: a copy, which later writes do not change
    loaded = LazyTensorStorage(10)
    loaded.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    assert (loaded.read() == full.read()).all() and (loaded.cursor, loaded.write_count) == (3, 13)


@pytest.mark.parametrize("ndim", [1, 2])
def test_a_state_of_a_storage_not_yet_full_holds_its_written_steps_and_goes_on_as_the_storage(tmp_path, ndim):
    writes = [batch if ndim == 2 else batch.reshape(-1) for batch in counting_batches(3)]  # [2, 6] each
    storage = LazyTensorStorage(1000, ndim=ndim)
    for batch in writes[:2]:
        storage.extend(batch)
    torch.save(storage.state_dict(include_data=True), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    assert state["data_shape"] == ([1000] if ndim == 1 else [2, 500])  # the storage's shape
    assert state["data"]["observation"].shape == ((24, 1) if ndim == 1 else (2, 12, 1))  # the steps written
    whole = dict(state, data=storage._data.clone().to_dict())  # as a state held it before the trimming
    written = storage.read()
    storage.extend(writes[2])
    for saved in (state, whole):
        resumed = LazyTensorStorage(1000, ndim=ndim)
        resumed.load_state_dict(saved)
        assert resumed.shape == storage.shape
        assert (len(resumed), resumed.cursor, resumed.write_count) == (24, 24 // ndim, 24)
        assert (resumed.read() == written).all()
        resumed.extend(writes[2])
        assert (resumed.read() == storage.read()).all() and len(resumed) == 36
    with pytest.raises(ValueError, match="state data has shape"):  # another max_size
        LazyTensorStorage(2000, ndim=ndim).load_state_dict(state)


# ---------------------------------------------------------------------- memmap
def test_memmap_storage_reopens_with_the_same_data_and_position(tmp_path):
    batches = counting_batches(3)
    storage = LazyMemmapStorage(20, scratch_dir=tmp_path / "rb", ndim=2)
    for batch in batches:
        storage.extend(batch)
    assert (len(storage), storage.cursor, storage.write_count) == (20, 8, 36)
    reopened = LazyMemmapStorage.load(tmp_path / "rb")
    assert (reopened.ndim, reopened.max_size, reopened.shape) == (2, 20, (2, 10))
    assert (len(reopened), reopened.cursor, reopened.write_count) == (20, 8, 36)
    assert (reopened.read() == storage.read()).all()
    assert torch.equal(reopened.read()["observation"], storage.read()["observation"])
    reopened.extend(batches[0][:, :2])  # writes continue at the reopened cursor
    assert (reopened.cursor, reopened.write_count) == (0, 40)
    assert torch.equal(reopened.read()["observation"][:, 8:], batches[0]["observation"][:, :2])


def test_memmap_storage_matches_the_in_memory_one():
    in_memory, memmap = LazyTensorStorage(10), LazyMemmapStorage(10)
    for start in range(0, 25, 5):
        in_memory.extend(values(start, start + 5))
        memmap.extend(values(start, start + 5))
    assert (in_memory.read() == memmap.read()).all()
    assert torch.equal(memmap.read()["value"], torch.arange(15, 25))


def test_memmap_refuses_to_overwrite_an_existing_storage(tmp_path):
    LazyMemmapStorage(10, scratch_dir=tmp_path).extend(values(0, 3))
    with pytest.raises(FileExistsError, match="LazyMemmapStorage.load"):
        LazyMemmapStorage(10, scratch_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="holds no LazyMemmapStorage"):
        LazyMemmapStorage.load(tmp_path / "elsewhere")


def test_memmap_temporary_scratch_dir_is_removed_with_the_storage():
    storage = LazyMemmapStorage(10)
    storage.extend(values(0, 3))
    scratch_dir = storage.scratch_dir
    assert (scratch_dir / "storage.json").exists()
    del storage
    gc.collect()
    assert not os.path.exists(scratch_dir)


def test_writes_of_dtypes_numpy_lacks_and_of_non_contiguous_sources():
    storage = LazyTensorStorage(10, ndim=2)
    data = TensorDict({"half": torch.arange(8.).reshape(4, 2).t().to(torch.bfloat16),  # [2, 4], a transposed view
                       "value": torch.arange(8).reshape(4, 2).t()}, [2, 4])
    assert not data["value"].is_contiguous()
    storage.extend(data)
    storage.extend(data[:, :2])  # one step fits, one wraps to the start of every row
    assert storage.shape == (2, 5) and storage.cursor == 1
    expected = torch.tensor([[2, 2, 4, 6, 0], [3, 3, 5, 7, 1]])
    assert torch.equal(storage.read()["value"], expected)
    assert torch.equal(storage.read()["half"].float(), expected.float())


@pytest.mark.parametrize("ndim", [1, 2])
def test_a_write_longer_than_the_ring_wraps_like_two_shorter_writes(ndim):
    """12 steps into a ring of 10 (starting at cursor 3) leave what 3 + 9 steps written in
    two extends would: the last 10 steps, the cursor and counts advanced by all 12."""
    def steps(first, count):
        data = values(first, first + count)
        return data if ndim == 1 else torch.stack([data, data], 0)

    max_size = 10 * (1 if ndim == 1 else 2)  # rows of 10
    one, two = LazyTensorStorage(max_size, ndim=ndim), LazyTensorStorage(max_size, ndim=ndim)
    for storage in (one, two):
        storage.extend(steps(0, 3))
    one.extend(steps(3, 12))
    two.extend(steps(3, 3))
    two.extend(steps(6, 9))
    assert one.position.cursor == two.position.cursor == 5
    assert one.write_count == two.write_count == 15 * (1 if ndim == 1 else 2)
    assert torch.equal(one.read()["value"], two.read()["value"])
    oldest_first = one.read()["value"] if ndim == 1 else one.read()["value"][0].roll(-one.position.cursor)
    assert oldest_first.tolist() == list(range(5, 15))
