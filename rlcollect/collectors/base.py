"""What every collector shares: frame accounting, iteration, the context-manager protocol."""
from __future__ import annotations

import collections
import dataclasses
import inspect
import math
import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

import torch
from tensordict import TensorDict

from rlcollect.choices import HOSTED_COLLECTOR_CLASSES
from rlcollect.collectors.delivery import PENDING
from rlcollect.collectors.options import BatchSpec, DeliveryOptions
from rlcollect.collectors.processes import one_set_per_worker
from rlcollect.collectors.restarts import Restarts, WorkerRestart
from rlcollect.errors import ConfigError
from rlcollect.keys import MASK

SETTABLE_DELIVERY = ("pre_collect_hook", "post_collect_hook", "postproc")


@dataclass(frozen=True)
class CollectionPlan:
    """What a run asks of its collector, in plain values, for the collector class's own
    checks (``CollectorBase.check_plan``) before anything is built.

    Attributes:
        name: the collector's option name, for messages ("pool": "collector=pool").
        options: its configured arguments (the config node's keys).
        on_policy: the learner trains on each batch as collected, one row per env (PPO);
            False: it learns from a replay buffer the collector writes into.
        algo: the algorithm's label, for messages.
        env_backend, num_envs: how the env is stepped, how many envs (None: one, unbatched).
        storage_ndim: the replay storage's ndim (None: no replay buffer).
        trajs_per_batch: complete trajectories per replay write (None: whole batches).
        weight_sync: the weight-sync scheme's class; weight_sync_name its option name.
        policy_device: where the policy runs.
    """

    name: str
    options: Mapping[str, Any]
    on_policy: bool = True
    algo: str = ""
    env_backend: str = "list"
    num_envs: int | None = None
    storage_ndim: int | None = None
    trajs_per_batch: int | None = None
    weight_sync: type | None = None
    weight_sync_name: str = ""
    policy_device: str = "cpu"


def check_env_device(plan: CollectionPlan) -> None:
    """A collector whose envs step in worker processes (on the CPU) takes no env_device."""
    env_device = plan.options.get("env_device")
    if env_device is not None:
        raise ConfigError(f"collector.env_device={env_device}: collector={plan.name} steps its envs in worker "
                          "processes, on the CPU; leave collector.env_device=null and set "
                          "collector.policy_device / collector.storing_device instead")


def check_worker_env_backend(plan: CollectionPlan) -> None:
    """A collector whose envs step in its (daemonic) worker processes cannot run the async
    backend there, which starts a process per env."""
    if plan.env_backend == "async":
        raise ConfigError(f"env.backend=async starts a process per env, which collector={plan.name}'s worker "
                          "processes cannot (they are daemonic): use env.backend=sync or list (the workers already "
                          "step in parallel), or a collector that steps its envs in this process")


def check_hosted_options(plan: CollectionPlan, host: str, hosted_class: Callable[[str], type]) -> None:
    """What a hosted collector (collector=ray, collector=distributed: each ``host`` runs the
    collector ``hosted_class(collector_class)``, host_plan.hosted_class, with collector_kwargs)
    would refuse once its hosts start: multisync/multiasync without
    collector_kwargs.num_workers (the run's one env source is split over that many worker
    processes), a collector_kwargs key the host's collector does not take (its
    ``accepted_arguments``) and a worker_cpu_affinity without one list of CPU ids per worker
    process. A null key is not passed on: not checked."""
    collector_class = plan.options.get("collector_class", "sync")
    if collector_class not in HOSTED_COLLECTOR_CLASSES:
        return  # a choice outside them: check_ranges says so
    kwargs = {key: value for key, value in (plan.options.get("collector_kwargs") or {}).items() if value is not None}
    cls = hosted_class(collector_class)
    unexpected = sorted(set(kwargs) - cls.accepted_arguments())
    if unexpected:
        given = ", ".join(f"collector.collector_kwargs.{key}={kwargs[key]}" for key in unexpected)
        takers = [name for name in HOSTED_COLLECTOR_CLASSES
                  if set(unexpected) <= hosted_class(name).accepted_arguments()]
        them = "it" if len(unexpected) == 1 else "them"
        where = (f"set collector.collector_class={' or '.join(takers)} (worker processes in each {host}), or leave "
                 f"{them} null" if takers else f"leave {them} null")
        raise ConfigError(f"{given}: not {'an argument' if len(unexpected) == 1 else 'arguments'} of "
                          f"collector.collector_class={collector_class} ({cls.__name__}), the collector each {host} "
                          f"runs: {where}")
    if collector_class == "sync":
        return
    workers = kwargs.get("num_workers")
    if workers is None:
        raise ConfigError(f"collector.collector_class={collector_class} runs worker processes in each {host}: set "
                          f"their number, collector.collector_kwargs.num_workers (null), e.g. "
                          f"collector.collector_kwargs.num_workers=2")
    affinity = kwargs.get("worker_cpu_affinity")
    if affinity is not None and not one_set_per_worker(affinity, workers):  # which CPUs: the hosts' machines'
        raise ConfigError(f"collector.collector_kwargs.worker_cpu_affinity={list(affinity)} "
                          f"(collector.collector_kwargs.num_workers={workers}): must hold one non-empty list of CPU "
                          f"ids per worker process of each {host}")


class CollectorBase(ABC):
    """Iterating yields batches of ``frames_per_batch`` frames until ``total_frames``
    (``-1``: forever). Iterating again continues where the last iteration stopped."""

    frames_per_batch: int
    total_frames: int
    batch_size: torch.Size  # of the batches collected (before split_trajs / postproc)

    hooks_run_in_process: bool = False  # whether post_collect_hook is called in this process, on every batch
    option_groups: tuple[type, ...] = ()  # the option groups (collectors/options.py) ``**options`` routes to

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """Refuse, with a ConfigError in one line, what the class cannot collect for the run
        ``plan`` describes (called before anything is built; subclasses add their own
        rules). Every collector refuses Ray's weight sync but RayCollector; one that takes no
        ``weight_sync_schemes`` (its policy runs in the training process) refuses any scheme
        but the default, shared memory, which it leaves unused, and none: the scheme would
        be built and dropped, silently."""
        from rlcollect.weight_sync import NoWeightSyncScheme, SharedMemWeightSyncScheme
        from rlcollect.weight_sync.ray import RayWeightSyncScheme

        if plan.weight_sync is not None and issubclass(plan.weight_sync, RayWeightSyncScheme):
            raise ConfigError(f"weight_sync={plan.weight_sync_name} needs collector=ray (got collector={plan.name})")
        if (plan.weight_sync is not None and "weight_sync_schemes" not in cls.accepted_arguments()
                and not issubclass(plan.weight_sync, (SharedMemWeightSyncScheme, NoWeightSyncScheme))):
            raise ConfigError(f"weight_sync={plan.weight_sync_name}: collector={plan.name} runs the policy in the "
                              "training process, so there are no weights to send to workers; leave weight_sync at "
                              "its default (shared_mem, unused by this collector) or set weight_sync=none")

    @classmethod
    def lags_policy(cls, options: Mapping[str, Any]) -> bool:
        """Whether, with ``options``, a batch may be collected with older weights than the
        trainer's (an on-policy algorithm then learns off-policy data: a warning)."""
        return False

    @classmethod
    def batch_envs(cls, plan: CollectionPlan) -> int:
        """How many envs' time steps each batch holds for the run ``plan`` describes: its
        frames are ``frames_per_batch`` rounded up to a multiple of them (``BatchSpec``).
        1 here: a class that does not say collects the frames it is asked for."""
        return 1

    @classmethod
    def batch_frames(cls, plan: CollectionPlan) -> int | None:
        """The frames of each batch the class collects for ``plan``: its
        ``frames_per_batch`` rounded as the class rounds it, what a check of a size against
        the batch compares with (None: the plan gives no frames_per_batch)."""
        frames = plan.options.get("frames_per_batch")
        if frames is None:
            return None
        envs = cls.batch_envs(plan)
        return BatchSpec.split(frames, envs) * envs

    @classmethod
    def accepted_arguments(cls) -> frozenset[str]:
        """The keyword arguments the class's constructor takes (``argument_defaults``). The
        pipeline passes a collector the runtime arguments of its contract (docs/collectors.md,
        "A collector of your own") that it takes."""
        return frozenset(cls.argument_defaults())

    @classmethod
    def argument_defaults(cls) -> dict[str, Any]:
        """``{name: default}`` of the keyword arguments the class's constructor takes
        (``inspect.Parameter.empty``: a required one): the named ones of its constructor
        and, while a constructor passes ``**kwargs`` on, of its bases' (the first one's
        default wins); and the fields of the option groups its ``**options`` are routed to."""
        defaults: dict[str, Any] = {}
        forwards = True
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None or not forwards:
                continue
            parameters = inspect.signature(init).parameters.values()
            for p in parameters:
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
                    defaults.setdefault(p.name, p.default)
            forwards = any(p.kind is p.VAR_KEYWORD for p in parameters)
        for group in cls.option_groups:
            for option in dataclasses.fields(group):
                defaults.setdefault(option.name, option.default)
        return defaults

    def __init__(self, delivery_options: DeliveryOptions | None = None) -> None:
        self.delivery_options = delivery_options if delivery_options is not None else DeliveryOptions()
        self._frames = 0
        self._yielded_frames = 0  # trajs_per_batch without a replay buffer: frames of the yielded trajectories
        self._shut_down = False
        self._background: threading.Thread | None = None
        self._background_error: BaseException | None = None
        self._stop_background = threading.Event()
        self._write_lock = threading.Lock()
        self._restarts = Restarts()  # collectors with workers: their max_worker_restarts budget
        self._hook_results: collections.deque = collections.deque()  # what post_collect_hook returned

    def collects_in_place(self) -> bool:
        """Whether a caller may drive this collector with ``collect(rollout=...)`` (writing
        an on-policy learner's rollout buffer in place) instead of iterating it; only the
        in-process Collector can (pipeline/loop.py asks)."""
        return False

    @property
    def replay_buffer(self):
        """The replay buffer batches are written into (None: batches are yielded)."""
        return self.delivery_options.replay_buffer

    def pop_worker_restarts(self) -> list[WorkerRestart]:
        """The workers replaced since the last call (collectors with worker processes or
        actors and ``max_worker_restarts``; docs/collectors.md)."""
        return self._restarts.pop()

    @property
    def worker_restarts(self) -> int:
        """How many workers were replaced so far."""
        return len(self._restarts)

    @property
    def post_collect_hook(self):
        """Called with each batch (where: see ``hooks_run_in_process``); settable."""
        return self.delivery_options.post_collect_hook

    @post_collect_hook.setter
    def post_collect_hook(self, hook) -> None:
        self.set_delivery(post_collect_hook=hook)

    @property
    def pre_collect_hook(self):
        """Called with no argument before each batch; settable."""
        return self.delivery_options.pre_collect_hook

    @pre_collect_hook.setter
    def pre_collect_hook(self, hook) -> None:
        self.set_delivery(pre_collect_hook=hook)

    @property
    def postproc(self):
        """TensorDict -> TensorDict applied to each batch before it is yielded or written; settable."""
        return self.delivery_options.postproc

    @postproc.setter
    def postproc(self, postproc) -> None:
        self.set_delivery(postproc=postproc)

    def set_delivery(self, **changes) -> None:
        """Change the hooks or postproc after construction: the change reaches wherever they
        run (worker processes included) before the next batch starts. split_trajs,
        replay_buffer and trajs_per_batch are fixed at construction."""
        fixed = sorted(set(changes) - set(SETTABLE_DELIVERY))
        if fixed:
            raise ValueError(f"{fixed} can only be set at construction; after it, set {list(SETTABLE_DELIVERY)}")
        self.delivery_options = replace(self.delivery_options, **changes)
        self._apply_delivery(changes)

    def _apply_delivery(self, changes: dict) -> None:
        """Bring ``changes`` (already in ``delivery_options``) to where the delivery runs."""

    def keep_hook_result(self, result) -> None:
        """Keep what the post-collect hook returned for a batch (wherever it ran: here, in a
        worker process, in a Ray actor) until ``hook_results()`` hands it over; None is not
        kept."""
        if result is not None:
            self._hook_results.append(result)

    def hook_results(self) -> list:
        """What the post-collect hook returned since the last call, batch by batch in the
        order they arrived (non-None values): the one way a hook's results reach the caller,
        whichever process the hook ran in. Safe against a background collection thread."""
        results = []
        while self._hook_results:
            results.append(self._hook_results.popleft())
        return results

    @property
    def frames(self) -> int:
        """Frames collected so far (every yielded batch counts in full)."""
        return self._frames

    def __len__(self) -> int:
        if self.total_frames < 0:
            raise TypeError("an endless collector (total_frames=-1) has no length")
        return math.ceil(self.total_frames / self.frames_per_batch)

    def __iter__(self) -> Iterator[TensorDict]:
        if self._shut_down:
            raise RuntimeError(f"{type(self).__name__} was shut down")
        while self.total_frames < 0 or self._counted_frames() < self.total_frames:
            batch = self._next_batch()
            if batch is PENDING:  # trajs_per_batch: the trajectories are still running
                continue
            if batch is not None and self._yields_trajectories():
                self._yielded_frames += int(batch.get(MASK).sum()) if MASK in batch.keys(True) else batch.numel()
            yield batch

    def _yields_trajectories(self) -> bool:
        options = self.delivery_options
        return options.trajs_per_batch is not None and options.replay_buffer is None

    def _counted_frames(self) -> int:
        """What total_frames counts: the frames collected, or with trajs_per_batch and no
        replay buffer the frames of the trajectories yielded."""
        return self._yielded_frames if self._yields_trajectories() else self._frames

    @abstractmethod
    def _next_batch(self) -> TensorDict:
        """Collect one batch (counting its frames), apply postproc and the post-collect
        hook, return it."""

    @abstractmethod
    def _close(self) -> None:
        """Release envs, processes and shared memory (called once)."""

    # ------------------------------------------------------------------ background collection
    def start(self) -> None:
        """Collect into ``replay_buffer`` in the background until total_frames or
        ``async_shutdown()``. A thread drives the collection loop (for multi-process
        collectors the workers collect and write; the thread only dispatches)."""
        if self.replay_buffer is None:
            raise ValueError("start() needs a collector built with replay_buffer=...")
        if self._background is not None:
            raise RuntimeError("the collector was already started")
        self._background = threading.Thread(target=self._run_in_background, name="rlcollect-collector", daemon=True)
        self._background.start()

    def _run_in_background(self) -> None:
        batches = iter(self)
        try:
            while not self._stop_background.is_set():
                with self._write_lock:
                    if next(batches, StopIteration) is StopIteration:
                        return
        except BaseException as error:  # surfaced by check_background() / async_shutdown()
            self._background_error = error

    @property
    def running(self) -> bool:
        """True while background collection is going on."""
        return self._background is not None and self._background.is_alive()

    def check_background(self) -> None:
        """Re-raise, in the caller's thread, an error that stopped background collection."""
        if self._background_error is not None:
            raise RuntimeError(f"background collection failed: {self._background_error}") from self._background_error

    @property
    def writes_between_batches(self) -> bool:
        """Whether its replay buffer may be written while no batch is being collected for
        the caller (background collection, workers collecting ahead); a collector that
        writes only while it is iterated, in the iterating thread, says False (a checkpoint
        taken between two batches then saves a full buffer in place, not copied)."""
        return True

    @contextmanager
    def pause(self):
        """No write reaches the replay buffer while the block runs (collection waits)."""
        with self._write_lock:
            self._wait_in_flight()
            yield

    def _wait_in_flight(self) -> None:
        """Let writes already under way finish (multi-process collectors)."""

    def async_shutdown(self, timeout: float | None = None) -> None:
        """Stop background collection (waiting up to ``timeout`` s for the batch under way),
        then shut down; re-raises an error that stopped the collection."""
        self._stop_background.set()
        if self._background is not None:
            self._background.join(timeout)
        self.shutdown()
        self.check_background()

    def shutdown(self) -> None:
        """Release everything the collector holds. Idempotent."""
        if self._shut_down:
            return
        self._shut_down = True
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
