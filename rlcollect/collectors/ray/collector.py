"""RayCollector: rlcollect's collectors as Ray actors, on one machine or across many.

Each actor runs one of rlcollect's own collectors (Collector, MultiSyncCollector or
MultiAsyncCollector: the same per-step loop) and answers ``collect()`` with one batch.

    driver (RayCollector)                     actor i: _CollectorActor ("rlcollect-<run>-<i>")
    actor.collect.remote() ─────────────────▶ inner collector's next batch, stamped with
    batch i ◀── object store (numpy arrays) ── ("collector", "worker_id") = i, "policy_version"
    update_policy_weights_(): ray.put once ─▶ actor.receive_weights(ref): applied in place
                                               before the actor's next batch (weight_sync/ray.py)

``sync=True`` asks every actor and stacks the batches in actor order; ``sync=False`` keeps
every actor busy and yields batches first-come first-served (``ray.wait``). While waiting
the driver polls in slices; a task that raised or an actor that died (``ray.kill``, a crash,
a lost node) becomes a ``WorkerError`` naming the actor index, after every actor is shut down;
with ``max_worker_restarts`` it is replaced instead (a new actor, the current weights, restart
seeds, a fresh trajectory-id sub-range) and asked again for what the failed one owed.

Trajectory ids: actor i draws ids from ``[i << 40, (i + 1) << 40)`` (TrajectoryPool(start=
i << 40), shared by the worker processes of a multi-process actor; its r-th replacement
from ``(i << 40) + (r << 32)``), so ids never collide across actors, machines included.

With ``replay_buffer=...`` the buffer lives in a Ray actor (RayReplayBuffer, placed on the
driver's node); collector actors write complete trajectories (``trajs_per_batch``) or their
flat batches into it, iteration yields None and the learner samples from
``collector.replay_buffer``.

Ray is imported only when a RayCollector is built: ``pip install 'rlcollect[ray]'``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
import uuid
import warnings
from typing import Any

import torch
from tensordict import TensorDictBase

from rlcollect.buffers.replay import ReplayBuffer
from rlcollect.collectors.base import CollectionPlan, check_hosted_options
from rlcollect.collectors.host_plan import HostPlan, host_collector_kwargs, hosted_class
from rlcollect.collectors.hosted_collector import HostedCollector
from rlcollect.collectors.options import DeliveryOptions
from rlcollect.collectors.processes import WorkerError, WorkerLost
from rlcollect.collectors.ray.actor import MAX_LIVES, ActorSpec, CollectorActor
from rlcollect.collectors.ray.replay_buffer import RayReplayBuffer
from rlcollect.collectors.ray.startup import import_ray, join_ray, remote_class, start_local_ray
from rlcollect.collectors.ray.wire import batch_from_wire, stack_from_wire
from rlcollect.collectors.restarts import Restarts
from rlcollect.collectors.worker import resolve_model
from rlcollect.envs.sources import EnvSpec
from rlcollect.errors import ConfigError
from rlcollect.moved import renamed_argument
from rlcollect.seeding import restart_seed
from rlcollect.validation import check_positive_int
from rlcollect.weight_sync import NoWeightSyncScheme, WeightSyncScheme
from rlcollect.weight_sync.ray import RayWeightSender, RayWeightSyncScheme

REMOTE_CONFIG_KEYS = ("num_cpus", "num_gpus", "memory", "resources")
WAIT_SLICE_SECONDS = 0.5


class RayCollector(HostedCollector):
    """``num_workers`` Ray actors, each running one of rlcollect's collectors.

    Batches (always on CPU in the driver) carry ("collector", "worker_id") = the actor index
    and ("collector", "policy_version") = the weights version the actor collected with.

    - ``sync=True``: every batch stacks one batch from each actor, in actor order, along a
      new leading dim: ``[A, T]`` (single env), ``[A, P, T]`` (batched env of P),
      ``[A, W, ..., T]`` (collector_class="multisync": W workers, stacked), A = num_workers.
      ``frames_per_batch`` is split across actors; the batch after ``update_policy_weights_()``
      is collected with the new weights.
    - ``sync=False``: each batch is one actor's ``frames_per_batch`` frames (that actor's
      layout: ``[T]``, ``[P, T]``, ...), yielded first-come first-served. An actor's next
      batch is requested as its previous one arrives, so it holds at least the weights
      pushed before that (one batch of lag per actor, readable in "policy_version").

    Trajectory ids stay unique across actors (and machines): actor i draws them from
    ``[i << 40, (i + 1) << 40)``.

    Args:
        create_env_fn: a picklable zero-argument callable returning a GymEnv, used by every
            actor, or a list with one per actor. For collector_class "multisync"/"multiasync"
            an actor's entry is a list of such callables, one per worker process: pass that
            list (every actor gets the same) or a list of them (one per actor).
        policy: picklable callable TensorDict -> TensorDict (an nn.Module to sync weights);
            None: random actions.
        num_workers: number of actors (DistributedCollector's and RPCCollector's name for
            their count of hosts too). ``num_collectors``, its former name, is still
            taken for one release, with a DeprecationWarning.
        frames_per_batch: frames per yielded batch. sync=True: split across the actors (each
            collects frames_per_batch / num_workers); sync=False: a batch is one actor's,
            which collects all of it.
        total_frames: stop after this many frames; -1 for endless.
        sync: gather from every actor (True) or first-come first-served (False).
        collector_class: "sync" (Collector), "multisync" or "multiasync" in each actor.
        collector_kwargs: arguments of that collector (device, max_frames_per_traj,
            set_truncated, hooks run in the actors, start_method of inner workers ...; a None
            value: that collector's default).
        device, init_random_frames: set in every actor's collector_kwargs (device where
            they set none; at least init_random_frames random frames).
        remote_config: Ray resources of each actor: num_cpus (default 1), num_gpus, memory,
            resources (a None value keeps Ray's default).
        ray_address: None starts a local Ray on loopback (``loopback_ray_env()``), stopped at
            shutdown; "auto" or "host:port" joins a running cluster (left running). When this
            process is already connected to Ray, that connection is used as is.
        weight_sync_schemes: model id -> RayWeightSyncScheme or NoWeightSyncScheme; default
            ``{"policy": RayWeightSyncScheme()}`` for an nn.Module policy.
        replay_buffer: a ReplayBuffer (storage ndim=1; moved into a buffer actor) or a
            RayReplayBuffer: the actors write into it, iteration yields None, and
            ``collector.replay_buffer`` is the handle to sample from.
        trajs_per_batch: with replay_buffer, each actor writes only complete trajectories, at
            least this many at a time.
        post_collect_hook: picklable callable run inside every actor on each batch it
            collects (after the stamps, before a replay-buffer write), so it sees every batch
            even when batches never reach the driver; each actor holds its own copy. Its
            non-None return values travel back with the batches: ``hook_results()``.
        batch_timeout: seconds to wait for a batch before failing (None: no limit; dead
            actors are detected regardless).
        shutdown_timeout: seconds actors get to close their collectors before being killed.
        max_worker_restarts: actors that may be replaced over the collector's life when one
            dies, hangs past batch_timeout or (restart_on_env_error) raises while collecting:
            a new actor with the current weights, its envs reseeded (seeding.restart_seed)
            and a fresh trajectory-id sub-range, asked again for what the failed one owed
            (its batch under way is lost; a sync batch is completed by the new actor). Each
            is listed by ``pop_worker_restarts()``. 0: fail at the first failure.
        restart_on_env_error: also replace an actor whose env or policy raised.
    """

    host, count_name, state_key = "actor", "num_workers", "actors"

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """Its actors share no memory with the trainer: Ray's weight sync, or none; and what
        each actor's collector would refuse (``check_hosted_options``)."""
        if plan.weight_sync is not None and not issubclass(plan.weight_sync, (RayWeightSyncScheme,
                                                                              NoWeightSyncScheme)):
            raise ConfigError(f"collector={plan.name} shares no memory with its actors: use weight_sync=ray (or "
                              f"none), not weight_sync={plan.weight_sync_name}")
        check_hosted_options(plan, cls.host, hosted_class)
        gpus = (plan.options.get("remote_config") or {}).get("num_gpus") or 0
        if gpus and plan.options.get("ray_address") is None and gpus > (here := torch.cuda.device_count()):
            # a Ray this run starts has this machine's GPUs: an actor asking for more would wait forever
            raise ConfigError(f"collector.remote_config.num_gpus={gpus}: the Ray this run starts "
                              f"(collector.ray_address=null) has this machine's {here} GPUs "
                              "(torch.cuda.device_count()); lower it, or give collector.ray_address of a cluster "
                              "with them")

    @classmethod
    def lags_policy(cls, options) -> bool:
        """sync=False: batches first come, first served, possibly with older weights."""
        return not options.get("sync", True)

    def __init__(
        self,
        create_env_fn,
        policy=None,
        *,
        num_workers: int | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool = True,
        collector_class: str = "sync",
        envs_per_worker: int | None = None,
        seed: int | None = None,
        env_kwargs: dict | None = None,
        collector_kwargs: dict | None = None,
        device=None,
        init_random_frames: int = 0,
        remote_config: dict | None = None,
        ray_address: str | None = None,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        replay_buffer: ReplayBuffer | RayReplayBuffer | None = None,
        trajs_per_batch: int | None = None,
        post_collect_hook=None,
        batch_timeout: float | None = None,
        shutdown_timeout: float = 5.0,
        max_worker_restarts: int = 0,
        restart_on_env_error: bool = False,
        num_collectors: int | None = None,  # deprecated: num_workers (rlcollect.moved.RENAMED_ARGUMENTS)
    ) -> None:
        num_workers = renamed_argument(RayCollector, "num_collectors", num_collectors, num_workers)
        if num_workers is None:
            raise TypeError("RayCollector() missing 1 required keyword argument: 'num_workers' (its number of actors)")
        super().__init__(DeliveryOptions(post_collect_hook=post_collect_hook))
        self._restarts = Restarts(max_worker_restarts, restart_on_env_error)
        if max_worker_restarts >= MAX_LIVES:
            raise ValueError(f"max_worker_restarts must be below {MAX_LIVES} (an actor's trajectory-id range holds "
                             f"{MAX_LIVES} lives), got {max_worker_restarts}")
        self._talking = 0  # > 0 while a failed actor may be replaced (collecting, answering a call)
        self._replay_buffer = None
        self._actor_kwargs = [{}] * check_positive_int("num_workers", num_workers)  # per actor, set by _env_specs
        self._actors: list = []
        self.actor_names: list[str] = []
        self._senders: dict = {}
        self._in_flight: dict = {}  # ObjectRef -> actor index (sync=False)
        self._started_ray = False
        self._owned_buffer: RayReplayBuffer | None = None
        plan = self._plan(create_env_fn, num_workers, frames_per_batch=frames_per_batch, total_frames=total_frames,
                          sync=sync, collector_class=collector_class, envs_per_worker=envs_per_worker, seed=seed,
                          env_kwargs=env_kwargs,
                          collector_kwargs=host_collector_kwargs(collector_kwargs, device=device,
                                                                 init_random_frames=init_random_frames))
        self.num_workers = self.num_hosts
        self.policy = policy
        self.batch_timeout = batch_timeout
        self.shutdown_timeout = shutdown_timeout
        self.remote_config = self._setup_remote_config(remote_config)
        schemes = self._setup_weight_sync_schemes(weight_sync_schemes)
        if trajs_per_batch is not None and replay_buffer is None:
            raise ValueError("trajs_per_batch applies to writes into replay_buffer: pass replay_buffer=...")
        ray = import_ray()
        try:
            self._started_ray = self._connect(ray, ray_address)
            self._senders = {model_id: scheme.make_sender(resolve_model(self, model_id), self.num_workers, None)
                             for model_id, scheme in schemes.items()}
            self._replay_buffer = self._setup_replay_buffer(replay_buffer)
            self._start_actors(ray, plan, trajs_per_batch)
        except BaseException:
            self.shutdown()
            raise

    def set_delivery(self, **changes) -> None:
        """Hooks run in the actors, each with the copy it was built with: not settable here."""
        raise ValueError(f"RayCollector: {sorted(changes)} can only be set at construction (each actor holds its own "
                         "copy from its start); pass post_collect_hook=..., or the inner collector's hooks in "
                         "collector_kwargs")

    @property
    def num_collectors(self) -> int:
        """Deprecated: ``num_workers`` (the number of actors)."""
        warnings.warn("RayCollector.num_collectors is deprecated: it is num_workers now; the old name will be removed "
                      "in a future release", DeprecationWarning, stacklevel=2)
        return self.num_workers

    @property
    def replay_buffer(self) -> RayReplayBuffer | None:
        """The Ray-held buffer the actors write into (sample from it); None: batches are yielded."""
        return self._replay_buffer

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _setup_remote_config(remote_config: dict | None) -> dict:
        given = {key: value for key, value in (remote_config or {}).items() if value is not None}  # None: Ray's default
        config = {"num_cpus": 1, **given}
        unknown = sorted(set(config) - set(REMOTE_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"remote_config keys must be among {REMOTE_CONFIG_KEYS}, got {unknown}")
        return config

    def _setup_weight_sync_schemes(self, schemes) -> dict:
        if schemes is None:
            return {"policy": RayWeightSyncScheme()} if isinstance(self.policy, torch.nn.Module) else {}
        for model_id, scheme in schemes.items():
            if not isinstance(scheme, (RayWeightSyncScheme, NoWeightSyncScheme)):
                raise TypeError(f"weight_sync_schemes[{model_id!r}] must be a RayWeightSyncScheme or "
                                f"NoWeightSyncScheme (actors share no memory with the driver), got "
                                f"{type(scheme).__name__}")
        return dict(schemes)

    def _connect(self, ray, ray_address: str | None) -> bool:
        """Connect this process to Ray; True when it started a local instance (to stop at shutdown)."""
        if ray.is_initialized():
            return False
        if ray_address is not None:
            join_ray(ray, ray_address)
            return False
        start_local_ray(math.ceil(self.num_workers * self.remote_config["num_cpus"]))
        return True

    def _setup_replay_buffer(self, replay_buffer) -> RayReplayBuffer | None:
        if replay_buffer is None:
            return None
        if isinstance(replay_buffer, ReplayBuffer):
            replay_buffer = self._owned_buffer = RayReplayBuffer(replay_buffer)
        elif not isinstance(replay_buffer, RayReplayBuffer):
            raise TypeError(f"replay_buffer must be a ReplayBuffer or RayReplayBuffer, got "
                            f"{type(replay_buffer).__name__}")
        if replay_buffer.ndim != 1:
            raise ValueError("actors write into one buffer in an uncontrolled order: use a storage with ndim=1 "
                             f"(got ndim={replay_buffer.ndim}), with trajs_per_batch or set_truncated=True to keep "
                             "trajectories whole")
        return replay_buffer

    def _start_actors(self, ray, plan: HostPlan, trajs_per_batch: int | None) -> None:
        # kept to replace a failed actor (max_worker_restarts)
        self._env_fns, self._spec_frames, self._trajs_per_batch = plan.env_sources, plan.host_frames, trajs_per_batch
        self._actor_kwargs = plan.collector_kwargs
        self._run = uuid.uuid4().hex[:8]
        policy_ref = ray.put(self.policy)  # one copy in the object store for every actor
        for index in range(self.num_workers):
            actor, name = self._create_actor(index, 0, policy_ref)
            self._actors.append(actor)
            self.actor_names.append(name)
        described = self._gather({actor.describe.remote(): index for index, actor in enumerate(self._actors)},
                                 what="start-up")
        self._actor_frames = [described[i][1] for i in range(self.num_workers)]
        for model_id, sender in self._senders.items():
            if isinstance(sender, RayWeightSender):
                sender.bind(functools.partial(self._deliver_weights, model_id))
        self._set_host_shapes([described[i][0] for i in range(self.num_workers)])
        self.frames_per_batch = sum(self._actor_frames) if self.sync else max(self._actor_frames)

    def _create_actor(self, index: int, life: int, policy_ref) -> tuple:
        """Actor ``index`` in its ``life``-th life (0: the first; later ones replace a failed
        actor: restart seeds, their own trajectory-id sub-range). Returns (handle, name)."""
        env_fn, kwargs = self._env_fns[index], dict(self._actor_kwargs[index])
        seed = env_fn.seed if isinstance(env_fn, EnvSpec) else None  # the seed rule: its first env's
        if life:
            if isinstance(env_fn, EnvSpec):
                env_fn = dataclasses.replace(env_fn, seed=restart_seed(env_fn.seed, life))
            seed = restart_seed(seed, life)
            if kwargs.get("seed") is not None:
                kwargs["seed"] = restart_seed(kwargs["seed"], life)
        spec = ActorSpec(
            actor_index=index, collector_class=self.collector_class, create_env_fn=env_fn,
            frames_per_batch=self._spec_frames, collector_kwargs=kwargs,
            weight_endpoints={model_id: sender.endpoint(index) for model_id, sender in self._senders.items()},
            replay_buffer=self._replay_buffer, trajs_per_batch=self._trajs_per_batch,
            post_collect_hook=self.post_collect_hook, seed=seed, life=life,
        )
        name = f"rlcollect-{self._run}-{index}" + (f"-{life}" if life else "")
        actor = remote_class(CollectorActor).options(name=name, max_restarts=0, max_task_retries=0,
                                                     **self.remote_config).remote(spec, policy_ref)
        return actor, name

    # ------------------------------------------------------------------ restarts
    def _replace_actor(self, lost: WorkerLost, pending: dict, resend) -> dict:
        """A new actor in the failed one's place, holding the latest weights (the updates
        it is sent run before any later call, Ray keeping one submitter's order), asked
        ``resend(index)`` again. Returns ``pending`` (ref -> actor index) with the failed
        actor's refs replaced by that new one."""
        ray, index = import_ray(), lost.worker_id
        self._restarts.record(index, lost.kind, lost.message, self._actor_frames[index], dropped="its batch under way")
        with contextlib.suppress(Exception):
            ray.kill(self._actors[index], no_restart=True)
        actor, name = self._create_actor(index, self._restarts.of(index), ray.put(self.policy))
        self._actors[index], self.actor_names[index] = actor, name
        for model_id, sender in self._senders.items():
            if isinstance(sender, RayWeightSender) and sender.last is not None:
                actor.receive_weights.remote(model_id, *sender.last)
        pending = {ref: i for ref, i in pending.items() if i != index}
        pending[resend(index)] = index
        return pending

    # ------------------------------------------------------------------ waiting on actors
    def _gather(self, pending: dict, what: str = "batch", resend=None) -> dict:
        """``{actor index: result}`` of every ref in ``pending`` (ref -> actor index),
        failing on the first error. ``resend(index)``: a failed actor is replaced (within
        max_worker_restarts) and its replacement asked again (returns the new ref);
        None: fail."""
        pending, results = dict(pending), {}
        while pending:
            self._talking += resend is not None
            try:
                ref = self._wait_one(pending, what)
                index = pending.pop(ref)
                results[index] = self._get(ref, index)
            except WorkerLost as lost:
                pending = self._replace_actor(lost, pending, resend)
            finally:
                self._talking -= resend is not None
        return results

    def _wait_one(self, pending: dict, what: str):
        """The first ready ref (oldest first among the ready ones), watching batch_timeout."""
        ray = import_ray()
        deadline = None if self.batch_timeout is None else time.monotonic() + self.batch_timeout
        while True:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SLICE_SECONDS)
            if ready:
                return ready[0]
            if deadline is not None and time.monotonic() > deadline:
                self._fail(min(pending.values()), f"no {what} within batch_timeout={self.batch_timeout} s",
                           "timeout")

    def _get(self, ref, index: int):
        ray = import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            self._fail(index, f"Ray actor {self.actor_names[index]!r} raised an exception:\n{error}", "raised")
        except ray.exceptions.RayActorError as error:
            self._fail(index, f"Ray actor {self.actor_names[index]!r} died: {error}")
        except ray.exceptions.RayError as error:
            self._fail(index, f"Ray actor {self.actor_names[index]!r} failed: {error}")

    def _fail(self, index: int, message: str, kind: str = "died"):
        """Raise WorkerLost when the actor may be replaced (see ``_gather``), else shut
        everything down and raise WorkerError."""
        if self._talking > 0 and self._restarts.allows(kind):
            raise WorkerLost(index, kind, message)
        self.shutdown()
        raise WorkerError(index, message)

    def _call_all(self, method: str, args_per_host: list[tuple] | None = None) -> list:
        """Call ``method`` on every actor (after the batches in flight), return results in actor order."""
        if self._shut_down:  # after an actor failed (its state is gone with it), or a shutdown
            raise RuntimeError(f"RayCollector was shut down: its actors cannot answer {method}")
        self._wait_in_flight()
        args_per_host = args_per_host or [()] * self.num_workers

        def call(index: int):
            return getattr(self._actors[index], method).remote(*args_per_host[index])

        results = self._gather({call(index): index for index in range(self.num_workers)},
                               what=f"answer to {method}", resend=call)
        return [results[index] for index in range(self.num_workers)]

    def _collect_from(self, index: int):
        return self._actors[index].collect.remote()

    # ------------------------------------------------------------------ batches
    def _next_batch(self) -> TensorDictBase | None:
        if self.sync:
            return self._next_sync_batch()
        return self._next_async_batch()

    def _next_sync_batch(self) -> TensorDictBase | None:
        results = self._gather({self._collect_from(index): index for index in range(self.num_workers)},
                               resend=self._collect_from)
        payloads = [self._keep_hook_result(results[index]) for index in range(self.num_workers)]
        if self.replay_buffer is not None:
            self._frames += sum(payloads)
            return None
        self._frames += self.frames_per_batch
        return stack_from_wire(payloads)

    def _next_async_batch(self) -> TensorDictBase | None:
        busy = set(self._in_flight.values())
        for index, actor in enumerate(self._actors):
            if index not in busy:
                self._in_flight[actor.collect.remote()] = index
        while True:
            self._talking += 1
            try:
                ref = self._wait_one(self._in_flight, "batch")
                index = self._in_flight.pop(ref)
                result = self._get(ref, index)
                break
            except WorkerLost as lost:  # its replacement collects that batch again
                self._in_flight = self._replace_actor(lost, self._in_flight, self._collect_from)
            finally:
                self._talking -= 1
        payload = self._keep_hook_result(result)
        self._in_flight[self._collect_from(index)] = index  # keep it busy while this one is used
        if self.replay_buffer is not None:
            self._frames += payload
            return None
        self._frames += self._actor_frames[index]
        return batch_from_wire(payload)

    def _wait_in_flight(self) -> None:
        """Let the batches in flight finish (their data is dropped, or written by the actors)."""
        if self._in_flight:
            results = self._gather(self._in_flight, resend=self._collect_from)
            self._in_flight.clear()
            payloads = [self._keep_hook_result(result) for result in results.values()]
            if self.replay_buffer is not None:  # written by the actors: they count
                self._frames += sum(payloads)

    def _keep_hook_result(self, result: tuple[Any, Any]):
        payload, hook_result = result
        self.keep_hook_result(hook_result)  # what the actor's post_collect_hook returned: hook_results()
        return payload

    # ------------------------------------------------------------------ weights
    def _deliver_weights(self, model_id: str, version: int, ref) -> None:
        for actor in self._actors:
            actor.receive_weights.remote(model_id, version, ref)  # Ray resolves ref: the actor pulls the weights

    def update_policy_weights_(self, policy_or_weights=None) -> None:
        """Put the weights (parameters and buffers) of every synchronised model once in the
        Ray object store; every actor copies them into its policy before its next batch.
        ``policy_or_weights`` (a module, state_dict or TensorDict) replaces the "policy"
        model's own weights as the source."""
        if self._shut_down:
            raise RuntimeError("RayCollector was shut down")
        for model_id, sender in self._senders.items():
            sender.send(policy_or_weights if model_id == "policy" else None)

    @property
    def policy_version(self) -> int:
        """How many weight updates have been pushed for the "policy" model."""
        sender = self._senders.get("policy")
        return 0 if sender is None else sender.version

    def actor_policy_versions(self) -> list[int]:
        """The weights version each actor holds now (a round trip; waits for batches in flight)."""
        return self._call_all("get_policy_version")

    def _restore_policy_version(self, version: int) -> None:
        """The version counts the weights the senders pushed since this collector started."""

    # ------------------------------------------------------------------ shutdown
    def _close(self) -> None:
        ray = import_ray()
        connected = ray.is_initialized()
        if self._actors and connected:
            closing = []
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    closing.append(actor.close.remote())  # the collector's envs and worker processes
            with contextlib.suppress(Exception):
                ray.wait(closing, num_returns=len(closing), timeout=self.shutdown_timeout)
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
        self._actors, self._in_flight = [], {}
        for sender in self._senders.values():
            sender.close()
        if self._owned_buffer is not None and connected:
            self._owned_buffer.close()
        if self._started_ray and connected:
            ray.shutdown()

    def __del__(self):
        if not getattr(self, "_shut_down", True) and getattr(self, "_actors", None):
            with contextlib.suppress(Exception):
                self.shutdown()

    def __repr__(self) -> str:
        return (f"RayCollector(num_workers={self.num_workers}, collector_class={self.collector_class!r}, "
                f"sync={self.sync}, frames_per_batch={getattr(self, 'frames_per_batch', None)}, "
                f"total_frames={self.total_frames})")
