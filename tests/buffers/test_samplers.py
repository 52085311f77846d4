import pytest
import torch
from tensordict import TensorDict

from rlcollect.buffers import (
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv, counting_env_factories

TRAJ_IDS = ("collector", "traj_ids")
MASK = ("collector", "mask")


def counting_batches(num_batches, frames_per_batch=12, lengths=(3, 4), **collector_kwargs):
    """Collector batches ``[2, T]``; observation = step count since the env's reset."""
    env = GymEnv(counting_env_factories(list(lengths)), num_envs=2)
    batches = iter(Collector(env, frames_per_batch=frames_per_batch, **collector_kwargs))
    return [next(batches) for _ in range(num_batches)]


def with_row(batch):
    """Add ``row``: which env row a step was written to (a slice must stay in one)."""
    batch = batch.clone()
    batch.set("row", torch.arange(batch.shape[0]).unsqueeze(1).expand(batch.shape).clone())
    return batch


def filled_storage(lengths=(3, 4), num_batches=3, ndim=1, max_size=100, **collector_kwargs):
    storage = LazyTensorStorage(max_size, ndim=ndim)
    for batch in counting_batches(num_batches, lengths=lengths, **collector_kwargs):
        storage.extend(batch.reshape(-1) if ndim == 1 else with_row(batch))
    return storage


def split_slices(sample):
    """The sample cut where is_init is set: exactly the sampler's slices."""
    starts = sample["is_init"].nonzero().squeeze(1).tolist()
    ends = starts[1:] + [sample.shape[0]]
    return [sample[start:end] for start, end in zip(starts, ends)]


def assert_valid_slice(piece, slice_len):
    """One trajectory, consecutive steps, at most slice_len long."""
    observation = piece["observation"].squeeze(-1)
    assert 1 <= piece.shape[0] <= slice_len
    if TRAJ_IDS in piece.keys(True):
        assert piece[TRAJ_IDS].unique().numel() == 1, piece[TRAJ_IDS]
    if "row" in piece.keys():
        assert piece["row"].unique().numel() == 1
    assert torch.equal(observation, observation[0] + torch.arange(piece.shape[0]).float()), observation
    assert not piece["next", "done"][:-1].any()  # a trajectory ends only at the slice's last step


# ---------------------------------------------------------------------- RandomSampler
def test_random_sampler_draws_stored_elements_uniformly():
    storage = LazyTensorStorage(10)
    storage.extend(TensorDict({"value": torch.arange(6)}, [6]))
    index = RandomSampler().sample_index(storage, 3000)
    assert index.min() == 0 and index.max() == 5
    assert torch.bincount(index).min() > 400  # ~500 each
    sample = RandomSampler().sample(storage, 7)
    assert sample.batch_size == (7,) and bool((sample["value"] < 6).all())


def test_sampling_an_empty_storage_raises():
    storage = LazyTensorStorage(10).init_from(TensorDict({"value": torch.zeros(1)}, [1]))
    with pytest.raises(RuntimeError, match="empty replay buffer"):
        RandomSampler().sample(storage, 4)


# ---------------------------------------------------------------------- SliceSampler arguments
@pytest.mark.parametrize("kwargs, message", [
    (dict(), "exactly one of num_slices or slice_len"),
    (dict(num_slices=2, slice_len=4), "exactly one of num_slices or slice_len"),
    (dict(slice_len=0), "slice_len must be a positive int"),
    (dict(num_slices=1.5), "num_slices must be a positive int"),
    (dict(slice_len=4, pad_output=True, strict_length=True), "pad_output=True.*strict_length=False"),
    (dict(slice_len=4, traj_key=None, end_key=None), "traj_key or end_key"),
])
def test_slice_sampler_validates_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SliceSampler(**kwargs)


def test_num_slices_and_slice_len_determine_each_other_with_batch_size():
    assert SliceSampler(num_slices=4).slice_shape(32) == (4, 8)
    assert SliceSampler(slice_len=8).slice_shape(32) == (4, 8)
    with pytest.raises(ValueError, match="batch_size=30 must be a multiple of SliceSampler's slice_len=8"):
        SliceSampler(slice_len=8).slice_shape(30)


# ---------------------------------------------------------------------- slices on CountingEnv data
@pytest.mark.parametrize("ndim", [1, 2])
def test_every_slice_is_one_trajectory_of_consecutive_steps(ndim):
    storage = filled_storage(lengths=(3, 7), num_batches=4, ndim=ndim)
    sampler = SliceSampler(slice_len=5)
    for _ in range(20):
        sample = sampler.sample(storage, 40)
        assert sample.batch_dims == 1 and sample.shape[0] <= 40
        pieces = split_slices(sample)
        assert len(pieces) == 8  # is_init marks exactly the 8 slice starts
        for piece in pieces:
            assert_valid_slice(piece, 5)
            # strict_length=False: a short trajectory gives a slice of all of it
            assert piece.shape[0] == 5 or piece[TRAJ_IDS][0] != piece[TRAJ_IDS][0] + 1
    sizes = {piece.shape[0] for _ in range(20) for piece in split_slices(sampler.sample(storage, 40))}
    assert 5 in sizes and 3 in sizes  # env 0 has 3-step episodes


def test_short_slices_keep_the_whole_short_trajectory():
    storage = filled_storage(lengths=(3, 3), num_batches=2)  # every episode is 3 steps
    sample = SliceSampler(num_slices=4).sample(storage, 40)  # slice_len 10
    assert sample.shape == (12,)
    for piece in split_slices(sample):
        assert piece.shape[0] == 3
        assert torch.equal(piece["observation"].squeeze(-1), torch.tensor([0., 1, 2]))


def test_strict_length_draws_only_long_enough_trajectories():
    storage = filled_storage(lengths=(3, 7), num_batches=4)
    sampler = SliceSampler(slice_len=5, strict_length=True)
    for _ in range(10):
        sample = sampler.sample(storage, 40)
        assert sample.shape == (40,)
        assert bool(sample["is_init"].view(8, 5)[:, 0].all()) and not sample["is_init"].view(8, 5)[:, 1:].any()
        for piece in sample.split(5):
            assert_valid_slice(piece, 5)
            assert piece["observation"].max() <= 6  # from the 7-step env, never the 3-step one
    # flattened [2, 6] batches: a 7-step episode is cut by each batch's row boundary
    with pytest.raises(RuntimeError, match="no stored trajectory has slice_len=8 steps.*longest has 6"):
        SliceSampler(slice_len=8, strict_length=True).sample(storage, 16)


def test_pad_output_repeats_the_last_real_step_and_adds_a_mask():
    storage = filled_storage(lengths=(3, 3), num_batches=2)
    sample = SliceSampler(slice_len=5, pad_output=True).sample(storage, 20)
    assert sample.shape == (20,)
    observation = sample["observation"].squeeze(-1).view(4, 5)
    assert torch.equal(observation, torch.tensor([[0., 1, 2, 2, 2]] * 4))
    assert torch.equal(sample[MASK].view(4, 5), torch.tensor([[True, True, True, False, False]] * 4))
    assert sample[MASK].dtype == torch.bool
    assert torch.equal(sample["is_init"].view(4, 5), torch.tensor([[True, False, False, False, False]] * 4))


def test_pad_output_on_long_trajectories_pads_nothing():
    storage = filled_storage(lengths=(20, 20), num_batches=2, ndim=2)  # one 12-step run per row
    sample = SliceSampler(slice_len=4, pad_output=True).sample(storage, 16)
    assert bool(sample[MASK].all())
    for piece in sample.split(4):
        assert_valid_slice(piece, 4)


def test_is_init_marks_slice_starts_or_ed_with_the_stored_resets():
    storage = filled_storage(lengths=(20, 20), num_batches=2)  # 12-step rows: one episode each
    sample = SliceSampler(slice_len=4, strict_length=True).sample(storage, 400)
    starts_of_slices = torch.zeros(400, dtype=torch.bool)
    starts_of_slices[::4] = True
    assert torch.equal(sample["is_init"], starts_of_slices)  # slices start mid-episode too
    stored_reset = sample["observation"].squeeze(-1) == 0
    assert bool(sample["is_init"][stored_reset].all())  # a stored reset stays marked


def test_slices_cut_short_of_their_trajectory_end_are_marked_truncated():
    storage = filled_storage(lengths=(3, 9), num_batches=2, ndim=2)
    sample = SliceSampler(slice_len=3).sample(storage, 300)
    for piece in split_slices(sample):
        last = piece[-1]
        assert bool(last["next", "done"])  # every slice ends done: its episode's real end, or a cut
        assert bool(last["next", "truncated"]) != bool(last["next", "terminated"])  # never both
        assert not piece["next", "truncated"][:-1].any() and not piece["next", "done"][:-1].any()
    assert not storage.read()["next", "truncated"].any()  # marks go to the sample, not the storage
    unmarked = SliceSampler(slice_len=3, truncated_key=None).sample(storage, 300)
    assert not unmarked["next", "truncated"].any()


def test_traj_key_is_detected_collector_ids_first_then_episode_then_done():
    storage = filled_storage()
    sampler = SliceSampler(slice_len=2)
    sampler.sample(storage, 4)
    assert sampler._boundary_key == (TRAJ_IDS, True)

    episode_storage = LazyTensorStorage(100)
    for batch in counting_batches(2):
        flat = batch.reshape(-1)
        flat.set("episode", flat.pop(TRAJ_IDS))
        episode_storage.extend(flat)
    sampler = SliceSampler(slice_len=2)
    sampler.sample(episode_storage, 4)
    assert sampler._boundary_key == ("episode", True)

    done_storage = filled_storage(track_traj_ids=False)
    assert TRAJ_IDS not in done_storage.keys()
    sampler = SliceSampler(slice_len=2)
    sampler.sample(done_storage, 4)
    assert sampler._boundary_key == (("next", "done"), False)

    sampler = SliceSampler(slice_len=2, traj_key="nope")  # not stored: boundaries from the end key, as detection does
    sampler.sample(storage, 4)
    assert sampler._boundary_key == (("next", "done"), False)
    with pytest.raises(KeyError, match="no trajectory key.*nope.*nor end_key.*nothing"):
        SliceSampler(slice_len=2, traj_key="nope", end_key="nothing").sample(storage, 4)
    bare = LazyTensorStorage(10)
    bare.extend(TensorDict({"value": torch.zeros(4)}, [4]))
    with pytest.raises(KeyError, match="no trajectory key"):
        SliceSampler(slice_len=2).sample(bare, 4)


def single_env_storage(length, num_batches, track_traj_ids=True):
    collector = Collector(GymEnv(lambda: CountingEnv(length)), frames_per_batch=10, track_traj_ids=track_traj_ids)
    batches = iter(collector)
    storage = LazyTensorStorage(100)
    for _ in range(num_batches):
        storage.extend(next(batches))
    return storage


@pytest.mark.parametrize("ndim", [1, 2])
def test_boundaries_rebuilt_from_done_give_valid_slices(ndim):
    if ndim == 1:  # one env: its steps follow each other in the buffer
        storage = single_env_storage(7, num_batches=4, track_traj_ids=False)
    else:  # each env its own row
        storage = filled_storage(lengths=(3, 7), num_batches=4, ndim=2, track_traj_ids=False)
    assert TRAJ_IDS not in storage.keys()
    sampler = SliceSampler(slice_len=5)
    for _ in range(20):
        sample = sampler.sample(storage, 40)
        pieces = split_slices(sample)
        assert len(pieces) == 8
        for piece in pieces:
            assert_valid_slice(piece, 5)


def _one_long_trajectory(start, stop, traj_ids=True):
    value = torch.arange(start, stop)
    data = {"observation": value.float().unsqueeze(-1), "is_init": value == 0,
            "next": {"done": torch.zeros(stop - start, dtype=torch.bool)}}
    if traj_ids:
        data["collector"] = {"traj_ids": torch.zeros(stop - start, dtype=torch.int64)}
    return TensorDict(data, [stop - start])


@pytest.mark.parametrize("traj_ids", [True, False])
def test_ndim1_slices_never_cross_the_write_seam_but_do_cross_the_array_end(traj_ids):
    storage = LazyTensorStorage(10)
    storage.extend(_one_long_trajectory(0, 8, traj_ids))
    storage.extend(_one_long_trajectory(8, 15, traj_ids))  # positions 0-4 hold 10-14, 5-9 hold 5-9
    assert storage.cursor == 5
    assert torch.equal(storage.get(torch.arange(10))["observation"].squeeze(-1),
                       torch.tensor([10., 11, 12, 13, 14, 5, 6, 7, 8, 9]))
    sampler = SliceSampler(slice_len=4, strict_length=True)
    first_steps = set()
    for _ in range(50):
        sample = sampler.sample(storage, 40)
        for piece in sample.split(4):
            observation = piece["observation"].squeeze(-1)
            assert torch.equal(observation, observation[0] + torch.arange(4.0))  # never 14 -> 5
            first_steps.add(int(observation[0]))
    assert first_steps == set(range(5, 12))  # every start that fits, 8 -> 11 spans the array end


def test_ndim2_slices_stay_in_their_row_even_with_equal_ids_across_rows():
    storage = LazyTensorStorage(40, ndim=2)
    rows = [_one_long_trajectory(0, 10), _one_long_trajectory(100, 110)]  # both traj id 0
    storage.extend(torch.stack(rows))
    sampler = SliceSampler(slice_len=4)
    for _ in range(20):
        for piece in split_slices(sampler.sample(storage, 40)):
            observation = piece["observation"].squeeze(-1)
            assert torch.equal(observation, observation[0] + torch.arange(float(piece.shape[0])))
            assert piece.shape[0] == 4 or observation[-1] in (9.0, 109.0)


def test_ndim3_stacked_batches_give_valid_slices():
    first, second = counting_batches(3), counting_batches(3, lengths=(5, 2))  # colliding traj ids
    storage = LazyTensorStorage(48, ndim=3)
    for a, b in zip(first, second):
        storage.extend(torch.stack([with_row(a), with_row(b).update({"row": with_row(b)["row"] + 2})]))
    assert storage.shape == (2, 2, 12)
    sampler = SliceSampler(num_slices=6)
    for _ in range(20):
        sample = sampler.sample(storage, 30)
        pieces = split_slices(sample)
        assert len(pieces) == 6
        for piece in pieces:
            assert_valid_slice(piece, 5)


def test_segmentation_is_cached_until_the_storage_is_written():
    storage = filled_storage()
    sampler = SliceSampler(slice_len=2)
    sampler.sample(storage, 4)
    segments = sampler.segments(storage)
    sampler.sample(storage, 4)
    assert sampler.segments(storage) is segments
    storage.extend(counting_batches(1)[0].reshape(-1))
    assert sampler.segments(storage) is not segments


# ---------------------------------------------------------------------------- edge cases (TorchRL's)
def flat_storage(num_steps, episode_length, capacity=100, extra=None):
    """A flat storage of ``num_steps`` steps of episodes of ``episode_length`` (observation = step index)."""
    from rlcollect import LazyTensorStorage

    steps = torch.arange(num_steps)
    done = (steps % episode_length) == episode_length - 1
    data = TensorDict({"observation": steps.float(), "next": {"done": done, "truncated": torch.zeros_like(done)}},
                      batch_size=[num_steps])
    if extra is not None:
        data.set(("next", "done"), extra(done))
    storage = LazyTensorStorage(capacity)
    storage.extend(data)
    return storage


def test_a_traj_key_not_in_the_storage_falls_back_to_the_end_key():
    storage = flat_storage(12, 4)
    sampler = SliceSampler(slice_len=4, traj_key=("collector", "traj_ids"), strict_length=True)
    torch.manual_seed(0)
    sample = sampler.sample(storage, 12)
    # every slice is a whole episode: starts at a multiple of 4
    assert (sample["observation"].reshape(3, 4)[:, 0] % 4 == 0).all()


def test_an_end_flag_with_extra_per_step_dims_is_rejected():
    storage = flat_storage(12, 4, extra=lambda done: done[:, None].expand(12, 5).clone())
    with pytest.raises(ValueError, match=r"one per step.*extra dims \[5\]"):
        SliceSampler(slice_len=4).sample(storage, 8)
    storage = flat_storage(12, 4, extra=lambda done: done[:, None].clone())  # [N, 1] is one per step
    assert SliceSampler(slice_len=4).sample(storage, 8).batch_size == (8,)


def test_pad_output_marks_truncated_on_the_last_real_step_only():
    storage = flat_storage(6, 2)  # episodes of 2 steps, slices of 4: every slice is padded
    sampler = SliceSampler(slice_len=4, pad_output=True)
    sample = sampler.sample(storage, 8)
    mask = sample["collector", "mask"].reshape(2, 4)
    assert mask.tolist() == [[True, True, False, False]] * 2
    truncated = sample["next", "truncated"].reshape(2, 4)
    assert not truncated[~mask].any()  # never on padding
    # these slices end with their episode (stored done): nothing to mark as truncated
    assert not truncated.any()


def test_pad_output_truncates_a_cut_slice_at_its_last_real_step():
    from rlcollect import LazyTensorStorage

    # one trajectory of 3 steps still running (no done): a slice of 4 is its 3 real steps + 1 pad
    data = TensorDict({"observation": torch.arange(3).float(),
                       "next": {"done": torch.zeros(3, dtype=torch.bool),
                                "truncated": torch.zeros(3, dtype=torch.bool)}},
                      batch_size=[3])
    storage = LazyTensorStorage(10)
    storage.extend(data)
    sample = SliceSampler(slice_len=4, pad_output=True).sample(storage, 4)
    assert sample["collector", "mask"].tolist() == [True, True, True, False]
    assert sample["next", "truncated"].tolist() == [False, False, True, False]


# ---------------------------------------------------------------------- SliceSamplerWithoutReplacement
def episodes_storage(lengths, capacity=100):
    """A flat storage of consecutive episodes of ``lengths`` steps; observation = step index
    in the storage (so a sample tells exactly which stored steps it holds)."""
    storage = LazyTensorStorage(capacity)
    storage.extend(episodes(lengths))
    return storage


def episodes(lengths, start=0):
    total = sum(lengths)
    done = torch.zeros(total, dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    return TensorDict({"observation": torch.arange(start, start + total).float(),
                       "next": {"done": done, "truncated": torch.zeros(total, dtype=torch.bool)}}, [total])


def slices_of(sample):
    return [tuple(int(x) for x in piece["observation"]) for piece in split_slices(sample)]


# runs of 5, 7 and 2 steps cut into slices of 3 steps
LENGTHS = (5, 7, 2)
ALL_SLICES = {(0, 1, 2), (3, 4), (5, 6, 7), (8, 9, 10), (11,), (12, 13)}
WHOLE_SLICES = {(0, 1, 2), (5, 6, 7), (8, 9, 10)}


def test_without_replacement_hands_out_every_slice_once_per_epoch():
    storage = episodes_storage(LENGTHS)
    sampler = SliceSamplerWithoutReplacement(slice_len=3)
    torch.manual_seed(0)
    for _ in range(3):  # three epochs of 6 slices: 4, then the 2 left
        first, rest = sampler.sample(storage, 12), sampler.sample(storage, 12)
        assert [len(slices_of(first)), len(slices_of(rest))] == [4, 2]
        assert set(slices_of(first)) | set(slices_of(rest)) == ALL_SLICES
        steps = torch.cat([first["observation"], rest["observation"]])
        assert torch.equal(steps.sort().values, torch.arange(14.0))  # every stored step exactly once


def test_without_replacement_strict_length_drops_the_short_slices():
    storage = episodes_storage(LENGTHS)
    sampler = SliceSamplerWithoutReplacement(slice_len=3, strict_length=True)
    sample = sampler.sample(storage, 12)
    assert sample.shape == (9,) and set(slices_of(sample)) == WHOLE_SLICES  # 3 whole slices: the epoch
    assert set(slices_of(sampler.sample(storage, 6))) < WHOLE_SLICES  # a new epoch
    with pytest.raises(RuntimeError, match=r"SliceSamplerWithoutReplacement\(strict_length=True\).*longest has 7"):
        SliceSamplerWithoutReplacement(slice_len=8, strict_length=True).sample(storage, 16)


def test_without_replacement_unshuffled_follows_time_order_with_slice_marks():
    storage = episodes_storage(LENGTHS)
    sampler = SliceSamplerWithoutReplacement(num_slices=4, shuffle=False)
    sample = sampler.sample(storage, 12)  # slice_len 3
    assert slices_of(sample) == [(0, 1, 2), (3, 4), (5, 6, 7), (8, 9, 10)]
    assert sample["is_init"].nonzero().squeeze(1).tolist() == [0, 3, 5, 8]
    # cut short of the trajectory's end: 2, 7 and 10; 4 ends its episode (stored done)
    assert sample["next", "truncated"].nonzero().squeeze(1).tolist() == [2, 7, 10]
    assert sample["next", "done"].nonzero().squeeze(1).tolist() == [2, 4, 7, 10]
    assert slices_of(sampler.sample(storage, 12)) == [(11,), (12, 13)]
    assert slices_of(sampler.sample(storage, 12)) == [(0, 1, 2), (3, 4), (5, 6, 7), (8, 9, 10)]


def test_without_replacement_pads_short_slices():
    storage = episodes_storage(LENGTHS)
    sample = SliceSamplerWithoutReplacement(slice_len=3, pad_output=True, shuffle=False).sample(storage, 18)
    assert sample["observation"].tolist() == [0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9, 10, 11, 11, 11, 12, 13, 13]
    assert sample[MASK].view(6, 3).tolist() == [[True, True, True], [True, True, False], [True, True, True],
                                                [True, True, True], [True, False, False], [True, True, False]]


def test_without_replacement_is_reproducible_with_torch_manual_seed():
    storage = episodes_storage(LENGTHS)

    def draws():
        torch.manual_seed(3)
        sampler = SliceSamplerWithoutReplacement(slice_len=3)
        return [slices_of(sampler.sample(storage, 6)) for _ in range(6)]

    assert draws() == draws()


def test_a_write_starts_a_new_epoch():
    storage = episodes_storage(LENGTHS)
    sampler = SliceSamplerWithoutReplacement(slice_len=3)
    assert len(slices_of(sampler.sample(storage, 12))) == 4  # 2 slices left in this epoch
    storage.extend(episodes([3], start=14))  # one more slice: (14, 15, 16)
    first, rest = sampler.sample(storage, 12), sampler.sample(storage, 12)
    assert [len(slices_of(first)), len(slices_of(rest))] == [4, 3]  # a whole new epoch of 7
    assert set(slices_of(first)) | set(slices_of(rest)) == ALL_SLICES | {(14, 15, 16)}


def test_without_replacement_on_an_ndim2_storage_covers_every_stored_step_once():
    storage = filled_storage(lengths=(3, 7), num_batches=4, ndim=2)
    sampler = SliceSamplerWithoutReplacement(slice_len=4)
    num_slices = int(sum(-(-length // 4) for length in sampler.segments(storage).lengths.tolist()))
    sample = torch.cat([sampler.sample(storage, 4) for _ in range(num_slices)])  # one slice each
    for piece in split_slices(sample):
        assert_valid_slice(piece, 4)
    stored = storage.read().reshape(-1)

    def steps(data):
        return sorted(zip(data["row"].tolist(), data[TRAJ_IDS].tolist(), data["observation"].squeeze(-1).tolist()))

    assert steps(sample) == steps(stored)  # every stored step, once


def test_without_replacement_validates_like_slice_sampler():
    with pytest.raises(ValueError, match="exactly one of num_slices or slice_len"):
        SliceSamplerWithoutReplacement()
    assert "shuffle=False" in repr(SliceSamplerWithoutReplacement(slice_len=2, shuffle=False))


# ---------------------------------------------------------------------- PrioritizedSampler
def value_storage(num, capacity=None):
    """A flat storage of ``num`` elements, ``value`` = 10 * position."""
    storage = LazyTensorStorage(capacity or num)
    storage.extend(TensorDict({"value": torch.arange(num) * 10}, [num]))
    return storage


def expected_probabilities(priorities, alpha, eps=0.0):
    powered = [(p + eps) ** alpha for p in priorities]
    return torch.tensor([p / sum(powered) for p in powered], dtype=torch.float64)


def test_probabilities_are_priorities_to_the_alpha_normalised():
    storage = value_storage(4)
    sampler = PrioritizedSampler(4, alpha=0.5, beta=1.0, eps=0.0)
    torch.testing.assert_close(sampler.probabilities(storage), torch.full((4,), 0.25, dtype=torch.float64))
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]), storage=storage)
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([1, 2, 3, 4], 0.5))
    with_eps = PrioritizedSampler(4, alpha=0.5, beta=1.0)  # eps=1e-8 added to each priority
    with_eps.update_priority([0, 1, 2, 3], [0.0, 2.0, 3.0, 4.0], storage=storage)
    torch.testing.assert_close(with_eps.probabilities(storage), expected_probabilities([0, 2, 3, 4], 0.5, 1e-8))
    assert with_eps.probabilities(storage)[0] > 0  # a zero priority is still drawn, rarely


def test_draws_follow_the_probabilities():
    storage = value_storage(4)
    sampler = PrioritizedSampler(4, alpha=0.5, beta=1.0)
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]), storage=storage)
    torch.manual_seed(0)
    index, _ = sampler.sample_index(storage, 200_000)
    frequencies = torch.bincount(index, minlength=4).double() / index.numel()
    torch.testing.assert_close(frequencies, expected_probabilities([1, 2, 3, 4], 0.5), atol=0.005, rtol=0)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_sample_carries_the_index_and_normalised_importance_weights(beta):
    storage = value_storage(4)
    sampler = PrioritizedSampler(4, alpha=0.5, beta=beta, eps=0.0)
    sampler.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]), storage=storage)
    sample = sampler.sample(storage, 64)
    index = sample["index"]
    assert index.dtype == torch.int64 and sample["_weight"].dtype == torch.float32
    assert torch.equal(sample["value"], index * 10)  # the elements at those storage positions
    # (N P(i))^-beta / (N P_min)^-beta = (sqrt(p_i) / sqrt(1))^-beta
    per_element = torch.tensor([(p ** 0.5) ** -beta for p in (1.0, 2.0, 3.0, 4.0)], dtype=torch.float32)
    torch.testing.assert_close(sample["_weight"], per_element[index])
    assert set(index.tolist()) == {0, 1, 2, 3}


def test_new_writes_get_the_largest_priority_given_so_far():
    storage = value_storage(2, capacity=6)
    sampler = PrioritizedSampler(6, alpha=1.0, beta=1.0, eps=0.0)
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([1, 1], 1.0))
    sampler.update_priority(1, 5.0)
    sampler.update_priority(0, 0.5)
    assert sampler.max_priority == 5.0
    storage.extend(TensorDict({"value": torch.arange(2, 5) * 10}, [3]))  # positions 2, 3, 4
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([0.5, 5, 5, 5, 5], 1.0))
    sampler.update_priority([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])
    assert sampler.max_priority == 5.0  # the largest ever given, not the largest stored
    storage.extend(TensorDict({"value": torch.arange(5, 8) * 10}, [3]))  # positions 5, then 0, 1 (wrapped)
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([5, 5, 2, 3, 4, 5], 1.0))
    sampler.update_priority([0, 1, 2, 3, 4, 5], 1.0)
    sampler.update_priority(0, 7.0)
    storage.extend(TensorDict({"value": torch.arange(8, 16) * 10}, [8]))  # more than the capacity: all new
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([7] * 6, 1.0))


def test_writes_between_samples_are_detected_one_extend_at_a_time():
    storage = value_storage(3, capacity=4)
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0)
    sampler.update_priority([0, 1, 2], [1.0, 2.0, 3.0], storage=storage)
    storage.extend(TensorDict({"value": torch.tensor([30])}, [1]))  # position 3
    storage.extend(TensorDict({"value": torch.tensor([40])}, [1]))  # position 0, overwritten
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([3, 2, 3, 3], 1.0))


def test_update_priority_validates_its_arguments():
    sampler = PrioritizedSampler(4, alpha=0.5, beta=1.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="priority must be finite and >= 0"):
            sampler.update_priority(torch.tensor([0]), torch.tensor([bad]))
    with pytest.raises(ValueError, match="one number or one per index"):
        sampler.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"index must be storage positions in \[0, max_capacity=4\)"):
        sampler.update_priority(torch.tensor([4]), 1.0)
    priority = torch.tensor([2.0, 3.0], dtype=torch.float64)
    sampler.update_priority(torch.tensor([0, 1]), priority)
    assert priority.tolist() == [2.0, 3.0]  # the caller's tensor is left alone


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_capacity=0, alpha=0.5, beta=1.0), "max_capacity must be a positive int"),
    (dict(max_capacity=4, alpha=-0.5, beta=1.0), "alpha must be a finite number >= 0"),
    (dict(max_capacity=4, alpha=0.5, beta=float("nan")), "beta must be a finite number >= 0"),
    (dict(max_capacity=4, alpha=0.5, beta=1.0, eps=-1.0), "eps must be a finite number >= 0"),
])
def test_prioritized_sampler_validates_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PrioritizedSampler(**kwargs)


def test_prioritized_sampler_rejects_other_storages_and_null_probabilities():
    sampler = PrioritizedSampler(100, alpha=0.5, beta=1.0)
    with pytest.raises(ValueError, match="needs a storage with ndim=1.*got ndim=2"):
        sampler.sample(filled_storage(ndim=2), 4)
    with pytest.raises(ValueError, match=r"max_capacity=4\) is smaller than the storage's capacity 8"):
        PrioritizedSampler(4, alpha=0.5, beta=1.0).sample(value_storage(4, capacity=8), 2)
    with pytest.raises(RuntimeError, match="empty replay buffer"):
        sampler.sample(LazyTensorStorage(10).init_from(TensorDict({"value": torch.zeros(1)}, [1])), 4)
    no_eps = PrioritizedSampler(4, alpha=0.5, beta=1.0, eps=0.0)
    storage = value_storage(4)
    no_eps.update_priority(0, 0.0, storage=storage)
    with pytest.raises(RuntimeError, match="probability 0.*use eps > 0"):
        no_eps.sample(storage, 2)


def test_an_update_without_the_storage_yields_to_writes_it_has_not_seen():
    storage = value_storage(4)
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0)
    sampler.sample(storage, 2)  # every stored element seen, priority 1
    storage.extend(TensorDict({"value": torch.tensor([40])}, [1]))  # position 0 now holds a new element
    sampler.update_priority(0, 0.5)  # meant for the element sampled there before
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([1, 1, 1, 1], 1.0))
    sampler.update_priority(0, 0.5, storage=storage)  # seen now: the update applies
    torch.testing.assert_close(sampler.probabilities(storage), expected_probabilities([0.5, 1, 1, 1], 1.0))
