"""Action-server collectors (rlpyt's GPU samplers): envs step in worker processes, the
policy runs in the main process, once per step for every env (on the GPU if there is one).

    ActionServerCollector                      AlternatingCollector (two groups A, B)
    for t:                                     for t:
      server: policy(obs of all P envs)          server: policy(obs A) ─▶ A steps ─┐
      workers: every env steps                   server: policy(obs B) ─▶ B steps  │ while
      server: wait for every worker              server: wait A, policy(obs A) ... ◀┘ B steps

The server side is a Collector per group driving a RemoteEnv (collectors/step_buffer.py):
a GymEnv whose staging arrays are that group's rows of a shared-memory step buffer the
workers' envs write into. So the carrier, the preallocated batch and its write plan, traj
ids, is_init, truncation, max_frames_per_traj, set_truncated and init_random_frames are
the Collector's own code, and batches look exactly like a Collector's on a batched env of
P = num_workers x envs_per_worker: ``[P, T]``. Collector's per-step loop is split in two
halves (``_act_step``: record the carrier, run the policy; ``_record_step``: record what
the step produced), and the server interleaves the halves of the groups: while group A
steps its envs, group B's actions are computed, and the reverse.

Hooks, postproc, split_trajs and replay-buffer writes run in the main process on the
whole ``[P, T]`` batch. Worker start-up, liveness, error reports and shutdown are the
multi-process collectors' (collectors/processes.py).
"""
from __future__ import annotations

import logging
import math
import multiprocessing as mp
import time
from typing import Callable

import torch
from tensordict import TensorDictBase
from tensordict.nn import set_interaction_type

from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.devices import DeviceLike
from rlcollect.collectors.processes import WorkerProcesses, check_cpu_affinity
from rlcollect.collectors.single import Collector, _policy_param_device as _param_device, deliver_batch
from rlcollect.collectors.step_buffer import CLOSE, RemoteEnv, StepBuffer, StepWorkerSpec, step_worker_main
from rlcollect.trajectories import TrajectoryPool
from rlcollect.envs.gym_env import EnvSource, GymEnv

log = logging.getLogger(__name__)

START_METHODS = ("spawn", "forkserver", "fork")
# Collector arguments that apply to the per-step loop of each group, as in Collector.
STEP_LOOP_ARGUMENTS = ("max_frames_per_traj", "init_random_frames", "reset_at_each_iter", "reset_when_done",
                       "exploration_type", "track_traj_ids", "set_truncated", "no_cuda_sync")


class ActionServerCollector(CollectorBase):
    """Envs step in ``num_workers`` processes, ``envs_per_worker`` each; the main process
    runs the policy once per step on the observations of all P = num_workers x
    envs_per_worker envs, writes the actions back and lets the workers step.

    Yields TensorDicts of batch shape ``[P, T]``, ``P * T == frames_per_batch`` (rounded
    up to a multiple of P), with the keys and semantics of Collector's (DESIGN.md). Each
    worker's envs are GymEnv rows ``[w*E, (w+1)*E)`` of the batch.

    Worth it when the policy is costly and batches well (a GPU): one forward for every env
    instead of one per worker; the policy is never copied to the workers, so
    ``update_policy_weights_()`` has nothing to send.

    Args:
        create_env_fn: a gymnasium id or a zero-argument callable returning a gymnasium.Env
            (picklable for spawn); each worker builds ``GymEnv(create_env_fn,
            envs_per_worker, seed=..., **env_kwargs)``. Its spaces are read from one env
            built in the main process at construction.
        policy: callable TensorDict -> TensorDict writing ``"action"``; None: uniform random.
        num_workers: worker processes.
        envs_per_worker: envs each worker steps (in lock-step, in turn).
        frames_per_batch: frames per yielded batch.
        total_frames: stop after this many frames; -1 for endless.
        policy_device: where the policy runs (default: its parameters' device).
        storing_device: where batches are stored (default: CPU).
        max_decorrelation_steps: after every reset of all envs (construction, ``reset()``,
            ``set_seed()``, reset_at_each_iter), each env takes a uniformly drawn number of
            random-action steps in 0..max_decorrelation_steps (resetting when it finishes),
            so that the envs' episodes are not in lock-step; collection then starts there,
            each env's first step a trajectory start (is_init). 0: no such steps.
        seed: env i (over all workers) is seeded with ``seed + i``, as in ``GymEnv(...,
            num_envs=P, seed=seed)``; worker w's RNGs (decorrelation included) with
            ``seed + w * envs_per_worker``. None: unseeded.
        env_kwargs: keyword arguments of GymEnv (``max_episode_steps``, gym.make kwargs).
        start_method: "spawn" (default), "forkserver" or "fork".
        worker_torch_threads: torch threads in each worker (None: leave torch's default).
        worker_cpu_affinity: None, or one list of CPU ids per worker to pin it to.
        batch_timeout: seconds a batch may take before failing (None: no limit; dead
            workers are detected regardless).
        shutdown_timeout: seconds workers get to exit before they are terminated.
        split_trajs, postproc, pre_collect_hook, post_collect_hook, replay_buffer,
            trajs_per_batch: as in Collector, in the main process, on the ``[P, T]`` batch.
        **collector_kwargs: the per-step arguments of Collector: max_frames_per_traj,
            init_random_frames, reset_at_each_iter, reset_when_done, exploration_type,
            track_traj_ids, set_truncated, no_cuda_sync.

    A worker that dies or an env that raises becomes a ``WorkerError`` naming the worker
    (with the env's traceback); any error during collection shuts the collector down
    first: no process, shared memory or semaphore is left behind.
    """

    num_groups = 1  # groups of workers whose steps alternate (AlternatingCollector: 2)

    def __init__(
        self,
        create_env_fn: EnvSource,
        policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
        *,
        num_workers: int,
        envs_per_worker: int = 1,
        frames_per_batch: int,
        total_frames: int = -1,
        policy_device: DeviceLike = None,
        storing_device: DeviceLike = None,
        max_decorrelation_steps: int = 0,
        seed: int | None = None,
        env_kwargs: dict | None = None,
        start_method: str = "spawn",
        worker_torch_threads: int | None = 1,
        worker_cpu_affinity=None,
        batch_timeout: float | None = None,
        shutdown_timeout: float = 5.0,
        split_trajs: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        pre_collect_hook: Callable[[], None] | None = None,
        post_collect_hook: Callable[[TensorDictBase], None] | None = None,
        replay_buffer=None,
        trajs_per_batch: int | None = None,
        **collector_kwargs,
    ) -> None:
        super().__init__()
        self._workers: WorkerProcesses | None = None
        self._groups: list[Collector] = []
        self._envs: list[RemoteEnv] = []
        self.num_workers, self.envs_per_worker = self._setup_workers(num_workers, envs_per_worker)
        self.num_envs = self.num_workers * self.envs_per_worker
        self.frames_per_batch, self._time_steps = self._setup_frames_per_batch(frames_per_batch)
        self.total_frames = self._setup_total_frames(total_frames)
        self.max_decorrelation_steps = Collector._setup_non_negative("max_decorrelation_steps",
                                                                     max_decorrelation_steps)
        self._collector_kwargs = self._setup_collector_kwargs(collector_kwargs)
        self.split_trajs = Collector._setup_split_trajs(split_trajs, collector_kwargs.get("track_traj_ids", True))
        self._complete_trajectories = Collector._setup_trajs_per_batch(trajs_per_batch, replay_buffer, split_trajs)
        self.replay_buffer = replay_buffer
        self.postproc = postproc
        self.pre_collect_hook = pre_collect_hook
        self.post_collect_hook = post_collect_hook
        self.seed = seed
        self.batch_timeout = batch_timeout
        self.shutdown_timeout = shutdown_timeout
        cpus = check_cpu_affinity(worker_cpu_affinity, self.num_workers)
        mp_context = self._setup_start_method(start_method)
        env_kwargs = dict(env_kwargs or {})
        observation_space, action_space = self._probe_spaces(create_env_fn, env_kwargs)
        self._step_buffer = StepBuffer.allocate(observation_space, action_space, self.num_workers,
                                                self.envs_per_worker, mp_context)
        self._workers = WorkerProcesses(mp_context, on_failure=self.shutdown, name="rlcollect-step-worker")
        try:
            self._start_workers(create_env_fn, env_kwargs, worker_torch_threads, cpus)
            self._build_groups(policy, policy_device, storing_device, observation_space, action_space)
        except BaseException:
            self.shutdown()
            raise
        self.batch_size = torch.Size([self.num_envs, self._time_steps])

    # ------------------------------------------------------------------ construction
    def _setup_workers(self, num_workers: int, envs_per_worker: int) -> tuple[int, int]:
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if num_workers % self.num_groups:
            raise ValueError(f"{type(self).__name__} splits its workers into {self.num_groups} groups of equal "
                             f"size: num_workers must be a multiple of {self.num_groups}, got {num_workers}")
        return num_workers, envs_per_worker

    def _setup_frames_per_batch(self, frames_per_batch: int) -> tuple[int, int]:
        if not isinstance(frames_per_batch, int) or frames_per_batch < 1:
            raise ValueError(f"frames_per_batch must be a positive int, got {frames_per_batch!r}")
        time_steps = math.ceil(frames_per_batch / self.num_envs)
        if time_steps * self.num_envs != frames_per_batch:
            log.info("frames_per_batch=%d rounded up to %d (a multiple of %d envs)",
                     frames_per_batch, time_steps * self.num_envs, self.num_envs)
        return time_steps * self.num_envs, time_steps

    @staticmethod
    def _setup_collector_kwargs(collector_kwargs: dict) -> dict:
        for name in ("device", "env_device"):
            if name in collector_kwargs:
                raise ValueError(f"{name}: the envs live in worker processes, on the CPU; set policy_device and "
                                 "storing_device instead")
        unknown = sorted(set(collector_kwargs) - set(STEP_LOOP_ARGUMENTS))
        if unknown:
            raise TypeError(f"unexpected arguments {unknown}; the Collector arguments that apply here are "
                            f"{list(STEP_LOOP_ARGUMENTS)}")
        return dict(collector_kwargs)

    @staticmethod
    def _setup_start_method(start_method: str):
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}")
        return mp.get_context(start_method)

    @staticmethod
    def _probe_spaces(create_env_fn, env_kwargs: dict):
        """The spaces of one env built here (rlpyt's example env), to size the step buffer."""
        if isinstance(create_env_fn, GymEnv):
            raise TypeError("create_env_fn must be a gymnasium id or a zero-argument callable returning a "
                            "gymnasium.Env: each worker builds its own GymEnv(create_env_fn, envs_per_worker)")
        probe = GymEnv(create_env_fn, **env_kwargs)
        try:
            return probe.observation_space, probe.action_space
        finally:
            probe.close()

    def _start_workers(self, create_env_fn, env_kwargs: dict, torch_threads, cpus) -> None:
        for worker_id in range(self.num_workers):
            first_env = worker_id * self.envs_per_worker
            spec = StepWorkerSpec(
                worker_id=worker_id, env_source=create_env_fn, env_kwargs=env_kwargs,
                env_seed=None if self.seed is None else self.seed + first_env,
                worker_seed=None if self.seed is None else self.seed + first_env,
                torch_threads=torch_threads, cpus=None if cpus is None else cpus[worker_id],
                max_decorrelation_steps=self.max_decorrelation_steps, step_buffer=self._step_buffer,
            )
            self._workers.start(step_worker_main, spec)
        for _ in self._workers.receive(range(self.num_workers), expect="ready", timeout=self.batch_timeout):
            pass

    def _build_groups(self, policy, policy_device, storing_device, observation_space, action_space) -> None:
        """One Collector per group of workers, over a RemoteEnv of the group's envs; the
        groups share the policy (the first group's, on policy_device) and the traj-id pool.
        Building each Collector resets its envs: the workers' first decorrelation."""
        self._traj_pool = traj_pool = TrajectoryPool()
        group_size = self.num_workers // self.num_groups
        kwargs = dict(self._collector_kwargs)
        if "init_random_frames" in kwargs:  # counted per group, in the group's share of the frames
            kwargs["init_random_frames"] = math.ceil(kwargs["init_random_frames"] / self.num_groups)
        for group in range(self.num_groups):
            env = RemoteEnv(self._step_buffer, range(group * group_size, (group + 1) * group_size), self._workers,
                            observation_space, action_space)
            self._envs.append(env)
            if group > 0:  # the first group's policy, on the exact device it is on ("cuda:0", not "cuda"): no copy
                policy = self._groups[0].policy
                policy_device = _param_device(policy) or self._groups[0].devices.policy
            self._groups.append(Collector(
                env, policy, frames_per_batch=self._time_steps * env.num_envs, total_frames=-1,
                policy_device=policy_device, env_device="cpu", storing_device=storing_device,
                traj_pool=traj_pool, **kwargs,
            ))
        assert all(collector.policy is self._groups[0].policy for collector in self._groups)

    # ------------------------------------------------------------------ collection
    def _interleave(self, overlap: bool) -> None:
        """Fill every group's batch: per step t, group by group, wait for the group's
        previous step, run the policy on its envs, let its workers step. With
        ``overlap=False`` a group is let go only once the other group's step is over."""
        groups, envs = self._groups, self._envs
        # A policy off the CPU with a batch on it: send the action from the batch, where step t just copied it,
        # rather than copy it from the policy's device a second time.
        sent_from_batch = [collector._action_views if collector._action_numpy_views is None
                           and collector.devices.storing.type == "cpu" else None for collector in groups]
        random_steps = [collector._begin_batch() for collector in groups]
        in_flight: list[int | None] = [None] * len(groups)  # the step each group's workers are taking
        reset_when_done = groups[0].reset_when_done

        def finish(group: int) -> None:
            groups[group]._record_step(in_flight[group], envs[group].receive())
            in_flight[group] = None

        self._set_deadline(None if self.batch_timeout is None else time.monotonic() + self.batch_timeout)
        with torch.no_grad(), set_interaction_type(groups[0].exploration_type):
            for t in range(self._time_steps):
                for group, (collector, env) in enumerate(zip(groups, envs)):
                    if in_flight[group] is not None:
                        finish(group)
                    action = collector._act_step(t, t < random_steps[group])
                    if not overlap:
                        for other in range(len(groups)):
                            if in_flight[other] is not None:
                                finish(other)
                    env.send(action if sent_from_batch[group] is None else sent_from_batch[group][t], reset_when_done)
                    in_flight[group] = t
            for group in range(len(groups)):
                if in_flight[group] is not None:
                    finish(group)
        self._set_deadline(None)
        for collector in groups:
            collector._end_batch()

    def _set_deadline(self, deadline: float | None) -> None:
        for env in self._envs:
            env.deadline = deadline

    def _collect_groups(self) -> None:
        self._interleave(overlap=True)

    def _next_batch(self) -> TensorDictBase | None:
        if self.pre_collect_hook is not None:
            self.pre_collect_hook()
        try:
            self._collect_groups()
        except BaseException:
            self.shutdown()  # steps may be in flight: the workers' state is unknown
            raise
        self._frames += self.frames_per_batch
        if len(self._groups) == 1:
            batch = self._groups[0]._batch
            if self.replay_buffer is None:
                batch = batch.clone()  # the preallocated batch is overwritten by the next one
        else:
            batch = torch.cat([collector._batch for collector in self._groups], 0)
        return deliver_batch(batch, split_trajs=self.split_trajs, postproc=self.postproc,
                             post_collect_hook=self.post_collect_hook, replay_buffer=self.replay_buffer,
                             complete_trajectories=self._complete_trajectories)

    # ------------------------------------------------------------------ public API
    @property
    def policy(self):
        """The policy the server runs (a copy on policy_device when its weights live elsewhere)."""
        return self._groups[0].policy if self._groups else None

    def update_policy_weights_(self, weights=None) -> None:
        """The policy lives in this process: nothing to send. Refreshes the server's copy
        when policy_device differs from the policy's own device (a no-op otherwise), or
        loads ``weights`` (a module, state_dict or TensorDict) into it, as Collector does."""
        self._groups[0].update_policy_weights_(weights)

    def set_seed(self, seed: int) -> int:
        """Seed torch's RNG here and every env (env i: ``seed + i``) and worker RNG, then
        reset every env (decorrelation steps included): the same seed gives the same
        batches. Returns the seed."""
        torch.manual_seed(seed)
        for env in self._envs:
            env.set_seed(seed)
        self._restart()
        return seed

    def reset(self) -> None:
        """Reset every env (decorrelation steps included); each starts a new trajectory."""
        self._restart()

    def _restart(self) -> None:
        try:
            for collector in self._groups:
                collector._make_carrier()
        except BaseException:
            self.shutdown()
            raise

    def state_dict(self) -> dict:
        """Frame count and the trajectory-id pool (ids never repeat after a reload)."""
        return {"frames": self._frames, "traj_pool": self._traj_pool.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._frames = int(state["frames"])
        self._traj_pool.load_state_dict(state["traj_pool"])
        for collector in self._groups:
            collector._frames = self._frames * collector._num_envs // self.num_envs
        self._restart()

    @property
    def _processes(self) -> list:
        return [] if self._workers is None else self._workers.processes

    def _close(self) -> None:
        if self._workers is not None:
            self._workers.close(self.shutdown_timeout, ask=self._ask_to_close)
        self._groups, self._envs = [], []
        self._step_buffer = None  # unlinks the semaphores (spawn) and frees the shared memory

    def _ask_to_close(self, worker_id: int) -> None:
        self._step_buffer.order(worker_id, CLOSE)

    def __del__(self):
        if not getattr(self, "_shut_down", True) and getattr(self, "_workers", None) is not None:
            self.shutdown()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_workers={self.num_workers}, envs_per_worker={self.envs_per_worker}, "
                f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames})")


class AlternatingCollector(ActionServerCollector):
    """ActionServerCollector with its workers in two groups that alternate: while group A
    steps its envs, the server computes group B's actions, and the reverse (rlpyt's
    alternating sampler). The policy's time is then hidden behind the envs' (up to 2x
    throughput in theory when the two are equal); it is called twice per step, on half the
    envs each time, so it gains nothing when the policy dominates.

    Same arguments and output as ActionServerCollector (``num_workers`` must be even:
    workers ``0..W/2-1`` form group A, envs rows ``[0, P/2)``), plus:

    Args:
        overlap: True (rlpyt's AlternatingSampler): a group is let go as soon as its
            actions are ready, even while the other group still steps. False
            (NoOverlapAlternatingSampler): a group waits until the other group's step is
            over, so the two groups never step at the same time (each may then have the
            whole CPU, e.g. two workers sharing cores in pairs).
    """

    num_groups = 2

    def __init__(self, create_env_fn: EnvSource, policy=None, *, overlap: bool = True, **kwargs) -> None:
        if not isinstance(overlap, bool):
            raise TypeError(f"overlap must be a bool, got {overlap!r}")
        self.overlap = overlap
        super().__init__(create_env_fn, policy, **kwargs)

    def _collect_groups(self) -> None:
        self._interleave(self.overlap)

