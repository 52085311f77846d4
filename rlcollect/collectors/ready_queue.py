"""The env pool's ready queue: workers announce, in the order they finish, that their
last command is done; the main process takes them first come, first served.

    worker w (any number at once)             main process (one reader)
    with lock:                                items.acquire(timeout)   # some worker is done
        ring[tail % W] = w; tail += 1          w = ring[head % W]; head += 1
    items.release()

Each worker has at most one command unanswered (the main process orders a worker only
once its previous answer was taken), so the ring of W slots never overflows. Slots are
taken in lock order and every slot below the highest written one is written, so after n
acquisitions the first n slots hold ids. ``items`` counts, so no announcement is lost;
a reader waits ``timeout`` seconds at most and gets None, to check on the workers.
"""
from __future__ import annotations

import torch


class ReadyQueue:
    """First come, first served worker ids, in shared memory (picklable to the workers).

    Args:
        num_workers: the workers that may announce (ids ``0..num_workers-1``).
        mp_context: the multiprocessing context the workers start with.
    """

    def __init__(self, num_workers: int, mp_context) -> None:
        self.num_workers = num_workers
        self._ring = torch.zeros(num_workers, dtype=torch.int64).share_memory_()
        self._tail = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._lock = mp_context.Lock()
        self._items = mp_context.Semaphore(0)
        self._head = 0  # the reader's own position (main process only)

    def put(self, worker_id: int) -> None:
        """Announce that worker ``worker_id`` answered its command (worker side)."""
        with self._lock:
            tail = int(self._tail[0])
            self._ring[tail % self.num_workers] = worker_id
            self._tail[0] = tail + 1
        self._items.release()

    def get(self, timeout: float | None) -> int | None:
        """The id of the worker that announced first among those not taken yet, waiting up
        to ``timeout`` seconds (None: no limit); None when none announced in time."""
        if not self._items.acquire(timeout=timeout):
            return None
        worker_id = int(self._ring[self._head % self.num_workers])
        self._head += 1
        return worker_id

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_head"] = 0  # a worker never reads
        return state
