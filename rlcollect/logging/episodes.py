"""Trajectory info: return, length, discounted return and chosen totals of every
trajectory that completes in a batch, counted exactly across batch boundaries."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rlcollect.collectors.trajectories import MASK, TRAJ_IDS


@dataclass(frozen=True)
class TrajectoryInfo:
    """One completed trajectory (rlpyt's TrajInfo): ``totals`` sums the tracker's
    ``sum_keys`` (env-specific per-step quantities) over its steps."""

    traj_id: int
    episode_return: float
    length: int
    discounted_return: float
    totals: dict = field(default_factory=dict)


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
    """

    def __init__(self, gamma: float = 0.99, sum_keys: Sequence[NestedKey] = ()) -> None:
        self.gamma = gamma
        self.sum_keys = list(sum_keys)
        self._partial: dict[int, tuple[float, int, float, list[float]]] = {}

    def update(self, batch: TensorDictBase) -> tuple[list[float], list[int]]:
        infos = self.infos(batch)
        return [info.episode_return for info in infos], [info.length for info in infos]

    def infos(self, batch: TensorDictBase) -> list[TrajectoryInfo]:
        keys = batch.keys(include_nested=True)
        if TRAJ_IDS not in keys:
            raise KeyError("trajectory info needs ('collector', 'traj_ids'): keep track_traj_ids=True")
        missing = [key for key in self.sum_keys if key not in keys]
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
        reward = flat.get(("next", "reward")).cpu().double().reshape(flat.numel())

        def per_segment(values: torch.Tensor) -> list[float]:
            return torch.zeros(num_segments, dtype=torch.float64).index_add_(0, segment, values).tolist()

        returns = per_segment(reward)
        discounted = per_segment(reward * torch.full_like(exponent, self.gamma).pow(exponent))
        totals = [per_segment(flat.get(key).cpu().double().reshape(flat.numel())) for key in self.sum_keys]
        finished = flat.get(("next", "done")).cpu().reshape(flat.numel())[starts + segment_lengths - 1].tolist()
        completed = []
        for index, traj_id in enumerate(traj_ids.tolist()):
            old_return, old_length, old_discounted, old_totals = partial[index]
            state = (old_return + returns[index], old_length + int(segment_lengths[index]),
                     old_discounted + discounted[index],
                     [old + new[index] for old, new in zip(old_totals, totals)])
            if finished[index]:
                names = ["/".join(key) if isinstance(key, tuple) else key for key in self.sum_keys]
                completed.append(TrajectoryInfo(traj_id, state[0], state[1], state[2], dict(zip(names, state[3]))))
            else:
                self._partial[traj_id] = state
        return completed
