"""The env pool's envs as its main process sees them: a StagedEnv (envs/staging.py) over the
step buffer (collectors/step_buffer.py) whose workers answer through a ReadyQueue, first
done first served.

    send(workers, envs, actions)   actions -> the envs' shared rows, STEP to each worker
    take()                         the next worker that answered (the ReadyQueue's order)
    wait_for(workers)              until those answered; others answering meanwhile are
                                   served next, in their order
    reset() / reset_some(envs)     every env (after the steps under way ended, their
                                   results dropped) / some envs of idle workers

A Collector drives it like any other env (collectors/pool.py), a group of workers at a
time: ``Collector.act(t, envs=...)`` reads the group's carrier from the staging rows,
``Collector.record(t, done, envs=...)`` what they staged. Waits last
``WAIT_SLICE_SECONDS`` at a time and check, in between, that the workers in flight are
alive and that the batch is within its deadline (batch_timeout).
"""
from __future__ import annotations

import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.collectors.processes import WAIT_SLICE_SECONDS, WorkerProcesses
from rlcollect.collectors.step_buffer import FAILED, RESET_ALL, RESET_ALL_SEEDED, RESET_SOME, STEP, StepBuffer
from rlcollect.envs.spaces import random_actions, tree_map
from rlcollect.envs.staging import Staging


class PoolEnv:
    """The P = W x E envs of a pool's W step workers (E each; env i of worker w is env
    ``w * E + i``), stepped a group of workers at a time.

    Args:
        buffer: the step buffer, allocated with ``pooled=True`` (workers answer through its
            ReadyQueue).
        workers: the worker processes (liveness, error reports).
        observation_space, action_space: one env's spaces.
        batch_timeout: seconds a batch may take (``begin_batch`` to ``end_batch``); None:
            no limit.
    """

    def __init__(self, buffer: StepBuffer, workers: WorkerProcesses, observation_space: gym.Space,
                 action_space: gym.Space, batch_timeout: float | None = None) -> None:
        self.batch_timeout = batch_timeout
        self.num_workers, self.envs_per_worker = len(buffer.command), buffer.envs_per_worker
        self.num_envs = self.num_workers * self.envs_per_worker
        self.batch_size = torch.Size([self.num_envs])
        self.device = torch.device("cpu")
        self.observation_space, self.action_space = observation_space, action_space
        self._buffer, self._workers, self._queue = buffer, workers, buffer.ready_queue
        self._commands, self._status = buffer.command.numpy(), buffer.status.numpy()
        self._actions, self._reset_rows = buffer.action.numpy(), buffer.reset.numpy()
        self._staging = Staging(tree_map(lambda tensor: tensor.numpy(), buffer.staging), batched=True,
                                device=self.device)
        self._done = self._staging.arrays["done"]
        self._worker_envs = [np.arange(w * self.envs_per_worker, (w + 1) * self.envs_per_worker)
                             for w in range(self.num_workers)]
        self.in_flight: set[int] = set()  # workers ordered a command not answered yet
        self._ready: deque[int] = deque()  # workers that answered, taken from the queue while waiting for others
        self._deadline: float | None = None  # time.monotonic() by which the batch under way must end
        self._next_check = 0.0  # time.monotonic() of the next liveness check while answers keep coming
        self._seed: int | None = None

    @property
    def staged(self) -> TensorDict:
        return self._staging.staged

    @property
    def answered(self) -> int:
        """How many workers in flight or answered are still to be taken."""
        return len(self.in_flight) + len(self._ready)

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
    def send(self, worker_ids: list[int], envs: np.ndarray | slice, actions: np.ndarray) -> None:
        """Write the actions of ``envs`` (the workers' envs) and let the workers step."""
        self._actions[envs] = actions
        self._order(worker_ids, STEP)

    def take(self) -> int:
        """The next worker that answered (first come, first served)."""
        return self._ready.popleft() if self._ready else self._receive()

    def wait_for(self, worker_ids) -> None:
        """Wait until each of ``worker_ids`` that is in flight answered; the others that
        answer meanwhile join the ready ones (taken next, in their order)."""
        waiting = set(worker_ids) & self.in_flight
        while waiting:
            worker_id = self._receive()
            if worker_id in waiting:
                waiting.discard(worker_id)
            else:
                self._ready.append(worker_id)

    def stage_step(self, actions, auto_reset: bool = True) -> np.ndarray | None:
        """Step every env (after the steps under way ended) and wait: the StagedEnv step."""
        if not auto_reset:
            raise ValueError("the pool's workers reset an env at the step that finishes it (auto_reset=True)")
        everyone = range(self.num_workers)
        self.wait_for(set(self.in_flight))
        self._ready.clear()
        self.send(list(everyone), slice(None), np.asarray(actions).reshape(self._actions.shape))
        self.wait_for(everyone)
        return self._done if self._done.any() else None

    def _order(self, worker_ids, command: int) -> None:
        commands, act_ready = self._commands, self._buffer.act_ready
        for worker_id in worker_ids:
            commands[worker_id] = command
            act_ready[worker_id].release()
            self.in_flight.add(worker_id)

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
        self.in_flight.discard(worker_id)
        if self._status[worker_id] == FAILED:
            self._workers.report(worker_id)
        return worker_id

    def check_workers(self) -> None:
        """Every worker in flight is alive, and the batch is within its deadline."""
        self._next_check = time.monotonic() + WAIT_SLICE_SECONDS
        for worker_id in sorted(self.in_flight):
            if not self._workers.is_alive(worker_id):
                self._workers.report(worker_id)
        if self._deadline is not None and time.monotonic() > self._deadline and self.in_flight:
            self._workers.fail(min(self.in_flight), f"no step within batch_timeout={self.batch_timeout} s",
                               kind="timeout")

    def begin_batch(self) -> None:
        """A batch starts: its steps must end within batch_timeout from now."""
        self._deadline = None if self.batch_timeout is None else time.monotonic() + self.batch_timeout

    def end_batch(self) -> None:
        self._deadline = None

    # ------------------------------------------------------------------ resets
    def reset(self) -> TensorDict:
        """Let every step under way end (its result is dropped), then reset every env
        (seeded after ``set_seed``; decorrelation steps included)."""
        self.wait_for(set(self.in_flight))
        self._ready.clear()
        if self._seed is not None:  # env seeds as in GymEnv(..., num_envs=P, seed): seed + env index
            for worker_id in range(self.num_workers):
                self._buffer.seed[worker_id] = self._seed + worker_id * self.envs_per_worker
        everyone = range(self.num_workers)
        self._order(everyone, RESET_ALL if self._seed is None else RESET_ALL_SEEDED)
        self._seed = None
        self.wait_for(everyone)
        return self.staged.select("observation", "is_init").clone()

    def reset_some(self, indices) -> None:
        """Reset some envs, of workers that are not in flight."""
        indices = np.asarray(indices, dtype=np.int64)
        self._reset_rows[:] = False
        self._reset_rows[indices] = True
        owners = sorted(set((indices // self.envs_per_worker).tolist()))
        self._order(owners, RESET_SOME)
        self.wait_for(owners)

    def mark_init(self, indices) -> None:
        self._staging.mark_init(indices)

    # ------------------------------------------------------------------ the rest of StagedEnv
    def set_seed(self, seed: int | None) -> int | None:
        """Seed env i with ``seed + i`` at the next reset of every env."""
        self._seed = seed
        return seed

    def random_action(self) -> torch.Tensor:
        return random_actions(self.action_space, (self.num_envs,), self.device)

    def to(self, device) -> "PoolEnv":
        if torch.device(device).type != "cpu":
            raise ValueError(f"the envs live in worker processes, their data in shared CPU memory: env_device must "
                             f"be 'cpu', got {str(device)!r}")
        return self

    def close(self) -> None:
        """Nothing to do: the workers' envs close with the workers."""

    def __repr__(self) -> str:
        return f"PoolEnv(num_workers={self.num_workers}, envs_per_worker={self.envs_per_worker})"
