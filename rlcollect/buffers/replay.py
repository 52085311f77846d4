"""Replay buffers: a storage written by ``extend`` and read by a sampler.

Sharing with worker processes (what a multi-process collector does)::

    rb = ReplayBuffer(LazyTensorStorage(100_000), SliceSampler(slice_len=32), batch_size=256)
    rb.init_from(template)            # allocate: every process must write the same tensors
    rb.share(mp_context)              # shared tensors + position + lock, BEFORE starting workers
    mp_context.Process(target=work, args=(rb, ...)).start()   # worker: rb.extend(batch)
    sample = rb.sample()              # main: takes the same lock as the workers' extends

``extend`` and ``sample`` each hold the storage's lock for their whole duration, so a sample
never sees a half-written extend and the write position stays consistent.
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch
from tensordict import TensorDictBase

from rlcollect.buffers.layout import to_storage_layout
from rlcollect.buffers.samplers import PrioritizedSampler, RandomSampler, Sampler
from rlcollect.buffers.storage import LazyTensorStorage
from rlcollect.keys import BUFFER_ID
from rlcollect.validation import check_positive_int

Transform = Callable[[TensorDictBase], TensorDictBase]


class ReplayBuffer:
    """A storage plus the sampler that reads it.

    Args:
        storage: a LazyTensorStorage or LazyMemmapStorage (its ``ndim`` sets the write layout).
        sampler: RandomSampler (the default), SliceSampler, SliceSamplerWithoutReplacement or
            PrioritizedSampler (then ``update_priority`` feeds it the new priorities).
        batch_size: default size of ``sample()``, and of the samples iterating the buffer yields.
        transform: applied to every sample (TensorDict -> TensorDict).
        write_transform: applied to every collector batch written with ``extend_batch`` (as
            collectors and learners write), on its ``[*B, T]`` layout before the rows are
            flattened, e.g. ``MultiStep``; ``extend`` writes its data as given.
    """

    def __init__(self, storage: LazyTensorStorage, sampler: Sampler | None = None, *,
                 batch_size: int | None = None, transform: Transform | None = None,
                 write_transform: Transform | None = None) -> None:
        if not isinstance(storage, LazyTensorStorage):
            raise TypeError(f"storage must be a LazyTensorStorage or LazyMemmapStorage, got {type(storage).__name__}")
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a Sampler (RandomSampler, SliceSampler, ...), "
                            f"got {type(sampler).__name__}")
        for name, value in (("transform", transform), ("write_transform", write_transform)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable TensorDict -> TensorDict, got {type(value).__name__}")
        self.storage = storage
        self.sampler = sampler if sampler is not None else RandomSampler()
        self.batch_size = check_positive_int("batch_size", batch_size, optional=True)
        self.transform = transform
        self.write_transform = write_transform

    @property
    def ndim(self) -> int:
        """The storage's write layout: the batch dims an ``extend`` takes (time last)."""
        return self.storage.ndim

    @property
    def lock(self):
        """The lock every ``extend`` and ``sample`` holds (re-entrant; shared after ``share``)."""
        return self.storage.position.lock

    def init_from(self, template: TensorDictBase) -> "ReplayBuffer":
        """Allocate the storage from a template in the write layout (see LazyTensorStorage)."""
        self.storage.init_from(template)
        return self

    def init_from_batch(self, batch: TensorDictBase) -> "ReplayBuffer":
        """Allocate the storage from a collector batch, as ``extend_batch`` would write it."""
        return self.init_from(self._in_storage_layout(batch))

    def share(self, mp_context) -> "ReplayBuffer":
        """Make the buffer writable from processes started afterwards with ``mp_context``
        (pass the buffer as a Process argument). The storage must be initialized."""
        self.storage.share(mp_context)
        return self

    # ------------------------------------------------------------------ writes
    def extend(self, data: TensorDictBase) -> None:
        """Write ``data`` (the storage's ``ndim`` batch dims, time last)."""
        self.storage.extend(data)

    def extend_batch(self, batch: TensorDictBase) -> None:
        """Write a collector batch (``[*B, T]``, time last, or complete trajectories end to
        end): ``write_transform`` on it, then in the storage's layout (``ndim`` trailing dims)."""
        self.extend(self._in_storage_layout(batch))

    def _in_storage_layout(self, batch: TensorDictBase) -> TensorDictBase:
        if self.write_transform is not None:
            batch = self.write_transform(batch)
        return to_storage_layout(batch, self.ndim)

    def add(self, step: TensorDictBase) -> None:
        """Write one step: batch dims ``ndim - 1`` (``[]`` for ndim=1, ``[B]`` for ndim=2)."""
        self.storage.extend(step.unsqueeze(-1))

    # ------------------------------------------------------------------ reads
    def sample(self, batch_size: int | None = None) -> TensorDictBase:
        """A flat sample drawn by the sampler (a SliceSampler may return fewer elements)."""
        batch_size = self._resolve_batch_size(batch_size)
        with self.lock:
            data = self.sampler.sample(self.storage, batch_size)
        return self.transform(data) if self.transform is not None else data

    def __iter__(self) -> Iterator[TensorDictBase]:
        """``sample()`` after ``sample()``, forever (as TorchRL's): ``for batch in rb`` with a
        stop of the caller's (``itertools.islice``, a break). Needs the buffer's batch_size."""
        if self.batch_size is None:
            raise ValueError("iterating a ReplayBuffer needs its batch_size: give batch_size= to the ReplayBuffer")
        return self._samples()

    def _samples(self) -> Iterator[TensorDictBase]:
        while True:
            yield self.sample()

    @property
    def prioritized(self) -> bool:
        """Whether this buffer samples with a PrioritizedSampler (takes ``update_priority``)."""
        return isinstance(self.sampler, PrioritizedSampler)

    def update_priority(self, index, priority) -> None:
        """Give the elements at ``index`` (a sample's ``"index"``) new priorities (e.g. their
        absolute TD errors), under the buffer's lock; needs a PrioritizedSampler."""
        if not isinstance(self.sampler, PrioritizedSampler):
            raise TypeError(f"update_priority needs a PrioritizedSampler; this buffer samples with {self.sampler!r}")
        with self.lock:
            self.sampler.update_priority(index, priority, storage=self.storage)

    def _resolve_batch_size(self, batch_size: int | None) -> int:
        batch_size = check_positive_int("batch_size", batch_size, optional=True)
        if batch_size is None:
            if self.batch_size is None:
                raise ValueError("sample() needs a batch_size: pass one, or give batch_size= to the ReplayBuffer")
            batch_size = self.batch_size
        return batch_size

    def __getitem__(self, index) -> TensorDictBase:
        """What is stored: ndim=1 oldest first; ndim > 1 the storage layout ``[*rows, filled]``."""
        with self.lock:
            return self.storage.read(index)

    def __len__(self) -> int:
        return len(self.storage)

    @property
    def write_count(self) -> int:
        """Elements ever written (overwritten ones included)."""
        return self.storage.write_count

    # ------------------------------------------------------------------ state
    def state_dict(self, *, include_storage: bool = False) -> dict:
        """The write position (and a PrioritizedSampler's priorities); with
        ``include_storage``, a copy of the stored data too."""
        state = {"storage": self.storage.state_dict(include_data=include_storage)}
        if isinstance(self.sampler, PrioritizedSampler):
            with self.lock:
                state["sampler"] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Load a ``state_dict``; where the storage moved its elements as it loaded (a
        memory-mapped one whose files were written past the state), the priorities follow."""
        kept = self.storage.load_state_dict(state["storage"])
        if "sampler" in state and isinstance(self.sampler, PrioritizedSampler):
            self.sampler.load_state_dict(state["sampler"])
            if kept is not None:
                self.sampler.elements_moved(kept)

    def __repr__(self) -> str:
        return (f"ReplayBuffer(storage={self.storage!r}, sampler={self.sampler!r}, batch_size={self.batch_size}, "
                f"write_transform={self.write_transform!r}, "
                f"write_count={self.write_count})")


class ReplayBufferEnsemble:
    """Samples several replay buffers as one (e.g. one buffer per collector worker).

    With ``sample_from_all`` every sample takes ``batch_size / num_buffers`` from each
    member and concatenates them; otherwise one member, drawn uniformly (or with
    ``weights``), gives the whole sample. Each row carries ``("collector", "buffer_id")``,
    the index of the member it came from.

    Args:
        buffers: the member ReplayBuffers (written directly, each by its own producer).
        sample_from_all: split every sample across all members, or draw one member.
        batch_size: default size of ``sample()``.
        weights: sample_from_all=False only: relative probability of each member.
        transform: applied to every concatenated sample.
    """

    def __init__(self, *buffers: ReplayBuffer, sample_from_all: bool = True, batch_size: int | None = None,
                 weights: list[float] | None = None, transform: Transform | None = None) -> None:
        if not buffers:
            raise ValueError("ReplayBufferEnsemble needs at least one ReplayBuffer")
        for index, buffer in enumerate(buffers):
            if not isinstance(buffer, ReplayBuffer):
                raise TypeError(f"buffers[{index}] must be a ReplayBuffer, got {type(buffer).__name__}")
        self.buffers = tuple(buffers)
        self.sample_from_all = bool(sample_from_all)
        self.batch_size = check_positive_int("batch_size", batch_size, optional=True)
        if batch_size is not None and sample_from_all and batch_size % len(buffers):
            raise ValueError(f"batch_size={batch_size} must be a multiple of the {len(buffers)} buffers "
                             "when sample_from_all=True")
        self.weights = self._setup_weights(weights, len(buffers), sample_from_all)
        self.transform = transform

    @staticmethod
    def _setup_weights(weights, num_buffers: int, sample_from_all: bool) -> torch.Tensor | None:
        if weights is None:
            return None
        if sample_from_all:
            raise ValueError("weights apply to sample_from_all=False only (one member per sample)")
        weights = torch.as_tensor(weights, dtype=torch.float64)
        if weights.shape != (num_buffers,) or bool((weights < 0).any()) or float(weights.sum()) <= 0:
            raise ValueError(f"weights must be {num_buffers} non-negative numbers with a positive sum, "
                             f"got {weights.tolist()}")
        return weights

    def sample(self, batch_size: int | None = None) -> TensorDictBase:
        batch_size = check_positive_int("batch_size", batch_size, optional=True) or self.batch_size
        if batch_size is None:
            raise ValueError("sample() needs a batch_size: pass one, or give batch_size= to the ensemble")
        if self.sample_from_all:
            if batch_size % len(self.buffers):
                raise ValueError(f"batch_size={batch_size} must be a multiple of the {len(self.buffers)} buffers "
                                 "when sample_from_all=True")
            share = batch_size // len(self.buffers)
            parts = [self._member_sample(index, share) for index in range(len(self.buffers))]
            data = torch.cat(parts, dim=0)
        else:
            if self.weights is None:
                index = int(torch.randint(len(self.buffers), ()))
            else:
                index = int(torch.multinomial(self.weights, 1))
            data = self._member_sample(index, batch_size)
        return self.transform(data) if self.transform is not None else data

    def _member_sample(self, index: int, batch_size: int) -> TensorDictBase:
        data = self.buffers[index].sample(batch_size)
        data.set(BUFFER_ID, torch.full(data.batch_size, index, dtype=torch.int64, device=data.device))
        return data

    def __getitem__(self, index: int) -> ReplayBuffer:
        return self.buffers[index]

    def __len__(self) -> int:
        return sum(len(buffer) for buffer in self.buffers)

    @property
    def write_count(self) -> int:
        return sum(buffer.write_count for buffer in self.buffers)

    def __repr__(self) -> str:
        return (f"ReplayBufferEnsemble({len(self.buffers)} buffers, sample_from_all={self.sample_from_all}, "
                f"batch_size={self.batch_size})")
