"""What every collector shares: frame accounting, iteration, the context-manager protocol."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Iterator

import torch
from tensordict import TensorDict


class CollectorBase(ABC):
    """Iterating yields batches of ``frames_per_batch`` frames until ``total_frames``
    (``-1``: forever). Iterating again continues where the last iteration stopped."""

    frames_per_batch: int
    total_frames: int
    batch_size: torch.Size  # of the batches collected (before split_trajs / postproc)

    def __init__(self) -> None:
        self._frames = 0
        self._shut_down = False

    @staticmethod
    def _setup_total_frames(total_frames: int) -> int:
        if not isinstance(total_frames, int) or (total_frames < 0 and total_frames != -1) or total_frames == 0:
            raise ValueError(f"total_frames must be a positive int or -1 (endless), got {total_frames!r}")
        return total_frames

    @property
    def frames(self) -> int:
        """Frames collected so far (every yielded batch counts in full)."""
        return self._frames

    def __len__(self) -> int:
        if self.total_frames < 0:
            raise TypeError("an endless collector (total_frames=-1) has no length")
        return math.ceil(self.total_frames / self.frames_per_batch)

    def __iter__(self) -> Iterator[TensorDict]:
        if self._shut_down:
            raise RuntimeError(f"{type(self).__name__} was shut down")
        while self.total_frames < 0 or self._frames < self.total_frames:
            yield self._next_batch()

    @abstractmethod
    def _next_batch(self) -> TensorDict:
        """Collect one batch (counting its frames), apply postproc and the post-collect
        hook, return it."""

    @abstractmethod
    def _close(self) -> None:
        """Release envs, processes and shared memory (called once)."""

    def shutdown(self) -> None:
        """Release everything the collector holds. Idempotent."""
        if self._shut_down:
            return
        self._shut_down = True
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
