"""Multi-process collectors: MultiSyncCollector and MultiAsyncCollector.

Each worker process runs a Collector (collectors/worker.py) into a batch preallocated in
shared memory; the main process only sends "collect" and reads the shared batches.

    main                                   worker i (one per create_env_fn entry)
    ("collect",) ───────── pipe ─────────▶  apply pending weights; Collector.collect()
    read shared batch i ◀── ("batch", v) ── batch i (shared memory), policy_version v

MultiSync asks every worker and combines the B batches (``cat_results``); MultiAsync keeps
every worker busy and yields each batch as it arrives. While waiting, the main process
watches the workers' pipes and process sentinels: a worker exception arrives as a
``WorkerError`` carrying its traceback text, a worker killed by a signal as a
``WorkerError`` naming the signal; either way every worker is shut down first.
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import replace
from typing import Sequence

import torch
from tensordict import TensorDictBase

from rlcollect.choices import CAT_RESULTS
from rlcollect.collectors.base import CollectionPlan, CollectorBase, check_worker_env_backend
from rlcollect.collectors.delivery import Delivery
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
from rlcollect.collectors.processes import WorkerError, WorkerLost, WorkerProcesses
from rlcollect.collectors.restarts import Restarts
from rlcollect.collectors.single import Collector
from rlcollect.collectors.worker import WorkerSpec, resolve_model, stamp_worker_keys, worker_main
from rlcollect.envs.sources import worker_env_specs
from rlcollect.errors import ConfigError
from rlcollect.keys import MASK
from rlcollect.seeding import env_seed, restart_seed
from rlcollect.trajectories import TrajectoryPool
from rlcollect.weight_sync import SharedMemWeightSyncScheme, WeightSyncScheme

__all__ = ["MultiAsyncCollector", "MultiSyncCollector", "WorkerError"]


class _MultiCollector(CollectorBase):
    """Shared machinery of the multi-process collectors; see MultiSyncCollector."""

    hooks_run_in_process = False  # hooks run in the workers, on each worker's batch
    option_groups = OPTION_GROUPS  # what **options are routed to
    _preempt_flag: torch.Tensor | None = None  # MultiSync's preemption: workers end their batch when it is set

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """Its workers step their envs in daemonic processes (no async backend there) and
        write into one shared replay buffer in no set order (a flat storage)."""
        super().check_plan(plan)
        check_worker_env_backend(plan)
        if plan.storage_ndim is not None and plan.storage_ndim > 1:
            raise ConfigError(f"buffer.storage.ndim={plan.storage_ndim}: collector={plan.name}'s workers write into "
                              "one shared buffer in no set order: use buffer.storage.ndim=1, with "
                              "buffer.trajs_per_batch to keep trajectories whole (docs/data-layout.md)")

    def __init__(
        self,
        create_env_fn,
        policy=None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_workers: int | None = None,
        envs_per_worker: int | None = None,
        seed: int | None = None,
        env_kwargs: dict | None = None,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        update_at_each_batch: bool = False,
        **options,
    ) -> None:
        groups = split_options(type(self).__name__, options)
        step, devices, delivery = groups[StepOptions], groups[DeviceOptions], groups[DeliveryOptions]
        self.worker_options = workers = groups[WorkerOptions]
        check_groups(step, delivery)
        super().__init__(delivery)
        self._workers: WorkerProcesses | None = None
        self._senders: dict = {}
        self._delivery_changes: dict[int, dict] = {}  # worker id -> delivery changes to send with its next "collect"
        env_specs = worker_env_specs(create_env_fn, num_workers, envs_per_worker, seed, env_kwargs)
        self.num_workers = len(env_specs)
        self.policy = policy
        self.total_frames = check_total_frames(total_frames)
        self.update_at_each_batch = update_at_each_batch
        self.batch_timeout, self.shutdown_timeout = workers.batch_timeout, workers.shutdown_timeout
        self._delivery = Delivery(delivery.in_main())
        cpus = workers.cpu_sets(self.num_workers)
        self._mp_context = workers.mp_context
        self._workers = WorkerProcesses(self._mp_context, on_failure=self.shutdown, recover=self._may_restart)
        self._restarts = Restarts(workers.max_worker_restarts, workers.restart_on_env_error)
        self._talking = 0  # > 0 while sending to or waiting on workers: failures may be recovered from
        self._traj_pool = TrajectoryPool(mp_context=self._mp_context)
        schemes = self._setup_weight_sync_schemes(weight_sync_schemes)
        worker_frames = self._setup_frames_per_batch(frames_per_batch)
        if delivery.replay_buffer is not None:
            self._setup_replay_buffer(delivery, env_specs[0], policy, worker_frames[0], step, devices)
        try:
            self._senders = {model_id: scheme.make_sender(resolve_model(self, model_id), self.num_workers,
                                                          self._mp_context)
                             for model_id, scheme in schemes.items()}
            self._start_workers(env_specs, worker_frames, step, devices, delivery.in_workers(), workers, cpus)
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------ construction
    def _setup_weight_sync_schemes(self, schemes) -> dict:
        if schemes is None:
            return {"policy": SharedMemWeightSyncScheme()} if isinstance(self.policy, torch.nn.Module) else {}
        for model_id, scheme in schemes.items():
            if not isinstance(scheme, WeightSyncScheme):
                raise TypeError(f"weight_sync_schemes[{model_id!r}] must be a WeightSyncScheme, "
                                f"got {type(scheme).__name__}")
        return dict(schemes)

    def _setup_frames_per_batch(self, frames_per_batch) -> list[int]:
        """Frames per batch of each worker: one int for all (see the subclass), or one per worker."""
        if isinstance(frames_per_batch, (list, tuple)):
            if len(frames_per_batch) != self.num_workers:
                raise ValueError(f"frames_per_batch lists {len(frames_per_batch)} values for {self.num_workers} "
                                 "workers: give one per worker, or one int")
            return [BatchSpec.split(value, 1, f"frames_per_batch[{i}]") for i, value in enumerate(frames_per_batch)]
        return [self._worker_frames_per_batch(frames_per_batch)] * self.num_workers

    def _worker_frames_per_batch(self, frames_per_batch: int) -> int:
        raise NotImplementedError

    def _setup_replay_buffer(self, delivery: DeliveryOptions, env_spec, policy, frames_per_batch: int,
                             step: StepOptions, devices: DeviceOptions) -> None:
        """Workers write into one shared flat buffer; allocate it from a worker-like batch
        (a probe Collector built here) and share it before the workers start."""
        replay_buffer = delivery.replay_buffer
        if replay_buffer.ndim != 1:
            raise ValueError("worker processes write into one shared buffer in an uncontrolled order: use a "
                             f"storage with ndim=1 (got ndim={replay_buffer.ndim}), with trajs_per_batch "
                             "or set_truncated=True to keep trajectories whole (docs/data-layout.md)")
        if not replay_buffer.storage.initialized:
            probe = Collector.from_options(env_spec(), policy, frames_per_batch=frames_per_batch, devices=devices,
                                           step=step)
            batch = stamp_worker_keys(probe.batch.clone(), 0)
            postproc = delivery.postproc
            replay_buffer.init_from_batch(postproc(batch) if postproc else batch)
            if not env_spec.is_built:  # a user's env instance is still to be sent to its worker
                probe.shutdown()
        replay_buffer.share(self._mp_context)

    def _start_workers(self, env_specs, frames_per_batch: list[int], step: StepOptions, devices: DeviceOptions,
                       delivery: DeliveryOptions, workers: WorkerOptions, cpus) -> None:
        # kept to replace a failed worker (max_worker_restarts)
        self._env_specs, self._spec_frames, self._step, self._devices, self._cpus = (
            env_specs, frames_per_batch, step, devices, cpus)
        for worker_id, env_spec in enumerate(env_specs):
            endpoints = {model_id: sender.endpoint(worker_id) for model_id, sender in self._senders.items()}
            self._workers.start(worker_main, self._worker_spec(worker_id, env_spec, delivery, endpoints))
        self._buffers: list[TensorDictBase] = [None] * self.num_workers
        self._worker_frames = [0] * self.num_workers
        for worker_id, (_, buffer, frames) in self._workers.receive(range(self.num_workers), "ready",
                                                                    timeout=self.batch_timeout):  # fail fast
            self._buffers[worker_id], self._worker_frames[worker_id] = buffer, frames
        env_counts = [buffer.batch_size[:-1].numel() for buffer in self._buffers]
        self._first_env = [sum(env_counts[:worker_id]) for worker_id in range(self.num_workers)]

    def _worker_spec(self, worker_id: int, env_spec, delivery: DeliveryOptions, endpoints: dict) -> WorkerSpec:
        return WorkerSpec(
            # A copy per worker: pickling for spawn would otherwise move the trainer's own tensors to
            # shared memory and let the workers see every in-place update without a weight sync.
            worker_id=worker_id, create_env=env_spec, policy=copy.deepcopy(self.policy),
            frames_per_batch=self._spec_frames[worker_id], step=self._step, devices=self._devices,
            delivery=delivery, traj_pool=self._traj_pool, seed=env_spec.seed, weight_endpoints=endpoints,
            torch_threads=self.worker_options.worker_torch_threads,
            cpus=None if self._cpus is None else self._cpus[worker_id], preempt=self._preempt_flag,
        )

    # ------------------------------------------------------------------ restarts
    def _may_restart(self, worker_id: int, kind: str) -> bool:
        """Whether a failure is recovered from (WorkerProcesses' ``recover``): while the
        collector talks to its workers (``_restartable``), within max_worker_restarts, for a
        death or a hang (and an exception with restart_on_env_error)."""
        return self._restartable and self._restarts.allows(kind)

    def _replace_worker(self, lost: WorkerLost) -> None:
        """A fresh worker in the failed one's place, ready: the trainer's current weights,
        its envs reseeded (seeding.restart_seed), new trajectory ids; what the failed one
        was collecting is dropped."""
        worker_id = lost.worker_id
        self._restarts.record(worker_id, lost.kind, lost.message, self._worker_frames[worker_id],
                              dropped="its partial batch")
        self._workers.stop(worker_id)
        replaced = self._restarts.of(worker_id)
        first = self._env_specs[worker_id]
        env_spec = replace(first, seed=restart_seed(first.seed, replaced))
        endpoints = {model_id: sender.renew_endpoint(worker_id) for model_id, sender in self._senders.items()}
        self._delivery_changes.pop(worker_id, None)  # the new worker starts with the current options
        self._workers.start(worker_main, self._worker_spec(worker_id, env_spec, self.delivery_options.in_workers(),
                                                           endpoints), worker_id=worker_id)
        [(_, (_, buffer, _))] = list(self._workers.receive([worker_id], "ready", timeout=self.batch_timeout))
        self._buffers[worker_id] = buffer

    def _recover(self, lost: WorkerLost, message: tuple) -> None:
        """Replace the failed worker and send its replacement ``message`` (what the failed
        one was asked), replacing again if the replacement fails too (within the budget)."""
        while True:
            try:
                self._replace_worker(lost)
                self._workers.send(lost.worker_id, *message)
                return
            except WorkerLost as again:
                lost = again

    @property
    def _restartable(self) -> bool:
        return self._talking > 0

    # ------------------------------------------------------------------ messaging
    @property
    def _processes(self) -> list:
        return [] if self._workers is None else self._workers.processes

    def _send(self, worker_id: int, *message) -> None:
        """Send ``message``; a failed worker's replacement gets it (see ``_may_restart``)."""
        self._talking += 1
        try:
            self._workers.send(worker_id, *message)
        except WorkerLost as lost:
            self._recover(lost, message)
        finally:
            self._talking -= 1

    def _receive(self, worker_ids, expect: str, message_of=None):
        """Yield ``(worker_id, message)`` from each of ``worker_ids`` as it arrives,
        watching the workers' liveness. A failed worker is replaced when ``_may_restart``
        allows, sent ``message_of(worker_id)`` again (default: asked for its batch) and
        waited for; else everything is shut down and the failure raised."""
        message_of = message_of or (lambda worker_id: ("collect",))
        pending = set(worker_ids)
        while pending:
            arrivals = self._workers.receive(sorted(pending), expect, timeout=self.batch_timeout)
            while True:
                self._talking += 1  # only while waiting here: never across a yield to the caller
                try:
                    worker_id, message = next(arrivals)
                except StopIteration:
                    break
                except WorkerLost as lost:
                    self._recover(lost, message_of(lost.worker_id))
                    break  # wait again, on those still pending
                finally:
                    self._talking -= 1
                pending.discard(worker_id)
                yield worker_id, self._kept(message)

    def _kept(self, message: tuple) -> tuple:
        """A worker's message; a "batch" one brings what the post-collect hook returned in the
        worker, kept here (``hook_results()``), and is passed on without it."""
        if message[0] != "batch":
            return message
        for result in message[4]:
            self.keep_hook_result(result)
        return message[:4]

    def _check_alive(self) -> None:
        self._workers.check_alive()

    def _send_collect(self, worker_id: int) -> None:
        """Ask for a batch, with the delivery changes this worker has not received yet."""
        changes = self._delivery_changes.pop(worker_id, None)
        self._send(worker_id, "collect", *(() if changes is None else (changes,)))

    def _apply_delivery(self, changes: dict) -> None:
        """postproc runs here on the combined batch (in the workers with a replay buffer);
        hooks run in the workers, which get the change with their next "collect"."""
        self._delivery.options = self.delivery_options.in_main()
        options = self.delivery_options.in_workers()
        worker_changes = {name: getattr(options, name) for name in changes}
        for worker_id in range(self.num_workers):
            self._delivery_changes[worker_id] = {**self._delivery_changes.get(worker_id, {}), **worker_changes}

    def _request(self, command: str, *args_per_worker) -> list:
        """Send a command (with the worker's own arguments) to every worker, wait for every
        answer; returns the answers in worker order (a replaced worker answers for itself)."""
        def message_of(worker_id: int) -> tuple:
            return (command, *(args[worker_id] for args in args_per_worker))

        for worker_id in range(self.num_workers):
            self._send(worker_id, *message_of(worker_id))
        answers = [None] * self.num_workers
        for worker_id, (_, answer) in self._receive(range(self.num_workers), expect="ok", message_of=message_of):
            answers[worker_id] = answer
        return answers

    # ------------------------------------------------------------------ public API
    def update_policy_weights_(self, policy_or_weights=None) -> None:
        """Push the weights (parameters and buffers) of every synchronised model to every
        worker. ``policy_or_weights`` (a module, state_dict or TensorDict) replaces the
        "policy" model's own weights as the source."""
        for model_id, sender in self._senders.items():
            weights = policy_or_weights if model_id == "policy" else None
            sender.send(weights, liveness=self._check_alive)

    @property
    def policy_version(self) -> int:
        """How many weight updates have been pushed for the "policy" model."""
        sender = self._senders.get("policy")
        return 0 if sender is None else sender.version

    def set_seed(self, seed: int) -> int:
        """Seed every worker by the seed rule (rlcollect/seeding.py: worker w's envs are
        seeded from ``seed`` + the global index of its first env, and so are its RNGs);
        returns ``seed``."""
        self._request("set_seed", [env_seed(seed, first) for first in self._first_env])
        return seed

    def reset(self) -> None:
        """Reset every env of every worker; each starts a new trajectory (trajectories held
        back for trajs_per_batch are dropped: they never complete)."""
        self._request("reset")
        self._delivery.drop_partial()

    def state_dict(self) -> dict:
        """Frame count, the shared trajectory-id pool, the policy version, and per worker
        (``"worker{i}"``) what it holds: its collector's state and its policy's weights.
        Tensors, numbers and dicts only (a checkpoint loads it with weights_only=True)."""
        workers = self._request("state_dict")
        return {"frames": self._frames, "traj_pool": self._traj_pool.state_dict(),
                "policy_version": self.policy_version,
                **{f"worker{worker_id}": state for worker_id, state in enumerate(workers)}}

    def load_state_dict(self, state: dict) -> None:
        """Restore the frame count and the id pool; each env restarts (a new trajectory in
        every env). The ``"worker{i}"`` entries are a record: the workers get their weights
        from the trainer's policy (``update_policy_weights_()``), never from a checkpoint."""
        self._frames = int(state["frames"])
        self._traj_pool.load_state_dict(state["traj_pool"])
        self.reset()

    def _close(self) -> None:
        if self._workers is not None:
            self._workers.close(self.shutdown_timeout)
        for sender in self._senders.values():
            sender.close()
        self._buffers = []
        # The hooks went to the workers; drop them here too (a worker hook holds a queue and its locks).
        self.delivery_options = replace(self.delivery_options, pre_collect_hook=None, post_collect_hook=None)
        # Keep counting ids in this process, and let go of the shared counter and its lock.
        self._traj_pool = TrajectoryPool(self._traj_pool.state_dict()["next_id"])

    def __del__(self):
        if not getattr(self, "_shut_down", True) and getattr(self, "_processes", None):
            self.shutdown()


@with_options_doc(StepOptions, DeviceOptions, DeliveryOptions, WorkerOptions)
class MultiSyncCollector(_MultiCollector):
    """B worker processes collect together; each batch combines one batch from every
    worker, in worker order, collected with the weights of the last
    ``update_policy_weights_()``.

    ``frames_per_batch`` is split across workers. ``cat_results`` sets the layout
    (time stays the last dim): "stack" gives ``[B, T]`` (single envs) / ``[B, P, T]``
    (batched envs of P); 0 gives ``[B*T]`` / ``[B*P, T]``; -1 gives ``[B*T]`` / ``[P, T*B]``.
    Every Collector option (devices, max_frames_per_traj, set_truncated, hooks, ...)
    applies inside each worker; hooks run in the workers, ``postproc`` and
    ``split_trajs`` on the combined batch (with a replay buffer, postproc and the write
    run in the workers too).

    Args:
        create_env_fn: one env source for every worker (a gymnasium id, or a picklable
            zero-argument callable returning a gymnasium.Env or a GymEnv), or a list with one
            per worker.
        policy: callable TensorDict -> TensorDict writing ``"action"`` (each worker gets a
            copy); None: uniform random actions.
        frames_per_batch: frames per yielded batch, split across the workers: each collects
            ``frames_per_batch / num_workers`` per batch (MultiAsyncCollector's workers each
            collect all of it: its batch is one worker's); or one value per worker (the batch
            holds their sum; with different lengths, concatenate along time: cat_results=-1).
        total_frames: stop after this many frames; -1 for endless.
        cat_results: "stack" (None means it too, as in TorchRL), 0 or -1 (see above).
        num_workers: worker processes (with one env source; a list sets it).
        envs_per_worker: envs each worker steps, a batched GymEnv (None: one env, batch [T]).
        seed: env i over all workers is seeded with ``seed + i``, each worker's RNGs with
            the seed of its first env (rlcollect/seeding.py); None: unseeded.
        env_kwargs: GymEnv keyword arguments (``max_episode_steps``, gym.make kwargs).
        weight_sync_schemes: model id -> WeightSyncScheme; default
            ``{"policy": SharedMemWeightSyncScheme()}``.
        update_at_each_batch: push the weights before every batch.
        preemptive_threshold: a fraction of the workers in [0, 1]: once that many have
            finished their share of a batch, the others end theirs at their next step (for
            envs of uneven speed). Their missing steps are marked ``("collector", "mask")``
            False with cat_results="stack", and left out with -1 (or 0 for single envs);
            only the steps collected count as frames. None or 1.0: every worker finishes.
    """

    @classmethod
    def batch_envs(cls, plan: CollectionPlan) -> int:
        """Every worker's envs: each worker's share of frames_per_batch is rounded up to its
        envs_per_worker envs."""
        return (plan.options.get("num_workers") or 1) * (plan.options.get("envs_per_worker") or 1)

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """An on-policy learner needs one row per env: not workers concatenated along time."""
        super().check_plan(plan)
        if plan.on_policy and plan.options.get("cat_results") == -1:
            raise ConfigError(f"collector.cat_results=-1 concatenates workers along time; algo={plan.algo}'s rollout "
                              "buffer needs one row per env: use cat_results=stack or 0")

    def __init__(self, create_env_fn, policy=None, *, frames_per_batch: int | Sequence[int], total_frames: int = -1,
                 cat_results: str | int | None = "stack", preemptive_threshold: float | None = None,
                 **kwargs) -> None:
        if cat_results is None:  # TorchRL's spelling of the default
            cat_results = "stack"
        self.preemptive_threshold = self._setup_preemptive_threshold(preemptive_threshold)
        if self.preemptive_threshold is not None:
            self._preempt_flag = torch.zeros(1, dtype=torch.uint8).share_memory_()
        if cat_results not in CAT_RESULTS:
            raise ValueError(f"cat_results must be one of {CAT_RESULTS}, got {cat_results!r}")
        if cat_results == "stack" and not isinstance(frames_per_batch, int) and len(set(frames_per_batch)) > 1:
            raise ValueError(f"frames_per_batch={list(frames_per_batch)}: cat_results='stack' stacks the workers' "
                             "batches, which needs them of one length: give each worker the same frames, or "
                             "concatenate along time with cat_results=-1")
        if cat_results == 0:
            warnings.warn("MultiSyncCollector with cat_results=0 stacks along the batch dimension with batched "
                          "envs but along time with single envs, which is confusing when swapping one for the "
                          "other; cat_results='stack' keeps every dimension separate.", UserWarning, stacklevel=2)
        self.cat_results = cat_results
        super().__init__(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                         **kwargs)
        self.frames_per_batch = sum(self._worker_frames)
        self._check_layout()
        self.batch_size = self._combined_shape([buffer.batch_size for buffer in self._buffers])
        if self.preemptive_threshold is not None and self.cat_results == 0 and self._buffers[0].batch_dims > 1:
            self.shutdown()
            raise ValueError("preemptive_threshold with cat_results=0 and batched envs: the rows of the workers that "
                             "stop early would be shorter; use cat_results='stack' (masked) or -1 (concatenated)")

    @staticmethod
    def _setup_preemptive_threshold(threshold) -> float | None:
        if threshold is None:
            return None
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise ValueError(f"preemptive_threshold must be None or a fraction of workers in [0, 1], got {threshold!r}")
        return None if threshold == 1.0 else float(threshold)  # 1.0: every worker finishes (no preemption)

    def _worker_frames_per_batch(self, frames_per_batch: int) -> int:
        return BatchSpec.split(frames_per_batch, self.num_workers)

    def _cat_dim(self, batch_dims: int) -> int | None:
        """The dim the workers' batches are concatenated along (None: stacked)."""
        if self.cat_results == "stack":
            return None
        return 0 if batch_dims == 1 or self.cat_results == 0 else batch_dims - 1

    def _check_layout(self) -> None:
        """Stacked batches need one shape; concatenated ones agree on every other dim."""
        shapes = [tuple(buffer.batch_size) for buffer in self._buffers]
        dim = self._cat_dim(len(shapes[0]))
        kept = {shape if dim is None else shape[:dim] + shape[dim + 1:] for shape in shapes}
        if len({len(shape) for shape in shapes}) > 1 or len(kept) > 1:
            self.shutdown()
            along = "" if dim is None else f" but along dim {dim}"
            raise ValueError(f"MultiSyncCollector with cat_results={self.cat_results!r} needs every worker's batch "
                             f"to have the same shape{along}; got {shapes} (give every worker the same number of "
                             "envs, and with per-worker frames_per_batch concatenate along time: cat_results=-1)")

    def _combined_shape(self, worker_shapes: list[torch.Size]) -> torch.Size:
        dim = self._cat_dim(len(worker_shapes[0]))
        if dim is None:
            return torch.Size([self.num_workers, *worker_shapes[0]])
        combined = list(worker_shapes[0])
        combined[dim] = sum(shape[dim] for shape in worker_shapes)
        return torch.Size(combined)

    def _combine(self, batches: list[TensorDictBase]) -> TensorDictBase:
        dim = self._cat_dim(batches[0].batch_dims)
        return torch.stack(batches, 0) if dim is None else torch.cat(batches, dim)

    def _next_batch(self) -> TensorDictBase:
        if self.update_at_each_batch:
            self.update_policy_weights_()
        steps = self._collect_round()
        envs = [buffer.batch_size[:-1].numel() for buffer in self._buffers]
        self._frames += sum(count * worker_steps for count, worker_steps in zip(envs, steps))
        if self.replay_buffer is not None:
            return None  # the workers wrote their batches
        if self._preempt_flag is None:
            return self._delivery(self._combine(self._buffers))
        return self._delivery(self._combine_preempted(steps))

    def _collect_round(self) -> list[int]:
        """Ask every worker for its batch and wait for all; returns the steps each collected."""
        if self._preempt_flag is not None:
            self._preempt_flag.zero_()
        for worker_id in range(self.num_workers):
            self._send_collect(worker_id)
        steps = [0] * self.num_workers
        enough = None if self._preempt_flag is None else math.ceil(self.preemptive_threshold * self.num_workers)
        for finished, (worker_id, (_, _, _, worker_steps)) in enumerate(
                self._receive(range(self.num_workers), expect="batch"), start=1):
            steps[worker_id] = worker_steps
            if enough is not None and finished >= enough:
                self.preempt()
        return steps

    def preempt(self) -> None:
        """End this round now: every worker still collecting ends its batch at its next
        step, as when ``preemptive_threshold`` of them have finished (callable from another
        thread while the round runs; the next round starts unpreempted). Needs a
        ``preemptive_threshold`` below 1."""
        if self._preempt_flag is None:
            raise RuntimeError("preempt() needs MultiSyncCollector(preemptive_threshold=...) below 1")
        self._preempt_flag.fill_(1)

    def _combine_preempted(self, steps: list[int]) -> TensorDictBase:
        """The batches of a preemptive round: stacked with ("collector", "mask") False on
        the steps a worker did not collect, or concatenated from the steps collected."""
        if self.cat_results == "stack":
            batch = torch.stack(self._buffers, 0)
            time = torch.arange(batch.batch_size[-1])
            valid = time < torch.tensor(steps).reshape(-1, *([1] * (batch.batch_dims - 1)))
            valid = valid.expand(batch.batch_size)
            if MASK in batch.keys(True):  # reset_policy="wait": the workers' padding stays masked
                valid = valid & batch.get(MASK)
            batch.set(MASK, valid.clone())
            return batch
        return self._combine([buffer[..., :worker_steps] for buffer, worker_steps in zip(self._buffers, steps)])


@with_options_doc(StepOptions, DeviceOptions, DeliveryOptions, WorkerOptions)
class MultiAsyncCollector(_MultiCollector):
    """B worker processes collect continuously; each batch is one worker's
    ``frames_per_batch`` frames (``[T]`` or ``[P, T]``), yielded first-come first-served:
    when several batches are ready, the one that finished first (the worker's clock at its
    end) is yielded first, so no batch waits behind a slower worker's.

    Workers pick up new weights at the start of their next batch, so a batch may have been
    collected with older weights than the trainer's: ("collector", "policy_version") says
    which. Same arguments as MultiSyncCollector, without ``cat_results`` and preemption, and
    one that reads differently:

        frames_per_batch: frames per yielded batch, as for MultiSyncCollector, but a batch
            here is one worker's, so each worker collects all ``frames_per_batch`` frames per
            batch, not a share of them: with W workers, MultiSyncCollector(frames_per_batch=F)
            and MultiAsyncCollector(frames_per_batch=F / W) have their workers collect the
            same batches (``rlcollect train``'s defaults: 256 and 128, with 2 workers). One
            value per worker gives each worker's batches their own length.
    """

    @classmethod
    def lags_policy(cls, options) -> bool:
        """Its batches may be collected with older weights (first come, first served)."""
        return True

    @classmethod
    def batch_envs(cls, plan: CollectionPlan) -> int:
        """A batch is one worker's: its envs_per_worker envs."""
        return plan.options.get("envs_per_worker") or 1

    def __init__(self, create_env_fn, policy=None, *, frames_per_batch: int, total_frames: int = -1,
                 **kwargs) -> None:
        super().__init__(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                         **kwargs)
        self.frames_per_batch = max(self._worker_frames)
        self.batch_size = max((buffer.batch_size for buffer in self._buffers), key=lambda size: size.numel())
        self._collecting: set[int] = set()  # workers asked for a batch not yet yielded
        self._arrived: dict[int, int] = {}  # of those, the ones whose batch is there: when it finished (ns)

    def _worker_frames_per_batch(self, frames_per_batch: int) -> int:
        return BatchSpec.split(frames_per_batch, 1)

    def _next_batch(self) -> TensorDictBase:
        worker_id = self._first_ready()
        del self._arrived[worker_id]
        batch = None if self.replay_buffer is not None else self._buffers[worker_id].clone()
        self._frames += self._worker_frames[worker_id]
        if self.update_at_each_batch:
            self.update_policy_weights_()
        self._send_collect(worker_id)  # keep it busy while this batch is consumed
        return None if batch is None else self._delivery(batch, source=worker_id)

    def _first_ready(self) -> int:
        """The worker whose batch finished first among those there (waiting for one if none)."""
        for worker_id in set(range(self.num_workers)) - self._collecting:
            self._send_collect(worker_id)
            self._collecting.add(worker_id)
        if not self._arrived:  # wait for the first batch to finish
            worker_id, (_, _, finished_ns, _) = next(self._receive(self._collecting, expect="batch"))
            self._arrived[worker_id] = finished_ns
        waiting = self._collecting - set(self._arrived)
        self._talking += 1
        try:
            found = self._workers.ready(waiting, expect="batch")
        except WorkerLost as lost:
            found = lost.found
            self._recover(lost, ("collect",))  # its replacement collects that batch again
        finally:
            self._talking -= 1
        for worker_id, message in found:
            self._arrived[worker_id] = self._kept(message)[2]  # every batch already there: the oldest goes first
        return min(self._arrived, key=self._arrived.get)

    def _wait_in_flight(self) -> None:
        self._pause()

    def _pause(self) -> None:
        """Wait for the batches in flight (their data is dropped, or written by the workers)."""
        for _ in self._receive(self._collecting - set(self._arrived), expect="batch"):
            pass
        if self.replay_buffer is not None:  # written by the workers: they count
            self._frames += sum(self._worker_frames[worker_id] for worker_id in self._collecting)
        self._collecting.clear()
        self._arrived.clear()

    def set_seed(self, seed: int) -> int:
        self._pause()
        return super().set_seed(seed)

    def state_dict(self) -> dict:
        """As MultiSyncCollector's; the batches in flight are waited for first (and dropped,
        unless written into a replay buffer)."""
        self._pause()
        return super().state_dict()

    def reset(self) -> None:
        self._pause()
        super().reset()
