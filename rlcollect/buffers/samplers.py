"""Samplers: which stored elements a replay-buffer sample holds.

A sampler turns ``(storage, batch_size)`` into a flat TensorDict ``[n]`` gathered from the
storage. ``RandomSampler`` draws elements uniformly; ``SliceSampler`` draws contiguous
slices of trajectories and concatenates them end to end (the recommended 1-D layout of
docs/data-layout.md), marking where each slice starts (``is_init``) and ends.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.buffers.storage import LazyTensorStorage
from rlcollect.keys import IS_INIT, MASK, TRAJ_IDS
from rlcollect.validation import check_positive_int

EPISODE = "episode"
TRAJ_KEY_CANDIDATES = (TRAJ_IDS, EPISODE)


class Sampler(ABC):
    """Draws a sample of ``batch_size`` elements (or fewer, for some samplers)."""

    @abstractmethod
    def sample(self, storage: LazyTensorStorage, batch_size: int) -> TensorDictBase:
        """A new flat TensorDict gathered from ``storage``; the caller holds its lock."""


def _check_not_empty(storage: LazyTensorStorage) -> int:
    size = len(storage)
    if size == 0:
        raise RuntimeError("cannot sample from an empty replay buffer: extend it first")
    return size


class RandomSampler(Sampler):
    """Uniform element indices over what the storage holds, with replacement."""

    def sample_index(self, storage: LazyTensorStorage, batch_size: int) -> torch.Tensor:
        return torch.randint(_check_not_empty(storage), (batch_size,))

    def sample(self, storage: LazyTensorStorage, batch_size: int) -> TensorDictBase:
        return storage.get(self.sample_index(storage, batch_size))

    def __repr__(self) -> str:
        return "RandomSampler()"


@dataclass(frozen=True)
class Segments:
    """Runs of consecutive steps of one trajectory, as flat positions in the storage's
    time-ordered ``[num_rows, filled]`` view: run j covers ``starts[j] : starts[j] + lengths[j]``."""

    starts: np.ndarray  # [num_runs] int64, increasing
    lengths: np.ndarray  # [num_runs] int64


@dataclass(frozen=True)
class SliceIndex:
    """Where a slice sample comes from and how it is marked (numpy: the index arithmetic on
    a few hundred elements costs several times less than in torch)."""

    index: np.ndarray  # [n] element indices (storage.get's argument)
    slice_starts: np.ndarray  # [num_slices] positions in the sample of each slice's first step
    slice_ends: np.ndarray  # [n] bool: a slice's last real step (and its padding)
    mask: np.ndarray | None  # [n] bool, real (True) vs padded steps; pad_output only


class SliceSampler(Sampler):
    """Contiguous slices of trajectories, concatenated into one flat batch.

    The sample is ``[n]``, never reshaped to ``[num_slices, slice_len]``: slice after slice,
    each within one trajectory (never across a trajectory boundary, a row of an ndim > 1
    storage, or the ring's write seam). Trajectories are drawn uniformly, then a start
    uniformly within the trajectory. The first step of every slice gets ``is_init=True``
    (OR-ed with the stored flag); the last step of a slice that does not end in a stored
    ``done`` gets ``("next", "truncated")`` (and ``("next", "done")``) set, so value
    estimators bootstrap there instead of running into the next slice.

    Args:
        num_slices: slices per sample (``slice_len = batch_size // num_slices``).
        slice_len: steps per slice (``num_slices = batch_size // slice_len``). Exactly one
            of num_slices / slice_len is given.
        traj_key: the per-step trajectory id. None: detected on the first sample,
            ``("collector", "traj_ids")`` first, then ``"episode"``. Either way, when it is
            not stored, boundaries are rebuilt from ``end_key``.
        end_key: the per-step "last step of its trajectory" flag, one per step (shape [N],
            or [N, 1]); a flag with more per-step dims is rejected.
        strict_length: False keeps trajectories shorter than slice_len (their slices are
            shorter, so the sample may be smaller than ``batch_size``); True draws only from
            trajectories of at least slice_len steps.
        pad_output: pad short slices to slice_len by repeating their last real step and add
            a bool ``("collector", "mask")`` (discouraged; needs strict_length=False). The
            mask is in every sample, padded or not, so that every sample has the same keys
            (samples stack, and code reading the mask never needs a branch); truncation is
            marked on the last real step of a slice, never on its padding.
        truncated_key: where slice cuts are marked; None leaves the stored flags untouched.
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key=None,
        end_key=("next", "done"),
        strict_length: bool = False,
        pad_output: bool = False,
        truncated_key=("next", "truncated"),
    ) -> None:
        self.num_slices, self.slice_len = self._setup_slices(num_slices, slice_len)
        if pad_output and strict_length:
            raise ValueError("pad_output=True pads short slices, strict_length=True excludes them: "
                             "use pad_output=True only with strict_length=False")
        if traj_key is None and end_key is None:
            raise ValueError("SliceSampler needs traj_key or end_key to find trajectory boundaries; both are None")
        self.traj_key = traj_key
        self.end_key = end_key
        self.strict_length = bool(strict_length)
        self.pad_output = bool(pad_output)
        self.truncated_key = truncated_key
        self._boundary_key = None  # resolved on the first sample: (key, is_traj_id)
        self._cache_key = None
        self._segments: Segments | None = None

    @staticmethod
    def _setup_slices(num_slices, slice_len) -> tuple[int | None, int | None]:
        if (num_slices is None) == (slice_len is None):
            raise ValueError(f"SliceSampler needs exactly one of num_slices or slice_len, got "
                             f"num_slices={num_slices!r}, slice_len={slice_len!r}")
        for name, value in (("num_slices", num_slices), ("slice_len", slice_len)):
            if value is not None:
                check_positive_int(name, value)
        return num_slices, slice_len

    def slice_shape(self, batch_size: int) -> tuple[int, int]:
        """``(num_slices, slice_len)`` for a sample of ``batch_size``."""
        given_name, given = (("num_slices", self.num_slices) if self.num_slices is not None
                             else ("slice_len", self.slice_len))
        if batch_size % given:
            raise ValueError(f"batch_size={batch_size} must be a multiple of SliceSampler's {given_name}={given}")
        other = batch_size // given
        return (given, other) if self.num_slices is not None else (other, given)

    # ------------------------------------------------------------------ trajectory runs
    def _resolve_boundary_key(self, storage: LazyTensorStorage):
        keys = storage.keys()
        if self.traj_key is not None and self.traj_key in keys:
            return self.traj_key, True
        if self.traj_key is None:
            for candidate in TRAJ_KEY_CANDIDATES:
                if candidate in keys:
                    return candidate, True
        if self.end_key in keys:  # boundaries rebuilt from the end flags (also when traj_key is not stored)
            shape = storage.rows_view(self.end_key).shape[2:]
            if any(size != 1 for size in shape):
                raise ValueError(f"SliceSampler(end_key={self.end_key!r}): the flag must be one per step, "
                                 f"shape [N] (or [N, 1]); the storage holds extra dims {list(shape)}")
            return self.end_key, False
        wanted = repr(self.traj_key) if self.traj_key is not None else ", ".join(map(repr, TRAJ_KEY_CANDIDATES))
        raise KeyError(f"SliceSampler found no trajectory key ({wanted}) nor end_key={self.end_key!r} in the "
                       f"storage (it holds {sorted(map(str, keys))}); pass traj_key= or end_key=")

    def segments(self, storage: LazyTensorStorage) -> Segments:
        """The storage's trajectory runs, cached until its write_count or position changes."""
        position = storage.position
        cache_key = (id(storage), position.write_count, position.cursor, position.filled)
        if self._segments is not None and cache_key == self._cache_key:
            return self._segments
        if self._boundary_key is None:
            self._boundary_key = self._resolve_boundary_key(storage)
        key, is_traj_id = self._boundary_key
        run_starts = _run_starts(storage.rows_view(key), is_traj_id, storage.time_offset)
        num_positions = len(storage)
        lengths = np.diff(run_starts, append=num_positions)
        self._segments = Segments(run_starts, lengths)
        self._cache_key = cache_key
        return self._segments

    # ------------------------------------------------------------------ sampling
    def sample_index(self, storage: LazyTensorStorage, batch_size: int) -> SliceIndex:
        """Draw the slices of one sample: element indices and slice marks."""
        num_slices, slice_len = self.slice_shape(batch_size)
        _check_not_empty(storage)
        segments = self.segments(storage)
        run_starts, run_lengths = segments.starts, segments.lengths
        if self.strict_length:
            long_enough = run_lengths >= slice_len
            if not long_enough.any():
                raise RuntimeError(f"SliceSampler(strict_length=True): no stored trajectory has slice_len="
                                   f"{slice_len} steps (the longest has {int(run_lengths.max())}); "
                                   "lower slice_len or use strict_length=False")
            run_starts, run_lengths = run_starts[long_enough], run_lengths[long_enough]
        # torch's generator, so that torch.manual_seed makes samples reproducible
        picked = torch.randint(run_starts.shape[0], (num_slices,)).numpy()
        uniform = torch.rand(num_slices, dtype=torch.float64).numpy()
        lengths = run_lengths[picked]
        room = np.maximum(lengths - slice_len + 1, 1)
        first = run_starts[picked] + (uniform * room).astype(np.int64)
        slice_lengths = np.minimum(lengths, slice_len)
        if self.pad_output:
            positions, slice_starts, ends, mask = _padded(first, slice_lengths, slice_len)
        elif (slice_lengths == slice_len).all():
            positions, slice_starts, ends, mask = _full(first, slice_len)
        else:
            positions, slice_starts, ends, mask = _ragged(first, slice_lengths)
        return SliceIndex(storage.index_from_time_order(positions), slice_starts, ends, mask)

    def sample(self, storage: LazyTensorStorage, batch_size: int) -> TensorDictBase:
        drawn = self.sample_index(storage, batch_size)
        data = storage.get(torch.from_numpy(drawn.index))
        self._mark(data, drawn)
        return data

    def _mark(self, data: TensorDictBase, drawn: SliceIndex) -> None:
        keys = data.keys(include_nested=True)
        size = data.batch_size[0]
        if IS_INIT not in keys:
            data.set(IS_INIT, torch.zeros(size, dtype=torch.bool, device=data.device))
        _set_rows(data.get(IS_INIT), drawn.slice_starts)
        if self.truncated_key is not None:
            cut = drawn.slice_ends
            ends_here = self.end_key is not None and self.end_key in keys
            if ends_here:  # a slice that ends with its trajectory is not truncated
                cut = cut & ~_rows_any(data.get(self.end_key))
            if self.truncated_key not in keys:
                data.set(self.truncated_key, torch.zeros(size, dtype=torch.bool, device=data.device))
            _set_rows(data.get(self.truncated_key), cut)
            if ends_here and self.end_key != self.truncated_key:
                _set_rows(data.get(self.end_key), cut)
        if drawn.mask is not None:
            data.set(MASK, torch.from_numpy(drawn.mask).to(data.device))

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_segments"], state["_cache_key"] = None, None  # a cache, per process
        return state

    def __repr__(self) -> str:
        shape = f"num_slices={self.num_slices}" if self.num_slices is not None else f"slice_len={self.slice_len}"
        return (f"SliceSampler({shape}, traj_key={self.traj_key!r}, end_key={self.end_key!r}, "
                f"strict_length={self.strict_length}, pad_output={self.pad_output})")


def _full(first: np.ndarray, slice_len: int):
    """Every slice has slice_len steps."""
    positions = (first[:, None] + np.arange(slice_len)).reshape(-1)
    ends = np.zeros(positions.shape[0], dtype=bool)
    ends[slice_len - 1::slice_len] = True
    return positions, np.arange(0, positions.shape[0], slice_len), ends, None


def _ragged(first: np.ndarray, slice_lengths: np.ndarray):
    """Slices of different lengths, end to end."""
    total = int(slice_lengths.sum())
    offsets = np.cumsum(slice_lengths) - slice_lengths
    slice_of = np.repeat(np.arange(first.shape[0]), slice_lengths)
    step = np.arange(total) - offsets[slice_of]
    ends = np.zeros(total, dtype=bool)
    ends[offsets + slice_lengths - 1] = True
    return first[slice_of] + step, offsets, ends, None


def _padded(first: np.ndarray, slice_lengths: np.ndarray, slice_len: int):
    """Every slice padded to slice_len by repeating its last real step."""
    steps = np.arange(slice_len)[None, :]
    last = (slice_lengths - 1)[:, None]
    positions = (first[:, None] + np.minimum(steps, last)).reshape(-1)
    mask = (steps <= last).reshape(-1)
    ends = (steps == last).reshape(-1)  # the last REAL step is the slice's end; padding is never marked
    return positions, np.arange(0, positions.shape[0], slice_len), ends, mask


def _set_rows(flags: torch.Tensor, rows: np.ndarray) -> None:
    """``flags[rows] = True`` (rows: positions or a bool mask), in place."""
    if flags.device.type == "cpu" and flags.is_contiguous():  # numpy: a view, and cheaper than index_put_
        flags.numpy().reshape(flags.shape[0], -1)[rows] = True
    else:
        flags.view(flags.shape[0], -1)[torch.from_numpy(rows).to(flags.device)] = True


def _rows_any(flags: torch.Tensor) -> np.ndarray:
    """``[n, *feature]`` -> ``[n]``: any over the feature dims, as numpy."""
    if flags.device.type == "cpu":
        return flags.numpy().reshape(flags.shape[0], -1).any(-1)
    return flags.reshape(flags.shape[0], -1).any(-1).cpu().numpy()


def _run_starts(values: torch.Tensor, is_traj_id: bool, time_offset: int) -> np.ndarray:
    """Sorted flat positions, in the time-ordered ``[rows, filled]`` view, where a run of one
    trajectory starts. ``values`` is ``[rows, filled, *feature]`` in storage order: trajectory
    ids (a run starts where the id changes) or end flags (a run starts after a True).

    Works in storage order, so a wrapped ring is never copied into time order: a row's last
    and first storage steps are compared like any other consecutive pair (they are
    consecutive in time once the ring is full), and the oldest step, at ``time_offset``,
    always starts a run (the first step of a row, or the write seam).
    """
    values = values.detach().cpu().numpy()  # numpy scans these flags several times faster than torch
    rows, filled = values.shape[:2]
    starts = np.empty((rows, filled), dtype=bool)
    if is_traj_id:
        starts[:, 1:] = _per_step(values[:, 1:] != values[:, :-1])
        starts[:, :1] = _per_step(values[:, :1] != values[:, -1:])
    else:
        starts[:, 1:] = _per_step(values[:, :-1])
        starts[:, :1] = _per_step(values[:, -1:])
    starts[:, time_offset] = True
    flat = np.flatnonzero(starts)
    if time_offset == 0:
        return flat
    row, step = np.divmod(flat, filled)
    positions = row * filled + (step - time_offset) % filled
    positions.sort()
    return positions


def _per_step(flags: np.ndarray) -> np.ndarray:
    """``[rows, n, *feature]`` -> ``[rows, n]``: any over the feature dims."""
    return flags if flags.ndim == 2 else flags.reshape(*flags.shape[:2], -1).any(-1)
