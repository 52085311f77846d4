"""The one delivery path of a collected batch (docs/collectors.md, "Delivery").

    batch ──split_trajs?──▶ padded ──postproc?──▶ ──post_collect_hook(batch)──▶ yielded
                                                                         └────▶ or written into
                                                                                replay_buffer
                                                                                (whole, or complete
                                                                                trajectories only)

Every collector and every worker process calls a ``Delivery``; where each part runs
(worker or main process) is ``DeliveryOptions.in_workers()`` / ``in_main()``.
"""
from __future__ import annotations

from tensordict import TensorDictBase

from rlcollect.buffers.layout import to_storage_layout
from rlcollect.collectors.options import DeliveryOptions
from rlcollect.trajectories import CompleteTrajectories, split_trajectories


class Delivery:
    """Applies ``options`` to each batch: ``delivery(batch)`` returns the batch to yield,
    or None once it was written into the replay buffer. ``source`` tells apart batches
    whose rows are different envs (e.g. an asynchronous collector's workers), so that
    trajectories held back for ``trajs_per_batch`` continue in the right row."""

    def __init__(self, options: DeliveryOptions) -> None:
        self.options = options
        self.last_hook_result = None  # what the post-collect hook returned for the last batch
        self._complete: dict[int, CompleteTrajectories] = {}

    @property
    def writes(self) -> bool:
        return self.options.replay_buffer is not None

    def __call__(self, batch: TensorDictBase, source: int = 0) -> TensorDictBase | None:
        options = self.options
        if options.split_trajs:
            batch = split_trajectories(batch)
        if options.postproc is not None:
            batch = options.postproc(batch)
        if options.post_collect_hook is not None:
            self.last_hook_result = options.post_collect_hook(batch)
        if options.replay_buffer is None:
            return batch
        self.write(batch, source)
        return None

    def write(self, batch: TensorDictBase, source: int = 0) -> None:
        """The direct write: the batch in the storage's layout, or only the trajectories
        it completes (``trajs_per_batch``)."""
        replay_buffer = self.options.replay_buffer
        if self.options.trajs_per_batch is None:
            replay_buffer.extend(to_storage_layout(batch, replay_buffer.ndim))
            return
        if source not in self._complete:
            self._complete[source] = CompleteTrajectories(self.options.trajs_per_batch)
        trajectories = self._complete[source].add(batch)
        if trajectories is not None:
            replay_buffer.extend(trajectories)
