"""The action server's step buffer: envs stepped in worker processes, read and driven by
the main process through shared memory (rlpyt's GPU sampler step buffer).

Both sides of the protocol live here. The buffer holds, for all P envs, GymEnv's staging
arrays plus the actions, in shared memory; worker w owns rows [w*E, (w+1)*E):

    main (RemoteEnv, one per group of workers)        worker w (step_worker_main)
    write actions[rows], command[w] = STEP
    act_ready[w].release()  ───────────────────────▶  act_ready[w].acquire()
                                                      GymEnv.stage_step(actions[rows]):
                                                        staging rows <- next obs, reward,
                                                        terminated, truncated, done,
                                                        reset obs where done, is_init
    step_ready[w].acquire()  ◀─────────────────────── step_ready[w].release()
    read the staging rows (the Collector's carrier and write plan alias them)

The worker's GymEnv stages straight into its rows (``GymEnv.stage_into``), so a step
copies nothing between processes besides the actions. Semaphores count, so no release is
ever lost; every command is answered by exactly one release, and the main process only
writes a command once the previous one was answered, so the two never drift. Waits on
the main side last ``WAIT_SLICE_SECONDS`` at a time and check the worker's liveness in
between; a worker that raises ships its traceback over its pipe, flags ``status`` and
releases ``step_ready`` at once, so an env error is reported without waiting. A worker
checks, whenever ``act_ready`` stays silent for a while, that the main process still
exists, and exits if not.

The env pool (collectors/pool.py) allocates the buffer with a ``ReadyQueue``: workers then
answer through it instead of ``step_ready``, so that the main process can wait for the
first workers done among many (``StepBuffer.answer``); its RemoteEnv over every worker,
PoolEnv (collectors/pool_env.py), waits on that queue.
"""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.collectors.processes import WAIT_SLICE_SECONDS, WorkerProcesses, initialize_worker
from rlcollect.collectors.ready_queue import ReadyQueue
from rlcollect.envs.gym_env import GymEnv
from rlcollect.envs.spaces import random_actions, sample_shape, torch_dtype, tree_map
from rlcollect.envs.staging import Staging, allocate_arrays

# commands, written to command[w] before act_ready[w] is released
STEP, STEP_KEEP_DONE, RESET_SOME, RESET_ALL, RESET_ALL_SEEDED, CLOSE = range(1, 7)
FAILED = 1  # status[w]: the worker raised (its traceback is on its pipe)
PARENT_CHECK_SECONDS = 1.0  # how often an idle worker checks that the main process exists


@dataclass
class StepBuffer:
    """Shared memory and semaphores between the server and its workers.

    ``staging``: GymEnv's staging arrays for all envs, ``[num_envs, ...]`` each;
    ``action``: ``[num_envs, *action]``; ``reset``: ``[num_envs]`` envs to reset
    (RESET_SOME); ``command``, ``seed``, ``status``: one entry per worker;
    ``ready_queue``: where workers answer when it is set (the env pool), else ``step_ready``.
    """

    staging: dict  # name -> tensor (observations nested as their space)
    action: torch.Tensor
    reset: torch.Tensor
    command: torch.Tensor
    seed: torch.Tensor
    status: torch.Tensor
    act_ready: list  # server -> worker w: command[w] is ready
    step_ready: list  # worker w -> server: command[w] is done
    envs_per_worker: int
    ready_queue: ReadyQueue | None = None

    @classmethod
    def allocate(cls, observation_space: gym.Space, action_space: gym.Space, num_workers: int,
                 envs_per_worker: int, mp_context, info_keys=(), pooled: bool = False) -> "StepBuffer":
        """Zeroed shared arrays and fresh semaphores; ``pooled``: workers answer through a
        ReadyQueue (first come, first served) instead of their ``step_ready``."""
        num_envs = num_workers * envs_per_worker

        def shared(shape, dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype).share_memory_()

        staging = tree_map(lambda array: torch.from_numpy(array).clone().share_memory_(),
                           allocate_arrays(observation_space, num_envs, info_keys))
        return cls(
            staging=staging,
            action=shared((num_envs, *sample_shape(action_space)), torch_dtype(action_space)),
            reset=shared(num_envs, torch.bool),
            command=shared(num_workers, torch.int64),
            seed=shared(num_workers, torch.int64),
            status=shared(num_workers, torch.int64),
            act_ready=[mp_context.Semaphore(0) for _ in range(num_workers)],
            step_ready=[mp_context.Semaphore(0) for _ in range(num_workers)],
            envs_per_worker=envs_per_worker,
            ready_queue=ReadyQueue(num_workers, mp_context) if pooled else None,
        )

    def rows(self, worker_ids: range) -> slice:
        """The env rows the workers ``worker_ids`` (consecutive) own."""
        return slice(worker_ids.start * self.envs_per_worker, worker_ids.stop * self.envs_per_worker)

    def order(self, worker_id: int, command: int) -> None:
        """Give worker ``worker_id`` a command (the server's RemoteEnv does this through
        numpy views on the hot path)."""
        self.command[worker_id] = command
        self.act_ready[worker_id].release()

    def answer(self, worker_id: int) -> None:
        """Tell the server that worker ``worker_id``'s command is done (worker side)."""
        if self.ready_queue is not None:
            self.ready_queue.put(worker_id)
        else:
            self.step_ready[worker_id].release()


# ---------------------------------------------------------------------- the worker's side
@dataclass
class StepWorkerSpec:
    """Everything a step worker needs, pickled once at start-up."""

    worker_id: int
    create_env: Callable[[], GymEnv]  # called in the worker (envs/sources.py EnvSpec): its envs, seeded
    worker_seed: int | None  # initialize_worker's seed (rlcollect/seeding.py: its first env's)
    torch_threads: int | None
    cpus: tuple[int, ...] | None
    max_decorrelation_steps: int
    step_buffer: StepBuffer


def step_worker_main(handoff: list[StepWorkerSpec], connection) -> None:
    """Process entry point: build the envs over this worker's rows, then serve commands."""
    spec = handoff[0]
    buffer = spec.step_buffer
    parent_pid = os.getppid()  # the main process (fork, spawn) or the fork server
    env = None
    try:
        initialize_worker(spec.worker_seed, spec.torch_threads, spec.cpus)
        env = spec.create_env()
        if not hasattr(env, "stage_into") or env.num_envs != buffer.envs_per_worker:
            raise TypeError(f"the env source built {env!r}: a step worker needs an env that stages into shared "
                            f"arrays (a GymEnv, a CPU TorchCartPole) of envs_per_worker={buffer.envs_per_worker} envs")
        rows = buffer.rows(range(spec.worker_id, spec.worker_id + 1))
        env.stage_into(tree_map(lambda tensor: tensor[rows].numpy(), buffer.staging))
        connection.send(("ready",))
        _serve(spec, env, buffer, rows, lambda: _main_gone(connection, parent_pid))
    except (EOFError, BrokenPipeError):
        pass  # the main process went away: nothing to report to
    except BaseException:
        try:
            connection.send(("error", traceback.format_exc()))
        except (OSError, EOFError):
            pass
        buffer.status[spec.worker_id] = FAILED
        buffer.answer(spec.worker_id)  # wake a waiting server now
    finally:
        if env is not None:
            env.close()


def _main_gone(connection, parent_pid: int) -> bool:
    """Whether the main process went away: this worker was handed to another parent, or
    the main end of its pipe closed (the main process never writes to it otherwise; with
    fork, later workers hold copies of it, so they notice first and, exiting, close it)."""
    if os.getppid() != parent_pid:
        return True
    try:
        if connection.poll():
            connection.recv()
    except (EOFError, OSError):
        return True
    return False


def _serve(spec: StepWorkerSpec, env: GymEnv, buffer: StepBuffer, rows: slice, main_gone) -> None:
    worker_id, num_envs = spec.worker_id, buffer.envs_per_worker
    act_ready = buffer.act_ready[worker_id]
    commands, seeds = buffer.command.numpy(), buffer.seed.numpy()
    actions, reset = buffer.action[rows].numpy(), buffer.reset[rows].numpy()
    rng = np.random.default_rng(spec.worker_seed)  # decorrelation step counts
    while True:
        while not act_ready.acquire(timeout=PARENT_CHECK_SECONDS):
            if main_gone():
                return
        command = commands[worker_id]
        if command == STEP:
            env.stage_step(actions)
        elif command == STEP_KEEP_DONE:
            env.stage_step(actions, auto_reset=False)
        elif command == RESET_SOME:
            env.reset_some(np.flatnonzero(reset))
        elif command == RESET_ALL or command == RESET_ALL_SEEDED:
            if command == RESET_ALL_SEEDED:
                env.set_seed(int(seeds[worker_id]))
                rng = np.random.default_rng(int(seeds[worker_id]))
            env.reset_some(range(num_envs))
            if spec.max_decorrelation_steps:
                env.random_steps(rng.integers(0, spec.max_decorrelation_steps + 1, size=num_envs))
        elif command == CLOSE:
            return
        else:
            raise ValueError(f"unknown step-worker command {command!r}")
        buffer.answer(worker_id)


# ---------------------------------------------------------------------- the server's side
class RemoteEnv:
    """The server's handle on the envs of a group of step workers: a StagedEnv
    (envs/staging.py), so a Collector drives it, whose staging arrays are the group's rows
    of the step buffer.

    ``send(actions)`` starts a step and returns at once; ``receive()`` waits for it and
    returns the done mask like ``stage_step``, which is the two together. Resets go to the
    workers that own the envs; a reset of every env (``reset()``) is followed, in each
    worker, by its decorrelation steps. Its tensors live on the CPU, in shared memory.
    """

    def __init__(self, buffer: StepBuffer, worker_ids: range, workers: WorkerProcesses,
                 observation_space: gym.Space, action_space: gym.Space) -> None:
        rows = buffer.rows(worker_ids)
        self.num_envs = rows.stop - rows.start
        self.batch_size = torch.Size([self.num_envs])
        self.device = torch.device("cpu")
        self.observation_space, self.action_space = observation_space, action_space
        self._staging = Staging(tree_map(lambda tensor: tensor[rows].numpy(), buffer.staging), batched=True,
                                device=self.device)
        self._seed = None
        self._actions_shape = (self.num_envs, *sample_shape(action_space))
        self._buffer, self._worker_ids, self._workers = buffer, worker_ids, workers
        self._actions = buffer.action[rows].numpy()
        self._reset_rows = buffer.reset[rows].numpy()
        self._status = buffer.status[worker_ids.start:worker_ids.stop].numpy()
        self._commands = buffer.command.numpy()
        self._step_ready = [buffer.step_ready[w] for w in worker_ids]
        self._pending: set[int] = set()  # workers given a command not yet answered
        self.deadline: float | None = None  # time.monotonic() by which a wait must end (batch_timeout)
        self.timeout: float | None = None  # the batch_timeout that set it, for the error

    @property
    def staged(self) -> TensorDict:
        return self._staging.staged

    @property
    def waiting(self):
        """The group's rows of the step buffer's ``waiting`` array (reset_policy="wait"):
        the workers' GymEnvs leave those envs unstepped."""
        return self._staging.arrays["waiting"]

    @property
    def worker_ids(self) -> range:
        """The workers whose envs this handle drives."""
        return self._worker_ids

    def limit_batch(self, timeout: float | None) -> None:
        """Waits fail once ``timeout`` seconds from now have passed (a batch's
        batch_timeout); None lifts the limit."""
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def _fail_past_deadline(self, worker_id: int) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self._workers.fail(worker_id, f"no step within batch_timeout={self.timeout} s", kind="timeout")

    # ------------------------------------------------------------------ stepping
    def send(self, actions, auto_reset: bool = True) -> None:
        """Write one action per env and let the group's workers step."""
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        np.copyto(self._actions, actions.reshape(self._actions_shape))
        self._staging.begin_step()  # is_init flags this side marked (set_truncated) end with this step
        self._order(self._worker_ids, STEP if auto_reset else STEP_KEEP_DONE)

    def receive(self) -> np.ndarray | None:
        """Wait for the step under way; the done mask when some env finished, else None."""
        self._wait(self._worker_ids)
        done = self._staging.arrays["done"]
        return done if done.any() else None

    def stage_step(self, actions, auto_reset: bool = True) -> np.ndarray | None:
        self.send(actions, auto_reset)
        return self.receive()

    def _order(self, worker_ids, command: int) -> None:
        commands, act_ready, pending = self._commands, self._buffer.act_ready, self._pending
        for worker_id in worker_ids:
            commands[worker_id] = command
            act_ready[worker_id].release()
            pending.add(worker_id)

    def _wait(self, worker_ids) -> None:
        for worker_id in worker_ids:
            step_ready = self._step_ready[worker_id - self._worker_ids.start]
            while not step_ready.acquire(timeout=WAIT_SLICE_SECONDS):
                if not self._workers.is_alive(worker_id):
                    self._workers.report(worker_id)
                self._fail_past_deadline(worker_id)
            self._pending.discard(worker_id)
        if self._status.any():
            self._workers.report(self._worker_ids.start + int(np.flatnonzero(self._status)[0]))

    # ------------------------------------------------------------------ replacing a worker
    def forget(self, worker_id: int) -> None:
        """Drop what a failed (stopped) worker left behind: its unanswered command, the
        semaphore counts it did not consume or gave, its failure flag; a replacement then
        starts from a clean slate."""
        self._pending.discard(worker_id)
        for semaphore in (self._buffer.act_ready[worker_id], self._buffer.step_ready[worker_id]):
            while semaphore.acquire(False):
                pass
        self._buffer.status[worker_id] = 0

    def settle(self) -> None:
        """Wait for every command still unanswered (after a failure, before the next order)."""
        self._wait(sorted(self._pending))

    # ------------------------------------------------------------------ resets
    def reset(self) -> TensorDict:
        self.reset_some(range(self.num_envs))
        return self.staged.select("observation", "is_init").clone()

    def reset_some(self, indices) -> None:
        indices = np.asarray(list(indices), dtype=np.int64)
        if indices.size == self.num_envs:
            if self._seed is not None:  # env seeds as in GymEnv(..., num_envs=P, seed): seed + env index
                for worker_id in self._worker_ids:
                    self._buffer.seed[worker_id] = self._seed + worker_id * self._buffer.envs_per_worker
            self._order(self._worker_ids, RESET_ALL if self._seed is None else RESET_ALL_SEEDED)
            self._seed = None
            self._wait(self._worker_ids)
            return
        self._reset_rows[:] = False
        self._reset_rows[indices] = True
        owners = sorted({self._worker_ids.start + int(i) // self._buffer.envs_per_worker for i in indices})
        self._order(owners, RESET_SOME)
        self._wait(owners)

    def mark_init(self, indices) -> None:
        self._staging.mark_init(indices)

    # ------------------------------------------------------------------ the rest of StagedEnv
    def set_seed(self, seed: int | None) -> int | None:
        """Seed env i of the group's workers with ``seed + i`` (over all workers) at the next reset."""
        self._seed = seed
        return seed

    def random_action(self) -> torch.Tensor:
        return random_actions(self.action_space, tuple(self.batch_size), self.device)

    def to(self, device) -> "RemoteEnv":
        if torch.device(device).type != "cpu":
            raise ValueError(f"the envs live in worker processes, their data in shared CPU memory: env_device must "
                             f"be 'cpu', got {str(device)!r} (policy_device and storing_device may differ)")
        return self

    def close(self) -> None:
        """Nothing to do: the workers' envs close with the workers."""

    def __repr__(self) -> str:
        return (f"RemoteEnv(workers={self._worker_ids.start}..{self._worker_ids.stop - 1}, "
                f"num_envs={self.num_envs})")
