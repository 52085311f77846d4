"""The one delivery path of a collected batch (docs/architecture.md, "Options and delivery").

    batch ──split_trajs?──▶ padded ──postproc?──▶ ──post_collect_hook(batch)──▶ yielded
                                                                         └────▶ or written into
                                                                                replay_buffer
                                                                                (whole, or complete
                                                                                trajectories only)

Every collector and every worker process calls a ``Delivery``; where each part runs
(worker or main process) is ``DeliveryOptions.in_workers()`` / ``in_main()``.
"""
from __future__ import annotations

import collections

from tensordict import TensorDictBase

from rlcollect.collectors.options import DeliveryOptions
from rlcollect.trajectories import CompleteTrajectories, TrajectoryBatcher, split_trajectories

PENDING = object()  # what a delivery returns while trajs_per_batch trajectories are still running


class Delivery:
    """Applies ``options`` to each batch: ``delivery(batch)`` returns the batch to yield,
    or None once it was written into the replay buffer. ``source`` tells apart batches
    whose rows are different envs (e.g. an asynchronous collector's workers), so that
    trajectories held back for ``trajs_per_batch`` continue in the right row."""

    def __init__(self, options: DeliveryOptions, hook_results: collections.deque | None = None) -> None:
        self.options = options
        # where each non-None hook result goes (a collector's, for hook_results(); the deque itself, not the
        # collector: no reference cycle keeps a shut-down collector's workers' resources alive)
        self.hook_results = hook_results
        self.last_hook_result = None  # what the post-collect hook returned for the last batch
        self._complete: dict[int, CompleteTrajectories] = {}
        self._batchers: dict[int, TrajectoryBatcher] = {}  # trajs_per_batch without a buffer, per source

    @property
    def writes(self) -> bool:
        return self.options.replay_buffer is not None

    @property
    def batches_trajectories(self) -> bool:
        """Whether yielded batches are whole trajectories (trajs_per_batch, no buffer)."""
        return self.options.trajs_per_batch is not None and self.options.replay_buffer is None

    def __call__(self, batch: TensorDictBase, source: int = 0):
        """The batch to yield, None once written into the replay buffer, or PENDING when
        trajs_per_batch trajectories have not completed yet (collect more)."""
        options = self.options
        if self.batches_trajectories:
            batch = self._trajectories(batch, source)
            if batch is None:
                return PENDING
        if options.split_trajs:
            batch = split_trajectories(batch)
        if options.postproc is not None:
            batch = options.postproc(batch)
        if options.post_collect_hook is not None:
            self.last_hook_result = options.post_collect_hook(batch)
            if self.hook_results is not None and self.last_hook_result is not None:
                self.hook_results.append(self.last_hook_result)
        if options.replay_buffer is None:
            return batch
        self.write(batch, source)
        return None

    def _trajectories(self, batch: TensorDictBase, source: int) -> TensorDictBase | None:
        """Exactly trajs_per_batch complete trajectories, the first to complete first, or None."""
        if source not in self._batchers:
            self._batchers[source] = TrajectoryBatcher(self.options.trajs_per_batch, self.options.traj_format)
        batcher = self._batchers[source]
        batcher.add(batch)
        return batcher.pop()

    def drop_partial(self) -> None:
        """The envs restarted: unfinished trajectories will never complete."""
        for batcher in self._batchers.values():
            batcher.drop_partial()
        for complete in self._complete.values():
            complete.drop_partial()

    def write(self, batch: TensorDictBase, source: int = 0) -> None:
        """The direct write: the batch in the storage's layout, or only the trajectories
        it completes (``trajs_per_batch``)."""
        replay_buffer = self.options.replay_buffer
        if self.options.trajs_per_batch is None:
            replay_buffer.extend_batch(batch)
            return
        if source not in self._complete:
            self._complete[source] = CompleteTrajectories(self.options.trajs_per_batch)
        trajectories = self._complete[source].add(batch)
        if trajectories is not None:
            replay_buffer.extend_batch(trajectories)
