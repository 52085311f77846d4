"""Trajectories: ids that never repeat, complete-trajectory bookkeeping, the legacy padded
layout, and trajectory info (return, length, discounted return, totals) counted exactly
across batch boundaries.

A data-level module: collectors, buffers and loggers all use it, it uses none of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack
from tensordict.utils import NestedKey

from rlcollect.keys import DONE, MASK, REWARD, TRAJ_IDS
from rlcollect.validation import check_positive_int


class TrajectoryPool:
    """Hands out trajectory ids that never repeat (also after ``load_state_dict``).

    With a multiprocessing context the counter lives in shared memory behind a lock, so
    worker processes that receive the pool at start-up draw from one sequence. A worker
    killed while it holds the lock (SIGKILL between the lock's acquire and release) would
    leave it held for good, and every other process waiting for an id, its replacement and
    the collector's shutdown included, would hang: the lock is held for a few instructions,
    so one not released within ``ORPHANED_AFTER`` seconds was left by a dead process, and is
    released for it. Reading the counter for a state (``state_dict``) takes no lock.
    """

    ORPHANED_AFTER = 5.0  # seconds: a lock held this long was left by a process that died holding it

    def __init__(self, start: int = 0, *, mp_context=None) -> None:
        # a plain lock (a Value's default is an RLock, which only its owner may release)
        self._counter = None if mp_context is None else mp_context.Value("q", start, lock=mp_context.Lock())
        self._next_id = start

    def take(self, count: int) -> torch.Tensor:
        """``count`` fresh ids as an int64 tensor."""
        first = self.take_range(count)
        return torch.arange(first, first + count, dtype=torch.int64)

    def take_range(self, count: int) -> int:
        """Reserve ``count`` consecutive fresh ids; returns the first."""
        if self._counter is None:
            first, self._next_id = self._next_id, self._next_id + count
            return first
        self._acquire()
        try:
            counter = self._counter.get_obj()  # the shared value itself: the lock is held
            first = counter.value
            counter.value = first + count
        finally:
            self._counter.get_lock().release()
        return first

    def _acquire(self) -> None:
        """The counter's lock; one held past ORPHANED_AFTER is released first (class docstring)."""
        lock = self._counter.get_lock()
        while not lock.acquire(timeout=self.ORPHANED_AFTER):
            try:
                lock.release()  # left held by a process that died in the few instructions it holds it
            except ValueError:  # released meanwhile (by its holder, or another waiter): take it again
                pass

    def state_dict(self) -> dict:
        # the counter read without its lock: one 8-byte word, whole, and never a wait on a dead holder
        return {"next_id": self._next_id if self._counter is None else self._counter.get_obj().value}

    def load_state_dict(self, state: dict) -> None:
        if self._counter is None:
            self._next_id = int(state["next_id"])
            return
        self._acquire()
        try:
            self._counter.get_obj().value = int(state["next_id"])
        finally:
            self._counter.get_lock().release()


def _trajectory_ids(flat: TensorDict, row_length: int) -> torch.Tensor:
    """Per-step trajectory ids of a flat batch made of rows of ``row_length`` steps:
    ("collector", "traj_ids") when present, else rebuilt from ("next", "done")."""
    if TRAJ_IDS in flat.keys(include_nested=True):
        return flat.get(TRAJ_IDS)
    done = flat.get(("next", "done")).reshape(-1, row_length)
    starts = torch.zeros_like(done)
    starts[:, 0] = True
    starts[:, 1:] = done[:, :-1]
    return starts.reshape(-1).cumsum(0)


def split_trajectories(batch: TensorDict, *, as_nested: bool = False) -> TensorDict:
    """Split a collector batch (time last: ``[*B, T]``) into its trajectories.

    Returns the legacy padded ``[N_traj, T_max]`` layout, zero-padded, with a bool
    ``("collector", "mask")`` marking real steps; or, with ``as_nested=True``, a lazily
    stacked TensorDict of the ragged trajectories (no padding, no mask). Trajectories are
    delimited by ``("collector", "traj_ids")``, or by ``("next", "done")`` without them.
    A trajectory cut by the batch boundary is split there: prefer the flat layout.
    """
    row_length = batch.batch_size[-1]
    flat = batch.reshape(-1)
    traj_ids = _trajectory_ids(flat, row_length)
    _, lengths = torch.unique_consecutive(traj_ids, return_counts=True)
    if as_nested:
        return lazy_stack(list(flat.split(lengths.tolist(), dim=0)), dim=0)
    num_trajs, max_length = lengths.numel(), int(lengths.max())
    device = traj_ids.device
    trajectory = torch.repeat_interleave(torch.arange(num_trajs, device=device), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.arange(flat.numel(), device=device) - starts[trajectory]
    padded = flat.apply(
        lambda x: torch.zeros((num_trajs, max_length, *x.shape[1:]), dtype=x.dtype, device=x.device),
        batch_size=[num_trajs, max_length],
    )
    padded[trajectory, position] = flat
    mask = torch.zeros(num_trajs, max_length, dtype=torch.bool, device=flat.device)
    mask[trajectory, position] = True
    padded.set(MASK, mask)
    return padded


class CompleteTrajectories:
    """Holds collected steps back until their trajectory is complete (last step done).

    ``add(batch)`` takes a collector batch (time last, each row one env) and returns the
    flat concatenation of complete trajectories once at least ``trajs_per_write`` are
    ready, else None. Each env's unfinished tail waits for the next batch, so a write never
    contains a partial episode. ``split(batch)`` gives the trajectories a batch completes,
    one by one, in the order they ended.
    """

    def __init__(self, trajs_per_write: int) -> None:
        self.trajs_per_write = check_positive_int("trajs_per_batch", trajs_per_write)
        self._tails: list[TensorDict | None] = []
        self._ready: list[TensorDict] = []
        self._ready_count = 0

    def split(self, batch: TensorDict) -> list[TensorDict]:
        """The trajectories that end in ``batch`` (earlier steps from previous batches
        included), ordered by the step they ended at, then by row; unfinished tails wait."""
        rows = batch.reshape(-1, batch.batch_size[-1])
        if not self._tails:
            self._tails = [None] * rows.shape[0]
        ended = []  # (end step in this batch, row, trajectory)
        for row_index in range(rows.shape[0]):
            row = rows[row_index]
            tail = self._tails[row_index]
            if tail is not None and TRAJ_IDS in row.keys(True) and tail.get(TRAJ_IDS)[-1] != row.get(TRAJ_IDS)[0]:
                tail = None  # the env was reset meanwhile (reset(), reset_at_each_iter): that trajectory never ends
            held = 0 if tail is None else tail.shape[0]
            steps = row if tail is None else torch.cat([tail, row], 0)
            ends = torch.nonzero(steps.get(DONE)).squeeze(-1).tolist()
            start = 0
            for end in ends:
                ended.append((end - held, row_index, steps[start:end + 1].clone()))
                start = end + 1
            self._tails[row_index] = steps[start:].clone() if start < steps.shape[0] else None
        return [trajectory for _, _, trajectory in sorted(ended, key=lambda item: item[:2])]

    def add(self, batch: TensorDict) -> TensorDict | None:
        trajectories = self.split(batch)
        self._ready += trajectories
        self._ready_count += len(trajectories)
        if self._ready_count < self.trajs_per_write:
            return None
        complete = torch.cat(self._ready, 0)
        self._ready, self._ready_count = [], 0
        return complete

    def drop_partial(self) -> None:
        """Forget the unfinished tails (their envs were reset)."""
        self._tails = []


TRAJ_FORMATS = ("cat", "padded")


class TrajectoryBatcher:
    """Batches of exactly ``trajs_per_batch`` complete trajectories, the first to complete
    first (a collector's ``trajs_per_batch`` without a replay buffer).

    ``add(batch)`` takes a collector batch; ``pop()`` returns the next batch of complete
    trajectories, or None until enough have completed. ``traj_format``: "cat" (flat
    ``[sum of lengths]``, trajectories end to end, exactly N done flags) or "padded"
    (``[N, T_max]``, zero-padded after each trajectory's done, with ``("collector", "mask")``).
    """

    def __init__(self, trajs_per_batch: int, traj_format: str = "cat") -> None:
        if traj_format not in TRAJ_FORMATS:
            raise ValueError(f"traj_format must be one of {TRAJ_FORMATS}, got {traj_format!r}")
        self.trajs_per_batch = check_positive_int("trajs_per_batch", trajs_per_batch)
        self.traj_format = traj_format
        self._splitter = CompleteTrajectories(trajs_per_batch)
        self._ready: list[TensorDict] = []

    def add(self, batch: TensorDict) -> None:
        self._ready += self._splitter.split(batch)

    def pop(self) -> TensorDict | None:
        if len(self._ready) < self.trajs_per_batch:
            return None
        chosen, self._ready = self._ready[:self.trajs_per_batch], self._ready[self.trajs_per_batch:]
        if self.traj_format == "cat":
            return torch.cat(chosen, 0)
        return _pad(chosen)

    def drop_partial(self) -> None:
        """Forget the unfinished trajectories (a reset restarted their envs)."""
        self._splitter.drop_partial()


def _pad(trajectories: list[TensorDict]) -> TensorDict:
    """``[N, T_max]``: trajectory i in row i from step 0, zeros after it, and the mask."""
    lengths = [trajectory.shape[0] for trajectory in trajectories]
    first = trajectories[0]
    padded = first.apply(lambda x: torch.zeros((len(trajectories), max(lengths), *x.shape[1:]), dtype=x.dtype,
                                               device=x.device), batch_size=[len(trajectories), max(lengths)])
    mask = torch.zeros(len(trajectories), max(lengths), dtype=torch.bool, device=first.device)
    for row, (trajectory, length) in enumerate(zip(trajectories, lengths)):
        padded[row, :length] = trajectory
        mask[row, :length] = True
    padded.set(MASK, mask)
    return padded


# ---------------------------------------------------------------------------- trajectory info
def end_rows(batch: TensorDictBase) -> dict[int, int]:
    """``{trajectory id: its env row}`` of the trajectories that end (done) in a batch
    ``[envs, T]`` (a batch ``[T]`` has one row, 0)."""
    done, ids = batch.get(DONE), batch.get(TRAJ_IDS)
    done = done.reshape(ids.shape)
    if done.dim() == 1:
        return {traj_id: 0 for traj_id in ids[done].tolist()}
    where = done.nonzero()
    return dict(zip(ids[where[:, 0], where[:, 1]].tolist(), where[:, 0].tolist()))


@dataclass(frozen=True)
class TrajectoryInfo:
    """One completed trajectory (rlpyt's TrajInfo): ``totals`` sums the tracker's
    ``sum_keys`` (env-specific per-step quantities) over its steps, ``last`` holds the
    values of its ``last_keys`` at its last step (e.g. an env's ``is_success``)."""

    traj_id: int
    episode_return: float
    length: int
    discounted_return: float
    totals: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)


def _names(keys: Sequence[NestedKey]) -> list[str]:
    """Nested keys as names joined with ``/`` (("next", "cost") -> "next/cost")."""
    return ["/".join(key) if isinstance(key, tuple) else key for key in keys]


class EpisodeTracker:
    """Follows trajectories across batches by ``("collector", "traj_ids")``.

    ``infos(batch)`` returns a TrajectoryInfo for each trajectory whose last step
    (``("next", "done")``) is in ``batch``, counting the steps it had in earlier batches;
    ``update(batch)`` the ``(returns, lengths)`` of the same trajectories.

    Args:
        gamma: discount of ``discounted_return`` (sum of gamma**k * reward_k, k from 0 at
            the trajectory's first step).
        sum_keys: per-step entries (e.g. ``("next", "cost")``) summed into ``totals``,
            keyed by their name joined with ``/``.
        last_keys: per-step entries read at each trajectory's last step into ``last``
            (e.g. ``("next", "is_success")``), keyed likewise.
    """

    def __init__(self, gamma: float = 0.99, sum_keys: Sequence[NestedKey] = (),
                 last_keys: Sequence[NestedKey] = ()) -> None:
        self.gamma = gamma
        self.sum_keys = list(sum_keys)
        self.last_keys = list(last_keys)
        self._partial: dict[int, tuple[float, int, float, list[float]]] = {}

    def update(self, batch: TensorDictBase) -> tuple[list[float], list[int]]:
        infos = self.infos(batch)
        return [info.episode_return for info in infos], [info.length for info in infos]

    def infos(self, batch: TensorDictBase) -> list[TrajectoryInfo]:
        keys = batch.keys(include_nested=True)
        if TRAJ_IDS not in keys:
            raise KeyError("trajectory info needs ('collector', 'traj_ids'): keep track_traj_ids=True")
        missing = [key for key in [*self.sum_keys, *self.last_keys] if key not in keys]
        if missing:
            raise KeyError(f"EpisodeTracker sum_keys {missing} are not in the batch")
        if MASK in keys:  # legacy padded layout
            batch = batch[batch.get(MASK)]
        flat = batch.reshape(-1)  # time is last: each env's steps stay contiguous
        traj_ids, segment_lengths = torch.unique_consecutive(flat.get(TRAJ_IDS).cpu(), return_counts=True)
        num_segments = len(traj_ids)
        starts = torch.cumsum(segment_lengths, 0) - segment_lengths
        segment = torch.repeat_interleave(torch.arange(num_segments), segment_lengths)
        partial = [self._partial.pop(traj_id, (0.0, 0, 0.0, [0.0] * len(self.sum_keys)))
                   for traj_id in traj_ids.tolist()]
        # the discount exponent of each step: steps seen before this batch + position in the segment
        before = torch.tensor([length for _, length, _, _ in partial], dtype=torch.float64)
        exponent = before[segment] + torch.arange(flat.numel(), dtype=torch.float64) - starts[segment]
        reward = flat.get(REWARD).cpu().double().reshape(flat.numel())

        def per_segment(values: torch.Tensor) -> list[float]:
            return torch.zeros(num_segments, dtype=torch.float64).index_add_(0, segment, values).tolist()

        returns = per_segment(reward)
        discounted = per_segment(reward * torch.full_like(exponent, self.gamma).pow(exponent))
        totals = [per_segment(flat.get(key).cpu().double().reshape(flat.numel())) for key in self.sum_keys]
        ends = starts + segment_lengths - 1
        finished = flat.get(DONE).cpu().reshape(flat.numel())[ends].tolist()
        lasts = [flat.get(key).cpu().reshape(flat.numel())[ends].tolist() for key in self.last_keys]
        completed = []
        for index, traj_id in enumerate(traj_ids.tolist()):
            old_return, old_length, old_discounted, old_totals = partial[index]
            state = (old_return + returns[index], old_length + int(segment_lengths[index]),
                     old_discounted + discounted[index],
                     [old + new[index] for old, new in zip(old_totals, totals)])
            if finished[index]:
                completed.append(TrajectoryInfo(traj_id, state[0], state[1], state[2],
                                                dict(zip(_names(self.sum_keys), state[3])),
                                                {name: values[index] for name, values in
                                                 zip(_names(self.last_keys), lasts)}))
            else:
                self._partial[traj_id] = state
        return completed
