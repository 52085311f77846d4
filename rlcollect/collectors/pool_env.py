"""The env pool's envs as its main process sees them: the action server's RemoteEnv
(collectors/step_buffer.py) over every worker, whose workers answer through a ReadyQueue,
first done first served, and are stepped a group at a time.

    send_to(workers, envs, actions)   actions -> the envs' shared rows, STEP to each worker
    take()                            the next worker that answered (the ReadyQueue's order)
    reset() / reset_some(envs)        every env (after the steps under way ended, their
                                      results dropped) / some envs of idle workers

Waiting for given workers takes the others that answer meanwhile aside, to be taken next
in their order. Waits last ``WAIT_SLICE_SECONDS`` at a time and check, in between, that
the workers in flight are alive and that the batch is within its ``deadline``
(batch_timeout). A Collector drives it like any other env (collectors/pool.py):
``Collector.act(t, envs=...)`` reads the carrier of a group's envs from their staging rows,
``Collector.record(t, done, envs=...)`` what they staged.
"""
from __future__ import annotations

import time
from collections import deque

import gymnasium as gym
import numpy as np
from tensordict import TensorDict

from rlcollect.collectors.processes import WAIT_SLICE_SECONDS, WorkerProcesses
from rlcollect.collectors.step_buffer import FAILED, STEP, RemoteEnv, StepBuffer


class PoolEnv(RemoteEnv):
    """The P = W x E envs of a pool's W step workers (E each; env i of worker w is env
    ``w * E + i``).

    Args:
        buffer: the step buffer, allocated with ``pooled=True`` (workers answer through its
            ReadyQueue).
        workers: the worker processes (liveness, error reports).
        observation_space, action_space: one env's spaces.
    """

    def __init__(self, buffer: StepBuffer, workers: WorkerProcesses, observation_space: gym.Space,
                 action_space: gym.Space) -> None:
        super().__init__(buffer, range(len(buffer.command)), workers, observation_space, action_space)
        self.envs_per_worker = buffer.envs_per_worker
        self._queue = buffer.ready_queue
        self._done = self._staging.arrays["done"]
        self._worker_envs = [np.arange(w * self.envs_per_worker, (w + 1) * self.envs_per_worker)
                             for w in self._worker_ids]
        self._ready: deque[int] = deque()  # workers that answered, taken from the queue while waiting for others
        self._next_check = 0.0  # time.monotonic() of the next liveness check while answers keep coming

    @property
    def answered(self) -> int:
        """How many workers in flight or answered are still to be taken."""
        return len(self._pending) + len(self._ready)

    def envs_of(self, worker_ids: list[int]) -> np.ndarray | slice:
        """The envs of ``worker_ids``: a slice when the workers are consecutive (one worker
        always is), else their ids in the workers' order."""
        first, last = worker_ids[0], worker_ids[-1]
        if last - first == len(worker_ids) - 1 and all(a < b for a, b in zip(worker_ids, worker_ids[1:])):
            return slice(first * self.envs_per_worker, (last + 1) * self.envs_per_worker)
        return np.concatenate([self._worker_envs[w] for w in worker_ids])

    def done_of(self, envs: np.ndarray | slice) -> np.ndarray:
        """The done flags ``envs`` staged at their last step."""
        return self._done[envs]

    # ------------------------------------------------------------------ stepping
    def send_to(self, worker_ids: list[int], envs: np.ndarray | slice, actions: np.ndarray) -> None:
        """Write the actions of ``envs`` (the workers' envs) and let those workers step."""
        self._actions[envs] = actions
        self._order(worker_ids, STEP)

    def take(self) -> int:
        """The next worker that answered (first come, first served)."""
        return self._ready.popleft() if self._ready else self._receive()

    def _wait(self, worker_ids) -> None:
        """Wait until each of ``worker_ids`` that is in flight answered; the others that
        answer meanwhile join the ready ones (taken next, in their order)."""
        waiting = set(worker_ids) & self._pending
        while waiting:
            worker_id = self._receive()
            if worker_id in waiting:
                waiting.discard(worker_id)
            else:
                self._ready.append(worker_id)

    def _receive(self) -> int:
        """The next answer from the ReadyQueue, watching the workers while waiting; a
        worker that answered with a failure is reported (WorkerError)."""
        while True:
            worker_id = self._queue.get(WAIT_SLICE_SECONDS)
            if worker_id is not None:
                break
            self.check_workers()
        if time.monotonic() > self._next_check:  # answers keep coming: check on the others now and then
            self.check_workers()
        self._pending.discard(worker_id)
        if self._status[worker_id] == FAILED:
            self._workers.report(worker_id)
        return worker_id

    def check_workers(self) -> None:
        """Every worker in flight is alive, and the batch is within its deadline."""
        self._next_check = time.monotonic() + WAIT_SLICE_SECONDS
        for worker_id in sorted(self._pending):
            if not self._workers.is_alive(worker_id):
                self._workers.report(worker_id)
        if self._pending:
            self._fail_past_deadline(min(self._pending))

    # ------------------------------------------------------------------ resets
    def reset(self) -> TensorDict:
        """Let every step under way end (its result is dropped), then reset every env
        (seeded after ``set_seed``; decorrelation steps included)."""
        self.settle()
        self._ready.clear()
        return super().reset()

    def __repr__(self) -> str:
        return f"PoolEnv(num_workers={len(self._worker_ids)}, envs_per_worker={self.envs_per_worker})"
