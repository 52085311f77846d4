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
halves (``act``: record the carrier, run the policy; ``record``: record what the step
produced), and the server interleaves the halves of the groups: while group A
steps its envs, group B's actions are computed, and the reverse.

Hooks, postproc, split_trajs and replay-buffer writes run in the main process on the
whole ``[P, T]`` batch. Worker start-up, liveness, error reports and shutdown are the
multi-process collectors' (collectors/processes.py).
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch
from tensordict import TensorDictBase
from tensordict.nn import set_interaction_type

from rlcollect.collectors.base import CollectionPlan, CollectorBase, check_env_device, check_worker_env_backend
from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.devices import policy_param_device
from rlcollect.collectors.options import (
    OPTION_GROUPS,
    BatchSpec,
    DeliveryOptions,
    DeviceOptions,
    StepOptions,
    WorkerOptions,
    check_groups,
    check_total_frames,
    split_options,
    with_options_doc,
)
from rlcollect.collectors.processes import WorkerLost, WorkerProcesses
from rlcollect.collectors.restarts import Restarts
from rlcollect.collectors.single import Collector
from rlcollect.collectors.step_buffer import CLOSE, RemoteEnv, StepBuffer, StepWorkerSpec, step_worker_main
from rlcollect.envs.sources import EnvSource, worker_env_specs
from rlcollect.errors import ConfigError
from rlcollect.seeding import restart_seed
from rlcollect.trajectories import TrajectoryPool
from rlcollect.validation import check_non_negative_int, check_positive_int


@with_options_doc(StepOptions, DeviceOptions, DeliveryOptions, WorkerOptions)
class ActionServerCollector(CollectorBase):
    """Envs step in ``num_workers`` processes, ``envs_per_worker`` each; the main process
    runs the policy once per step on the observations of all P = num_workers x
    envs_per_worker envs, writes the actions back and lets the workers step.

    Yields TensorDicts of batch shape ``[P, T]``, ``P * T == frames_per_batch`` (rounded
    up to a multiple of P), with the keys and semantics of Collector's
    (docs/data-layout.md). Each worker's envs are GymEnv rows ``[w*E, (w+1)*E)`` of the batch.

    Worth it when the policy is costly and batches well (a GPU): one forward for every env
    instead of one per worker; the policy is never copied to the workers, so
    ``update_policy_weights_()`` has nothing to send.

    Args:
        create_env_fn: a gymnasium id or a zero-argument callable returning a gymnasium.Env
            or a GymEnv of envs_per_worker envs (picklable for spawn); each worker builds
            its own. The spaces are read from one env built in the main process.
        policy: callable TensorDict -> TensorDict writing ``"action"``; None: uniform random.
        num_workers: worker processes.
        envs_per_worker: envs each worker steps (in lock-step, in turn).
        frames_per_batch: frames per yielded batch.
        total_frames: stop after this many frames; -1 for endless.
        max_decorrelation_steps: after every reset of all envs (construction, ``reset()``,
            ``set_seed()``, reset_at_each_iter), each env takes a uniformly drawn number of
            random-action steps in 0..max_decorrelation_steps (resetting when it finishes),
            so that the envs' episodes are not in lock-step; collection then starts there,
            each env's first step a trajectory start (is_init). 0: no such steps.
        seed: env i (over all workers) is seeded with ``seed + i``, as in ``GymEnv(...,
            num_envs=P, seed=seed)``; worker w's RNGs (decorrelation included) with the seed
            of its first env (rlcollect/seeding.py). None: unseeded.
        env_kwargs: keyword arguments of GymEnv (``max_episode_steps``, gym.make kwargs).

    The envs live in the workers, on the CPU: ``env_device`` must stay None;
    ``device`` sets policy_device and storing_device. Hooks, postproc, split_trajs and
    replay-buffer writes run in the main process on the whole ``[P, T]`` batch.

    A worker that dies or an env that raises becomes a ``WorkerError`` naming the worker
    (with the env's traceback); any error during collection shuts the collector down
    first: no process, shared memory or semaphore is left behind. With
    ``max_worker_restarts`` the worker is replaced instead and every env restarts: the
    envs step in lockstep, so the batch under way is collected again from new trajectories
    (docs/collectors.md, "Failures, shutdown, state").
    """

    num_groups = 1  # groups of workers whose steps alternate (AlternatingCollector: 2)
    hooks_run_in_process = True  # hooks see the whole [P, T] batch here
    option_groups = OPTION_GROUPS  # what **options are routed to

    @classmethod
    def batch_envs(cls, plan: CollectionPlan) -> int:
        """Every worker's envs step together: num_workers x envs_per_worker."""
        return plan.options.get("num_workers", 1) * plan.options.get("envs_per_worker", 1)

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """Its envs step in worker processes, on the CPU: no env_device, no async backend."""
        super().check_plan(plan)
        check_env_device(plan)
        check_worker_env_backend(plan)

    def __init__(
        self,
        create_env_fn: EnvSource,
        policy=None,
        *,
        num_workers: int,
        envs_per_worker: int = 1,
        frames_per_batch: int,
        total_frames: int = -1,
        max_decorrelation_steps: int = 0,
        seed: int | None = None,
        env_kwargs: dict | None = None,
        **options,
    ) -> None:
        groups = split_options(type(self).__name__, options)
        step, devices, delivery = groups[StepOptions], groups[DeviceOptions], groups[DeliveryOptions]
        self.worker_options = workers = groups[WorkerOptions]
        check_groups(step, delivery)
        super().__init__(delivery)
        self._restarts = Restarts(workers.max_worker_restarts, workers.restart_on_env_error)
        self._talking = 0  # > 0 while a failed worker may be replaced (collecting, resetting)
        self._batch_frames = 0  # frames the batch under way has recorded
        self._workers: WorkerProcesses | None = None
        self._groups: list[Collector] = []
        self._envs: list[RemoteEnv] = []
        self.num_workers, self.envs_per_worker = self._setup_workers(num_workers, envs_per_worker)
        self.num_envs = self.num_workers * self.envs_per_worker
        self.batch_spec = BatchSpec.round(frames_per_batch, self.num_envs)
        self.frames_per_batch, self._time_steps = self.batch_spec.size, self.batch_spec.time_steps
        self.total_frames = check_total_frames(total_frames)
        self.max_decorrelation_steps = check_non_negative_int("max_decorrelation_steps", max_decorrelation_steps)
        self._delivery = Delivery(delivery, self._hook_results)
        self.seed = seed
        self.batch_timeout, self.shutdown_timeout = workers.batch_timeout, workers.shutdown_timeout
        group_devices = self._setup_devices(devices)
        env_specs = worker_env_specs(create_env_fn, self.num_workers, self.envs_per_worker, seed, env_kwargs)
        cpus = workers.cpu_sets(self.num_workers)
        observation_space, action_space, info_keys = self._probe_spaces(env_specs[0])
        mp_context = workers.mp_context
        self._step_buffer = StepBuffer.allocate(observation_space, action_space, self.num_workers,
                                                self.envs_per_worker, mp_context, info_keys)
        self._workers = WorkerProcesses(mp_context, on_failure=self.shutdown, name="rlcollect-step-worker",
                                        recover=self._may_restart)
        try:
            self._start_workers(env_specs, cpus)
            self._build_groups(policy, group_devices, step, observation_space, action_space)
        except BaseException:
            self.shutdown()
            raise
        self.batch_size = torch.Size([self.num_envs, self._time_steps])

    # ------------------------------------------------------------------ construction
    def _setup_workers(self, num_workers: int, envs_per_worker: int) -> tuple[int, int]:
        check_positive_int("num_workers", num_workers)
        check_positive_int("envs_per_worker", envs_per_worker)
        if num_workers % self.num_groups:
            raise ValueError(f"{type(self).__name__} splits its workers into {self.num_groups} groups of equal "
                             f"size: num_workers must be a multiple of {self.num_groups}, got {num_workers}")
        return num_workers, envs_per_worker

    @staticmethod
    def _setup_devices(devices: DeviceOptions) -> DeviceOptions:
        """The groups' devices: the envs on the CPU, ``device`` for the policy and the storage."""
        if devices.env_device is not None:
            raise ValueError(f"env_device: the envs live in worker processes, on the CPU (got "
                             f"{devices.env_device!r}); set policy_device and storing_device instead")
        return DeviceOptions(policy_device=devices.policy_device or devices.device, env_device="cpu",
                             storing_device=devices.storing_device or devices.device)

    @staticmethod
    def _probe_spaces(env_spec):
        """The spaces and info keys of one env built here (rlpyt's example env), to size the
        step buffer."""
        probe = replace(env_spec, seed=None)()
        try:
            return probe.observation_space, probe.action_space, getattr(probe, "info_keys", ())
        finally:
            probe.close()

    def _start_workers(self, env_specs, cpus) -> None:
        self._env_specs, self._cpus = env_specs, cpus  # kept to replace a failed worker (max_worker_restarts)
        for worker_id, env_spec in enumerate(env_specs):
            self._workers.start(step_worker_main, self._worker_spec(worker_id, env_spec))
        for _ in self._workers.receive(range(self.num_workers), expect="ready", timeout=self.batch_timeout):
            pass

    def _worker_spec(self, worker_id: int, env_spec) -> StepWorkerSpec:
        return StepWorkerSpec(
            worker_id=worker_id, create_env=env_spec, worker_seed=env_spec.seed,
            torch_threads=self.worker_options.worker_torch_threads,
            cpus=None if self._cpus is None else self._cpus[worker_id],
            max_decorrelation_steps=self.max_decorrelation_steps, step_buffer=self._step_buffer,
        )

    def _build_groups(self, policy, devices: DeviceOptions, step: StepOptions, observation_space,
                      action_space) -> None:
        """One Collector per group of workers, over a RemoteEnv of the group's envs; the
        groups share the policy (the first group's, on policy_device) and the traj-id pool.
        Building each Collector resets its envs: the workers' first decorrelation."""
        self._traj_pool = traj_pool = TrajectoryPool()
        group_size = self.num_workers // self.num_groups
        # init_random_frames is counted per group, in the group's share of the frames
        step = replace(step, init_random_frames=math.ceil(step.init_random_frames / self.num_groups))
        for group in range(self.num_groups):
            env = RemoteEnv(self._step_buffer, range(group * group_size, (group + 1) * group_size), self._workers,
                            observation_space, action_space)
            self._envs.append(env)
            if group > 0:  # the first group's policy, on the exact device it is on ("cuda:0", not "cuda"): no copy
                policy = self._groups[0].policy
                devices = replace(devices, policy_device=policy_param_device(policy) or self._groups[0].devices.policy)
            self._groups.append(Collector.from_options(
                env, policy, frames_per_batch=self._time_steps * env.num_envs, devices=devices, step=step,
                traj_pool=traj_pool,
            ))
        assert all(collector.policy is self._groups[0].policy for collector in self._groups)

    # ------------------------------------------------------------------ collection
    def _interleave(self, overlap: bool) -> None:
        """Fill every group's batch: per step t, group by group, wait for the group's
        previous step, run the policy on its envs, let its workers step. With
        ``overlap=False`` a group is let go only once the other group's step is over."""
        groups, envs = self._groups, self._envs
        random_steps = [collector.begin_batch() for collector in groups]
        in_flight: list[int | None] = [None] * len(groups)  # the step each group's workers are taking
        auto_reset = groups[0].auto_reset

        def finish(group: int) -> None:
            groups[group].record(in_flight[group], envs[group].receive())
            in_flight[group] = None
            self._batch_frames += envs[group].num_envs

        self._batch_frames = 0  # recorded so far: what a failure now would lose

        self._limit_batch(self.batch_timeout)
        with torch.no_grad(), set_interaction_type(groups[0].exploration_type):
            for t in range(self._time_steps):
                for group, (collector, env) in enumerate(zip(groups, envs)):
                    if in_flight[group] is not None:
                        finish(group)
                    action = collector.act(t, t < random_steps[group])
                    if not overlap:
                        for other in range(len(groups)):
                            if in_flight[other] is not None:
                                finish(other)
                    env.send(action, auto_reset)
                    in_flight[group] = t
            for group in range(len(groups)):
                if in_flight[group] is not None:
                    finish(group)
        self._limit_batch(None)
        for collector in groups:
            collector.end_batch()

    def _limit_batch(self, timeout: float | None) -> None:
        for env in self._envs:
            env.limit_batch(timeout)

    def _collect_groups(self) -> None:
        self._interleave(overlap=True)

    def _next_batch(self) -> TensorDictBase | None:
        pre_collect_hook = self.delivery_options.pre_collect_hook
        if pre_collect_hook is not None:
            pre_collect_hook()
        try:
            self._with_restarts(self._collect_groups, frames_lost=lambda: self._batch_frames)
        except BaseException:
            self.shutdown()  # steps may be in flight: the workers' state is unknown
            raise
        self._frames += self.frames_per_batch
        if len(self._groups) == 1:
            batch = self._groups[0].batch
            if not self._delivery.writes:
                batch = batch.clone()  # the preallocated batch is overwritten by the next one
        else:
            batch = torch.cat([collector.batch for collector in self._groups], 0)
        return self._delivery(batch)

    # ------------------------------------------------------------------ restarts
    def _may_restart(self, worker_id: int, kind: str) -> bool:
        """Whether a failure is recovered from (WorkerProcesses' ``recover``): while
        collecting or resetting, within max_worker_restarts (docs/collectors.md)."""
        return self._talking > 0 and self._restarts.allows(kind)

    def _with_restarts(self, action, frames_lost=lambda: 0) -> None:
        """Run ``action``; when a worker fails and may be replaced, replace it, restart
        every env and run ``action`` again. The envs step in lockstep, so what the batch
        under way held is dropped for all of them (``frames_lost()``: the frames it had
        recorded)."""
        self._talking += 1
        try:
            while True:
                try:
                    action()
                    return
                except WorkerLost as lost:
                    self._recover(lost, frames_lost())
        finally:
            self._talking -= 1

    def _recover(self, lost: WorkerLost, frames_lost: int) -> None:
        """Replace the failed worker, then reset every env: each starts a new trajectory
        (new ids), the replacement's envs from their restart seeds. Replaces again if a
        worker fails meanwhile (within the budget)."""
        while True:
            try:
                self._replace_worker(lost, frames_lost)
                self._limit_batch(None)
                for collector in self._groups:
                    collector.reset()
                self._delivery.drop_partial()  # trajectories held back never complete
                return
            except WorkerLost as again:
                lost, frames_lost = again, 0

    def _replace_worker(self, lost: WorkerLost, frames_lost: int) -> None:
        """A fresh worker in the failed one's place, its envs reseeded
        (seeding.restart_seed), ready; every other worker's command answered."""
        worker_id = lost.worker_id
        self._restarts.record(worker_id, lost.kind, lost.message, frames_lost,
                              dropped="the batch under way (every env restarts)")
        self._workers.stop(worker_id)
        for env in self._envs:
            if worker_id in env.worker_ids:
                env.forget(worker_id)
        first = self._env_specs[worker_id]
        env_spec = replace(first, seed=restart_seed(first.seed, self._restarts.of(worker_id)))
        self._workers.start(step_worker_main, self._worker_spec(worker_id, env_spec), worker_id=worker_id)
        for _ in self._workers.receive([worker_id], expect="ready", timeout=self.batch_timeout):
            pass
        for env in self._envs:
            env.settle()

    # ------------------------------------------------------------------ public API
    def _apply_delivery(self, changes: dict) -> None:
        self._delivery.options = self.delivery_options

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
        self._restart(seed)
        return seed

    def reset(self) -> None:
        """Reset every env (decorrelation steps included); each starts a new trajectory
        (trajectories held back for trajs_per_batch are dropped)."""
        self._restart()
        self._delivery.drop_partial()

    def _restart(self, seed: int | None = None) -> None:
        def reset_all() -> None:
            if seed is not None:
                for env in self._envs:
                    env.set_seed(seed)
            for collector in self._groups:
                collector.reset()

        try:
            self._with_restarts(reset_all)
        except BaseException:
            self.shutdown()
            raise

    def state_dict(self) -> dict:
        """Frame count and the trajectory-id pool (ids never repeat after a reload)."""
        return {"frames": self._frames, "traj_pool": self._traj_pool.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._frames = int(state["frames"])
        self._traj_pool.load_state_dict(state["traj_pool"])
        def load() -> None:
            for collector in self._groups:  # each group's share of the frames; the pool as the groups leave it
                collector.load_state_dict({"frames": self._frames * collector.env.num_envs // self.num_envs,
                                           "traj_pool": self._traj_pool.state_dict()})

        try:
            self._with_restarts(load)
        except BaseException:
            self.shutdown()
            raise

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


@with_options_doc(StepOptions, DeviceOptions, DeliveryOptions, WorkerOptions)
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

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """Two groups of workers of equal size."""
        super().check_plan(plan)
        workers = plan.options.get("num_workers")
        if isinstance(workers, int) and workers % 2:
            raise ConfigError(f"collector.num_workers={workers}: collector={plan.name} splits its workers into 2 "
                              "groups of equal size: num_workers must be a multiple of 2")

    def __init__(self, create_env_fn: EnvSource, policy=None, *, overlap: bool = True, **kwargs) -> None:
        if not isinstance(overlap, bool):
            raise TypeError(f"overlap must be a bool, got {overlap!r}")
        self.overlap = overlap
        super().__init__(create_env_fn, policy, **kwargs)

    def _collect_groups(self) -> None:
        self._interleave(self.overlap)

