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
"""
from __future__ import annotations

import inspect
import math
from dataclasses import fields
from typing import Callable

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import set_interaction_type

from rlcollect.acting import set_actions_only
from rlcollect.buffers.rollout import transition_view
from rlcollect.collectors.base import CollectionPlan, CollectorBase
from rlcollect.collectors.cudagraph import GraphedPolicy, graphed_policy
from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.devices import (
    CollectorDevices,
    load_policy_weights,
    policy_on_device,
    policy_param_device,
    sync_function,
)
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
from rlcollect.collectors.rows import put_rows, row_elements
from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.envs.gym_env import NonFiniteActionError
from rlcollect.envs.sources import EnvSource, make_env
from rlcollect.envs.spaces import random_actions
from rlcollect.errors import ConfigError
from rlcollect.keys import CARRIER_KEYS, MASK, POLICY_VERSION, TIME_DIM, TRAJ_IDS
from rlcollect.primers import policy_primers
from rlcollect.trajectories import TrajectoryPool

Policy = Callable[[TensorDictBase], TensorDictBase]
OPTION_GROUPS = (DeviceOptions, StepOptions, DeliveryOptions)  # what Collector's flat keyword arguments fill


def _as_tuple(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


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
                    traj_pool=traj_pool, actions_only=actions_only)
        if track_policy_version:
            self._policy_version_entry = torch.zeros(self.batch_size, dtype=torch.int64, device=self.devices.storing)
            self._batch.set(POLICY_VERSION, self._policy_version_entry)
        if cudagraph_policy:
            written = [*self._policy_keys, *(("next", key) for key in self._hidden)]
            try:
                self._graphed = graphed_policy(self.policy, self.devices.policy, written)
            except ValueError:
                self.shutdown()
                raise

    @classmethod
    def from_options(cls, create_env_fn: EnvSource, policy: Policy | None = None, *, frames_per_batch: int,
                     total_frames: int = -1, devices: DeviceOptions = DeviceOptions(),
                     step: StepOptions = StepOptions(), delivery: DeliveryOptions = DeliveryOptions(),
                     traj_pool: TrajectoryPool | None = None) -> "Collector":
        """A Collector from option groups (what the other collectors build theirs with)."""
        collector = cls.__new__(cls)
        collector._build(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                         devices=devices, step=step, delivery=delivery, traj_pool=traj_pool)
        return collector

    # ------------------------------------------------------------------ construction
    def _build(self, create_env_fn, policy, *, frames_per_batch: int, total_frames: int, devices: DeviceOptions,
               step: StepOptions, delivery: DeliveryOptions, traj_pool: TrajectoryPool | None,
               actions_only: bool = False) -> None:
        super().__init__(delivery)
        check_groups(step, delivery)
        self.env = make_env(create_env_fn)
        self.step_options = step
        self.devices = self._setup_devices(policy, devices, step.no_cuda_sync)
        self.policy = self._setup_policy(policy)
        self._num_envs = self.env.num_envs or 1
        self.batch_spec = BatchSpec.round(frames_per_batch, self._num_envs)
        self.frames_per_batch, self._time_steps = self.batch_spec.size, self.batch_spec.time_steps
        self.total_frames = check_total_frames(total_frames)
        self.max_frames_per_traj, self.init_random_frames = step.max_frames_per_traj, step.init_random_frames
        self.reset_at_each_iter, self.reset_when_done = step.reset_at_each_iter, step.reset_when_done
        self.exploration_type, self.track_traj_ids = step.exploration_type, step.track_traj_ids
        self.actions_only = actions_only
        self.set_truncated = step.set_truncated
        self._waiting = self._setup_waiting(step.reset_policy)
        self.delivery = Delivery(delivery, self._hook_results)
        self._traj_pool = traj_pool if traj_pool is not None else TrajectoryPool()
        self._env_batch = tuple(self.env.batch_size)
        self.batch_size = torch.Size([*self._env_batch, self._time_steps])  # of every collected batch
        # a torch env returns its done mask as a tensor on its device: the bookkeeping stays there
        self._steps_on_device = bool(getattr(self.env, "steps_on_device", False))
        self._book = TrajectoryBook(self._num_envs, self._traj_pool, max_frames_per_traj=self.max_frames_per_traj,
                                    track_ids=self.track_traj_ids, ids_device=self.devices.env,
                                    on_device=self._steps_on_device, waiting=self._waiting)
        # the carrier's ("collector", "traj_ids"): a view of the book's ids, which write plans point at
        self._carried_ids = None if self._book.ids is None else self._book.ids.view(self._env_batch)
        self._env_ids = np.arange(self._num_envs)  # indexed as envs are (a slice gives a view)
        self._primers = policy_primers(policy)
        self._hidden: dict = {}  # hidden-state key -> its persistent carrier tensor [*env_batch, L, H]
        self.policy_version = 0  # update_policy_weights_() calls so far
        self.steps_collected = 0  # steps per env in the last batch (fewer than T when stopped early)
        self._policy_version_entry: torch.Tensor | None = None  # track_policy_version's batch entry
        self._graphed: GraphedPolicy | None = None  # cudagraph_policy: the forward replayed as a CUDA graph
        self._make_carrier()
        self._allocate_batch()

    def _setup_devices(self, policy, devices: DeviceOptions, no_cuda_sync: bool) -> CollectorDevices:
        resolved = CollectorDevices.resolve(
            device=devices.device,
            policy_device=devices.policy_device,
            env_device=devices.env_device,
            storing_device=devices.storing_device,
            policy_param_device=policy_param_device(policy),
            env_own_device=self.env.device,
        )
        self.env.to(resolved.env)
        self._cast_to_policy_device = resolved.policy != resolved.env
        self._sync_policy = sync_function(resolved.policy, no_cuda_sync)
        self._sync_storage = sync_function(resolved.storing, no_cuda_sync)
        return resolved

    def _setup_waiting(self, reset_policy: str):
        """reset_policy="wait": the env's ``waiting`` array (envs/staging.py), which the
        loop sets where an env finished and clears at the next batch; else None."""
        if reset_policy != "wait":
            return None
        waiting = getattr(self.env, "waiting", None)
        if waiting is None:
            raise ValueError(f"reset_policy='wait' leaves finished envs unstepped until the next batch; {self.env!r} "
                             "cannot (it needs a GymEnv with backend='list', or the action server's workers)")
        return waiting

    def _setup_policy(self, policy):
        """Use the policy as is, or a copy on policy_device when its weights live elsewhere
        (``update_policy_weights_()`` then refreshes the copy from the original)."""
        policy, self._source_policy = policy_on_device(policy, self.devices.policy)
        return policy

    def _make_carrier(self) -> None:
        """Reset every env and start a trajectory in each (the carrier's initial state)."""
        self.env.reset()
        self._book.start_all()
        carrier = self.env.staged.select(*CARRIER_KEYS)
        if self._carried_ids is not None:
            carrier.set(TRAJ_IDS, self._carried_ids)
        self._prime(carrier)
        self._carried_keys = list(carrier.keys(True, True))
        # the env's leaves of the carrier (an observation's entries, nested as its space, then is_init)
        self._carrier_leaves = [key for key in self.env.staged.select(*CARRIER_KEYS).keys(True, True)]
        self._observation_leaf = self._carrier_leaves[0]  # checked each step: did the policy replace it?
        self._carrier = carrier
        self._carrier_views: dict = {}  # act(envs=slice): (start, stop) -> (view of those rows, its entries)
        self._carrier_is_fresh = True  # no step taken since this reset

    def _prime(self, carrier: TensorDictBase) -> None:
        """Zero hidden states for a recurrent policy: added once (never twice), then the same
        tensors, never replaced (the write plan points at them), which the trajectory book
        zeroes (``start_all`` before each call here, ``start`` where an env is reset)."""
        if not self._hidden:
            for primer in self._primers:
                primer.apply(carrier, device=self.devices.env)
            self._hidden = {key: carrier.get(key) for primer in self._primers for key in primer.keys}
            self._book.hidden = self._hidden
            return
        for key, state in self._hidden.items():
            carrier.set(key, state)

    def _allocate_batch(self) -> None:
        """Dry-run the policy once to learn what it writes, then preallocate the batch
        ``[*env_batch, T]`` on storing_device and the per-step views written by index."""
        probe = self._carrier.clone()
        with torch.no_grad(), set_interaction_type(self.exploration_type), \
                set_actions_only(self.actions_only):
            probe = self._act(probe, random=self.policy is None)
        if "action" not in probe.keys():
            raise ValueError(f"the policy must write 'action' into the TensorDict it receives; it wrote "
                             f"{sorted(map(str, probe.keys(True, True)))}")
        step = probe.exclude("next")
        self._policy_keys = [key for key in step.keys(True, True) if key not in self._carried_keys]
        step.set("next", self.env.staged.get("next").clone())
        if self._waiting is not None:
            step.set(MASK, torch.ones((), dtype=torch.bool).expand(step.batch_size).clone())
        for key in self._hidden:
            if ("next", key) not in probe.keys(True, True):
                raise ValueError(f"the recurrent policy must write the hidden state it read, {key!r}, to "
                                 f"('next', {key!r}); it wrote {sorted(map(str, probe.keys(True, True)))}")
            step.set(("next", key), probe.get(("next", key)))
        time_dim = len(self._env_batch)
        self._batch = step.apply(
            lambda x: torch.zeros((*self._env_batch, self._time_steps, *x.shape[time_dim:]),
                                  dtype=x.dtype, device=self.devices.storing),
            batch_size=[*self._env_batch, self._time_steps],
            device=self.devices.storing,
        )
        self._batch.names = [None] * len(self._env_batch) + [TIME_DIM]  # as TorchRL's batches: time is named
        self._build_write_plan()

    def _build_write_plan(self) -> None:
        """The per-step destinations for the preallocated batch (see ``_write_plan``)."""
        self._batch_plan = self._write_plan(self._batch)
        self._rollout_plans: dict = {}  # (id, data pointer, T) of a rollout -> its write plan
        self.__dict__.update(self._batch_plan)

    def _write_plan(self, target: TensorDictBase) -> dict:
        """Per-step destinations (views of ``target`` ``[*env_batch, T]`` at each t) and
        their sources: the attributes the per-step loop reads, as a dict, so that a
        rollout's plan can stand in for the batch's (``collect(rollout=...)``)."""
        time_dim = len(self._env_batch)
        time_steps = target.batch_size[-1]

        def views(key):
            return target.get(key).unbind(time_dim)

        def numpy_views(key, rows: bool = False) -> list:
            stored = target.get(key)
            flat = stored.numpy().reshape(self._num_envs, time_steps, *stored.shape[time_dim + 1:])
            return [row_elements(flat[:, t]) if rows else flat[:, t] for t in range(time_steps)]

        carrier_keys = self._carried_keys
        plan = dict(
            _time_steps=time_steps,
            _action_views=views("action"),
            _other_policy_views=[(key, views(key)) for key in self._policy_keys if key != "action"],
            _next_hidden_views=[(key, state, views(("next", key))) for key, state in self._hidden.items()],
            _truncated_views=views(("next", "truncated")),
            _done_views=views(("next", "done")),
            _carrier_entries=[(key, self.env.staged.get(key)) for key in self._carrier_leaves],
            _staged_observation=self.env.staged.get(self._observation_leaf),
            _mask=target.get(MASK) if self._waiting is not None else None,  # reset_policy="wait": real steps
        )
        env_keys = [*carrier_keys, *(("next", *_as_tuple(key)) for key in self.env.staged.get("next").keys(True, True))]
        storing_on_cpu = target.device is not None and target.device.type == "cpu"
        if self.devices.env.type == "cpu" and storing_on_cpu:
            # numpy writes cost a third of Tensor.copy_ for these tiny per-step slices
            plan["_copy_env_output"] = np.copyto
            # each env's entry as one element: a strided copy of P rows, not of P x feature values
            sources = [(row_elements(self._env_source(key).numpy()), numpy_views(key, rows=True)) for key in env_keys]
            plan["_action_numpy_views"] = numpy_views("action") if self.devices.policy.type == "cpu" else None
        else:
            plan["_action_numpy_views"] = None
            plan["_copy_env_output"] = torch.Tensor.copy_
            sources = [(self._env_source(key), views(key)) for key in env_keys]
        plan["_carrier_plan"], plan["_next_plan"] = sources[:len(carrier_keys)], sources[len(carrier_keys):]
        # A policy off the CPU with a batch on it: step the env with the stored copy, not a second device copy.
        plan["_send_stored_action"] = plan["_action_numpy_views"] is None and storing_on_cpu
        return plan

    def share_memory_(self) -> "Collector":
        """Move the preallocated batch to shared memory (for worker processes)."""
        self._batch.share_memory_()
        self._build_write_plan()  # numpy views hold raw pointers: rebuild them
        return self

    def _env_source(self, key) -> torch.Tensor:
        """The persistent tensor that holds ``key`` for the current step, flat over envs."""
        source = self._carrier.get(key) if key in self._carrier.keys(True, True) else self.env.staged.get(key)
        return source.reshape(self._num_envs, *source.shape[len(self._env_batch):])

    # ------------------------------------------------------------------ the loop
    def _act(self, carrier: TensorDictBase, random: bool) -> TensorDictBase:
        if random:
            carrier.set("action", self.env.random_action())
            return carrier
        if self._cast_to_policy_device:
            policy_input = carrier.to(self.devices.policy, non_blocking=True)
            self._sync_policy()
        else:
            policy_input = carrier
        output = self.policy(policy_input) if self._graphed is None else self._graphed(policy_input)
        if output is None or output is policy_input:
            return policy_input
        # An out-of-place policy returned a new TensorDict: its entries join the input's, so the
        # step keeps its observation, is_init and trajectory ids (as with an in-place policy).
        return policy_input.update(output)

    @property
    def auto_reset(self) -> bool:
        """Whether the env resets an env at the step that finished it (the ``auto_reset``
        of ``stage_step``): reset_when_done, unless finished envs wait (reset_policy="wait")."""
        return self.reset_when_done and self._waiting is None

    @property
    def batch(self) -> TensorDictBase:
        """The preallocated batch ``[*env_batch, T]`` each ``collect()`` fills (overwritten
        by the next one: clone what you keep)."""
        return self._batch

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
        are added to it once.

        ``stop``: called before every step but the first; when it returns True the batch
        ends there (``steps_collected`` says how many steps it holds; the later slots keep
        stale data, and only the steps collected count as frames).
        """
        if rollout is None:
            if num_steps is not None and num_steps != self._time_steps:
                raise ValueError(f"num_steps={num_steps}: this collector's batches have {self._time_steps} steps "
                                 "per env; pass rollout=... to collect another length")
            self._run_steps(stop)
            return self._batch
        rows, target, plan = self._rollout_plan(rollout, num_steps)
        self.__dict__.update(plan)
        try:
            self._run_steps(stop)
        finally:
            self.__dict__.update(self._batch_plan)
        last = (slice(None),) * (rows.batch_dims - 1) + (-1,)  # the bootstrap slot: the observation after the last step
        rows.get("observation")[last].copy_(target.get(("next", "observation"))[last])  # a tensor, or nested ones
        return rollout

    def _run_steps(self, stop: Callable[[], bool] | None = None) -> None:
        """The loop over the current write plan's time steps (until ``stop()`` says so,
        when given: checked before every step but the first)."""
        random_steps = self.begin_batch()
        env, auto_reset = self.env, self.auto_reset
        steps = self._time_steps
        act, record, stage_step = self.act, self.record, env.stage_step
        with torch.no_grad(), set_interaction_type(self.exploration_type), \
                set_actions_only(self.actions_only):
            try:
                for t in range(self._time_steps):
                    if stop is not None and t > 0 and stop():
                        steps = t
                        break
                    record(t, stage_step(act(t, t < random_steps), auto_reset))
            except NonFiniteActionError as error:
                first, batch = self._frames + 1, self._frames // self.frames_per_batch + 1
                raise NonFiniteActionError(f"batch {batch} (frames {first}..{first + self.frames_per_batch - 1}), "
                                           f"step {t}: {error}") from None
        self.end_batch(steps)

    def _rollout_plan(self, rollout: TensorDictBase, num_steps: int | None) -> tuple:
        """``(rows, transitions, write plan)`` of ``rollout``: its ``[*env_batch, T + 1]``
        rows, their ``[*env_batch, T]`` transitions view this collector writes into, and the
        plan (cached: a RolloutBuffer hands out the same TensorDict every time)."""
        single = not self._env_batch and rollout.batch_dims == 2 and rollout.batch_size[0] == 1
        env_batch = tuple(rollout.batch_size[1:-1] if single else rollout.batch_size[:-1])
        steps = rollout.batch_size[-1] - 1 if rollout.batch_dims else 0
        if env_batch != self._env_batch or steps < 1:
            raise ValueError(f"rollout has batch size {list(rollout.batch_size)}; this collector's env batch is "
                             f"{list(self._env_batch)}: expected [*env_batch, num_steps + 1] ([1, num_steps + 1] "
                             "for a single env)")
        if num_steps is not None and num_steps != steps:
            raise ValueError(f"num_steps={num_steps} but the rollout holds {steps} steps (+ 1 bootstrap slot)")
        key = (id(rollout), rollout.get("is_init").data_ptr(), steps)  # a leaf of every rollout
        if key not in self._rollout_plans:
            batch_dims = self._batch.batch_dims
            for name, stored in self._batch.items(True, True):
                feature = stored.shape[batch_dims:]
                if name not in rollout.keys(True, True):
                    rollout.set(name, torch.zeros((*rollout.batch_size, *feature), dtype=stored.dtype,
                                                  device=rollout.device))
                    continue
                given = rollout.get(name)
                if given.dtype != stored.dtype or given.shape[rollout.batch_dims:] != feature:
                    raise ValueError(f"rollout entry {name!r} is {given.dtype} "
                                     f"{list(given.shape[rollout.batch_dims:])}; the collector writes {stored.dtype} "
                                     f"{list(feature)}")
            rows = rollout[0] if single else rollout
            target = transition_view(rows)
            self._rollout_plans[key] = (rows, target, self._write_plan(target))
        return self._rollout_plans[key]

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
        if self.reset_at_each_iter and not self._carrier_is_fresh:
            self._make_carrier()
        self._carrier_is_fresh = False
        if self._waiting is not None:
            self._reset_waiting()
        if self._steps_on_device:  # one id per (step, env) slot: no count read back
            self._book.reserve_slots(self._time_steps)
        if self._policy_version_entry is not None:
            self._policy_version_entry.fill_(self.policy_version)
        if self.policy is None:
            return self._time_steps
        return math.ceil(max(self.init_random_frames - self._frames, 0) / self._num_envs)

    def end_batch(self, steps: int | None = None) -> None:
        """Finish a batch of ``steps`` steps (default: all; fewer when collection stopped
        early): set_truncated, the storage sync, the frame count."""
        self.steps_collected = self._time_steps if steps is None else steps
        if self.set_truncated:
            self._truncate_last_step(self.steps_collected - 1)
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
            return self._act_some(t, random, envs)
        carrier, copy = self._carrier, self._copy_env_output
        for source, views in self._carrier_plan:
            copy(views[t], source)
        policy_output = self._act(carrier, random)
        if carrier.get(self._observation_leaf) is not self._staged_observation:
            self._restore_carrier()  # the policy replaced the observation: point back to staging
        action = policy_output.get("action")
        if self._action_numpy_views is not None:
            action = action.numpy()
            copy(self._action_numpy_views[t], action.reshape(self._action_numpy_views[t].shape))
        else:
            self._action_views[t].copy_(action)
            if self._send_stored_action:
                action = self._action_views[t]
        if random and self.policy is not None:
            for _, views in self._other_policy_views:
                views[t].zero_()
            for _, state, views in self._next_hidden_views:  # no policy call: the state stays
                views[t].copy_(state)
        else:
            for key, views in self._other_policy_views:
                views[t].copy_(policy_output.get(key))
            for key, state, views in self._next_hidden_views:
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
            self._record_some(t, done, envs)
            return
        copy = self._copy_env_output
        for source, views in self._next_plan:
            copy(views[t], source)
        if self._steps_on_device:
            self._record_on_device(t, done)
            return
        if self._waiting is not None:
            self._record_waiting(t, done)
            return
        restarted = done if self.reset_when_done else None  # a done mask comes only when some env finished
        if self.max_frames_per_traj is not None:
            cut = self._cut_long_trajectories(t, done)
            restarted = cut if restarted is None else restarted | cut
            if not restarted.any():
                return
        if restarted is not None:
            self._book.start(restarted)

    # ------------------------------------------------------------------ a subset of the envs
    def _act_some(self, t: int, random: bool, envs: np.ndarray | slice) -> np.ndarray:
        """``act`` for the envs ``envs`` alone (see ``act``)."""
        if self._waiting is not None or self._steps_on_device or self._graphed is not None:
            raise ValueError("act(envs=...) steps some envs of a batched CPU env; this collector's envs wait "
                             "(reset_policy='wait'), keep their bookkeeping on a device or its policy replays a "
                             "CUDA graph")
        for source, views in self._carrier_plan:
            put_rows(views[t], envs, source[envs])
        carrier = self._carrier_of(envs)
        if random:
            carrier.set("action", random_actions(self.env.action_space, tuple(carrier.batch_size), self.devices.env))
            policy_output = carrier
        else:
            policy_output = self._act(carrier, False)
        action = policy_output.get("action")
        if self._action_numpy_views is not None:
            views = self._action_numpy_views[t]
            action = action.numpy().reshape(-1, *views.shape[1:])
            views[envs] = action
        else:
            action = action.cpu()
            put_rows(self._action_views[t], envs, action)
            action = action.numpy()
        for key, views in self._other_policy_views:
            put_rows(views[t], envs, 0 if random else policy_output.get(key))
        for key, state, views in self._next_hidden_views:  # as in ``act``: no policy call, the state stays
            next_state = state[envs] if random else policy_output.get(("next", key))
            put_rows(views[t], envs, next_state)
            put_rows(state, envs, next_state)
        return action

    def _carrier_of(self, envs: np.ndarray | slice) -> TensorDictBase:
        """The carrier of ``envs``: for a slice, a view of the carrier's rows built once per
        slice (its entries are pointed back at the carrier's where the policy replaced
        them); for env ids, a copy of their rows."""
        if not isinstance(envs, slice):
            return self._carrier[torch.from_numpy(np.asarray(envs))]
        found = self._carrier_views.get((envs.start, envs.stop))
        if found is None:
            view = self._carrier[envs]
            found = self._carrier_views[(envs.start, envs.stop)] = (view, list(view.items(True, True)))
        view, entries = found
        for key, tensor in entries:
            if view.get(key) is not tensor:
                view.set(key, tensor)
        return view

    def _record_some(self, t: int, done: np.ndarray, envs: np.ndarray | slice) -> None:
        """``record`` for the envs ``envs`` alone (``done``: theirs, in their order)."""
        for source, views in self._next_plan:
            put_rows(views[t], envs, source[envs])
        restarted = done if self.reset_when_done else np.zeros_like(done)
        if self.max_frames_per_traj is not None:
            restarted = restarted | self._cut_long_trajectories(t, done, envs=envs)
        if restarted.any():
            self._book.start(self._env_ids[envs][restarted])

    def _record_waiting(self, t: int, done: np.ndarray | None) -> None:
        """``record``'s bookkeeping under reset_policy="wait": an env that finished at step t
        (done, or cut by max_frames_per_traj) waits, unstepped, for the next batch; its
        steps after t are padding (mask False)."""
        waiting = self._waiting
        finished = None if done is None else done & ~waiting
        if self.max_frames_per_traj is not None:
            cut = self._cut_long_trajectories(t, done, reset=False)
            finished = cut if finished is None else finished | cut
        if finished is not None and finished.any():
            waiting |= finished
            if not self._env_batch:
                self._mask[t + 1:] = False
            else:
                rows = torch.from_numpy(finished).reshape(self._env_batch).to(self._mask.device)
                self._mask[rows, t + 1:] = False

    def _reset_waiting(self) -> None:
        """At the start of a batch: reset the envs that wait, each starting a trajectory;
        every step of the new batch starts real (mask True)."""
        waiting = self._waiting
        if waiting.any():
            restarted = waiting.copy()
            self.env.reset_some(np.flatnonzero(restarted))
            waiting[:] = False
            self._book.start(restarted)
        self._mask.fill_(True)

    def _record_on_device(self, t: int, done: torch.Tensor) -> None:
        """``record``'s bookkeeping for a torch env, in tensor operations on its device (no
        host synchronisation): the time limit, new trajectory ids, hidden-state resets."""
        restarted = done if self.reset_when_done else torch.zeros_like(done)
        cut = self._book.count_step_on_device(done)
        if cut is not None:
            cut_mask = cut.reshape(self._env_batch).to(self.devices.storing, non_blocking=True)
            self._truncated_views[t].logical_or_(cut_mask)
            self._done_views[t].logical_or_(cut_mask)
            self.env.reset_some(cut)
            restarted = restarted | cut
        self._book.start_on_device(restarted, t)

    def _restore_carrier(self) -> None:
        for key, staged in self._carrier_entries:
            self._carrier.set(key, staged)

    def _cut_long_trajectories(self, t: int, done: np.ndarray | None, reset: bool = True,
                               envs: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Mark truncated (and, with ``reset``, reset) the envs that reached
        max_frames_per_traj; returns them, as a mask aligned with ``envs`` (the envs that
        stepped, ``done`` theirs; default all). Envs that wait (reset_policy="wait") are not cut."""
        cut = self._book.count_step(envs, done)
        if cut.any():
            cut_ids = self._env_ids[envs][cut]
            cut_mask = np.zeros(self._num_envs, np.bool_)
            cut_mask[cut_ids] = True
            cut_mask = torch.from_numpy(cut_mask).reshape(self._env_batch).to(self.devices.storing)
            self._truncated_views[t].logical_or_(cut_mask)
            self._done_views[t].logical_or_(cut_mask)
            if reset:
                self.env.reset_some(cut_ids)
        return cut

    def _truncate_last_step(self, last: int) -> None:
        """set_truncated: cut every trajectory at the batch boundary. The last step is
        truncated and done whatever happened there (an env that terminated on it is both
        terminated and truncated); the envs still running start new trajectories."""
        still_running = ~self._done_views[last]
        self._truncated_views[last].fill_(True)
        self._done_views[last].fill_(True)
        if self._steps_on_device:
            running = still_running.reshape(-1).to(self.devices.env)
            self.env.mark_init(running)
            self._book.start_on_device(running, last, env_reset=False)  # the env runs on: its state stays
            return
        running = still_running.reshape(-1).cpu().numpy()
        if self._waiting is not None:
            running &= ~self._waiting  # they restart at the next batch
        if running.any():
            self.env.mark_init(np.flatnonzero(running))
            self._book.start(running, env_reset=False)  # the env runs on: its state stays

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
        self._make_carrier()
        return seed

    def reset(self) -> None:
        """Reset every env; each starts a new trajectory (trajectories held back for
        trajs_per_batch are dropped: they never complete)."""
        self._make_carrier()
        self.delivery.drop_partial()

    def update_policy_weights_(self, weights=None) -> None:
        """Refresh the collector's policy copy.

        ``weights`` may be None (copy from the policy the collector was built with, a no-op
        when no copy was made), an ``nn.Module``, a state_dict, or a TensorDict of
        parameters (``TensorDict.from_module``).
        """
        self.policy_version += 1
        # a captured graph reads the parameters where they are: copy into them, never swap them
        load_policy_weights(self.policy, self._source_policy, weights, inplace=self._graphed is not None)

    def state_dict(self) -> dict:
        """Frame count, the trajectory-id pool (ids never repeat after a reload) and the
        policy version."""
        return {"frames": self._frames, "traj_pool": self._traj_pool.state_dict(),
                "policy_version": self.policy_version}

    def load_state_dict(self, state: dict) -> None:
        self._frames = int(state["frames"])
        self._traj_pool.load_state_dict(state["traj_pool"])
        self.policy_version = int(state.get("policy_version", 0))
        self._make_carrier()

    def _close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return (f"Collector(env={self.env!r}, frames_per_batch={self.frames_per_batch}, "
                f"total_frames={self.total_frames}, devices={self.devices})")
