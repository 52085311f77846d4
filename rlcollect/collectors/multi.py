"""Multi-process collectors: MultiSyncCollector and MultiAsyncCollector.

Each worker process runs a Collector (collectors/worker.py) into a batch preallocated in
shared memory; the main process only sends "collect" and reads the shared batches.

    main                                   worker i (one per create_env_fn entry)
    ("collect",) ───────── pipe ─────────▶  apply pending weights; Collector._collect()
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
import multiprocessing as mp
import warnings
from typing import Callable, Sequence

import torch
from tensordict import TensorDictBase

from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.processes import WorkerError, WorkerProcesses
from rlcollect.trajectories import TrajectoryPool, split_trajectories
from rlcollect.buffers.layout import to_storage_layout
from rlcollect.collectors.single import Collector
from rlcollect.collectors.worker import WorkerSpec, resolve_model, stamp_worker_keys, worker_main
from rlcollect.envs.gym_env import GymEnv
from rlcollect.weight_sync import SharedMemWeightSyncScheme, WeightSyncScheme

START_METHODS = ("spawn", "forkserver", "fork")
CAT_RESULTS = ("stack", 0, -1)
__all__ = ["MultiAsyncCollector", "MultiSyncCollector", "WorkerError"]


class _MultiCollector(CollectorBase):
    """Shared machinery of the multi-process collectors; see MultiSyncCollector."""

    def __init__(
        self,
        create_env_fn: Sequence,
        policy=None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        weight_sync_schemes: dict[str, WeightSyncScheme] | None = None,
        update_at_each_batch: bool = False,
        start_method: str = "spawn",
        worker_torch_threads: int = 1,
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
        self._senders: dict = {}
        self.num_workers = self._setup_create_env_fn(create_env_fn)
        self.policy = policy
        self.total_frames = self._setup_total_frames(total_frames)
        self.update_at_each_batch = update_at_each_batch
        self.batch_timeout = batch_timeout
        self.shutdown_timeout = shutdown_timeout
        self.split_trajs = split_trajs
        self.postproc = postproc
        if split_trajs and not collector_kwargs.get("track_traj_ids", True):
            raise ValueError("split_trajs=True needs track_traj_ids=True")
        if split_trajs and replay_buffer is not None:
            raise ValueError("split_trajs=True pads batches; a replay_buffer takes the flat layout: drop split_trajs")
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}")
        self._mp_context = mp.get_context(start_method)
        self._workers = WorkerProcesses(self._mp_context, on_failure=self.shutdown)
        self._traj_pool = TrajectoryPool(mp_context=self._mp_context)
        schemes = self._setup_weight_sync_schemes(weight_sync_schemes)
        worker_frames = self._worker_frames_per_batch(frames_per_batch)
        writes = dict(replay_buffer=replay_buffer, trajs_per_batch=trajs_per_batch, postproc=postproc)
        if replay_buffer is not None:
            self._setup_replay_buffer(replay_buffer, create_env_fn[0], policy, worker_frames, collector_kwargs, postproc)
        try:
            self._senders = {model_id: scheme.make_sender(resolve_model(self, model_id), self.num_workers,
                                                          self._mp_context)
                             for model_id, scheme in schemes.items()}
            self._start_workers(create_env_fn, worker_frames, collector_kwargs, worker_torch_threads,
                                pre_collect_hook, post_collect_hook, writes if replay_buffer is not None else {})
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _setup_create_env_fn(create_env_fn) -> int:
        if isinstance(create_env_fn, (str, bytes)) or not isinstance(create_env_fn, Sequence) or not create_env_fn:
            raise TypeError("create_env_fn must be a non-empty list: one GymEnv (or callable returning one) "
                            f"per worker process, got {create_env_fn!r}")
        return len(create_env_fn)

    def _setup_weight_sync_schemes(self, schemes) -> dict:
        if schemes is None:
            return {"policy": SharedMemWeightSyncScheme()} if isinstance(self.policy, torch.nn.Module) else {}
        for model_id, scheme in schemes.items():
            if not isinstance(scheme, WeightSyncScheme):
                raise TypeError(f"weight_sync_schemes[{model_id!r}] must be a WeightSyncScheme, "
                                f"got {type(scheme).__name__}")
        return dict(schemes)

    def _worker_frames_per_batch(self, frames_per_batch: int) -> int:
        raise NotImplementedError

    def _setup_replay_buffer(self, replay_buffer, env_fn, policy, frames_per_batch, collector_kwargs, postproc):
        """Workers write into one shared flat buffer; allocate it from a worker-like batch
        (a probe Collector built here) and share it before the workers start."""
        if replay_buffer.storage.ndim != 1:
            raise ValueError("worker processes write into one shared buffer in an uncontrolled order: use a "
                             f"storage with ndim=1 (got ndim={replay_buffer.storage.ndim}), with trajs_per_batch "
                             "or set_truncated=True to keep trajectories whole (data-layout.txt)")
        if not replay_buffer.storage.initialized:
            probe = Collector(env_fn, policy, frames_per_batch=frames_per_batch, **collector_kwargs)
            batch = stamp_worker_keys(probe._batch.clone(), 0)
            replay_buffer.init_from(to_storage_layout(postproc(batch) if postproc else batch, 1))
            if not isinstance(env_fn, GymEnv):  # a user's env instance is still to be sent to its worker
                probe.shutdown()
        replay_buffer.share(self._mp_context)
        self.replay_buffer = replay_buffer

    def _start_workers(self, create_env_fn, frames_per_batch, collector_kwargs, torch_threads,
                       pre_collect_hook, post_collect_hook, writes: dict) -> None:
        for worker_id, env_fn in enumerate(create_env_fn):
            spec = WorkerSpec(
                # A copy per worker: pickling for spawn would otherwise move the trainer's own tensors to
                # shared memory and let the workers see every in-place update without a weight sync.
                worker_id=worker_id, create_env_fn=env_fn, policy=copy.deepcopy(self.policy),
                frames_per_batch=frames_per_batch,
                collector_kwargs=collector_kwargs, traj_pool=self._traj_pool,
                weight_endpoints={model_id: sender.endpoint(worker_id) for model_id, sender in self._senders.items()},
                torch_threads=torch_threads, pre_collect_hook=pre_collect_hook, post_collect_hook=post_collect_hook,
                **writes,
            )
            self._workers.start(worker_main, spec)
        self._buffers: list[TensorDictBase] = [None] * self.num_workers
        self._worker_frames = [0] * self.num_workers
        for worker_id, (_, buffer, frames) in self._receive(range(self.num_workers), expect="ready"):
            self._buffers[worker_id], self._worker_frames[worker_id] = buffer, frames

    # ------------------------------------------------------------------ messaging
    @property
    def _processes(self) -> list:
        return [] if self._workers is None else self._workers.processes

    def _send(self, worker_id: int, *message) -> None:
        self._workers.send(worker_id, *message)

    def _receive(self, worker_ids, expect: str):
        """Yield ``(worker_id, message)`` from each of ``worker_ids`` as it arrives,
        watching the workers' liveness; on any failure shut everything down and raise."""
        return self._workers.receive(worker_ids, expect, timeout=self.batch_timeout)

    def _check_alive(self) -> None:
        self._workers.check_alive()

    def _request(self, command: str, *args) -> None:
        """Send a command to every worker and wait for every answer."""
        for worker_id in range(self.num_workers):
            self._send(worker_id, command, *args)
        for _ in self._receive(range(self.num_workers), expect="ok"):
            pass

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
        """Seed every worker (worker i gets ``seed + 1000 * i``); returns ``seed``."""
        for worker_id in range(self.num_workers):
            self._send(worker_id, "set_seed", seed + 1000 * worker_id)
        for _ in self._receive(range(self.num_workers), expect="ok"):
            pass
        return seed

    def reset(self) -> None:
        """Reset every env of every worker; each starts a new trajectory."""
        self._request("reset")

    def state_dict(self) -> dict:
        return {"frames": self._frames, "traj_pool": self._traj_pool.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._frames = int(state["frames"])
        self._traj_pool.load_state_dict(state["traj_pool"])
        self.reset()

    def _finish(self, batch: TensorDictBase) -> TensorDictBase:
        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        return batch

    def _close(self) -> None:
        if self._workers is not None:
            self._workers.close(self.shutdown_timeout)
        for sender in self._senders.values():
            sender.close()
        self._buffers = []
        # Keep counting ids in this process, and let go of the shared counter and its lock.
        self._traj_pool = TrajectoryPool(self._traj_pool.state_dict()["next_id"])

    def __del__(self):
        if not getattr(self, "_shut_down", True) and getattr(self, "_processes", None):
            self.shutdown()


class MultiSyncCollector(_MultiCollector):
    """B worker processes collect together; each batch combines one batch from every
    worker, in worker order, collected with the weights of the last
    ``update_policy_weights_()``.

    ``frames_per_batch`` is split across workers. ``cat_results`` sets the layout
    (time stays the last dim): "stack" gives ``[B, T]`` (single envs) / ``[B, P, T]``
    (batched envs of P); 0 gives ``[B*T]`` / ``[B*P, T]``; -1 gives ``[B*T]`` / ``[P, T*B]``.
    Every Collector argument (devices, max_frames_per_traj, set_truncated, hooks, ...)
    applies inside each worker; hooks run in the workers, ``postproc`` and
    ``split_trajs`` on the combined batch.

    Args:
        create_env_fn: one GymEnv or callable returning one per worker.
        weight_sync_schemes: model id -> WeightSyncScheme; default
            ``{"policy": SharedMemWeightSyncScheme()}``.
        update_at_each_batch: push the weights before every batch.
        start_method: "spawn" (default: safe with torch threads), "forkserver" or "fork".
        worker_torch_threads: torch threads in each worker.
        batch_timeout: seconds to wait for a batch before failing (None: no limit; dead
            workers are detected regardless).
        shutdown_timeout: seconds workers get to exit before they are terminated.
    """

    def __init__(self, create_env_fn: Sequence, policy=None, *, frames_per_batch: int, total_frames: int = -1,
                 cat_results: str | int = "stack", **kwargs) -> None:
        if cat_results not in CAT_RESULTS:
            raise ValueError(f"cat_results must be one of {CAT_RESULTS}, got {cat_results!r}")
        if cat_results == 0:
            warnings.warn("MultiSyncCollector with cat_results=0 stacks along the batch dimension with batched "
                          "envs but along time with single envs, which is confusing when swapping one for the "
                          "other; cat_results='stack' keeps every dimension separate.", UserWarning, stacklevel=2)
        self.cat_results = cat_results
        super().__init__(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                         **kwargs)
        self.frames_per_batch = sum(self._worker_frames)
        self._check_layout()
        self.batch_size = self._combined_shape(self._buffers[0].batch_size)

    def _worker_frames_per_batch(self, frames_per_batch: int) -> int:
        if not isinstance(frames_per_batch, int) or frames_per_batch < 1:
            raise ValueError(f"frames_per_batch must be a positive int, got {frames_per_batch!r}")
        return math.ceil(frames_per_batch / self.num_workers)

    def _check_layout(self) -> None:
        shapes = {tuple(buffer.batch_size) for buffer in self._buffers}
        if len(shapes) > 1:
            self.shutdown()
            raise ValueError(f"MultiSyncCollector needs every worker to produce the same batch shape; got "
                             f"{sorted(shapes)} (give every worker the same number of envs)")

    def _combined_shape(self, worker_shape: torch.Size) -> torch.Size:
        workers = self.num_workers
        if self.cat_results == "stack":
            return torch.Size([workers, *worker_shape])
        if len(worker_shape) == 1 or self.cat_results == 0:
            return torch.Size([workers * worker_shape[0], *worker_shape[1:]])
        return torch.Size([*worker_shape[:-1], worker_shape[-1] * workers])

    def _combine(self, batches: list[TensorDictBase]) -> TensorDictBase:
        if self.cat_results == "stack":
            return torch.stack(batches, 0)
        if batches[0].batch_dims == 1:
            return torch.cat(batches, 0)
        return torch.cat(batches, 0 if self.cat_results == 0 else -1)

    def _next_batch(self) -> TensorDictBase:
        if self.update_at_each_batch:
            self.update_policy_weights_()
        for worker_id in range(self.num_workers):
            self._send(worker_id, "collect")
        for _ in self._receive(range(self.num_workers), expect="batch"):
            pass
        self._frames += self.frames_per_batch
        if self.replay_buffer is not None:
            return None  # the workers wrote their batches
        return self._finish(self._combine(self._buffers))


class MultiAsyncCollector(_MultiCollector):
    """B worker processes collect continuously; each batch is one worker's
    ``frames_per_batch`` frames (``[T]`` or ``[P, T]``), yielded first-come first-served.

    Workers pick up new weights at the start of their next batch, so a batch may have been
    collected with older weights than the trainer's: ("collector", "policy_version") says
    which. Same arguments as MultiSyncCollector, without ``cat_results``.
    """

    def __init__(self, create_env_fn: Sequence, policy=None, *, frames_per_batch: int, total_frames: int = -1,
                 **kwargs) -> None:
        super().__init__(create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                         **kwargs)
        self.frames_per_batch = max(self._worker_frames)
        self.batch_size = max((buffer.batch_size for buffer in self._buffers), key=lambda size: size.numel())
        self._collecting: set[int] = set()

    def _worker_frames_per_batch(self, frames_per_batch: int) -> int:
        if not isinstance(frames_per_batch, int) or frames_per_batch < 1:
            raise ValueError(f"frames_per_batch must be a positive int, got {frames_per_batch!r}")
        return frames_per_batch

    def _next_batch(self) -> TensorDictBase:
        for worker_id in set(range(self.num_workers)) - self._collecting:
            self._send(worker_id, "collect")
            self._collecting.add(worker_id)
        worker_id, _ = next(self._receive(self._collecting, expect="batch"))
        batch = None if self.replay_buffer is not None else self._buffers[worker_id].clone()
        self._frames += self._worker_frames[worker_id]
        if self.update_at_each_batch:
            self.update_policy_weights_()
        self._send(worker_id, "collect")  # keep it busy while this batch is consumed
        return None if batch is None else self._finish(batch)

    def _wait_in_flight(self) -> None:
        self._pause()

    def _pause(self) -> None:
        """Wait for the batches in flight (their data is dropped, or written by the workers)."""
        for worker_id, _ in self._receive(set(self._collecting), expect="batch"):
            if self.replay_buffer is not None:  # written by the worker: it counts
                self._frames += self._worker_frames[worker_id]
        self._collecting.clear()

    def set_seed(self, seed: int) -> int:
        self._pause()
        return super().set_seed(seed)

    def reset(self) -> None:
        self._pause()
        super().reset()
