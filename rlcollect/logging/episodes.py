"""Returns and lengths of the trajectories that complete in each batch."""
from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rlcollect.collectors.trajectories import MASK, TRAJ_IDS


class EpisodeTracker:
    """Follows trajectories across batches by ``("collector", "traj_ids")``.

    ``update(batch)`` returns ``(returns, lengths)`` of the trajectories whose last step
    (``("next", "done")``) is in ``batch``, counting the steps they had in earlier batches.
    """

    def __init__(self) -> None:
        self._partial: dict[int, tuple[float, int]] = {}

    def update(self, batch: TensorDictBase) -> tuple[list[float], list[int]]:
        if TRAJ_IDS not in batch.keys(include_nested=True):
            raise KeyError("episode statistics need ('collector', 'traj_ids'): keep track_traj_ids=True")
        if MASK in batch.keys(include_nested=True):  # legacy padded layout
            batch = batch[batch.get(MASK)]
        flat = batch.reshape(-1)  # time is last: each env's steps stay contiguous
        traj_ids, segment_lengths = torch.unique_consecutive(flat.get(TRAJ_IDS).cpu(), return_counts=True)
        ends = torch.cumsum(segment_lengths, 0) - 1
        segment = torch.repeat_interleave(torch.arange(len(traj_ids)), segment_lengths)
        reward = flat.get(("next", "reward")).cpu().double()
        segment_returns = torch.zeros(len(traj_ids), dtype=torch.float64).index_add_(0, segment, reward)
        finished = flat.get(("next", "done")).cpu()[ends]
        returns, lengths = [], []
        for traj_id, seg_return, seg_length, done in zip(
            traj_ids.tolist(), segment_returns.tolist(), segment_lengths.tolist(), finished.tolist()
        ):
            previous_return, previous_length = self._partial.pop(traj_id, (0.0, 0))
            total = (previous_return + seg_return, previous_length + seg_length)
            if done:
                returns.append(total[0])
                lengths.append(total[1])
            else:
                self._partial[traj_id] = total
        return returns, lengths
