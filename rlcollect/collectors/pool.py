"""PoolCollector: an asynchronous env pool (EnvPool's async mode, PufferLib's pool).

W worker processes step E envs each into a shared-memory step buffer
(collectors/step_buffer.py); they answer through a ReadyQueue, in the order they finish.
The main process serves the first ``batch_size`` envs (whole workers) that are ready,
while the others keep stepping:

    main                                              workers
    act(group): policy(carrier of the group's envs)   ... the other workers step ...
                actions -> shared rows, STEP  ──────▶ group steps its envs
    group = the first k workers in the ReadyQueue ◀── first done, first in the queue
    record(group): its steps -> the next rows of the batch, fresh traj ids
    repeat until the batch is full

At the start every worker is acted on (one policy call for all P envs); from then on
each pool step records and acts on k = batch_size / E workers, so a step of the slowest
env never holds up the others.

The main process's halves are a Collector's: a Collector over the pool's P envs
(collectors/pool_env.py, the step buffer seen as one env) keeps every env's step under way
in a one-step batch ``[P, 1]``, and ``act``/``record`` given the group's envs run the
policy on them and keep their trajectories (ids, cuts by max_frames_per_traj: its
TrajectoryBook). PoolBatch (collectors/pool_batch.py) copies each finished step to its
row of the batch, with its env id and policy version.

Batch layouts (``layout``):

- "flat": ``[F]`` steps, F = frames_per_batch rounded up to a multiple of batch_size,
  sorted by ``("collector", "env_id")`` (stable): env 0's steps in time order, then env
  1's, ...; an env contributes as many steps as it took (the fast ones more). Envs keep
  stepping across batch boundaries: a batch's first step of an env may have been chosen
  by the weights before ``update_policy_weights_()`` (``policy_version`` says so).
- "per_env": ``[P, T]`` (row p is env p, T = frames_per_batch / P rounded up), as a
  Collector on P envs: each worker takes exactly T steps per batch; a worker that has
  them waits for the batch's end (so batches are whole, and the first step of the next
  batch uses the weights of its start). ``per_env(batch)`` regroups a flat batch whose
  envs contributed equally.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import set_interaction_type

from rlcollect.choices import POOL_LAYOUTS as LAYOUTS
from rlcollect.collectors.base import CollectionPlan, CollectorBase, check_env_device, check_worker_env_backend
from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.devices import as_device, policy_param_device
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
from rlcollect.collectors.pool_batch import PoolBatch
from rlcollect.collectors.pool_env import PoolEnv
from rlcollect.collectors.processes import WorkerProcesses
from rlcollect.collectors.single import Collector
from rlcollect.collectors.step_buffer import CLOSE, StepBuffer, StepWorkerSpec, step_worker_main
from rlcollect.envs.sources import EnvSource, worker_env_specs
from rlcollect.errors import ConfigError
from rlcollect.keys import ENV_ID
from rlcollect.trajectories import TrajectoryPool
from rlcollect.validation import check_non_negative_int, check_positive_int


def default_batch_size(num_workers: int, envs_per_worker: int) -> int:
    """The envs a pool step serves when batch_size is not given: half of the workers' (at
    least one worker's)."""
    return max(1, num_workers // 2) * envs_per_worker


@with_options_doc(StepOptions, DeviceOptions, DeliveryOptions, WorkerOptions)
class PoolCollector(CollectorBase):
    """An asynchronous env pool: ``num_workers`` processes step ``envs_per_worker`` envs
    each; the main process runs the policy on the first ``batch_size`` envs that are ready
    (whole workers, first done first served) and sends their actions back while the other
    workers keep stepping. Worth it when env steps take uneven times: no worker waits for
    the slowest one, as the action server's do.

    Batches (docs/collectors.md, "PoolCollector"), with layout="flat" (default): batch
    size ``[F]``, F = frames_per_batch rounded up to a multiple of batch_size; the steps
    are sorted by ``("collector", "env_id")`` (int64, 0..P-1, env i of worker w is
    ``w * envs_per_worker + i``), each env's steps in time order; envs contribute unequal
    numbers of steps. With layout="per_env": ``[P, T]``, row p is env p, every env takes
    exactly T = frames_per_batch / P (rounded up) steps per batch, as a Collector on P
    envs: what on-policy training (PPO) needs. ``per_env(batch)`` regroups a flat batch
    into ``[P, T]`` when every env contributed exactly T steps.

    Either way the keys and semantics are Collector's (docs/data-layout.md), per env:
    traj ids unique across the run and continuing across batches, is_init exactly after a
    done, terminated and truncated apart, the true final observation in
    ``("next", "observation")`` and the reset one carried on, plus
    ``("collector", "env_id")`` and ``("collector", "policy_version")`` (the weights that
    chose the step's action: with layout="flat" an env's first step in a batch may
    predate the last ``update_policy_weights_()``).

    Args:
        create_env_fn: a gymnasium id, a zero-argument callable returning a gymnasium.Env
            or a GymEnv of envs_per_worker envs (picklable for spawn), or a list of one
            such source per worker; each worker builds its own.
        policy: callable TensorDict -> TensorDict writing ``"action"`` (a recurrent policy
            gets its hidden state per env, as in a Collector); None: uniform random.
        num_workers: worker processes (W).
        envs_per_worker: envs each worker steps (E, in turn); P = W x E.
        batch_size: envs served per pool step, a multiple of envs_per_worker up to P
            (P: every worker, a synchronous action server); None: half the workers' envs
            (at least one worker's).
        frames_per_batch: frames per yielded batch (rounded up, see above).
        total_frames: stop after this many frames; -1 for endless.
        layout: "flat" or "per_env" (see above).
        max_decorrelation_steps: after every reset of all envs, each env takes 0..this
            many random steps (as ActionServerCollector's).
        seed: env i is seeded ``seed + i`` (rlcollect/seeding.py); None: unseeded.
        env_kwargs: keyword arguments of GymEnv (``max_episode_steps``, gym.make kwargs).

    Not supported (a ValueError says so): reset_when_done=False, set_truncated,
    trajs_per_batch with layout="flat" (whole trajectories need rows per env: use
    "per_env"), max_worker_restarts > 0, env_device (the envs live in the workers).

    A worker that dies or an env that raises becomes a ``WorkerError`` naming the worker
    (with the env's traceback); the collector is shut down first: no process, shared
    memory or semaphore is left behind.
    """

    hooks_run_in_process = True  # hooks, postproc and replay-buffer writes run here, on whole batches
    option_groups = OPTION_GROUPS  # what **options are routed to

    @classmethod
    def batch_envs(cls, plan: CollectionPlan) -> int:
        """per_env: every env of every worker; flat: the envs served per pool step."""
        options = plan.options
        workers, envs_per_worker = options.get("num_workers", 1), options.get("envs_per_worker", 1)
        if options.get("layout", "flat") == "per_env":
            return workers * envs_per_worker
        return options.get("batch_size") or default_batch_size(workers, envs_per_worker)

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """The per_env layout for an on-policy learner, a batch_size of whole workers,
        no env_device, and only the options it supports."""
        super().check_plan(plan)
        options = plan.options
        check_env_device(plan)
        check_worker_env_backend(plan)
        layout = options.get("layout", "flat")  # one of LAYOUTS: the config's choices (config.check_ranges)
        dims = 1 if layout == "flat" else 2  # its batches: steps [N], or env rows [P, T]
        if plan.storage_ndim is not None and plan.storage_ndim > dims:
            raise ConfigError(f"buffer.storage.ndim={plan.storage_ndim}: collector={plan.name} with "
                              f"collector.layout={layout} yields batches of {dims} batch dim{'s' * (dims > 1)}: use "
                              f"ndim <= {dims}")
        if plan.on_policy and layout != "per_env":
            raise ConfigError(f"collector={plan.name} with collector.layout=flat yields steps grouped by env, in "
                              f"unequal numbers; algo={plan.algo}'s rollout buffer needs one row per env: use "
                              "collector.layout=per_env")
        if layout == "flat" and plan.trajs_per_batch is not None:
            raise ConfigError(f"buffer.trajs_per_batch collects whole trajectories per env row: with "
                              f"collector={plan.name} use collector.layout=per_env")
        batch_size, envs_per_worker = options.get("batch_size"), options.get("envs_per_worker", 1)
        if batch_size is not None:
            num_envs = options.get("num_workers", 1) * envs_per_worker
            if batch_size % envs_per_worker or batch_size > num_envs:
                raise ConfigError(f"collector.batch_size={batch_size}: collector={plan.name} serves whole workers, so "
                                  f"it must be a multiple of collector.envs_per_worker={envs_per_worker} and at most "
                                  f"num_workers x envs_per_worker={num_envs}")
        supported = {"reset_when_done": True, "set_truncated": False, "reset_policy": "immediate",
                     "max_worker_restarts": 0}
        unsupported = [f"collector.{key}={options[key]}" for key, value in supported.items()
                       if key in options and options[key] != value]
        if unsupported:
            raise ConfigError(f"collector={plan.name} does not support {', '.join(unsupported)} (use "
                              "collector=action_server)")

    def __init__(
        self,
        create_env_fn: EnvSource,
        policy=None,
        *,
        num_workers: int,
        envs_per_worker: int = 1,
        batch_size: int | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        layout: str = "flat",
        max_decorrelation_steps: int = 0,
        seed: int | None = None,
        env_kwargs: dict | None = None,
        **options,
    ) -> None:
        groups = split_options(type(self).__name__, options)
        step, devices, delivery = groups[StepOptions], groups[DeviceOptions], groups[DeliveryOptions]
        workers = groups[WorkerOptions]
        check_groups(step, delivery)
        super().__init__(delivery)
        self._workers: WorkerProcesses | None = None
        self.num_workers = check_positive_int("num_workers", num_workers)
        self.envs_per_worker = check_positive_int("envs_per_worker", envs_per_worker)
        self.num_envs = self.num_workers * self.envs_per_worker
        self.envs_per_step = self._setup_batch_size(batch_size)
        self.layout = self._setup_layout(layout, delivery)
        self._setup_step(step, workers)
        self.batch_spec = BatchSpec.round(frames_per_batch, self.num_envs if self.layout == "per_env"
                                          else self.envs_per_step)
        self.frames_per_batch = self.batch_spec.size
        self._time_steps = self.batch_spec.time_steps  # per_env: steps per env; flat: pool steps per batch
        self.total_frames = check_total_frames(total_frames)
        self.max_decorrelation_steps = check_non_negative_int("max_decorrelation_steps", max_decorrelation_steps)
        self.seed = seed
        self.batch_timeout, self.shutdown_timeout = workers.batch_timeout, workers.shutdown_timeout
        self._torch_threads = workers.worker_torch_threads
        self.policy_device, self.storing_device = self._setup_devices(devices, policy)
        self._delivery = Delivery(delivery, self._hook_results)
        per_worker_sources = isinstance(create_env_fn, (list, tuple))  # each builds its worker's E envs
        env_specs = worker_env_specs(create_env_fn, self.num_workers,
                                     None if per_worker_sources else self.envs_per_worker, seed, env_kwargs)
        cpus = workers.cpu_sets(self.num_workers)
        observation_space, self.action_space, info_keys = self._probe_spaces(env_specs[0])
        self._step_buffer = StepBuffer.allocate(observation_space, self.action_space, self.num_workers,
                                                self.envs_per_worker, workers.mp_context, info_keys, pooled=True)
        self._workers = WorkerProcesses(workers.mp_context, on_failure=self.shutdown, name="rlcollect-pool-worker")
        try:
            self._start_workers(env_specs, cpus)
            self.env = PoolEnv(self._step_buffer, self._workers, observation_space, self.action_space)
            self._build_collector(policy, step)
        except BaseException:
            self.shutdown()
            raise
        self.batch_size = self.pool.batch.batch_size  # [F] or [P, T]

    # ------------------------------------------------------------------ construction
    def _setup_batch_size(self, batch_size: int | None) -> int:
        if batch_size is None:
            return default_batch_size(self.num_workers, self.envs_per_worker)
        check_positive_int("batch_size", batch_size)
        if batch_size % self.envs_per_worker or batch_size > self.num_envs:
            raise ValueError(f"batch_size={batch_size}: the pool serves whole workers, so batch_size must be a "
                             f"multiple of envs_per_worker={self.envs_per_worker} and at most num_workers x "
                             f"envs_per_worker={self.num_envs}")
        return batch_size

    @staticmethod
    def _setup_layout(layout: str, delivery: DeliveryOptions) -> str:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if layout == "flat" and delivery.trajs_per_batch is not None:
            raise ValueError("trajs_per_batch collects whole trajectories per env row: use layout='per_env' with "
                             "PoolCollector (its flat batches have no env rows)")
        return layout

    def _setup_step(self, step: StepOptions, workers: WorkerOptions) -> None:
        unsupported = {"reset_when_done": not step.reset_when_done, "set_truncated": step.set_truncated,
                       "reset_policy": step.reset_policy != "immediate",
                       "max_worker_restarts": workers.max_worker_restarts > 0}
        named = [name for name, given in unsupported.items() if given]
        if named:
            raise ValueError(f"PoolCollector does not support {', '.join(named)} (got reset_when_done="
                             f"{step.reset_when_done}, set_truncated={step.set_truncated}, reset_policy="
                             f"{step.reset_policy!r}, max_worker_restarts={workers.max_worker_restarts}); use "
                             "ActionServerCollector for them")
        self.step_options = step
        self.max_frames_per_traj, self.init_random_frames = step.max_frames_per_traj, step.init_random_frames
        self.reset_at_each_iter, self.exploration_type = step.reset_at_each_iter, step.exploration_type
        self.track_traj_ids = step.track_traj_ids

    @staticmethod
    def _setup_devices(devices: DeviceOptions, policy) -> tuple[torch.device, torch.device]:
        """The envs live in the workers, on the CPU; ``device`` sets the policy's and the storage's."""
        if devices.env_device is not None:
            raise ValueError(f"env_device: the envs live in worker processes, on the CPU (got "
                             f"{devices.env_device!r}); set policy_device and storing_device instead")
        policy_device = devices.policy_device or devices.device or policy_param_device(policy) or "cpu"
        return as_device(policy_device), as_device(devices.storing_device or devices.device or "cpu")

    @staticmethod
    def _probe_spaces(env_spec):
        """The spaces and info keys of one env built here, to size the step buffer."""
        probe = replace(env_spec, seed=None)()
        try:
            return probe.observation_space, probe.action_space, getattr(probe, "info_keys", ())
        finally:
            probe.close()

    def _start_workers(self, env_specs, cpus) -> None:
        for worker_id, env_spec in enumerate(env_specs):
            self._workers.start(step_worker_main, StepWorkerSpec(
                worker_id=worker_id, create_env=env_spec, worker_seed=env_spec.seed,
                torch_threads=self._torch_threads, cpus=None if cpus is None else cpus[worker_id],
                max_decorrelation_steps=self.max_decorrelation_steps, step_buffer=self._step_buffer))
        for _ in self._workers.receive(range(self.num_workers), expect="ready", timeout=self.batch_timeout):
            pass

    def _build_collector(self, policy, step: StepOptions) -> None:
        """The Collector that runs the policy and keeps the trajectories of the envs, a group
        at a time (its act/record halves with ``envs``; building it resets every env and
        dry-runs the policy), and the batch its steps are copied into (PoolBatch)."""
        self._traj_pool = TrajectoryPool()
        self._collector = Collector.from_options(
            self.env, policy, frames_per_batch=self.num_envs,
            devices=DeviceOptions(policy_device=self.policy_device, storing_device="cpu"),
            step=replace(step, reset_at_each_iter=False, init_random_frames=0), traj_pool=self._traj_pool)
        self.policy = self._collector.policy
        shape = [self.num_envs, self._time_steps] if self.layout == "per_env" else [self.frames_per_batch]
        self.pool = PoolBatch(self._collector.batch, shape)
        self._frames_acted = 0  # init_random_frames counts the actions chosen
        self._all_envs_reset()

    def _all_envs_reset(self) -> None:
        """Every env was just reset: every worker acts next, and the carrier is fresh."""
        self._to_act = list(range(self.num_workers))  # workers whose last step was recorded (or reset): next to act
        self._carrier_is_fresh = True

    def _restart(self, seed: int | None = None) -> None:
        """Let every step under way end (its result is dropped), then reset every env
        (seeded when ``seed`` is given; decorrelation steps included): each env starts a
        trajectory."""
        if seed is None:
            self._collector.reset()
        else:
            self._collector.set_seed(seed)
        self._all_envs_reset()

    # ------------------------------------------------------------------ the pool step
    def _act(self, worker_ids: list[int]) -> None:
        """Choose the actions of the workers' envs and let the workers step."""
        if not worker_ids:
            return
        envs = self.env.envs_of(worker_ids)
        random = self.policy is None or self._frames_acted < self.init_random_frames
        action = self._collector.act(0, random, envs)
        self.pool.keep_version(envs, self.policy_version)
        self._frames_acted += len(worker_ids) * self.envs_per_worker
        self.env.send_to(worker_ids, envs, action)

    def _record(self, worker_ids: list[int], rows: np.ndarray | slice) -> None:
        """Record the step the workers' envs took into ``rows`` of the batch."""
        envs = self.env.envs_of(worker_ids)
        self._collector.record(0, self.env.done_of(envs), envs)
        self.pool.record(envs, rows)

    def _collect_flat(self) -> None:
        workers_per_step = self.envs_per_step // self.envs_per_worker
        filled = 0
        while filled < self.frames_per_batch:
            self._act(self._to_act)
            group = [self.env.take() for _ in range(workers_per_step)]
            rows = slice(filled, filled + self.envs_per_step)
            self._record(group, rows)
            self._to_act = group
            filled += self.envs_per_step

    def _collect_per_env(self) -> None:
        steps = np.zeros(self.num_workers, np.int64)  # steps recorded this batch, per worker
        workers_per_step = self.envs_per_step // self.envs_per_worker
        time_steps = self._time_steps
        while True:
            parked = [w for w in self._to_act if steps[w] >= time_steps]
            self._act([w for w in self._to_act if steps[w] < time_steps])
            if not self.env.answered:
                self._to_act = parked
                return
            group = [self.env.take() for _ in range(min(workers_per_step, self.env.answered))]
            envs = self.pool.env_ids(self.env.envs_of(group))
            self._record(group, envs * time_steps + np.repeat(steps[group], self.envs_per_worker))
            steps[group] += 1
            self._to_act = parked + group

    def _next_batch(self) -> TensorDictBase | None:
        pre_collect_hook = self.delivery_options.pre_collect_hook
        if pre_collect_hook is not None:
            pre_collect_hook()
        try:
            self._workers.check_alive()  # also those that died idle, or behind others that kept answering
            if self.reset_at_each_iter and not self._carrier_is_fresh:
                self._restart()
            self._carrier_is_fresh = False
            self.env.limit_batch(self.batch_timeout)
            with torch.no_grad(), set_interaction_type(self.exploration_type):
                self._collect_per_env() if self.layout == "per_env" else self._collect_flat()
            self.env.limit_batch(None)
        except BaseException:
            self.shutdown()  # steps may be in flight: the workers' state is unknown
            raise
        self._frames += self.frames_per_batch
        batch = self.pool.batch
        if self.layout == "flat":
            order = np.argsort(batch.get(ENV_ID).numpy(), kind="stable")
            batch = batch[torch.from_numpy(order)]  # a copy: the preallocated batch is overwritten next time
        else:
            batch = batch.clone()
        if self.storing_device.type != "cpu":
            batch = batch.to(self.storing_device)
        return self._delivery(batch)

    # ------------------------------------------------------------------ public API
    def per_env(self, batch: TensorDictBase) -> TensorDictBase:
        """A flat batch regrouped per env, ``[P, T]`` (row p: env p's steps in time order),
        when every env contributed exactly T steps; a ValueError otherwise (use
        layout="per_env" to get such batches). A ``[P, T]`` batch is returned as is."""
        if batch.batch_dims == 2 and batch.batch_size[0] == self.num_envs:
            return batch
        env_ids = batch.get(ENV_ID).reshape(-1).cpu()
        counts = torch.bincount(env_ids, minlength=self.num_envs)
        if batch.batch_dims != 1 or not (counts == counts[0]).all() or counts[0] == 0:
            raise ValueError(f"per_env needs a flat batch in which every env took the same number of steps; the "
                             f"envs took {counts.tolist()} steps: collect with layout='per_env'")
        order = torch.from_numpy(np.argsort(env_ids.numpy(), kind="stable"))
        return batch[order].reshape(self.num_envs, int(counts[0]))

    def _apply_delivery(self, changes: dict) -> None:
        self._delivery.options = self.delivery_options

    def update_policy_weights_(self, weights=None) -> None:
        """The policy lives in this process: nothing to send. Counts a new policy version;
        refreshes the copy on policy_device from the original (a no-op when there is no
        copy), or loads ``weights`` (a module, state_dict or TensorDict) into the policy."""
        self._collector.update_policy_weights_(weights)  # counts the version

    def set_seed(self, seed: int) -> int:
        """Seed torch's RNG here and env i with ``seed + i``, then reset every env: the
        steps under way are dropped and each env starts a trajectory. Returns the seed."""
        self._guarded(lambda: self._restart(seed))
        return seed

    def reset(self) -> None:
        """Reset every env (the steps under way are dropped); each starts a new trajectory."""
        self._guarded(self._restart)
        self._delivery.drop_partial()

    def _guarded(self, action) -> None:
        try:
            action()
        except BaseException:
            self.shutdown()
            raise

    @property
    def policy_version(self) -> int:
        """``update_policy_weights_()`` calls so far (the Collector that runs the policy counts them)."""
        return self._collector.policy_version

    def state_dict(self) -> dict:
        """Frame count, the trajectory-id pool (ids never repeat after a reload) and the
        policy version."""
        return {"frames": self._frames, "traj_pool": self._traj_pool.state_dict(),
                "policy_version": self.policy_version}

    def load_state_dict(self, state: dict) -> None:
        """Restore the counters, then reset every env (new trajectories, fresh ids)."""
        self._frames = int(state["frames"])
        self._traj_pool.load_state_dict(state["traj_pool"])
        self._collector.policy_version = int(state.get("policy_version", 0))
        self._guarded(self._restart)

    @property
    def _processes(self) -> list:
        return [] if self._workers is None else self._workers.processes

    def _close(self) -> None:
        if self._workers is not None:
            self._workers.close(self.shutdown_timeout, ask=lambda worker_id: self._step_buffer.order(worker_id, CLOSE))
        # the last references to the shared memory and the semaphores (named ones are unlinked with them)
        self._step_buffer = self.env = self._collector = None

    def __del__(self):
        if not getattr(self, "_shut_down", True) and getattr(self, "_workers", None) is not None:
            self.shutdown()

    def __repr__(self) -> str:
        return (f"PoolCollector(num_workers={self.num_workers}, envs_per_worker={self.envs_per_worker}, "
                f"batch_size={self.envs_per_step}, frames_per_batch={self.frames_per_batch}, "
                f"layout={self.layout!r}, total_frames={self.total_frames})")
