"""Collector: the single-process per-step loop.

    for t in range(T):
        carrier ──(cast to policy_device if it differs)──▶ policy ──▶ action, log_prob, ...
        carrier + policy output ──copy──▶ batch[..., t]
        env.stage_step(action) ──▶ staged ("next", ...) ──copy──▶ batch["next"][..., t]
                           ──▶ carrier obs = reset obs where done (is_init), next obs elsewhere
        new traj ids where an env finished

The carrier persists across batches, so a trajectory that crosses a batch boundary
continues with the right observation and the same traj id. A recurrent policy (one with
``make_tensordict_primer`` submodules) gets its hidden-state entries added to the carrier
(zeros), stored with every step (the state read, and the one written at ``("next", key)``),
carried to the next step and zeroed for the envs that restart. The batch is allocated once,
from a dry-run of the policy at construction, and written by index; every step writes
precomputed views, so the loop allocates nothing it can avoid.

The loop is public in pieces, so that other collectors drive it without a second copy:
``begin_batch()``, then per step ``act(t)`` (carrier and policy) and ``record(t, done)``
(what the env step produced), then ``end_batch()``; the action-server collectors step the
env in other processes between ``act`` and ``record``. ``collect()`` is the whole batch,
``deliver(batch)`` the delivery path (collectors/delivery.py).

The loop's parts, one job per module; the class holds them and runs the loop:

    carrier.py           the state between steps (Carrier)
    policy_runner.py     the policy as the loop calls it: device cast, CUDA graph, weights
    write_plan.py        the batch, allocated once, and the views each step writes (WritePlan)
    rollout_plan.py      collect(rollout=...): a rollout's plan, written in place (RolloutPlans)
    trajectory_book.py   each env's trajectory id, step count, waiting flag, hidden state
    trajectory_cuts.py   max_frames_per_traj and set_truncated on the host (TrajectoryCuts)
    wait_reset.py        reset_policy="wait": finished envs wait for the next batch (WaitReset)
    device_recording.py  a torch env's bookkeeping on its device (DeviceRecording)
    env_subsets.py       act/record(envs=...): a step of some envs, the pool's (EnvSubsets)

Construction takes the option groups (``from_options``); the flat keyword arguments of the
constructor are routed to them by ``split_options``.
"""
from __future__ import annotations

import functools
import inspect
import math
from dataclasses import fields
from typing import Callable

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import set_interaction_type

from rlcollect.acting import set_actions_only
from rlcollect.collectors.base import CollectionPlan, CollectorBase
from rlcollect.collectors.carrier import Carrier
from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.device_recording import DeviceRecording
from rlcollect.collectors.devices import CollectorDevices, policy_param_device, sync_function
from rlcollect.collectors.env_subsets import EnvSubsets
from rlcollect.collectors.options import (
    BatchSpec,
    DeliveryOptions,
    DeviceOptions,
    StepOptions,
    check_groups,
    check_total_frames,
    split_options,
    with_options_doc,
)
from rlcollect.collectors.policy_runner import PolicyRunner
from rlcollect.collectors.rollout_plan import RolloutPlans, bootstrap
from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.collectors.trajectory_cuts import TrajectoryCuts
from rlcollect.collectors.wait_reset import WaitReset, waiting_array
from rlcollect.collectors.write_plan import WritePlan, allocate_batch
from rlcollect.envs.gym_env import NonFiniteActionError
from rlcollect.envs.sources import EnvSource, make_env
from rlcollect.errors import ConfigError
from rlcollect.keys import POLICY_VERSION
from rlcollect.primers import policy_primers
from rlcollect.trajectories import TrajectoryPool

Policy = Callable[[TensorDictBase], TensorDictBase]
OPTION_GROUPS = (DeviceOptions, StepOptions, DeliveryOptions)  # what Collector's flat keyword arguments fill


def _options_spelled_out(*groups: type):
    """Decorator of a constructor taking ``**options``: its signature (what ``help()``,
    ``inspect`` and the pipeline's key checks read) names each field of ``groups`` instead,
    keyword-only, with its default."""
    def decorate(init):
        signature = inspect.signature(init)
        kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        spelled = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
                   for group in groups for f in fields(group)]
        init.__signature__ = signature.replace(parameters=kept + spelled)
        return init
    return decorate


@with_options_doc(*OPTION_GROUPS)
class Collector(CollectorBase):
    """Collects batches from one (possibly batched) env in the calling process.

    Yields TensorDicts of batch shape ``[T]`` (single env) or ``[P, T]`` (batched env of
    P), ``P * T == frames_per_batch`` (rounded up to a multiple of P). docs/data-layout.md
    lists the keys, docs/collectors.md the semantics of every option.

    Args:
        create_env_fn: an env source (envs/sources.py ``make_env``): a GymEnv or torch env of
            any size (used as it is), a gymnasium id, a gymnasium VectorEnv, or a
            zero-argument callable returning a gymnasium.Env or a GymEnv.
        policy: callable TensorDict -> TensorDict writing ``"action"``; None: uniform random.
        num_envs, seed, env_kwargs: how an id or a callable is made into envs:
            ``num_envs`` of them (None: one, batch_size ``[]``), env i seeded ``seed + i``,
            ``env_kwargs`` GymEnv's other arguments (an env already built is used as it is).
        frames_per_batch: frames per yielded batch.
        total_frames: stop after this many frames; -1 for endless.
        track_policy_version: write ("collector", "policy_version"), the number of
            ``update_policy_weights_()`` calls before the batch started (as the
            multi-process collectors always do).
        traj_pool: where trajectory ids come from (shared by the workers of a multi-process
            collector); default: a pool of its own.
        cudagraph_policy: replay the policy's forward as a CUDA graph, captured at the second
            step (policy_device cuda; a TensorDict module whose out_keys name all it writes;
            collectors/cudagraph.py).
        actions_only: run the policy under ``rlcollect.set_actions_only``: a policy may then
            write its action alone (ActorCritic skips its log-prob and state value,
            QValuePolicy its Q-values), and the batches hold nothing else of its output.
            What EvalCollector asks for.

    The other keyword arguments are the options of collectors/options.py, listed below by
    group (``Collector.from_options`` takes the groups themselves). With ``replay_buffer``
    iteration yields None, and ``start()`` collects in a background thread.
    """

    hooks_run_in_process = True  # the post-collect hook sees every batch in the caller's process
    option_groups = OPTION_GROUPS  # what **options are routed to

    @classmethod
    def batch_envs(cls, plan: CollectionPlan) -> int:
        """Its env's batch (env.num_envs; a single env, 1)."""
        return plan.num_envs or 1

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """Its envs are stepped here: a batched backend needs a number of envs, a replay
        storage keeping env rows at most the batches' dims, a CUDA-graph policy cuda."""
        super().check_plan(plan)
        if plan.env_backend != "list" and plan.num_envs is None:
            raise ConfigError(f"env.backend={plan.env_backend} steps a batch of envs but env.num_envs is null (a "
                              "single env): set env.num_envs or env.backend=list")
        dims = 1 if plan.num_envs is None else 2
        if plan.storage_ndim is not None and plan.storage_ndim > dims:
            raise ConfigError(f"buffer.storage.ndim={plan.storage_ndim}: the collector's batches have {dims} batch "
                              f"dims (env.num_envs={plan.num_envs}): use ndim <= {dims}")
        if plan.options.get("cudagraph_policy") and torch.device(plan.policy_device).type != "cuda":
            raise ConfigError(f"collector.cudagraph_policy=true replays the policy as a CUDA graph: it needs the "
                              f"policy on cuda (device=cuda or collector.policy_device=cuda), not {plan.policy_device}")

    @_options_spelled_out(*OPTION_GROUPS)
    def __init__(self, create_env_fn: EnvSource, policy: Policy | None = None, *, frames_per_batch: int,
                 total_frames: int = -1, num_envs: int | None = None, seed: int | None = None,
                 env_kwargs: dict | None = None, track_policy_version: bool = False,
                 traj_pool: TrajectoryPool | None = None, cudagraph_policy: bool = False, actions_only: bool = False,
                 **options) -> None:
        if num_envs is not None or seed is not None or env_kwargs:
            create_env_fn = make_env(create_env_fn, num_envs, seed=seed, **(env_kwargs or {}))
        groups = split_options(type(self).__name__, options, self.option_groups)
        self._build(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                    devices=groups[DeviceOptions], step=groups[StepOptions], delivery=groups[DeliveryOptions],
                    traj_pool=traj_pool, track_policy_version=track_policy_version,
                    cudagraph_policy=cudagraph_policy, actions_only=actions_only)

    @classmethod
    def from_options(cls, create_env_fn: EnvSource, policy: Policy | None = None, *, frames_per_batch: int,
                     total_frames: int = -1, devices: DeviceOptions = DeviceOptions(),
                     step: StepOptions = StepOptions(), delivery: DeliveryOptions = DeliveryOptions(),
                     traj_pool: TrajectoryPool | None = None, track_policy_version: bool = False,
                     cudagraph_policy: bool = False, actions_only: bool = False) -> "Collector":
        """A Collector from option groups (what the other collectors build theirs with)."""
        collector = cls.__new__(cls)
        collector._build(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                         devices=devices, step=step, delivery=delivery, traj_pool=traj_pool,
                         track_policy_version=track_policy_version, cudagraph_policy=cudagraph_policy,
                         actions_only=actions_only)
        return collector

    # ------------------------------------------------------------------ construction
    def _build(self, create_env_fn, policy, *, frames_per_batch: int, total_frames: int, devices: DeviceOptions,
               step: StepOptions, delivery: DeliveryOptions, traj_pool: TrajectoryPool | None,
               track_policy_version: bool, cudagraph_policy: bool, actions_only: bool) -> None:
        super().__init__(delivery)
        check_groups(step, delivery)
        self.env = env = make_env(create_env_fn)
        self.step_options, self.actions_only = step, actions_only
        self.max_frames_per_traj, self.init_random_frames = step.max_frames_per_traj, step.init_random_frames
        self.reset_at_each_iter, self.reset_when_done = step.reset_at_each_iter, step.reset_when_done
        self.exploration_type, self.track_traj_ids = step.exploration_type, step.track_traj_ids
        self.set_truncated = step.set_truncated
        self.devices = CollectorDevices.resolve(**vars(devices), policy_param_device=policy_param_device(policy),
                                                env_own_device=env.device)
        env.to(self.devices.env)
        self._sync_storage = sync_function(self.devices.storing, step.no_cuda_sync)
        self._runner = PolicyRunner(policy, env, self.devices, step.no_cuda_sync)
        self.policy, self._run_policy = self._runner.policy, self._runner.run  # the policy, or its copy
        self._num_envs = env.num_envs or 1
        self.batch_spec = BatchSpec.round(frames_per_batch, self._num_envs)
        self.frames_per_batch = self.batch_spec.size
        self.total_frames = check_total_frames(total_frames)
        waiting = waiting_array(env) if step.reset_policy == "wait" else None
        self.delivery = Delivery(delivery, self._hook_results)
        self._traj_pool = traj_pool if traj_pool is not None else TrajectoryPool()
        self._env_batch = tuple(env.batch_size)
        self.batch_size = torch.Size([*self._env_batch, self.batch_spec.time_steps])  # of every collected batch
        # a torch env returns its done mask as a tensor on its device: the bookkeeping stays there
        on_device = bool(getattr(env, "steps_on_device", False))
        self._book = book = TrajectoryBook(
            self._num_envs, self._traj_pool, max_frames_per_traj=self.max_frames_per_traj,
            track_ids=self.track_traj_ids, ids_device=self.devices.env, on_device=on_device, waiting=waiting)
        self._cuts = TrajectoryCuts(env, book, self._env_batch, self.devices.storing)
        self._wait = None if waiting is None else WaitReset(
            env, book, None if self.max_frames_per_traj is None else self._cuts)
        self._on_device = DeviceRecording(env, book, self.devices, self.reset_when_done) if on_device else None
        self.policy_version = 0  # update_policy_weights_() calls so far
        self.steps_collected = 0  # steps per env in the last batch (fewer than T when stopped early)
        self._carrier = Carrier(env, book, policy_primers(policy), self.devices.env)
        self._subsets = EnvSubsets(env, self._carrier, book, self._cuts, self._runner, env_device=self.devices.env,
                                   reset_when_done=self.reset_when_done, refused=waiting is not None or on_device)
        self._batch, self._policy_keys = allocate_batch(
            self._dry_run(), self._carrier, env.staged, time_steps=self.batch_spec.time_steps,
            device=self.devices.storing, padded=waiting is not None)
        self._plan_batch()
        self._policy_version_entry: torch.Tensor | None = None  # track_policy_version's batch entry
        if track_policy_version:
            self._policy_version_entry = torch.zeros(self.batch_size, dtype=torch.int64, device=self.devices.storing)
            self._batch.set(POLICY_VERSION, self._policy_version_entry)
        if cudagraph_policy:
            written = [*self._policy_keys, *(("next", key) for key in self._carrier.hidden)]
            try:
                self._runner.capture(written)
            except ValueError:
                self.shutdown()
                raise

    def _dry_run(self) -> TensorDictBase:
        """The policy run once on a copy of the carrier: what it writes lays out the batch."""
        with torch.no_grad(), set_interaction_type(self.exploration_type), set_actions_only(self.actions_only):
            return self._run_policy(self._carrier.td.clone(), random=self.policy is None)

    def _plan_batch(self) -> None:
        """The batch's write plan, the loop's current one; the rollouts' plans, none yet."""
        # the parts, not a method of the collector: no reference cycle keeps a shut-down collector alive
        plan_of = functools.partial(WritePlan, carrier=self._carrier, staged=self.env.staged,
                                    policy_keys=self._policy_keys, devices=self.devices, padded=self._wait is not None)
        self._plan = self._batch_plan = plan_of(self._batch)
        self._rollouts = RolloutPlans(self._batch, self._env_batch, plan_of)

    def share_memory_(self) -> "Collector":
        """Move the preallocated batch to shared memory (for worker processes)."""
        self._batch.share_memory_()
        self._plan_batch()  # numpy views hold raw pointers: rebuild them
        return self

    # ------------------------------------------------------------------ the loop
    @property
    def auto_reset(self) -> bool:
        """Whether the env resets an env at the step that finished it (the ``auto_reset``
        of ``stage_step``): reset_when_done, unless finished envs wait (reset_policy="wait")."""
        return self.reset_when_done and self._wait is None

    @property
    def batch(self) -> TensorDictBase:
        """The preallocated batch ``[*env_batch, T]`` each ``collect()`` fills (overwritten
        by the next one: clone what you keep)."""
        return self._batch

    @property
    def writes_between_batches(self) -> bool:
        """It writes its replay buffer while it is iterated, in the iterating thread; once
        started in the background (``start()``), at any time."""
        return self._background is not None

    def collects_in_place(self) -> bool:
        """Whether a caller may drive this collector with ``collect(rollout=...)`` instead of
        iterating it: a Collector, or a subclass that keeps its iteration (one that changes
        what iterating does must be iterated)."""
        own = type(self)
        return own.__iter__ is Collector.__iter__ and own._next_batch is Collector._next_batch

    def collect(self, num_steps: int | None = None, rollout: TensorDictBase | None = None, *,
                stop: Callable[[], bool] | None = None) -> TensorDictBase:
        """Collect one batch and count its frames.

        Without ``rollout``: fill the preallocated batch (``num_steps``, if given, must be
        its T) and return it, not delivered (see ``deliver``). With ``rollout``, a
        ``[*env_batch, num_steps + 1]`` TensorDict such as ``RolloutBuffer.start_rollout()``
        (``[1, num_steps + 1]`` for a single env): write ``num_steps`` steps straight into
        its first ``num_steps`` slots, with no intermediate batch, put the observation that
        follows the last step into slot ``num_steps``, and return it. Entries the rollout
        lacks (trajectory ids, what the policy writes besides action, log-prob and value)
        are added to it once (collectors/rollout_plan.py).

        ``stop``: called before every step but the first; when it returns True the batch
        ends there (``steps_collected`` says how many steps it holds; the later slots keep
        stale data, and only the steps collected count as frames).
        """
        if rollout is None:
            if num_steps is not None and num_steps != self.batch_spec.time_steps:
                raise ValueError(f"num_steps={num_steps}: this collector's batches have {self.batch_spec.time_steps} "
                                 "steps per env; pass rollout=... to collect another length")
            self._run_steps(stop)
            return self._batch
        rows, self._plan = self._rollouts.plan_of(rollout, num_steps)
        try:
            self._run_steps(stop)
        finally:
            plan, self._plan = self._plan, self._batch_plan
        bootstrap(rows, plan)
        return rollout

    def _run_steps(self, stop: Callable[[], bool] | None = None) -> None:
        """The loop over the current write plan's time steps (until ``stop()`` says so,
        when given: checked before every step but the first)."""
        random_steps = self.begin_batch()
        env, auto_reset = self.env, self.auto_reset
        steps = self._plan.time_steps
        act, record, stage_step = self.act, self.record, env.stage_step
        with torch.no_grad(), set_interaction_type(self.exploration_type), \
                set_actions_only(self.actions_only):
            try:
                for t in range(steps):
                    if stop is not None and t > 0 and stop():
                        steps = t
                        break
                    record(t, stage_step(act(t, t < random_steps), auto_reset))
            except NonFiniteActionError as error:
                first, batch = self._frames + 1, self._frames // self.frames_per_batch + 1
                raise NonFiniteActionError(f"batch {batch} (frames {first}..{first + self.frames_per_batch - 1}), "
                                           f"step {t}: {error}") from None
        self.end_batch(steps)

    def deliver(self, batch: TensorDictBase) -> TensorDictBase | None:
        """The delivery path (split_trajs, postproc, post-collect hook, replay-buffer write);
        the batch to yield, or None when it was written."""
        return self.delivery(batch)

    def begin_batch(self) -> int:
        """Start a batch: pre-collect hook and reset_at_each_iter; returns how many of the
        batch's first steps take random actions (init_random_frames, or no policy)."""
        pre_collect_hook = self.delivery.options.pre_collect_hook
        if pre_collect_hook is not None:
            pre_collect_hook()
        if self.reset_at_each_iter and not self._carrier.fresh:
            self._carrier.reset()
        self._carrier.fresh = False
        if self._wait is not None:
            self._wait.begin_batch(self._plan)
        if self._on_device is not None:
            self._on_device.begin_batch(self._plan)
        if self._policy_version_entry is not None:
            self._policy_version_entry.fill_(self.policy_version)
        if self.policy is None:
            return self._plan.time_steps
        return math.ceil(max(self.init_random_frames - self._frames, 0) / self._num_envs)

    def end_batch(self, steps: int | None = None) -> None:
        """Finish a batch of ``steps`` steps (default: all; fewer when collection stopped
        early): set_truncated, the storage sync, the frame count."""
        self.steps_collected = self._plan.time_steps if steps is None else steps
        if self.set_truncated:
            (self._on_device or self._cuts).at_batch_end(self._plan, self.steps_collected - 1)
        self._sync_storage()
        self._frames += self._num_envs * self.steps_collected

    def act(self, t: int, random: bool = False, envs: np.ndarray | slice | None = None):
        """First half of step t: record the carrier, run the policy (or take a random
        action), record its output. Returns the action to step the env with: a numpy
        array with a numpy write plan, the stored CPU copy when the batch is on the CPU,
        else the policy's tensor.

        ``envs``: only these envs act (env ids, or a slice of them; a batched env on the
        CPU): their carrier rows go to rows ``envs`` of step t, the policy runs on those
        envs alone, and their action comes back as a numpy array. The env pool drives its
        envs so, a group at a time (collectors/pool.py); ``record(t, done, envs)`` is the
        other half."""
        if envs is not None:
            return self._subsets.act(self._plan, t, random, envs)
        carrier, plan = self._carrier, self._plan
        td, copy = carrier.td, plan.copy
        for source, views in plan.carrier:
            copy(views[t], source)
        policy_output = self._run_policy(td, random)
        if td.get(carrier.observation_leaf) is not carrier.staged_observation:
            carrier.restore()  # the policy replaced the observation: point back to staging
        action = policy_output.get("action")
        if plan.action_numpy is not None:
            action = action.numpy()
            copy(plan.action_numpy[t], action.reshape(plan.action_numpy[t].shape))
        else:
            plan.action[t].copy_(action)
            if plan.send_stored_action:
                action = plan.action[t]
        if random and self.policy is not None:
            for _, views in plan.other_policy:
                views[t].zero_()
            for _, state, views in plan.next_hidden:  # no policy call: the state stays
                views[t].copy_(state)
        else:
            for key, views in plan.other_policy:
                views[t].copy_(policy_output.get(key))
            for key, state, views in plan.next_hidden:
                next_state = policy_output.get(("next", key))
                views[t].copy_(next_state)
                state.copy_(next_state)  # the next step reads it (zeroed below where an env restarts)
        return action

    def record(self, t: int, done: np.ndarray | None, envs: np.ndarray | slice | None = None) -> None:
        """Second half of step t, once the env stepped (``done``: its done mask, or None
        when no env finished): record what the step produced, cut trajectories that reached
        max_frames_per_traj, give restarted envs new trajectory ids. ``envs``: only these
        envs stepped (as in ``act``); ``done`` is then their done mask, in their order."""
        if envs is not None:
            self._subsets.record(self._plan, t, done, envs)
            return
        plan = self._plan
        copy = plan.copy
        for source, views in plan.next:
            copy(views[t], source)
        if self._on_device is not None:
            self._on_device.record(plan, t, done)
            return
        if self._wait is not None:
            self._wait.record(plan, t, done)
            return
        restarted = done if self.reset_when_done else None  # a done mask comes only when some env finished
        if self.max_frames_per_traj is not None:
            cut = self._cuts.time_limit(plan, t, done)
            restarted = cut if restarted is None else restarted | cut
            if not restarted.any():
                return
        if restarted is not None:
            self._book.start(restarted)

    # ------------------------------------------------------------------ public API
    def _next_batch(self) -> TensorDictBase | None:
        batch = self.collect()
        if not self.delivery.writes:
            batch = batch.clone()  # the preallocated batch is overwritten by the next one
        return self.deliver(batch)

    def _apply_delivery(self, changes: dict) -> None:
        self.delivery.options = self.delivery_options

    def set_seed(self, seed: int) -> int:
        """Seed torch's RNG and the envs, and restart every env from the seeded reset:
        the same seed gives the same batches. Returns the seed."""
        torch.manual_seed(seed)
        self.env.set_seed(seed)
        self._carrier.reset()
        return seed

    def reset(self) -> None:
        """Reset every env; each starts a new trajectory (trajectories held back for
        trajs_per_batch are dropped: they never complete)."""
        self._carrier.reset()
        self.delivery.drop_partial()

    def update_policy_weights_(self, weights=None) -> None:
        """Refresh the collector's policy copy.

        ``weights`` may be None (copy from the policy the collector was built with, a no-op
        when no copy was made), an ``nn.Module``, a state_dict, or a TensorDict of
        parameters (``TensorDict.from_module``).
        """
        self.policy_version += 1
        self._runner.load_weights(weights)

    def state_dict(self) -> dict:
        """Frame count, the trajectory-id pool (ids never repeat after a reload) and the
        policy version."""
        return {"frames": self._frames, "traj_pool": self._traj_pool.state_dict(),
                "policy_version": self.policy_version}

    def load_state_dict(self, state: dict) -> None:
        self._frames = int(state["frames"])
        self._traj_pool.load_state_dict(state["traj_pool"])
        self.policy_version = int(state.get("policy_version", 0))
        self._carrier.reset()

    def _close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return (f"Collector(env={self.env!r}, frames_per_batch={self.frames_per_batch}, "
                f"total_frames={self.total_frames}, devices={self.devices})")
