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

``dedup_observations=True`` stores each observation once (buffers/frames.py): the
observation leaves and their ``("next", ...)`` twins become frames plus pointers, rebuilt
exactly on every read; ``frame_stack=K`` also stores each frame of a K-frame stack once.
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase

from rlcollect.buffers.frames import (
    FRAMES,
    FrameKey,
    FrameLayout,
    FrameStore,
    as_path,
    default_spare_frames,
    new_spares,
    write_context,
)
from rlcollect.buffers.in_place import in_place
from rlcollect.buffers.locks import SharedLock
from rlcollect.errors import ConfigError
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
        dedup_observations: store each observation once: ``"observation"`` (and its nested
            leaves) as frames, ``("next", "observation")`` as pointers to them (a copy only
            after a trajectory's or a write's last step). Reads are exactly what was written.
        frame_stack: with dedup_observations, observations whose first feature dim is this
            (FrameStackObservation's ``stack_size``) are stored one frame per step, not one
            stack; 1 stores observations whole.
        spare_frames: frames held beside the one per element (the frames after each run's
            last step); None: ``max_size / (4 * frame_stack)``. They grow when needed, except
            in a storage shared with other processes (``share``), where running out raises.
    """

    SAVED_IN_PLACE = True  # inside saved_in_place(), a full storage's state holds its tensors themselves

    def __init__(self, max_size: int, *, ndim: int = 1, device: DeviceLike = "cpu", dedup_observations: bool = False,
                 frame_stack: int = 1, spare_frames: int | None = None) -> None:
        self.max_size = check_positive_int("max_size", max_size)
        self.ndim = check_positive_int("ndim", ndim)
        self.device = torch.device(device)
        self.dedup_observations, self.frame_stack, self.spare_frames = _setup_frames(
            dedup_observations, frame_stack, spare_frames)
        self.position = WritePosition()
        self._data: TensorDict | None = None
        self._rows: tuple[int, ...] = ()
        self._capacity = 0
        self._layout: FrameLayout | None = None
        self._frames: FrameStore | None = None
        self._tensors_shared = False

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
        if self.dedup_observations:
            self._layout = FrameLayout.from_template(template, self.ndim, self.frame_stack)
            template = self._layout.stored_template(template)
        self._bind(self._allocate(template, torch.Size([*rows, capacity])))
        if self._layout is not None:
            self._frames.spares = [self._make_spares(key, self._spare_size(key), None) for key in self._layout.keys]
        return self

    def _spare_size(self, key: FrameKey) -> int:
        return self.spare_frames or default_spare_frames(self.num_rows * self._capacity, key.stack)

    def _make_spares(self, key: FrameKey, size: int, old: TensorDict | None) -> TensorDict:
        """``size`` spare frames of ``key``, the first ones ``old``'s (growing them)."""
        spares = new_spares(key, size, self.device)
        if old is not None:
            spares[:old.batch_size[0]] = old
        return spares

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
        stored = [(key, value.as_subclass(torch.Tensor))
                  for key, value in data.items(include_nested=True, leaves_only=True)]
        self._writers = [(key, value, _numpy_view(value)) for key, value in stored]
        plain = {as_path(key): value.reshape(elements, *value.shape[self.ndim:]) for key, value in stored
                 if as_path(key)[0] != FRAMES}
        if self._layout is None:  # every key a write holds (its feature shape), what a read gathers
            self._leaves = [(key, tuple(value.shape[self.ndim:])) for key, value in stored]
            self._gather_tree = _leaf_tree(list(plain.items()))
        else:
            framed = {key.path: key.feature_shape for key in self._layout.keys}
            framed.update({key.next_key: key.feature_shape for key in self._layout.keys})
            self._leaves = [(_as_key(path), framed[path] if path in framed else tuple(plain[path].shape[1:]))
                            for path in self._layout.user_keys]
            self._gather_tree = _leaf_tree([(path, plain.get(path, _FRAMED)) for path in self._layout.user_keys])
            if self._frames is None:
                self._frames = FrameStore(self._layout, self.num_rows, self._capacity, [])
            self._frames.grow_spares = None if self._tensors_shared else self._make_spares
            self._frames.bind(data)
        self._keys = frozenset(key for key, _ in self._leaves)

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

    @property
    def nbytes(self) -> int:
        """Bytes of every tensor the storage holds (data, frames and spares; 0 before allocation)."""
        tensors = [] if self._data is None else list(self._data.values(include_nested=True, leaves_only=True))
        if self._frames is not None:
            tensors += [value for spares in self._frames.spares
                        for value in spares.values(include_nested=True, leaves_only=True)]
        return sum(tensor.numel() * tensor.element_size() for tensor in tensors)

    def spares_in_use(self) -> dict:
        """Per observation key stored as frames: the spare frames stored elements point at,
        and how many there are (``{key: (in_use, size)}``; empty without dedup_observations)."""
        if self._frames is None:
            return {}
        oldest = self.position.write_count // max(self.num_rows, 1) - self.position.filled
        in_use = self._frames.spares_in_use(oldest)
        return {key.key: (count, spares.batch_size[0])
                for key, count, spares in zip(self._layout.keys, in_use, self._frames.spares)}

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
            sources = {key: value[(slice(None),) * (self.ndim - 1) + (slice(skipped, None),)]
                       for key, value in sources.items()}
        rows = (slice(None),) * (self.ndim - 1)
        with self.position.lock:
            cursor = (self.position.cursor + skipped) % self._capacity
            head = min(steps, self._capacity - cursor)
            wrapped = head < steps  # the rest goes to the start of every row
            framed = self._frames is not None
            frames = self._prepare_frames(sources, cursor, written, skipped, steps) if framed else None
            self.position.begin_write(cursor, steps)
            continue_pending = self._commit_frames(sources, frames, steps) if framed else None
            for key, stored, stored_numpy in self._writers:
                value = sources[key]
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
            if continue_pending is not None:  # after end_write: a repair never sees earlier elements point here
                continue_pending()

    def _prepare_frames(self, sources: dict, cursor: int, written: int, skipped: int, steps: int) -> tuple:
        """Where a write's frames go (FrameStore.prepare): raises, changing nothing, when the
        spares run out."""
        position, num_rows = self.position, self.num_rows
        steps_written = position.write_count // num_rows
        oldest_after = steps_written + written - min(position.filled + written, self._capacity)
        context = write_context(sources, ndim=self.ndim, num_rows=num_rows, steps=steps, capacity=self._capacity,
                                cursor=cursor, sigma0=steps_written + skipped, oldest_after=oldest_after,
                                generation=position.generation, device=self.device)
        return context, self._frames.prepare(sources, context)

    def _commit_frames(self, sources: dict, frames: tuple, steps: int):
        """Replace the write's frame keys by the frames and pointers stored for them
        (``[*rows, steps, ...]``); returns FrameStore.commit's step for after the write."""
        context, prepared = frames
        encoded, continue_pending = self._frames.commit(prepared, context)
        for key in self._layout.paths:
            sources.pop(_as_key(key))
        sources.update({key: value.reshape(*self._rows, steps, *value.shape[2:]) for key, value in encoded.items()})
        return continue_pending

    def _drop_interrupted_write(self, start: int, steps: int) -> int:
        """Called under the lock after a writer died in ``extend`` while writing ``steps``
        time steps from ``start`` (counters not advanced): the stored steps that write had
        begun to overwrite are dropped (they may hold a mix of old and new keys); the others
        stay, moved to time indices ``[0, kept)`` oldest first. Returns how many were dropped."""
        filled = self.position.filled
        touched, kept = self._touched_and_kept(start, steps)
        if kept.numel() == filled:  # the write had touched no stored step
            return 0
        self._keep_only(kept, touched)
        return filled - kept.numel()

    def _touched_and_kept(self, start: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``touched``: bool ``[capacity]``, the time indices ``start .. start + steps - 1``
        (modulo capacity); ``kept``: the stored time indices not touched, oldest first."""
        capacity, filled, cursor = self._capacity, self.position.filled, self.position.cursor
        oldest = cursor if filled == capacity else 0
        in_time_order = (oldest + torch.arange(filled)) % capacity
        touched = torch.zeros(capacity, dtype=torch.bool)
        touched[(start + torch.arange(min(steps, capacity))) % capacity] = True
        return touched.to(self.device), in_time_order[~touched[in_time_order]].to(self.device)

    def _keep_only(self, kept: torch.Tensor, touched: torch.Tensor) -> None:
        """Keep the stored time indices ``kept`` (oldest first), moved to ``[0, kept)``, and
        drop every other one; the frames a kept element names in a ``touched`` slot are
        copied to spares first (dedup_observations). Under the lock."""
        capacity, count = self._capacity, kept.numel()
        if self._frames is not None:
            self._frames.copy_touched_frames(kept, touched)
        if not torch.equal(kept, torch.arange(count, device=kept.device)):  # else every kept step is in place
            time_dim = self.ndim - 1
            for _, stored, _ in self._writers:
                stored.narrow(time_dim, 0, count).copy_(stored.index_select(time_dim, kept))
        if self._frames is not None:
            remap = torch.full((capacity,), -1, dtype=torch.int64, device=self.device)
            remap[kept] = torch.arange(count, device=self.device)
            self._frames.after_repair(remap, count, self.position.write_count // self.num_rows)
        self.position.set(count, count, self.position.write_count)

    def _check_write(self, data: TensorDictBase) -> dict:
        """Validate a write's batch shape, keys and feature shapes; returns its tensors by key."""
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
        ndim = self.ndim
        for key, feature in self._leaves:
            value = given[key]
            if tuple(value.shape[ndim:]) != feature:
                raise ValueError(f"{type(self).__name__}: {key!r} has feature shape {list(value.shape[ndim:])}, "
                                 f"the storage holds {list(feature)}")
        return given

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
        framed = self._frames.gather(flat_index) if self._frames is not None else None

        def build(tree: dict, path: tuple) -> TensorDict:
            # _new_unsafe skips the checks TensorDict() repeats per key: the shapes are ours
            return TensorDict._new_unsafe(
                {name: build(node, (*path, name)) if isinstance(node, dict)
                 else framed[(*path, name)] if node is _FRAMED else torch.index_select(node, 0, flat_index)
                 for name, node in tree.items()},
                batch_size=batch_size, device=device, nested=False)

        return build(self._gather_tree, ())

    def read(self, index: Any = slice(None)) -> TensorDictBase:
        """What ``rb[index]`` shows: ndim=1 the stored elements oldest first, indexed by
        ``index``; ndim > 1 the storage layout ``[*rows, filled]`` indexed by ``index``."""
        self._require_data()
        filled = self.position.filled
        if self.ndim > 1 and self._frames is not None:  # rebuilt: a copy, in the storage layout
            slots = torch.arange(self.num_rows)[:, None] * self._capacity + torch.arange(filled)
            return self._gather(slots.reshape(-1)).reshape(*self._rows, filled)[index]
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
        if self._layout is not None and (as_path(key) in self._layout.paths or as_path(key)[0] == FRAMES):
            raise KeyError(f"{key!r} is stored as frames (dedup_observations=True): read it with get() or read()")
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
        """Stored leaf keys, as a write holds them (empty before allocation)."""
        return [] if self._data is None else [key for key, _ in self._leaves]

    def _require_data(self) -> None:
        if self._data is None:
            raise RuntimeError(f"{type(self).__name__} is empty: extend it or call init_from(template) first")

    # ------------------------------------------------------------------ sharing and state
    def share_memory_(self) -> "LazyTensorStorage":
        """Move the storage tensors to shared memory (worker processes can write into them)."""
        self._require_data()
        self._data.share_memory_()
        if self._frames is not None:
            for spares in self._frames.spares:
                spares.share_memory_()
        self._tensors_shared = True  # other processes hold them: spares cannot grow any more
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
        nested dicts of tensors, loadable with ``torch.load(weights_only=True)``). The data
        is what was written: until the ring is full, time indices ``[0, filled)`` of each row
        (a checkpoint early in a run of a large buffer holds its few steps, not the whole
        preallocated storage); ``data_shape`` is the storage's shape. Inside
        ``saved_in_place()`` a full storage's data are its tensors, not a copy."""
        state = {"cursor": self.cursor, "filled": self.filled, "write_count": self.write_count}
        if include_data and self._data is not None:
            with self.position.lock:
                filled = self.position.filled
                held = in_place() and self.SAVED_IN_PLACE  # saved_in_place(): nothing writes until it is saved
                if filled == self._capacity:
                    state["data"] = (self._data if held else self._data.clone()).to_dict()
                else:  # the steps written, copied: a view would save the whole preallocated storage
                    state["data"] = self._data[..., :filled].clone().to_dict()
                state["data_shape"] = list(self._data.batch_size)
                if self._frames is not None:  # the frame layout and spares (the pointers are in data)
                    state["frames"] = self._frames.state_dict(in_place=held)
        return state

    def load_state_dict(self, state: dict) -> torch.Tensor | None:
        """Load a ``state_dict``: the position, and the data where the state holds it (its
        written steps, or, from states saved before they were trimmed, every step). Returns
        None (a LazyMemmapStorage that moved its elements: the time indices kept)."""
        with self.position.lock:
            if "data" in state:
                shape = torch.Size(state["data_shape"])  # the storage's: [*rows, capacity]
                data = state["data"]
                if not isinstance(data, TensorDictBase):
                    steps = _time_length(data, len(shape))
                    data = TensorDict(data, batch_size=[*shape[:-1], steps])
                frames = state.get("frames")
                if (frames is not None) != self.dedup_observations:
                    raise ValueError(f"the state's data was stored with dedup_observations={frames is not None}, "
                                     f"this storage has dedup_observations={self.dedup_observations}")
                if self._data is None and frames is None:
                    self.init_from(data)
                elif self._data is None:
                    self._init_stored(data, shape, FrameLayout.from_dict(frames["layout"]))
                if shape != self.shape or data.batch_size[:-1] != shape[:-1] or data.batch_size[-1] > shape[-1]:
                    raise ValueError(f"state data has shape {list(shape)}, the storage {list(self.shape)}")
                self._data[..., :data.batch_size[-1]].update_(data)
                if frames is not None:
                    self._frames.load_state_dict(frames)
            self.position.set(int(state["cursor"]), int(state["filled"]), int(state["write_count"]))

    def _init_stored(self, data: TensorDictBase, shape: torch.Size, layout: FrameLayout) -> None:
        """Allocate ``shape`` with a state's ``data``'s entries: the stored layout (frames, not
        observations)."""
        if data.batch_dims != self.ndim or len(shape) != self.ndim or shape.numel() > self.max_size:
            raise ValueError(f"state data of shape {list(shape)} does not fit {self!r}")
        if any(key.stack not in (1, self.frame_stack) for key in layout.keys):
            raise ValueError(f"the state's observations are stacks of {[key.stack for key in layout.keys]} frames, "
                             f"this storage has frame_stack={self.frame_stack}")
        self._layout = layout
        self._bind(self._allocate(data, shape))
        self._frames.spares = [self._make_spares(key, self._spare_size(key), None) for key in layout.keys]

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
        frames = f", dedup_observations=True, frame_stack={self.frame_stack}" if self.dedup_observations else ""
        return (f"{type(self).__name__}(max_size={self.max_size}, ndim={self.ndim}{frames}, shape={shape}, "
                f"len={len(self)}, cursor={self.cursor})")


TENSORDICT_META = "meta.json"  # what TensorDict.memmap writes beside a folder's tensors: their dtypes and shapes


class LazyMemmapStorage(LazyTensorStorage):
    """A LazyTensorStorage on memory-mapped files, for buffers larger than RAM.

    Files go under ``scratch_dir`` (a fresh temporary folder, removed with the storage,
    when None)::

        scratch_dir/storage.json      max_size, ndim, shape (and the frame options and layout)
        scratch_dir/position.memmap   cursor, filled, write_count (int64, always current)
        scratch_dir/data/             TensorDict.memmap layout (TensorDict.load_memmap)
        scratch_dir/spares/<i>.<n>/   dedup_observations: the spare frames of frame key i (n-th size)

    ``LazyMemmapStorage.load(scratch_dir)`` re-opens them: same data, same position. The
    mapping is shared, so processes writing the files see each other's writes; ``share``
    only adds the multiprocessing lock.
    """

    SAVED_IN_PLACE = False  # its data are file mappings: a state holding them is copied into memory
    METADATA = "storage.json"
    POSITION = "position.memmap"
    DATA = "data"
    SPARES = "spares"

    def __init__(self, max_size: int, *, scratch_dir: str | os.PathLike | None = None, ndim: int = 1,
                 dedup_observations: bool = False, frame_stack: int = 1, spare_frames: int | None = None) -> None:
        super().__init__(max_size, ndim=ndim, device="cpu", dedup_observations=dedup_observations,
                         frame_stack=frame_stack, spare_frames=spare_frames)
        self._spare_dirs: dict[str, str] = {}
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
        self._shape = list(shape)
        self._write_metadata()
        return data

    def _write_metadata(self) -> None:
        metadata = {"max_size": self.max_size, "ndim": self.ndim, "shape": self._shape}
        if self._layout is not None:
            metadata.update(dedup_observations=True, frame_stack=self.frame_stack, spare_frames=self.spare_frames,
                            layout=self._layout.to_dict(), spares=self._spare_dirs)
        path = self.scratch_dir / self.METADATA
        path.with_suffix(".tmp").write_text(json.dumps(metadata))
        path.with_suffix(".tmp").replace(path)

    def _make_spares(self, key: FrameKey, size: int, old: TensorDict | None) -> TensorDict:
        """Spares in files: ``spares/<key index>.<n>``, the n-th size (a grown copy is a new folder)."""
        name = str(key.index)
        previous = self._spare_dirs.get(name)
        folder = f"{name}.{int(previous.rsplit('.', 1)[1]) + 1 if previous else 0}"
        layout = new_spares(key, 1, "cpu").expand(size)  # allocates nothing: memmap_like writes the files
        spares = layout.memmap_like(prefix=self.scratch_dir / self.SPARES / folder)
        spares.get("last_step").fill_(-1)
        if old is not None:
            spares[:old.batch_size[0]] = old
        self._spare_dirs[name] = folder
        self._write_metadata()
        if previous:
            shutil.rmtree(self.scratch_dir / self.SPARES / previous, ignore_errors=True)
        return spares

    @classmethod
    def missing_files(cls, scratch_dir: str | os.PathLike) -> str | None:
        """Which of the storage's files in ``scratch_dir`` (its position, its data/ and
        spares/ folders) is missing or cut short, in words; None when every file is whole.
        Checked before ``load`` opens them, which would make a missing position file anew,
        and whose tensordict leaves out a tensor whose file is missing (the storage would
        lack that key) and maps one cut short (reading past its end kills the process).
        Each folder of a TensorDict.memmap is compared with its meta.json: as many tensor
        files (and bytes) and sub-folders as it lists, whatever names they were given on
        disk. Reads only."""
        scratch_dir = Path(scratch_dir)
        position = scratch_dir / cls.POSITION
        if not position.is_file() or position.stat().st_size < 3 * 8:  # cursor, filled, write_count: int64
            return cls.POSITION
        metadata = json.loads((scratch_dir / cls.METADATA).read_text())
        folders = [Path(cls.DATA), *(Path(cls.SPARES) / name for name in metadata.get("spares", {}).values())]
        for folder in folders:
            if not (scratch_dir / folder).is_dir():
                return f"its folder {folder}/"
            for path, subfolders, files in os.walk(scratch_dir / folder):
                where = f"a file of its {Path(path).relative_to(scratch_dir)}/"
                if TENSORDICT_META not in files:
                    return where
                entries = [entry for entry in json.loads(Path(path, TENSORDICT_META).read_text()).values()
                           if isinstance(entry, dict)]
                tensors = [(math.prod(entry["shape"]), getattr(torch, entry["dtype"].removeprefix("torch.")).itemsize)
                           for entry in entries if "dtype" in entry and "shape" in entry]
                memmaps = [name for name in files if name.endswith(".memmap")]
                if (len(memmaps) < sum(1 for elements, _ in tensors if elements)
                        or sum(os.path.getsize(Path(path, name)) for name in memmaps)
                        < sum(elements * size for elements, size in tensors)
                        or len(subfolders) < sum(1 for entry in entries if entry.get("type") is not None)):
                    return where
        return None

    @classmethod
    def load(cls, scratch_dir: str | os.PathLike) -> "LazyMemmapStorage":
        """Re-open the storage whose files are in ``scratch_dir`` (data and write position)."""
        scratch_dir = Path(scratch_dir)
        metadata_path = scratch_dir / cls.METADATA
        if not metadata_path.exists():
            raise FileNotFoundError(f"{metadata_path} not found: {scratch_dir} holds no LazyMemmapStorage")
        metadata = json.loads(metadata_path.read_text())
        storage = cls.__new__(cls)
        LazyTensorStorage.__init__(storage, metadata["max_size"], ndim=metadata["ndim"], device="cpu",
                                   dedup_observations=metadata.get("dedup_observations", False),
                                   frame_stack=metadata.get("frame_stack", 1),
                                   spare_frames=metadata.get("spare_frames"))
        storage.scratch_dir = scratch_dir
        storage._shape, storage._spare_dirs = metadata["shape"], dict(metadata.get("spares", {}))
        counters = MemoryMappedTensor.from_filename(scratch_dir / cls.POSITION, dtype=torch.int64, shape=(3,))
        storage.position = WritePosition(counters)
        data = TensorDict.load_memmap(scratch_dir / cls.DATA)
        if list(data.batch_size) != metadata["shape"]:
            raise ValueError(f"{scratch_dir}: data shape {list(data.batch_size)} differs from storage.json's "
                             f"{metadata['shape']}")
        if "layout" in metadata:
            storage._layout = FrameLayout.from_dict(metadata["layout"])
        storage._bind(data)
        if storage._layout is not None:
            storage._frames.spares = [TensorDict.load_memmap(scratch_dir / cls.SPARES / storage._spare_dirs[str(i)])
                                      for i in range(len(storage._layout.keys))]
        return storage

    def load_state_dict(self, state: dict) -> torch.Tensor | None:
        """Load a ``state_dict``. A state without data (a checkpoint's: the files outlast the
        run) loaded onto files written on after it was taken (the run went on, then died
        before its next checkpoint; a resume) gets back the checkpoint's buffer as far as it
        still exists: the steps written after the checkpoint are dropped, and so are the
        checkpoint's steps they overwrote; the rest moves to time indices ``[0, kept)``,
        oldest first (a resumed run writes the dropped ones again). A warning says so.
        Returns the time indices kept, oldest first (element ``j`` was at ``kept[j]``: a
        PrioritizedSampler's priorities move with them), or None where nothing moved."""
        if "data" in state or self._data is None:
            super().load_state_dict(state)
            return None
        with self.position.lock:
            files_count = self.position.write_count
            super().load_state_dict(state)
            ahead = files_count - self.position.write_count
            if ahead < 0:
                log.warning("replay buffer %s: its files hold %d transitions fewer than the checkpoint (%d written, "
                            "the checkpoint's %d): the slots of the missing ones hold what the files had there",
                            self.scratch_dir, -ahead, files_count, self.position.write_count)
            if ahead <= 0:
                return None
            held = len(self)
            touched, kept = self._touched_and_kept(self.position.cursor, -(-ahead // self.num_rows))
            self._keep_only(kept, touched)
            in_files = min(ahead, self.num_rows * self._capacity)  # the ring holds the last ones
            log.warning("replay buffer %s: %d transitions in its files were written after the checkpoint (%d "
                        "written, the checkpoint's %d): dropped, with the %d of the checkpoint's they had "
                        "overwritten; the buffer resumes with the checkpoint's other %d", self.scratch_dir, in_files,
                        files_count, self.position.write_count, held - len(self), len(self))
            return kept

    def share_memory_(self) -> "LazyMemmapStorage":
        """A no-op: memory-mapped files are already shared between processes."""
        self._require_data()
        return self

    def share(self, mp_context) -> "LazyMemmapStorage":
        if self._data is None:
            raise RuntimeError("LazyMemmapStorage.share: call init_from(template) first, so that every "
                               "process writes into the same files")
        self.position.share(mp_context, file_backed=True)
        self._tensors_shared = True  # other processes map these files: spares cannot grow any more
        if self._frames is not None:
            self._frames.grow_spares = None
        return self


_FRAMED = object()  # a leaf of the gather tree that FrameStore.gather rebuilds


def _time_length(data: dict, ndim: int) -> int:
    """The time length (batch dim ``ndim - 1``) of a state's nested dict of tensors."""
    value = next(iter(data.values()))
    return _time_length(value, ndim) if isinstance(value, dict) else value.shape[ndim - 1]


def _as_key(path: tuple[str, ...]):
    return path[0] if len(path) == 1 else path


def _setup_frames(dedup_observations: Any, frame_stack: Any, spare_frames: Any) -> tuple[bool, int, int | None]:
    if not isinstance(dedup_observations, bool):
        raise ConfigError(f"dedup_observations must be True or False, got {dedup_observations!r}")
    frame_stack = check_positive_int("frame_stack", frame_stack)
    spare_frames = check_positive_int("spare_frames", spare_frames, optional=True)
    if frame_stack > 1 and not dedup_observations:
        raise ConfigError(f"frame_stack={frame_stack} stores each frame of a stack once, which needs "
                          "dedup_observations=True")
    return dedup_observations, frame_stack, spare_frames


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
