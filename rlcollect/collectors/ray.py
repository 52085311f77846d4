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
a lost node) becomes a ``WorkerError`` naming the actor index, after every actor is shut down.

Trajectory ids: actor i draws ids from ``[i << 40, (i + 1) << 40)`` (TrajectoryPool(start=
i << 40), shared by the worker processes of a multi-process actor), so ids never collide
across actors, machines included.

With ``replay_buffer=...`` the buffer lives in a Ray actor (RayReplayBuffer, placed on the
driver's node); collector actors write complete trajectories (``trajs_per_batch``) or their
flat batches into it, iteration yields None and the learner samples from
``collector.replay_buffer``.

Ray is imported only when a RayCollector is built: ``pip install 'rlcollect[ray]'``.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.buffers.layout import to_storage_layout
from rlcollect.buffers.replay import ReplayBuffer
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.multi import WorkerError
from rlcollect.collectors.trajectories import CompleteTrajectories, TrajectoryPool
from rlcollect.collectors.worker import POLICY_VERSION, WORKER_ID, resolve_model
from rlcollect.envs.gym_env import GymEnv
from rlcollect.weight_sync import NoWeightSyncScheme, WeightSyncScheme
from rlcollect.weight_sync.ray import RayWeightSender, RayWeightSyncScheme, tensor_from_wire, tensor_to_wire


COLLECTOR_CLASSES = ("sync", "multisync", "multiasync")
REMOTE_CONFIG_KEYS = ("num_cpus", "num_gpus", "memory", "resources")
RESERVED_COLLECTOR_KWARGS = ("frames_per_batch", "total_frames", "traj_pool", "replay_buffer", "trajs_per_batch")
TRAJ_ID_SHIFT = 40  # actor i owns traj ids [i << 40, (i + 1) << 40)
WAIT_SLICE_SECONDS = 0.5
INSTALL_HINT = "RayCollector needs Ray: pip install 'rlcollect[ray]' (or pip install ray)"


def loopback_ray_env() -> dict[str, str]:
    """Environment under which a Ray instance started on this machine binds and talks to
    loopback only: node IP 127.0.0.1, no usage report, and the cloud-metadata probe
    (169.254.169.254) and any other HTTP(S) request sent to a closed loopback port.
    Set it before Ray starts (``ray start`` or ``ray.init``); it also stops this node from
    joining a multi-node cluster, so use it for local instances only."""
    proxy, local = "http://127.0.0.1:9", "127.0.0.1,localhost,::1"
    return {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray then takes 127.0.0.1 as this node's IP
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_USAGE_STATS_REPORT_URL": f"{proxy}/",  # `ray start` reports "disabled" to usage-stats.ray.io otherwise
        "RAY_AUTH_MODE": "disabled",
        "http_proxy": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "HTTPS_PROXY": proxy,
        "no_proxy": local, "NO_PROXY": local,
    }


@contextlib.contextmanager
def _loopback_node_ip(ray):
    """Let Ray keep 127.0.0.1 as this node's IP while it starts or connects.

    Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, when it is imported; unless it was 0
    then, ``ray.init`` rewrites 127.0.0.1 (as ``_node_ip_address`` or in an address) into
    the machine's external IP, and a local instance binds every interface. When ray was
    imported without it, its constant is switched for the duration.
    """
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if saved is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved is not None:
            constants.ENABLE_RAY_CLUSTER = saved


@contextlib.contextmanager
def _loopback_environment(ray):
    """``loopback_ray_env()`` in os.environ while a local Ray starts (the processes it
    starts inherit it), then the caller's environment back, so the driver's own HTTP is
    left alone."""
    saved = {name: os.environ.get(name) for name in loopback_ray_env()}
    os.environ.update(loopback_ray_env())
    try:
        with _loopback_node_ip(ray):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _is_loopback_address(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in ("localhost", "127.0.0.1", "::1")


def _import_ray():
    try:
        import ray
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return ray


@functools.lru_cache(maxsize=None)
def _remote_class(cls):
    return _import_ray().remote(cls)


def start_local_ray(num_cpus: int | None = None) -> None:
    """Start a Ray instance on this machine, bound to loopback (``loopback_ray_env()``), no
    dashboard, and connect this process to it (``ray.shutdown()`` stops it). ``num_cpus``
    logical CPUs, at least os.cpu_count(). What RayCollector(ray_address=None) does."""
    ray = _import_ray()
    with _loopback_environment(ray):
        ray.init(address="local", num_cpus=max(os.cpu_count() or 1, num_cpus or 0), include_dashboard=False,
                 _node_ip_address="127.0.0.1", logging_level=logging.WARNING)
    node_ip = ray.util.get_node_ip_address()
    if node_ip != "127.0.0.1":  # a Ray version that ignores these settings: never run exposed
        ray.shutdown()
        raise RuntimeError(f"the local Ray instance came up on {node_ip}, not 127.0.0.1: export "
                           "rlcollect.collectors.ray.loopback_ray_env() before Python starts")


# ---------------------------------------------------------------------------- batches on the wire
def batch_to_wire(batch: TensorDictBase) -> tuple[list[int], dict]:
    """``(batch_size, {key: array})``: numpy arrays pickle out-of-band, torch tensors do not."""
    return list(batch.batch_size), {key: tensor_to_wire(value) for key, value in batch.items(True, True)}


def batch_from_wire(wire) -> TensorDict:
    batch_size, leaves = wire
    batch = TensorDict({}, batch_size=batch_size)
    for key, value in leaves.items():
        batch.set(key, tensor_from_wire(value, copy=True))
    return batch


def stack_from_wire(wires: list) -> TensorDict:
    """Stack actor batches along a new leading dim (one copy, straight from the arrays)."""
    batch_size, first = wires[0]
    batch = TensorDict({}, batch_size=[len(wires), *batch_size])
    for key, value in first.items():
        parts = [leaves[key] for _, leaves in wires]
        if isinstance(value, torch.Tensor):
            batch.set(key, torch.stack(parts))
        else:
            batch.set(key, torch.from_numpy(np.stack(parts)))
    return batch


# ---------------------------------------------------------------------------- replay buffer in an actor
class _ReplayBufferActor:
    """Holds an rlcollect ReplayBuffer; one task at a time, so no lock is needed."""

    def __init__(self, replay_buffer: ReplayBuffer) -> None:
        self.buffer = replay_buffer

    def extend(self, wire) -> int:
        self.buffer.extend(batch_from_wire(wire))
        return self.buffer.write_count

    def sample(self, batch_size):
        return batch_to_wire(self.buffer.sample(batch_size))

    def read(self, index):
        return batch_to_wire(self.buffer[index])

    def length(self) -> int:
        return len(self.buffer)

    def write_count(self) -> int:
        return self.buffer.write_count

    def state_dict(self, include_storage: bool) -> dict:
        return self.buffer.state_dict(include_storage=include_storage)

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state)


class RayReplayBuffer:
    """A ReplayBuffer held by a Ray actor on the driver's node; this object is its handle,
    with the ReplayBuffer methods a learner and a collector use (``extend``, ``add``,
    ``sample``, ``len``, ``write_count``, indexing, ``state_dict``). Picklable: collector
    actors write through their copy. Each call is one round trip to the buffer actor.

    Args:
        replay_buffer: the rlcollect ReplayBuffer to hold (moved into the actor; the local
            object is not used afterwards).
        remote_config: Ray options of the buffer actor (default ``num_cpus=0``: it waits more
            than it works).
    """

    def __init__(self, replay_buffer: ReplayBuffer, *, remote_config: dict | None = None) -> None:
        if not isinstance(replay_buffer, ReplayBuffer):
            raise TypeError(f"replay_buffer must be an rlcollect ReplayBuffer, got {type(replay_buffer).__name__}")
        ray = _import_ray()
        if not ray.is_initialized():
            raise RuntimeError("RayReplayBuffer needs a running Ray: build it after ray.init() or a RayCollector")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options = {"num_cpus": 0, "max_restarts": 0, **(remote_config or {})}
        options.setdefault("scheduling_strategy", NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=False))
        self._actor = _remote_class(_ReplayBufferActor).options(**options).remote(replay_buffer)
        self.ndim = replay_buffer.storage.ndim
        self.batch_size = replay_buffer.batch_size
        self._owner = True

    def _call(self, method: str, *args):
        if self._actor is None:
            raise RuntimeError("this RayReplayBuffer was closed (a RayCollector closes the buffer it made at shutdown)")
        return _import_ray().get(getattr(self._actor, method).remote(*args))

    def extend(self, data: TensorDictBase) -> None:
        self._call("extend", batch_to_wire(data))

    def add(self, step: TensorDictBase) -> None:
        self.extend(step.unsqueeze(-1))

    def sample(self, batch_size: int | None = None) -> TensorDict:
        return batch_from_wire(self._call("sample", batch_size))

    def __getitem__(self, index) -> TensorDict:
        return batch_from_wire(self._call("read", index))

    def __len__(self) -> int:
        return self._call("length")

    @property
    def write_count(self) -> int:
        return self._call("write_count")

    def state_dict(self, *, include_storage: bool = False) -> dict:
        return self._call("state_dict", include_storage)

    def load_state_dict(self, state: dict) -> None:
        self._call("load_state_dict", state)

    def close(self) -> None:
        """Kill the buffer actor (only from the handle that created it)."""
        if self._owner and self._actor is not None:
            ray = _import_ray()
            if ray.is_initialized():
                ray.kill(self._actor, no_restart=True)
        self._actor = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_owner": False}  # copies write and sample, never kill

    def __repr__(self) -> str:
        return f"RayReplayBuffer(ndim={self.ndim}, batch_size={self.batch_size})"


# ---------------------------------------------------------------------------- the collector actor
@dataclass
class _ActorSpec:
    """What one collector actor is built from (pickled once, at its creation)."""

    actor_index: int
    collector_class: str
    create_env_fn: Any
    frames_per_batch: int
    collector_kwargs: dict
    weight_endpoints: dict = field(default_factory=dict)
    replay_buffer: RayReplayBuffer | None = None
    trajs_per_batch: int | None = None
    post_collect_hook: Any = None


class _CollectorActor:
    """One of rlcollect's collectors inside a Ray actor; see RayCollector."""

    def __init__(self, spec: _ActorSpec, policy) -> None:
        from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
        from rlcollect.collectors.single import Collector

        self.index = spec.actor_index
        traj_start = spec.actor_index << TRAJ_ID_SHIFT
        kwargs = dict(frames_per_batch=spec.frames_per_batch, total_frames=-1, **spec.collector_kwargs)
        if spec.collector_class == "sync":
            self.collector = Collector(spec.create_env_fn, policy, traj_pool=TrajectoryPool(traj_start), **kwargs)
        else:
            cls = MultiSyncCollector if spec.collector_class == "multisync" else MultiAsyncCollector
            self.collector = cls(list(spec.create_env_fn), policy, **kwargs)
            # The workers share one pool; move it to this actor's range (they restart their trajectories).
            self.collector.load_state_dict({"frames": 0, "traj_pool": {"next_id": traj_start}})
        self._multi = spec.collector_class != "sync"
        self._batches = iter(self.collector)
        self._receivers = {model_id: endpoint.make_receiver(resolve_model(self.collector, model_id))
                           for model_id, endpoint in spec.weight_endpoints.items()}
        self._weights_error: BaseException | None = None
        self.policy_version = 0
        self.replay_buffer = spec.replay_buffer
        self._trajs_per_batch = spec.trajs_per_batch
        self._complete: dict[int, CompleteTrajectories] = {}
        self._hook = spec.post_collect_hook

    def describe(self) -> tuple[list[int], int]:
        """The batch shape and frames this actor yields per ``collect``."""
        return list(self.collector.batch_size), self.collector.frames_per_batch

    def receive_weights(self, model_id: str, version: int, payload: dict) -> None:
        """Apply an update now (no batch runs meanwhile); a failure is raised by the next collect."""
        try:
            receiver = self._receivers[model_id]
            receiver.receive(version, payload)
            receiver.poll()
            if self._multi:
                self.collector.update_policy_weights_()  # on to the actor's worker processes
            if model_id == "policy":
                self.policy_version = version
        except BaseException as error:
            self._weights_error = error

    def collect(self) -> tuple[Any, Any]:
        """``(payload, hook result)``: payload is one batch on the wire, or (replay_buffer)
        the number of frames written."""
        if self._weights_error is not None:
            raise RuntimeError("applying the policy weights failed") from self._weights_error
        frames_before = self.collector.frames
        batch = next(self._batches)
        # the inner worker (before restamping): rows of one worker are the same envs from batch to batch
        source = int(batch.get(WORKER_ID).reshape(-1)[0]) if self._multi and self._trajs_per_batch else 0
        batch.set(WORKER_ID, torch.full(batch.shape, self.index, dtype=torch.int64, device=batch.device))
        batch.set(POLICY_VERSION, torch.full(batch.shape, self.policy_version, dtype=torch.int64, device=batch.device))
        hook_result = None if self._hook is None else self._hook(batch)
        if self.replay_buffer is None:
            return batch_to_wire(batch), hook_result
        self._write(batch, source)
        return self.collector.frames - frames_before, hook_result

    def _write(self, batch: TensorDictBase, source: int) -> None:
        if self._trajs_per_batch is None:
            self.replay_buffer.extend(to_storage_layout(batch, 1))
            return
        if source not in self._complete:
            self._complete[source] = CompleteTrajectories(self._trajs_per_batch)
        trajectories = self._complete[source].add(batch)
        if trajectories is not None:
            self.replay_buffer.extend(trajectories)

    def set_seed(self, seed: int) -> int:
        return self.collector.set_seed(seed)

    def reset(self) -> None:
        self.collector.reset()

    def state_dict(self) -> dict:
        return self.collector.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.collector.load_state_dict(state)

    def get_policy_version(self) -> int:
        return self.policy_version

    def close(self) -> None:
        self.collector.shutdown()


# ---------------------------------------------------------------------------- the driver side
class RayCollector(CollectorBase):
    """``num_collectors`` Ray actors, each running one of rlcollect's collectors.

    Batches (always on CPU in the driver) carry ("collector", "worker_id") = the actor index
    and ("collector", "policy_version") = the weights version the actor collected with.

    - ``sync=True``: every batch stacks one batch from each actor, in actor order, along a
      new leading dim: ``[A, T]`` (single env), ``[A, P, T]`` (batched env of P),
      ``[A, W, ..., T]`` (collector_class="multisync": W workers, stacked), A = num_collectors.
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
        num_collectors: number of actors.
        frames_per_batch: frames per yielded batch (sync: split across actors).
        total_frames: stop after this many frames; -1 for endless.
        sync: gather from every actor (True) or first-come first-served (False).
        collector_class: "sync" (Collector), "multisync" or "multiasync" in each actor.
        collector_kwargs: arguments of that collector (device, max_frames_per_traj,
            set_truncated, hooks run in the actors, start_method of inner workers ...).
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
    """

    def __init__(
        self,
        create_env_fn,
        policy=None,
        *,
        num_collectors: int,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool = True,
        collector_class: str = "sync",
        collector_kwargs: dict | None = None,
        remote_config: dict | None = None,
        ray_address: str | None = None,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        replay_buffer: ReplayBuffer | RayReplayBuffer | None = None,
        trajs_per_batch: int | None = None,
        post_collect_hook=None,
        batch_timeout: float | None = None,
        shutdown_timeout: float = 5.0,
    ) -> None:
        super().__init__()
        self._actors: list = []
        self.actor_names: list[str] = []
        self._senders: dict = {}
        self._in_flight: dict = {}  # ObjectRef -> actor index (sync=False)
        self._started_ray = False
        self._owned_buffer: RayReplayBuffer | None = None
        self._hook_results: list = []
        self.post_collect_hook = post_collect_hook
        self.num_collectors = self._setup_num_collectors(num_collectors)
        self.collector_class = self._setup_collector_class(collector_class)
        self.sync = bool(sync)
        self.policy = policy
        self.total_frames = self._setup_total_frames(total_frames)
        self.batch_timeout = batch_timeout
        self.shutdown_timeout = shutdown_timeout
        env_fns = self._setup_create_env_fn(create_env_fn)
        self.collector_kwargs = self._setup_collector_kwargs(collector_kwargs)
        self.remote_config = self._setup_remote_config(remote_config)
        actor_frames = self._setup_frames_per_batch(frames_per_batch)
        schemes = self._setup_weight_sync_schemes(weight_sync_schemes)
        if trajs_per_batch is not None and replay_buffer is None:
            raise ValueError("trajs_per_batch applies to writes into replay_buffer: pass replay_buffer=...")
        ray = _import_ray()
        try:
            self._started_ray = self._connect(ray, ray_address)
            self._senders = {model_id: scheme.make_sender(resolve_model(self, model_id), self.num_collectors, None)
                             for model_id, scheme in schemes.items()}
            self.replay_buffer = self._setup_replay_buffer(replay_buffer)
            self._start_actors(ray, env_fns, actor_frames, trajs_per_batch)
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _setup_num_collectors(num_collectors: int) -> int:
        if isinstance(num_collectors, bool) or not isinstance(num_collectors, int) or num_collectors < 1:
            raise ValueError(f"num_collectors must be a positive int, got {num_collectors!r}")
        if num_collectors >= 1 << (63 - TRAJ_ID_SHIFT):
            raise ValueError(f"num_collectors must be below {1 << (63 - TRAJ_ID_SHIFT)} (traj id ranges)")
        return num_collectors

    @staticmethod
    def _setup_collector_class(collector_class: str) -> str:
        if collector_class not in COLLECTOR_CLASSES:
            raise ValueError(f"collector_class must be one of {COLLECTOR_CLASSES}, got {collector_class!r}")
        return collector_class

    def _setup_create_env_fn(self, create_env_fn) -> list:
        multi = self.collector_class != "sync"

        def is_list(value) -> bool:
            return isinstance(value, Sequence) and not isinstance(value, (str, bytes))

        if is_list(create_env_fn) and create_env_fn and (not multi or all(is_list(e) for e in create_env_fn)):
            entries = list(create_env_fn)
            if len(entries) != self.num_collectors:
                raise ValueError(f"create_env_fn has {len(entries)} entries for num_collectors="
                                 f"{self.num_collectors}: give one per actor, or one for all")
        else:
            entries = [create_env_fn] * self.num_collectors
        for index, entry in enumerate(entries):
            for env_fn in (entry if multi and is_list(entry) else [entry]):
                if isinstance(env_fn, GymEnv) or not callable(env_fn):
                    raise TypeError(f"create_env_fn[{index}]: actors build their own envs; pass a picklable "
                                    "zero-argument callable returning a GymEnv (e.g. functools.partial(GymEnv, "
                                    f"'CartPole-v1', 4)), got {type(env_fn).__name__}")
            if multi and not (is_list(entry) and entry):
                raise TypeError(f"create_env_fn[{index}]: collector_class={self.collector_class!r} runs worker "
                                "processes in each actor: give a non-empty list of env callables, one per worker")
        return entries

    def _setup_collector_kwargs(self, collector_kwargs: dict | None) -> dict:
        kwargs = dict(collector_kwargs or {})
        reserved = sorted(set(kwargs) & set(RESERVED_COLLECTOR_KWARGS))
        if reserved:
            raise ValueError(f"collector_kwargs may not set {reserved}: RayCollector sets them (frames_per_batch, "
                             "total_frames, replay_buffer and trajs_per_batch are its own arguments; traj ids come "
                             "from per-actor ranges)")
        if self.collector_class == "multisync" and kwargs.get("cat_results", "stack") != "stack":
            raise ValueError("collector_kwargs['cat_results']: a multisync actor keeps its workers stacked "
                             f"('stack'), got {kwargs['cat_results']!r}")
        if self.sync and kwargs.get("split_trajs", False):
            raise ValueError("split_trajs=True gives each actor a different padded shape, which sync=True cannot "
                             "stack: split the stacked batch with split_trajectories instead")
        return kwargs

    @staticmethod
    def _setup_remote_config(remote_config: dict | None) -> dict:
        given = {key: value for key, value in (remote_config or {}).items() if value is not None}  # None: Ray's default
        config = {"num_cpus": 1, **given}
        unknown = sorted(set(config) - set(REMOTE_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"remote_config keys must be among {REMOTE_CONFIG_KEYS}, got {unknown}")
        return config

    def _setup_frames_per_batch(self, frames_per_batch: int) -> int:
        if isinstance(frames_per_batch, bool) or not isinstance(frames_per_batch, int) or frames_per_batch < 1:
            raise ValueError(f"frames_per_batch must be a positive int, got {frames_per_batch!r}")
        return math.ceil(frames_per_batch / self.num_collectors) if self.sync else frames_per_batch

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
            # joining a head bound to loopback: keep 127.0.0.1 (Ray would swap in the external IP)
            with _loopback_node_ip(ray) if _is_loopback_address(ray_address) else contextlib.nullcontext():
                ray.init(address=ray_address, logging_level=logging.WARNING)
            return False
        start_local_ray(math.ceil(self.num_collectors * self.remote_config["num_cpus"]))
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

    def _start_actors(self, ray, env_fns: list, actor_frames: int, trajs_per_batch: int | None) -> None:
        actor_class = _remote_class(_CollectorActor)
        policy_ref = ray.put(self.policy)  # one copy in the object store for every actor
        run = uuid.uuid4().hex[:8]
        for index, env_fn in enumerate(env_fns):
            spec = _ActorSpec(
                actor_index=index, collector_class=self.collector_class, create_env_fn=env_fn,
                frames_per_batch=actor_frames, collector_kwargs=self.collector_kwargs,
                weight_endpoints={model_id: sender.endpoint(index) for model_id, sender in self._senders.items()},
                replay_buffer=self.replay_buffer, trajs_per_batch=trajs_per_batch,
                post_collect_hook=self.post_collect_hook,
            )
            name = f"rlcollect-{run}-{index}"
            self._actors.append(actor_class.options(name=name, max_restarts=0, max_task_retries=0,
                                                    **self.remote_config).remote(spec, policy_ref))
            self.actor_names.append(name)
        described = self._gather({actor.describe.remote(): index for index, actor in enumerate(self._actors)},
                                 what="start-up")
        self._actor_shapes = [torch.Size(described[i][0]) for i in range(self.num_collectors)]
        self._actor_frames = [described[i][1] for i in range(self.num_collectors)]
        for model_id, sender in self._senders.items():
            if isinstance(sender, RayWeightSender):
                sender.bind(functools.partial(self._deliver_weights, model_id))
        if self.sync:
            if len(set(self._actor_shapes)) > 1:
                raise ValueError(f"sync=True stacks the actors' batches, which needs one shape; got "
                                 f"{[list(s) for s in self._actor_shapes]} (give every actor the same envs)")
            self.frames_per_batch = sum(self._actor_frames)
            self.batch_size = torch.Size([self.num_collectors, *self._actor_shapes[0]])
        else:
            self.frames_per_batch = max(self._actor_frames)
            self.batch_size = max(self._actor_shapes, key=lambda shape: shape.numel())

    # ------------------------------------------------------------------ waiting on actors
    def _gather(self, pending: dict, what: str = "batch") -> dict:
        """``{actor index: result}`` of every ref in ``pending`` (ref -> actor index),
        failing on the first error."""
        pending, results = dict(pending), {}
        while pending:
            ref = self._wait_one(pending, what)
            index = pending.pop(ref)
            results[index] = self._get(ref, index)
        return results

    def _wait_one(self, pending: dict, what: str):
        """The first ready ref (oldest first among the ready ones), watching batch_timeout."""
        ray = _import_ray()
        deadline = None if self.batch_timeout is None else time.monotonic() + self.batch_timeout
        while True:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SLICE_SECONDS)
            if ready:
                return ready[0]
            if deadline is not None and time.monotonic() > deadline:
                self._fail(min(pending.values()), f"no {what} within batch_timeout={self.batch_timeout} s")

    def _get(self, ref, index: int):
        ray = _import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            self._fail(index, f"Ray actor {self.actor_names[index]!r} raised an exception:\n{error}")
        except ray.exceptions.RayActorError as error:
            self._fail(index, f"Ray actor {self.actor_names[index]!r} died: {error}")
        except ray.exceptions.RayError as error:
            self._fail(index, f"Ray actor {self.actor_names[index]!r} failed: {error}")

    def _fail(self, index: int, message: str):
        self.shutdown()
        raise WorkerError(index, message)

    def _call_all(self, method: str, *args_per_actor) -> list:
        """Call ``method`` on every actor (after the batches in flight), return results in actor order."""
        self._wait_in_flight()
        refs = {}
        for index, actor in enumerate(self._actors):
            args = [arg[index] for arg in args_per_actor]
            refs[getattr(actor, method).remote(*args)] = index
        results = self._gather(refs, what=f"answer to {method}")
        return [results[index] for index in range(self.num_collectors)]

    # ------------------------------------------------------------------ batches
    def _next_batch(self) -> TensorDictBase | None:
        if self.sync:
            return self._next_sync_batch()
        return self._next_async_batch()

    def _next_sync_batch(self) -> TensorDictBase | None:
        results = self._gather({actor.collect.remote(): index for index, actor in enumerate(self._actors)})
        payloads = [self._keep_hook_result(results[index]) for index in range(self.num_collectors)]
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
        ref = self._wait_one(self._in_flight, "batch")
        index = self._in_flight.pop(ref)
        payload = self._keep_hook_result(self._get(ref, index))
        self._in_flight[self._actors[index].collect.remote()] = index  # keep it busy while this one is used
        if self.replay_buffer is not None:
            self._frames += payload
            return None
        self._frames += self._actor_frames[index]
        return batch_from_wire(payload)

    def _wait_in_flight(self) -> None:
        """Let the batches in flight finish (their data is dropped, or written by the actors)."""
        if self._in_flight:
            results = self._gather(self._in_flight)
            self._in_flight.clear()
            payloads = [self._keep_hook_result(result) for result in results.values()]
            if self.replay_buffer is not None:  # written by the actors: they count
                self._frames += sum(payloads)

    def _keep_hook_result(self, result: tuple[Any, Any]):
        payload, hook_result = result
        if hook_result is not None:
            self._hook_results.append(hook_result)
        return payload

    def hook_results(self) -> list:
        """What the actors' post_collect_hook returned since the last call (non-None
        values, in arrival order)."""
        results, self._hook_results = self._hook_results, []
        return results

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

    # ------------------------------------------------------------------ seeds and state
    def set_seed(self, seed: int) -> int:
        """Seed every actor (actor i gets ``seed + 1000 * i``); returns ``seed``."""
        self._call_all("set_seed", [seed + 1000 * index for index in range(self.num_collectors)])
        return seed

    def reset(self) -> None:
        """Reset every env of every actor; each starts a new trajectory."""
        self._call_all("reset")

    def state_dict(self) -> dict:
        """Frame count and each actor's collector state (its trajectory-id pool)."""
        return {"frames": self._frames, "actors": self._call_all("state_dict")}

    def load_state_dict(self, state: dict) -> None:
        if len(state["actors"]) != self.num_collectors:
            raise ValueError(f"state holds {len(state['actors'])} actors, this collector has {self.num_collectors}")
        self._call_all("load_state_dict", state["actors"])
        self._frames = int(state["frames"])

    # ------------------------------------------------------------------ shutdown
    def _close(self) -> None:
        ray = _import_ray()
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
        return (f"RayCollector(num_collectors={self.num_collectors}, collector_class={self.collector_class!r}, "
                f"sync={self.sync}, frames_per_batch={getattr(self, 'frames_per_batch', None)}, "
                f"total_frames={self.total_frames})")
