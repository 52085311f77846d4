"""Samplers: which stored elements a replay-buffer sample holds.

A sampler turns ``(storage, batch_size)`` into a flat TensorDict ``[n]`` gathered from the
storage. ``RandomSampler`` draws elements uniformly; ``SliceSampler`` draws contiguous
slices of trajectories and concatenates them end to end (the recommended 1-D layout of
docs/data-layout.md), marking where each slice starts (``is_init``) and ends;
``SliceSamplerWithoutReplacement`` hands out every stored slice once per epoch;
``PrioritizedSampler`` draws elements in proportion to their priorities (prioritized
experience replay) and adds the ``index`` and importance ``_weight`` of each.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.buffers.storage import LazyTensorStorage
from rlcollect.keys import INDEX, IS_INIT, MASK, TRAJ_IDS, WEIGHT
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
        cache_key = (id(storage), position.write_count, position.cursor, position.filled, position.generation)
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
                raise _none_long_enough(type(self).__name__, slice_len, run_lengths)
            run_starts, run_lengths = run_starts[long_enough], run_lengths[long_enough]
        # torch's generator, so that torch.manual_seed makes samples reproducible
        picked = torch.randint(run_starts.shape[0], (num_slices,)).numpy()
        uniform = torch.rand(num_slices, dtype=torch.float64).numpy()
        lengths = run_lengths[picked]
        room = np.maximum(lengths - slice_len + 1, 1)
        first = run_starts[picked] + (uniform * room).astype(np.int64)
        return self._slice_index(storage, first, np.minimum(lengths, slice_len), slice_len)

    def _slice_index(self, storage: LazyTensorStorage, first: np.ndarray, slice_lengths: np.ndarray,
                     slice_len: int) -> SliceIndex:
        """The SliceIndex of slices starting at time-ordered positions ``first``."""
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
        return f"{type(self).__name__}({self._repr_args()})"

    def _repr_args(self) -> str:
        shape = f"num_slices={self.num_slices}" if self.num_slices is not None else f"slice_len={self.slice_len}"
        return (f"{shape}, traj_key={self.traj_key!r}, end_key={self.end_key!r}, "
                f"strict_length={self.strict_length}, pad_output={self.pad_output}")


@dataclass
class _Epoch:
    """The slices of one epoch of a SliceSamplerWithoutReplacement, in the order handed out."""

    segments: Segments  # the trajectory runs they were cut from (a new object after every write)
    slice_len: int
    first: np.ndarray  # [num_slices] time-ordered position of each slice's first step
    lengths: np.ndarray  # [num_slices] steps of each slice (the last of a run may be shorter)
    handed_out: int = 0  # slices already sampled this epoch


class SliceSamplerWithoutReplacement(SliceSampler):
    """SliceSampler that hands out every stored slice exactly once per epoch.

    An epoch cuts each stored trajectory run into consecutive, non-overlapping slices of
    ``slice_len`` steps (the last one of a run shorter; dropped with ``strict_length=True``),
    orders them randomly (torch's generator: ``torch.manual_seed`` reproduces it) and hands
    them out ``num_slices`` per sample. The sample that ends an epoch may hold fewer slices
    (what the epoch has left); the next sample starts a new epoch. Any write to the storage
    (its runs change) also starts a new epoch, so a slice is never handed out from data that
    was since overwritten: the guarantee is for a buffer sampled between writes (offline
    data, or several samples per collected batch); one written before every sample hands out
    the first slices of a new random order each time. Slices are marked as by SliceSampler
    (``is_init`` at slice starts, truncation at cuts, ``pad_output``).

    Args:
        shuffle: False hands the slices out in storage time order (each row oldest first).
        Every other argument: as SliceSampler.
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
        shuffle: bool = True,
    ) -> None:
        super().__init__(num_slices=num_slices, slice_len=slice_len, traj_key=traj_key, end_key=end_key,
                         strict_length=strict_length, pad_output=pad_output, truncated_key=truncated_key)
        self.shuffle = bool(shuffle)
        self._epoch: _Epoch | None = None

    def sample_index(self, storage: LazyTensorStorage, batch_size: int) -> SliceIndex:
        """The next ``num_slices`` slices of the epoch (fewer at its end)."""
        num_slices, slice_len = self.slice_shape(batch_size)
        _check_not_empty(storage)
        epoch = self._current_epoch(storage, slice_len)
        start = epoch.handed_out
        stop = min(start + num_slices, epoch.first.shape[0])
        epoch.handed_out = stop
        return self._slice_index(storage, epoch.first[start:stop], epoch.lengths[start:stop], slice_len)

    def _current_epoch(self, storage: LazyTensorStorage, slice_len: int) -> _Epoch:
        """The running epoch, or a new one when it is used up, the storage was written, or
        the slice length changed (a new batch_size with num_slices=)."""
        segments = self.segments(storage)
        epoch = self._epoch
        if (epoch is None or epoch.segments is not segments or epoch.slice_len != slice_len
                or epoch.handed_out >= epoch.first.shape[0]):
            epoch = self._epoch = self._new_epoch(segments, slice_len)
        return epoch

    def _new_epoch(self, segments: Segments, slice_len: int) -> _Epoch:
        """Cut every run into consecutive slices of slice_len steps, in random order."""
        run_lengths = segments.lengths
        # slices per run: only whole ones with strict_length, else the shorter rest too
        per_run = run_lengths // slice_len if self.strict_length else -(-run_lengths // slice_len)
        total = int(per_run.sum())
        if total == 0:
            raise _none_long_enough(type(self).__name__, slice_len, run_lengths)
        run_of = np.repeat(np.arange(run_lengths.shape[0]), per_run)
        offset = (np.arange(total) - np.repeat(np.cumsum(per_run) - per_run, per_run)) * slice_len
        first = segments.starts[run_of] + offset
        lengths = np.minimum(run_lengths[run_of] - offset, slice_len)
        if self.shuffle:
            order = torch.randperm(total).numpy()
            first, lengths = first[order], lengths[order]
        return _Epoch(segments, slice_len, first, lengths)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_epoch"] = None  # holds the per-process segments cache
        return state

    def _repr_args(self) -> str:
        return f"{super()._repr_args()}, shuffle={self.shuffle}"


class PrioritizedSampler(Sampler):
    """Proportional prioritized experience replay (Schaul et al., 2016), as TorchRL's.

    Element i is drawn with probability ``P(i) = (p_i + eps)^alpha / sum_j (p_j + eps)^alpha``
    over the stored elements, with replacement. Every element written gets the largest
    priority given so far (1.0 initially), so that it is replayed at least once soon. Writes
    are detected at sample time from the storage's write position (``write_count`` and
    ``cursor``), so they may come from any process; the priorities live in this sampler, in
    the sampling process. A sample carries ``"index"`` (int64 storage positions, what
    ``update_priority`` and ``storage.get`` take) and ``"_weight"`` (float32 importance
    weights ``(N * P(i))^-beta`` divided by the largest possible one, that of the smallest
    ``P`` over the stored elements: weights are in ``(0, 1]``).

    Drawing costs O(capacity) per sample (``torch.multinomial`` over every stored priority,
    no sum tree): fine for buffers up to a few million elements.

    Args:
        max_capacity: the largest storage served (its ``max_size``); ndim=1 storages only.
        alpha: how much prioritization is used (0: uniform).
        beta: importance-sampling exponent (0: no correction, 1: full); may be annealed by
            assigning ``sampler.beta``.
        eps: added to every priority, so that an element of priority 0 is still drawn.
    """

    def __init__(self, max_capacity: int, alpha: float, beta: float, eps: float = 1e-8) -> None:
        self.max_capacity = check_positive_int("max_capacity", max_capacity)
        self.alpha = _check_non_negative_float("alpha", alpha)
        self.beta = _check_non_negative_float("beta", beta)
        self.eps = _check_non_negative_float("eps", eps)
        self._priority = torch.zeros(self.max_capacity, dtype=torch.float64)  # (p + eps) ** alpha per position
        self._max_priority = 1.0
        self._seen_writes = 0  # storage.write_count when new writes were last given the default priority
        self._seen_generation = 0  # storage.position.generation then

    @property
    def max_priority(self) -> float:
        """The largest priority given so far (1.0 initially): what new elements get."""
        return self._max_priority

    def probabilities(self, storage: LazyTensorStorage) -> torch.Tensor:
        """``P(i)`` of every stored element (float64, ``[len(storage)]``, by storage position)."""
        stored = self._stored(storage)
        return stored / stored.sum()

    def sample_index(self, storage: LazyTensorStorage, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(index, weight)``: ``batch_size`` storage positions drawn with probability P, and
        their normalised importance weights (float32)."""
        stored = self._stored(storage)
        smallest = stored.min()
        if smallest <= 0:
            raise RuntimeError("PrioritizedSampler: a stored element has probability 0 (priority 0 with eps=0), "
                               "so its importance weight is infinite; use eps > 0")
        index = torch.multinomial(stored, batch_size, replacement=True)
        # (N P(i))^-beta / (N P_min)^-beta = (p_i / p_min)^-beta
        weight = stored[index].div_(smallest).pow_(-self.beta).to(torch.float32)
        return index, weight

    def sample(self, storage: LazyTensorStorage, batch_size: int) -> TensorDictBase:
        index, weight = self.sample_index(storage, batch_size)
        data = storage.get(index)
        data.set(INDEX, index.to(data.device))
        data.set(WEIGHT, weight.to(data.device))
        return data

    def update_priority(self, index, priority, *, storage: LazyTensorStorage | None = None) -> None:
        """``p[index] = priority``; a priority above every earlier one becomes the one new
        elements get. ``priority``: one per index, or one for all (finite, >= 0).

        ``storage``: the storage served; the elements written to it since the sampler last
        looked first get their max priority (as if given at write time, which this update
        then overrides). Without it, such pending writes get it at the next sample, over
        this update: right for a position overwritten since it was sampled, not for one
        written before (pass ``storage``, as ``ReplayBuffer.update_priority`` does)."""
        if storage is not None and len(storage):
            self._stored(storage)
        index = torch.as_tensor(index).detach().to("cpu", torch.int64).reshape(-1)
        priority = torch.as_tensor(priority).detach().to("cpu", torch.float64).reshape(-1)
        if priority.numel() != 1 and priority.numel() != index.numel():
            raise ValueError(f"priority must be one number or one per index: got {priority.numel()} priorities "
                             f"for {index.numel()} indices")
        if not bool(torch.isfinite(priority).all()) or bool((priority < 0).any()):
            raise ValueError(f"priority must be finite and >= 0, got {priority.tolist()}")
        if index.numel() == 0:
            return
        if int(index.min()) < 0 or int(index.max()) >= self.max_capacity:
            raise ValueError(f"index must be storage positions in [0, max_capacity={self.max_capacity}), got "
                             f"values in [{int(index.min())}, {int(index.max())}]")
        self._max_priority = max(self._max_priority, float(priority.max()))
        self._priority[index] = (priority + self.eps).pow_(self.alpha)  # a copy: never the caller's tensor

    @property
    def _default_priority(self) -> float:
        return (self._max_priority + self.eps) ** self.alpha

    def _stored(self, storage: LazyTensorStorage) -> torch.Tensor:
        """``(p + eps) ** alpha`` of the stored elements (a view), new writes included."""
        if storage.ndim != 1:
            raise ValueError(f"PrioritizedSampler needs a storage with ndim=1 (one priority per element), "
                             f"got ndim={storage.ndim}")
        size = _check_not_empty(storage)
        if storage.capacity > self.max_capacity:
            raise ValueError(f"PrioritizedSampler(max_capacity={self.max_capacity}) is smaller than the "
                             f"storage's capacity {storage.capacity}")
        self._give_new_writes_the_max_priority(storage)
        return self._priority[:size]

    def _give_new_writes_the_max_priority(self, storage: LazyTensorStorage) -> None:
        """The positions written since the last look are the ``new`` before the cursor
        (modulo capacity), or every position once a whole capacity or more was written."""
        position, capacity = storage.position, storage.capacity
        written = position.write_count
        new = written - self._seen_writes
        moved = position.generation != self._seen_generation  # a repair moved the stored elements
        if new == 0 and not moved:
            return
        default = self._default_priority
        self._seen_generation = position.generation
        if new < 0 or new >= capacity or moved:  # fewer than seen: the storage was reloaded; start over
            self._priority[:capacity] = default
        else:
            cursor = position.cursor
            start = (cursor - new) % capacity
            if start < cursor:
                self._priority[start:cursor] = default
            else:  # the writes wrapped around the end of the ring
                self._priority[start:capacity] = default
                self._priority[:cursor] = default
        self._seen_writes = written

    def state_dict(self) -> dict[str, Any]:
        """The priorities and what they were last synchronised with (a checkpoint's part)."""
        return {"priority": self._priority.clone(), "max_priority": self._max_priority,
                "seen_writes": self._seen_writes}

    def elements_moved(self, kept: torch.Tensor) -> None:
        """The storage moved its elements (a memory-mapped one, loading a state its files
        were written past): element ``j`` was at position ``kept[j]``; its priority follows."""
        kept = torch.as_tensor(kept).to("cpu", torch.int64)
        self._priority[:kept.numel()] = self._priority[kept]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        priority = torch.as_tensor(state["priority"], dtype=torch.float64)
        if priority.shape != self._priority.shape:
            raise ValueError(f"state holds {priority.numel()} priorities, this sampler has "
                             f"max_capacity={self.max_capacity}")
        self._priority.copy_(priority)
        self._max_priority = float(state["max_priority"])
        self._seen_writes = int(state["seen_writes"])

    def __repr__(self) -> str:
        return (f"PrioritizedSampler(max_capacity={self.max_capacity}, alpha={self.alpha}, beta={self.beta}, "
                f"eps={self.eps})")


def _check_non_negative_float(name: str, value: Any) -> float:
    """``value`` as a float when it is a finite real >= 0 (never a bool); else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _none_long_enough(sampler: str, slice_len: int, run_lengths: np.ndarray) -> RuntimeError:
    return RuntimeError(f"{sampler}(strict_length=True): no stored trajectory has slice_len={slice_len} steps "
                        f"(the longest has {int(run_lengths.max())}); lower slice_len or use strict_length=False")


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
