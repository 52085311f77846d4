"""Trajectory ids and the legacy padded trajectory layout."""
from __future__ import annotations

import torch
from tensordict import TensorDict, lazy_stack

TRAJ_IDS = ("collector", "traj_ids")
MASK = ("collector", "mask")


class TrajectoryPool:
    """Hands out trajectory ids that never repeat (also after ``load_state_dict``).

    With a multiprocessing context the counter lives in shared memory behind a lock, so
    worker processes that receive the pool at start-up draw from one sequence.
    """

    def __init__(self, start: int = 0, *, mp_context=None) -> None:
        self._counter = None if mp_context is None else mp_context.Value("q", start)
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
        with self._counter.get_lock():
            first = self._counter.value
            self._counter.value = first + count
        return first

    def state_dict(self) -> dict:
        return {"next_id": self._next_id if self._counter is None else self._counter.value}

    def load_state_dict(self, state: dict) -> None:
        if self._counter is None:
            self._next_id = int(state["next_id"])
        else:
            with self._counter.get_lock():
                self._counter.value = int(state["next_id"])


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
    contains a partial episode.
    """

    def __init__(self, trajs_per_write: int) -> None:
        if not isinstance(trajs_per_write, int) or trajs_per_write < 1:
            raise ValueError(f"trajs_per_batch must be a positive int, got {trajs_per_write!r}")
        self.trajs_per_write = trajs_per_write
        self._tails: list[TensorDict | None] = []
        self._ready: list[TensorDict] = []
        self._ready_count = 0

    def add(self, batch: TensorDict) -> TensorDict | None:
        rows = batch.reshape(-1, batch.batch_size[-1])
        if not self._tails:
            self._tails = [None] * rows.shape[0]
        for row_index in range(rows.shape[0]):
            row = rows[row_index]
            tail = self._tails[row_index]
            steps = row if tail is None else torch.cat([tail, row], 0)
            ends = torch.nonzero(steps.get(("next", "done"))).squeeze(-1)
            if ends.numel():
                last_end = int(ends[-1]) + 1
                self._ready.append(steps[:last_end].clone())
                self._ready_count += ends.numel()
                self._tails[row_index] = steps[last_end:].clone() if last_end < steps.shape[0] else None
            else:
                self._tails[row_index] = steps.clone()
        if self._ready_count < self.trajs_per_write:
            return None
        complete = torch.cat(self._ready, 0)
        self._ready, self._ready_count = [], 0
        return complete
