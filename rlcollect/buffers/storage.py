"""Replay-buffer storages: a TensorDict preallocated on the first write, a ring along time.

Layout (time is the LAST batch dim, as in collector batches)::

    ndim=1   [capacity]                     extend(td[N])        writes N rows at the cursor
    ndim=2   [B, capacity]                  extend(td[B, T])     appends T steps to each of B rows
    ndim=3   [W, P, capacity]               extend(td[W, P, T])  same, rows = W * P envs

    capacity = max_size // (number of rows)

Every row advances together: one ``cursor`` (the next time index written, the same in every
row), ``filled`` (time steps held per row) and ``write_count`` (elements ever written). They
live in a ``WritePosition`` whose lock every write takes; ``share(mp_context)`` makes both
the tensors and the position shared with worker processes started afterwards.

Elements are addressed by a flat "element index" in ``[0, len(storage))``: element ``i`` is
row ``i // filled``, time index ``i % filled`` of the storage (for ndim=1 simply position i).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase

from rlcollect.buffers.locks import SharedLock
from rlcollect.validation import check_positive_int

log = logging.getLogger(__name__)

DeviceLike = str | torch.device


class WritePosition:
    """Where a storage writes next: ``cursor``, ``filled``, ``write_count``, and their lock.

    The three counters sit in an int64 tensor: a plain one in a single process, a
    shared-memory one after ``share(mp_context)``, or a memory-mapped file (LazyMemmapStorage,
    so that they persist). ``lock`` is a ``threading.RLock`` until ``share`` replaces it by
    a ``SharedLock`` (buffers/locks.py); like every multiprocessing lock it reaches a worker
    only as an argument of its Process (inheritance), so share before starting workers.

    A write in progress is recorded (``begin_write``/``end_write``); when a process dies
    inside one, holding the shared lock, the process that takes the lock over calls
    ``repair(start, steps)`` (set by the storage: drop the steps it left half-written) and
    bumps ``generation``, which tells samplers that stored elements moved.
    """

    _CURSOR, _FILLED, _WRITE_COUNT = 0, 1, 2
    _START, _STEPS, _GENERATION = 0, 1, 2  # of the write in progress; layout changes

    def __init__(self, counters: torch.Tensor | None = None) -> None:
        self._counters = torch.zeros(3, dtype=torch.int64) if counters is None else counters
        self._values = self._counters.numpy()
        self._writing = torch.zeros(3, dtype=torch.int64)
        self._writing_values = self._writing.numpy()
        self._lock: Any = threading.RLock()
        self._shared = False
        self.repair: Callable[[int, int], int] | None = None  # the storage's: drop a write left half done

    @property
    def lock(self):
        """Re-entrant lock guarding the counters and the storage contents."""
        return self._lock

    @property
    def shared(self) -> bool:
        return self._shared

    @property
    def cursor(self) -> int:
        return int(self._values[self._CURSOR])

    @property
    def filled(self) -> int:
        return int(self._values[self._FILLED])

    @property
    def write_count(self) -> int:
        return int(self._values[self._WRITE_COUNT])

    def advance(self, steps: int, elements: int, capacity: int) -> None:
        """Account for a write of ``steps`` time steps (``elements`` in all rows)."""
        values = self._values
        values[self._CURSOR] = (int(values[self._CURSOR]) + steps) % capacity
        values[self._FILLED] = min(int(values[self._FILLED]) + steps, capacity)
        values[self._WRITE_COUNT] += elements

    def set(self, cursor: int, filled: int, write_count: int) -> None:
        self._values[:] = (cursor, filled, write_count)

    def begin_write(self, start: int, steps: int) -> None:
        """A write of ``steps`` time steps from time index ``start`` begins (under the lock)."""
        self._writing_values[self._START], self._writing_values[self._STEPS] = start, steps

    def end_write(self) -> None:
        self._writing_values[self._STEPS] = 0

    @property
    def generation(self) -> int:
        """How many times stored elements were moved by a repair (samplers keyed by
        position start over when it changes)."""
        return int(self._writing_values[self._GENERATION])

    def _take_over(self, dead_pid: int) -> None:
        """The shared lock was taken over from ``dead_pid``: drop what its write left."""
        steps = int(self._writing_values[self._STEPS])
        if steps and self.repair is not None:
            dropped = self.repair(int(self._writing_values[self._START]), steps)
            log.warning("replay buffer: process %d died writing %d steps into it; dropped the %d stored steps per "
                        "row it had overwritten in part (%d steps per row remain)", dead_pid, steps, dropped,
                        self.filled)
            self._writing_values[self._GENERATION] += 1
        self.end_write()

    def attach(self, counters: torch.Tensor) -> None:
        """Keep the counters in ``counters`` (e.g. a memory-mapped file) from now on."""
        counters.copy_(self._counters)
        self._counters = counters
        self._values = counters.numpy()

    def share(self, mp_context, *, file_backed: bool = False) -> None:
        """Counters to shared memory (unless file-backed) and a multiprocessing lock."""
        if self._shared:
            return
        if not file_backed:
            self._counters.share_memory_()
            self._values = self._counters.numpy()
        self._writing.share_memory_()
        self._writing_values = self._writing.numpy()
        self._lock = SharedLock(mp_context, on_take_over=self._take_over)
        self._shared = True

    def __getstate__(self) -> dict:
        state = {"counters": self._counters, "writing": self._writing, "shared": self._shared}
        if self._shared:  # an mp lock pickles only while a Process is being spawned
            state["lock"] = self._lock
        return state

    def __setstate__(self, state: dict) -> None:
        self._counters, self._writing = state["counters"], state["writing"]
        self._values, self._writing_values = self._counters.numpy(), self._writing.numpy()
        self._shared = state["shared"]
        self._lock = state["lock"] if self._shared else threading.RLock()
        if self._shared:
            self._lock.on_take_over = self._take_over
        self.repair = None  # set again by the storage that holds this position

    def __repr__(self) -> str:
        return (f"WritePosition(cursor={self.cursor}, filled={self.filled}, write_count={self.write_count}, "
                f"shared={self._shared})")


class LazyTensorStorage:
    """A ring-buffer TensorDict in memory, allocated from the first write's structure.

    Args:
        max_size: number of elements held (rows x time steps).
        ndim: batch dims of a write: 1 for ``[N]``, 2 for ``[B, T]`` (collector on a batched
            env), 3 for ``[W, P, T]`` (MultiSync stack of batched envs). Time is the last.
        device: where the storage lives; writes are copied there.
    """

    def __init__(self, max_size: int, *, ndim: int = 1, device: DeviceLike = "cpu") -> None:
        self.max_size = check_positive_int("max_size", max_size)
        self.ndim = check_positive_int("ndim", ndim)
        self.device = torch.device(device)
        self.position = WritePosition()
        self._data: TensorDict | None = None
        self._rows: tuple[int, ...] = ()
        self._capacity = 0

    @property
    def position(self) -> WritePosition:
        """The write position (cursor, filled, write_count) and the lock of every write."""
        return self._position

    @position.setter
    def position(self, position: WritePosition) -> None:
        self._position = position
        position.repair = self._drop_interrupted_write

    # ------------------------------------------------------------------ allocation
    @property
    def initialized(self) -> bool:
        return self._data is not None

    @property
    def shape(self) -> torch.Size | None:
        """``[*rows, capacity]`` once allocated, else None."""
        return None if self._data is None else self._data.batch_size

    @property
    def capacity(self) -> int:
        """Time steps per row (``max_size`` for ndim=1); 0 before allocation."""
        return self._capacity

    @property
    def num_rows(self) -> int:
        return int(torch.Size(self._rows).numel())

    def init_from(self, template: TensorDictBase) -> "LazyTensorStorage":
        """Allocate from ``template``'s structure (keys, dtypes, feature shapes and, for
        ndim > 1, its leading batch dims); nothing is written. ``template`` has the layout of
        a write: ``ndim`` batch dims, time last (its length is irrelevant)."""
        if self._data is not None:
            raise RuntimeError(f"{type(self).__name__} is already initialized with shape {list(self.shape)}")
        if not isinstance(template, TensorDictBase):
            raise TypeError(f"template must be a TensorDict, got {type(template).__name__}")
        if template.batch_dims != self.ndim:
            raise ValueError(self._layout_message(template.batch_size, "template"))
        rows = tuple(template.batch_size[: self.ndim - 1])
        num_rows = int(torch.Size(rows).numel())
        capacity = self.max_size // num_rows
        if capacity < 1:
            raise ValueError(f"max_size={self.max_size} is smaller than the {num_rows} rows of a "
                             f"{list(template.batch_size)} write (ndim={self.ndim})")
        for key, value in template.items(include_nested=True, leaves_only=True):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{type(self).__name__} stores tensors only; {key!r} is {type(value).__name__}")
        self._bind(self._allocate(template, torch.Size([*rows, capacity])))
        return self

    def _allocate(self, template: TensorDictBase, shape: torch.Size) -> TensorDict:
        ndim = self.ndim
        return template.apply(
            lambda x: torch.empty((*shape, *x.shape[ndim:]), dtype=x.dtype, device=self.device),
            batch_size=shape, device=self.device,
        )

    def _bind(self, data: TensorDict) -> None:
        """Hold ``data`` and precompute the per-key views that writes and reads use."""
        self._data = data
        self._rows, self._capacity = tuple(data.batch_size[:-1]), data.batch_size[-1]
        elements = data.batch_size.numel()
        leaves = [(key, value.as_subclass(torch.Tensor))
                  for key, value in data.items(include_nested=True, leaves_only=True)]
        self._leaves = leaves
        self._keys = frozenset(key for key, _ in leaves)
        self._writers = [(value, _numpy_view(value)) for _, value in leaves]
        self._gather_tree = _leaf_tree([(key, value.reshape(elements, *value.shape[self.ndim:]))
                                        for key, value in leaves])

    # ------------------------------------------------------------------ positions
    @property
    def cursor(self) -> int:
        """The next time index written (in every row)."""
        return self.position.cursor

    @property
    def filled(self) -> int:
        """Time steps held per row."""
        return self.position.filled

    @property
    def write_count(self) -> int:
        """Elements ever written (overwritten ones included)."""
        return self.position.write_count

    def __len__(self) -> int:
        return self.num_rows * self.position.filled if self._data is not None else 0

    # ------------------------------------------------------------------ writes
    def extend(self, data: TensorDictBase) -> None:
        """Write ``data`` (``ndim`` batch dims, time last) at the cursor, under the lock;
        the oldest steps are overwritten once the ring is full (a write longer than the
        ring leaves its last ``capacity`` steps, exactly as several shorter writes would)."""
        if self._data is None:
            with self.position.lock:
                if self._data is None:
                    self.init_from(data)
        sources = self._check_write(data)
        written = data.batch_size[-1]
        if written == 0:
            return
        steps, skipped = min(written, self._capacity), max(written - self._capacity, 0)
        if skipped:  # longer than the ring: only its last `capacity` steps survive, as with several writes
            sources = [value[(slice(None),) * (self.ndim - 1) + (slice(skipped, None),)] for value in sources]
        rows = (slice(None),) * (self.ndim - 1)
        with self.position.lock:
            cursor = (self.position.cursor + skipped) % self._capacity
            head = min(steps, self._capacity - cursor)
            wrapped = head < steps  # the rest goes to the start of every row
            self.position.begin_write(cursor, steps)
            for (stored, stored_numpy), value in zip(self._writers, sources):
                if stored_numpy is not None and value.dtype == stored.dtype and value.device.type == "cpu" \
                        and not value.requires_grad:
                    # numpy slice assignment costs a fraction of Tensor.copy_ for small writes
                    value = value.numpy()
                    stored_numpy[(*rows, slice(cursor, cursor + head))] = value[(*rows, slice(0, head))]
                    if wrapped:
                        stored_numpy[(*rows, slice(0, steps - head))] = value[(*rows, slice(head, steps))]
                else:
                    stored[(*rows, slice(cursor, cursor + head))].copy_(value[(*rows, slice(0, head))])
                    if wrapped:
                        stored[(*rows, slice(0, steps - head))].copy_(value[(*rows, slice(head, steps))])
            self.position.advance(written, self.num_rows * written, self._capacity)
            self.position.end_write()

    def _drop_interrupted_write(self, start: int, steps: int) -> int:
        """Called under the lock after a writer died in ``extend`` while writing ``steps``
        time steps from ``start`` (counters not advanced): the stored steps that write had
        begun to overwrite are dropped (they may hold a mix of old and new keys); the others
        stay, moved to time indices ``[0, kept)`` oldest first. Returns how many were dropped."""
        capacity, filled, cursor = self._capacity, self.position.filled, self.position.cursor
        oldest = cursor if filled == capacity else 0
        in_time_order = (oldest + torch.arange(filled)) % capacity
        touched = torch.zeros(capacity, dtype=torch.bool)
        touched[(start + torch.arange(steps)) % capacity] = True
        kept = in_time_order[~touched[in_time_order]].to(self.device)
        if kept.numel() == filled:  # the write had touched no stored step
            return 0
        time_dim = self.ndim - 1
        for stored, _ in self._writers:
            stored.narrow(time_dim, 0, kept.numel()).copy_(stored.index_select(time_dim, kept))
        self.position.set(kept.numel(), kept.numel(), self.position.write_count)
        return filled - kept.numel()

    def _check_write(self, data: TensorDictBase) -> list[torch.Tensor]:
        """Validate a write's batch shape, keys and feature shapes; returns its tensors in
        the order of ``self._leaves``."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(f"extend takes a TensorDict, got {type(data).__name__}")
        batch = data.batch_size
        if len(batch) != self.ndim or tuple(batch[:-1]) != self._rows:
            raise ValueError(self._layout_message(batch, "write"))
        given = dict(data.items(include_nested=True, leaves_only=True))
        if len(given) != len(self._leaves) or not self._keys.issuperset(given):
            raise KeyError(f"{type(self).__name__}: the write's keys differ from the stored ones; "
                           f"missing {sorted(map(str, self._keys - given.keys()))}, "
                           f"unexpected {sorted(map(str, given.keys() - self._keys))}")
        ndim, sources = self.ndim, []
        for key, stored in self._leaves:
            value = given[key]
            if value.shape[ndim:] != stored.shape[ndim:]:
                raise ValueError(f"{type(self).__name__}: {key!r} has feature shape {list(value.shape[ndim:])}, "
                                 f"the storage holds {list(stored.shape[ndim:])}")
            sources.append(value)
        return sources

    def _layout_message(self, batch: torch.Size, what: str) -> str:
        expected = "[N]" if self.ndim == 1 else "[" + ", ".join(f"R{i}" for i in range(self.ndim - 1)) + ", T]"
        allocated, capacity = "", ""
        if self._data is not None:
            allocated = f"; allocated storage shape {list(self.shape)}"
            capacity = "" if self.ndim == 1 else f" with leading dims {list(self._rows)}"
        return (f"{type(self).__name__}(ndim={self.ndim}) takes a {what} of batch shape {expected}{capacity} "
                f"(time last), got {list(batch)}{allocated}")

    # ------------------------------------------------------------------ reads
    def get(self, index: torch.Tensor) -> TensorDict:
        """Gather elements by element index (a 1-D int tensor of values in ``[0, len)``);
        returns a new TensorDict of batch shape ``[len(index)]``."""
        self._require_data()
        filled = self.position.filled
        if self.ndim > 1 and filled < self._capacity:
            index = (index // filled) * self._capacity + index % filled
        return self._gather(index)

    def _gather(self, flat_index: torch.Tensor) -> TensorDict:
        """Gather by position in the flattened ``[rows * capacity]`` storage."""
        flat_index = flat_index.to(self.device)
        batch_size, device = flat_index.shape, self.device

        def build(tree: dict) -> TensorDict:
            # _new_unsafe skips the checks TensorDict() repeats per key: the shapes are ours
            return TensorDict._new_unsafe(
                {name: build(node) if isinstance(node, dict) else torch.index_select(node, 0, flat_index)
                 for name, node in tree.items()},
                batch_size=batch_size, device=device, nested=False)

        return build(self._gather_tree)

    def read(self, index: Any = slice(None)) -> TensorDictBase:
        """What ``rb[index]`` shows: ndim=1 the stored elements oldest first, indexed by
        ``index``; ndim > 1 the storage layout ``[*rows, filled]`` indexed by ``index``."""
        self._require_data()
        filled = self.position.filled
        if self.ndim > 1:
            return self._data[..., :filled][index]
        positions = torch.arange(filled, device=self.device)[index]
        if filled == self._capacity:  # full: the oldest element sits at the cursor
            positions = (positions + self.position.cursor) % self._capacity
        if positions.dim() == 0:
            return self._gather(positions.reshape(1))[0]
        return self._gather(positions)

    def rows_view(self, key) -> torch.Tensor:
        """The stored ``key`` as ``[num_rows, filled, *feature]`` in storage order (a view);
        each row's oldest step is at time index ``time_offset``."""
        self._require_data()
        value = self._data.get(key).as_subclass(torch.Tensor)
        value = value.reshape(self.num_rows, self._capacity, *value.shape[self.ndim:])
        return value[:, :self.position.filled]

    @property
    def time_offset(self) -> int:
        """Time index of every row's oldest step: the cursor once the ring is full, else 0."""
        return self.position.cursor if self.position.filled == self._capacity else 0

    def index_from_time_order(self, positions: torch.Tensor) -> torch.Tensor:
        """Map flat positions in the time-ordered ``[num_rows, filled]`` view (each row
        oldest step first) to element indices (the argument of ``get``)."""
        offset = self.time_offset
        if offset == 0:
            return positions
        filled = self.position.filled
        row, step = positions // filled, positions % filled
        return row * filled + (step + offset) % filled

    def keys(self) -> list:
        """Stored leaf keys (empty before allocation)."""
        return [] if self._data is None else [key for key, _ in self._leaves]

    def _require_data(self) -> None:
        if self._data is None:
            raise RuntimeError(f"{type(self).__name__} is empty: extend it or call init_from(template) first")

    # ------------------------------------------------------------------ sharing and state
    def share_memory_(self) -> "LazyTensorStorage":
        """Move the storage tensors to shared memory (worker processes can write into them)."""
        self._require_data()
        self._data.share_memory_()
        self._bind(self._data)
        return self

    def share(self, mp_context) -> "LazyTensorStorage":
        """Share the tensors and the write position with processes started afterwards (fork
        or spawn): pass this storage (or its ReplayBuffer) to them as a Process argument."""
        if self._data is None:
            raise RuntimeError(f"{type(self).__name__}.share: call init_from(template) first, so that every "
                               "process writes into the same preallocated tensors")
        self.share_memory_()
        self.position.share(mp_context)
        return self

    def state_dict(self, *, include_data: bool = False) -> dict:
        """The write position (and, with ``include_data``, a copy of the stored data as plain
        nested dicts of tensors, loadable with ``torch.load(weights_only=True)``)."""
        state = {"cursor": self.cursor, "filled": self.filled, "write_count": self.write_count}
        if include_data and self._data is not None:
            with self.position.lock:
                state["data"] = self._data.clone().to_dict()
                state["data_shape"] = list(self._data.batch_size)
        return state

    def load_state_dict(self, state: dict) -> None:
        with self.position.lock:
            if "data" in state:
                data = state["data"]
                if not isinstance(data, TensorDictBase):
                    data = TensorDict(data, batch_size=state["data_shape"])
                if self._data is None:
                    self.init_from(data)
                if data.batch_size != self.shape:
                    raise ValueError(f"state data has shape {list(data.batch_size)}, the storage {list(self.shape)}")
                self._data.update_(data)
            self.position.set(int(state["cursor"]), int(state["filled"]), int(state["write_count"]))

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for derived in ("_leaves", "_keys", "_writers", "_gather_tree"):  # views: rebuilt from _data on unpickling
            state.pop(derived, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.position = self._position  # its repair is this storage's
        if self._data is not None:
            self._bind(self._data)

    def __repr__(self) -> str:
        shape = list(self.shape) if self._data is not None else "lazy"
        return (f"{type(self).__name__}(max_size={self.max_size}, ndim={self.ndim}, shape={shape}, "
                f"len={len(self)}, cursor={self.cursor})")


class LazyMemmapStorage(LazyTensorStorage):
    """A LazyTensorStorage on memory-mapped files, for buffers larger than RAM.

    Files go under ``scratch_dir`` (a fresh temporary folder, removed with the storage,
    when None)::

        scratch_dir/storage.json      max_size, ndim, shape
        scratch_dir/position.memmap   cursor, filled, write_count (int64, always current)
        scratch_dir/data/             TensorDict.memmap layout (TensorDict.load_memmap)

    ``LazyMemmapStorage.load(scratch_dir)`` re-opens them: same data, same position. The
    mapping is shared, so processes writing the files see each other's writes; ``share``
    only adds the multiprocessing lock.
    """

    METADATA = "storage.json"
    POSITION = "position.memmap"
    DATA = "data"

    def __init__(self, max_size: int, *, scratch_dir: str | os.PathLike | None = None, ndim: int = 1) -> None:
        super().__init__(max_size, ndim=ndim, device="cpu")
        self.scratch_dir = None if scratch_dir is None else Path(scratch_dir)
        if self.scratch_dir is not None and (self.scratch_dir / self.METADATA).exists():
            raise FileExistsError(f"{self.scratch_dir} already holds a storage: re-open it with "
                                  f"LazyMemmapStorage.load({str(self.scratch_dir)!r}) or choose an empty scratch_dir")

    def _allocate(self, template: TensorDictBase, shape: torch.Size) -> TensorDict:
        if self.scratch_dir is None:
            self.scratch_dir = Path(tempfile.mkdtemp(prefix="rlcollect-memmap-"))
            # only the creating process removes it (forked children hold copies of this object)
            weakref.finalize(self, _remove_dir_in_process, str(self.scratch_dir), os.getpid())
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        ndim = self.ndim
        layout = template.apply(
            lambda x: x.narrow(ndim - 1, 0, 1).expand(*shape, *x.shape[ndim:]), batch_size=shape, device="cpu",
        )
        data = layout.memmap_like(prefix=self.scratch_dir / self.DATA)
        counters = MemoryMappedTensor.empty((3,), dtype=torch.int64, filename=self.scratch_dir / self.POSITION)
        self.position.attach(counters)
        metadata = {"max_size": self.max_size, "ndim": self.ndim, "shape": list(shape)}
        (self.scratch_dir / self.METADATA).write_text(json.dumps(metadata))
        return data

    @classmethod
    def load(cls, scratch_dir: str | os.PathLike) -> "LazyMemmapStorage":
        """Re-open the storage whose files are in ``scratch_dir`` (data and write position)."""
        scratch_dir = Path(scratch_dir)
        metadata_path = scratch_dir / cls.METADATA
        if not metadata_path.exists():
            raise FileNotFoundError(f"{metadata_path} not found: {scratch_dir} holds no LazyMemmapStorage")
        metadata = json.loads(metadata_path.read_text())
        storage = cls.__new__(cls)
        LazyTensorStorage.__init__(storage, metadata["max_size"], ndim=metadata["ndim"], device="cpu")
        storage.scratch_dir = scratch_dir
        counters = MemoryMappedTensor.from_filename(scratch_dir / cls.POSITION, dtype=torch.int64, shape=(3,))
        storage.position = WritePosition(counters)
        data = TensorDict.load_memmap(scratch_dir / cls.DATA)
        if list(data.batch_size) != metadata["shape"]:
            raise ValueError(f"{scratch_dir}: data shape {list(data.batch_size)} differs from storage.json's "
                             f"{metadata['shape']}")
        storage._bind(data)
        return storage

    def share_memory_(self) -> "LazyMemmapStorage":
        """A no-op: memory-mapped files are already shared between processes."""
        self._require_data()
        return self

    def share(self, mp_context) -> "LazyMemmapStorage":
        if self._data is None:
            raise RuntimeError("LazyMemmapStorage.share: call init_from(template) first, so that every "
                               "process writes into the same files")
        self.position.share(mp_context, file_backed=True)
        return self


def _numpy_view(tensor: torch.Tensor):
    """A numpy view of a CPU tensor, or None where numpy has no such dtype (bfloat16 ...)."""
    if tensor.device.type != "cpu":
        return None
    try:
        return tensor.numpy()
    except TypeError:
        return None


def _leaf_tree(leaves: list) -> dict:
    """``[(("next", "done"), t), ("action", a)]`` -> ``{"next": {"done": t}, "action": a}``."""
    tree: dict = {}
    for key, value in leaves:
        path = key if isinstance(key, tuple) else (key,)
        node = tree
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value
    return tree


def _remove_dir_in_process(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:
        shutil.rmtree(path, ignore_errors=True)
