"""DistributedCollector: rlcollect's collectors in worker processes or SLURM jobs that join
a torch.distributed (gloo) process group with the trainer; batches and weights travel
point to point over it (worker.py has the protocol)."""
from __future__ import annotations

import pickle
import time
from pathlib import Path

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase

from rlcollect.choices import DISTRIBUTED_BACKENDS as BACKENDS
from rlcollect.collectors.base import CollectionPlan, check_hosted_options
from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.distributed.group import (
    ANSWER_TAG,
    COMMAND_TAG,
    DATA_TAG,
    HEADER_TAG,
    WEIGHTS_TAG,
    FlatLayout,
    Rendezvous,
    make_group,
    recv_object,
    send_object,
)
from rlcollect.collectors.distributed.starters import STARTERS, make_starter
from rlcollect.collectors.distributed.worker import (
    CALL,
    COLLECT,
    PAUSED,
    START,
    STOP,
    WEIGHTS,
    WorkerSpec,
    policy_tensors,
    weight_tensors,
    worker_main,
)
from rlcollect.collectors.host_plan import host_collector_kwargs, hosted_class
from rlcollect.collectors.hosted_collector import HostedCollector
from rlcollect.collectors.options import DeliveryOptions
from rlcollect.collectors.processes import WorkerError
from rlcollect.errors import ConfigError
from rlcollect.keys import WORKER_ID
from rlcollect.moved import renamed_argument

LIVENESS_SECONDS = 0.5
FAILURE_GRACE_SECONDS = 5.0


class DistributedCollector(HostedCollector):
    """``num_workers`` workers, each running one of rlcollect's collectors, joined with this
    process (rank 0) in a torch.distributed gloo group.

    - ``sync=True``: every batch stacks one batch from each worker, in worker order, along a
      new leading dim (``[W, T]``, ``[W, P, T]``, ...); ``frames_per_batch`` is split across
      the workers, and the batch after ``update_policy_weights_()`` uses the new weights.
    - ``sync=False``: each batch is one worker's ``frames_per_batch`` frames, first come
      first served; workers collect back to back and read new weights between batches
      (the lag shows in ("collector", "policy_version")).

    Batches carry ("collector", "worker_id") and ("collector", "policy_version"); worker w
    draws trajectory ids from ``[w << 40, (w + 1) << 40)``. They travel as the tensors of a
    layout each worker publishes once (no pickling per batch), into buffers preallocated
    here. Weights (parameters and buffers) go out point to point after each
    ``update_policy_weights_()``.

    Args:
        create_env_fn: one env source for every worker (a gymnasium id, or a picklable
            zero-argument callable returning a GymEnv), or a list with one per worker (for
            collector_class "multisync"/"multiasync": a list of callables per worker).
        policy: picklable callable TensorDict -> TensorDict (an nn.Module to sync weights).
        num_workers: worker processes (SLURM jobs with start_workers_with="submitit").
        collector_class: "sync" (Collector), "multisync" or "multiasync" in each worker.
        envs_per_worker, seed, env_kwargs: with one env source, each worker's envs (env i of
            the run seeded ``seed + i``, rlcollect/seeding.py).
        collector_kwargs: the inner collector's options (device, max_frames_per_traj, ...;
            ``num_workers`` of its own processes for multisync/multiasync; a None value: that
            collector's default).
        device, init_random_frames: set in every worker's collector_kwargs (device where
            they set none; at least init_random_frames random frames).
        run_dir: the folder a relative ``submitit_folder`` is in (the run folder).
        backend: "gloo" (CPU tensors).
        start_workers_with: how the workers start: "mp" (local processes, ``start_method``),
            "submitit" (``cluster``: None for SLURM where available, "local" for local jobs;
            ``slurm_kwargs`` to ``update_parameters``; logs in ``submitit_folder``) or "ray"
            (Ray tasks: on the cluster at ``ray_address``, or None: a local Ray bound to
            loopback). ``launcher``, its former name, is still taken for one release, with a
            DeprecationWarning.
        master_addr, master_port: where the trainer's store and group listen: 127.0.0.1 (this
            machine only, the default) or an address the workers' nodes reach; port 0 picks a
            free one.
        timeout: seconds any wait on the group may take before it fails (a hung worker).
        post_collect_hook: picklable, run in every worker on each batch; its non-None
            return values come back with the batches (``hook_results()``).
        replay_buffer, trajs_per_batch: batches are written into ``replay_buffer`` here, as
            they arrive (each worker's rows apart: ``trajs_per_batch`` complete trajectories
            at a time), and iteration yields None.
        shutdown_timeout: seconds workers get to close their collectors before being killed.
    """

    @classmethod
    def check_plan(cls, plan: CollectionPlan) -> None:
        """It sends the weights over its own process group: no other weight sync; and what
        each worker's collector would refuse (``check_hosted_options``)."""
        from rlcollect.weight_sync import NoWeightSyncScheme

        if plan.weight_sync is not None and not issubclass(plan.weight_sync, NoWeightSyncScheme):
            raise ConfigError(f"collector={plan.name} sends the weights over its process group itself: use "
                              f"weight_sync=none (what it selects), not weight_sync={plan.weight_sync_name}")
        check_hosted_options(plan, cls.host, hosted_class)

    @classmethod
    def lags_policy(cls, options) -> bool:
        """sync=False: batches first come, first served, possibly with older weights."""
        return not options.get("sync", True)

    def __init__(
        self,
        create_env_fn,
        policy=None,
        *,
        num_workers: int,
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
        backend: str = "gloo",
        start_workers_with: str = "mp",
        start_method: str = "spawn",
        cluster: str | None = None,
        slurm_kwargs: dict | None = None,
        submitit_folder: str | Path = "submitit",
        run_dir: str | Path | None = None,
        ray_address: str | None = None,
        master_addr: str = "127.0.0.1",
        master_port: int = 0,
        timeout: float = 60.0,
        worker_torch_threads: int | None = 1,
        post_collect_hook=None,
        replay_buffer=None,
        trajs_per_batch: int | None = None,
        shutdown_timeout: float = 10.0,
        launcher: str | None = None,  # deprecated: start_workers_with (rlcollect.moved.RENAMED_ARGUMENTS)
    ) -> None:
        start_workers_with = renamed_argument(DistributedCollector, "launcher", launcher, start_workers_with,
                                              new_default="mp")
        super().__init__(DeliveryOptions(post_collect_hook=post_collect_hook, replay_buffer=replay_buffer,
                                         trajs_per_batch=trajs_per_batch))
        # here: the replay-buffer write (the hook runs in the workers)
        self._delivery = Delivery(DeliveryOptions(replay_buffer=replay_buffer, trajs_per_batch=trajs_per_batch))
        self._group = self._rendezvous = self._starter = None
        if backend not in BACKENDS:
            available = {"nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available()}.get(backend)
            built = "" if available is None else f" (this torch build has it: {available})"
            raise ValueError(f"backend={backend!r}{built}: batches and weights travel point to point over gloo "
                             "(CPU tensors); nccl and mpi are not supported by DistributedCollector yet")
        if start_workers_with not in STARTERS:
            raise ValueError(f"start_workers_with must be one of {', '.join(STARTERS)}; got {start_workers_with!r}")
        plan = self._plan(create_env_fn, num_workers, frames_per_batch=frames_per_batch, total_frames=total_frames,
                          sync=sync, collector_class=collector_class, envs_per_worker=envs_per_worker, seed=seed,
                          env_kwargs=env_kwargs,
                          collector_kwargs=host_collector_kwargs(collector_kwargs, device=device,
                                                                 init_random_frames=init_random_frames))
        self.num_workers, self.policy = self.num_hosts, policy
        self.shutdown_timeout = shutdown_timeout
        self.policy_version = 0
        self._streaming = False  # sync=False: workers send batches back to back
        self._early: list = []  # batches received while pausing the workers for a call
        self._outgoing: dict = {}  # sync=False: worker -> sends not waited for [(version, work, tensor)]
        self._owed: set = set()  # sync: workers told to collect whose batch was not received yet
        self._last_check = 0.0  # sync=False: when the workers' liveness was last looked at
        self._buffers: dict = {}  # worker -> (TensorDict, its leaves): where its batches land
        self._weights = policy_tensors(policy)
        try:
            self._rendezvous = Rendezvous(master_addr, master_port, self.num_workers + 1, backend, timeout)
            specs = [WorkerSpec(index, collector_class, plan.env_sources[index], plan.host_frames,
                                plan.collector_kwargs[index], post_collect_hook, seed=plan.seeds[index],
                                group=self._rendezvous.spec, torch_threads=worker_torch_threads)
                     for index in range(self.num_workers)]
            folder = Path(run_dir) / submitit_folder if run_dir is not None else Path(submitit_folder)
            self._starter = make_starter(start_workers_with, start_method=start_method, folder=folder,
                                         cluster=cluster, slurm_kwargs=slurm_kwargs, ray_address=ray_address)
            self._starter.start(worker_main, [(spec, policy) for spec in specs])
            self._group = make_group(self._rendezvous.spec, self._rendezvous.store, 0)
            self._set_host_shapes([shape for shape, _ in self._call_all("describe")])
        except BaseException:
            self.shutdown()
            raise

    @property
    def listen_address(self) -> tuple[str, int]:
        """Where the store listens (``master_addr``, port)."""
        return self._rendezvous.spec.address, self._rendezvous.spec.port

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes' pids (start_workers_with="mp")."""
        return self._starter.pids

    # ------------------------------------------------------------------ talking to workers
    def _failed(self, index: int | None, error: BaseException) -> WorkerError:
        """The WorkerError for a failure seen while talking to ``index`` (None: any worker):
        the traceback a worker left in the store, else who died, else the group's error."""
        store = self._rendezvous.store
        indices = range(self.num_workers) if index is None else [index]
        order = [*indices, *range(self.num_workers)]
        # a peer's socket closes a moment before its process can be reaped: give the
        # starter FAILURE_GRACE_SECONDS to see the death before blaming the group
        deadline = time.monotonic() + FAILURE_GRACE_SECONDS
        while True:
            for worker in order:
                if store.check([f"error/{worker}"]):
                    return WorkerError(worker, f"raised an exception:\n{store.get(f'error/{worker}').decode()}")
            for worker in order:
                reason = self._starter.failure(worker)
                if reason is not None:
                    return WorkerError(worker, reason)
            if time.monotonic() >= deadline:
                return WorkerError(-1 if index is None else index, f"no answer from the process group ({error})")
            time.sleep(0.05)

    def _check_workers(self) -> None:
        """Streaming: a worker that died while the others keep sending is not seen by the
        receives; ask the starter every LIVENESS_SECONDS."""
        now = time.monotonic()
        if now - self._last_check < LIVENESS_SECONDS:
            return
        self._last_check = now
        for index in range(self.num_workers):
            reason = self._starter.failure(index)
            if reason is not None:
                raise self._failed(index, RuntimeError(reason))

    def _command(self, index: int, kind: int, argument: int = 0) -> None:
        """Send a command. While the workers stream, never wait for it: a worker reads its
        next command only once the batch it is sending was received here."""
        command = torch.tensor([kind, self.policy_version, argument], dtype=torch.int64)
        work = self._group.send([command], index + 1, COMMAND_TAG)
        if self._streaming:
            self._outgoing.setdefault(index, []).append((self.policy_version, work, command))
            self._rendezvous.store.add(f"doorbell/{index}", 1)  # the worker looks here between batches
        else:
            work.wait()

    def _call_all(self, method: str, args_per_worker: list[tuple] | None = None) -> list:
        """``method(*args)`` on every worker's collector; their answers in worker order."""
        args_per_worker = args_per_worker or [()] * self.num_workers
        try:
            for index in range(self.num_workers):
                self._command(index, CALL)
            if self._streaming:  # each worker finishes the batch it is sending, then says so
                self._drain(lambda data: self._early.append(data))
            for index, args in enumerate(args_per_worker):
                send_object(self._group, (method, tuple(args)), index + 1, COMMAND_TAG)
            return [recv_object(self._group, index + 1, ANSWER_TAG) for index in range(self.num_workers)]
        except RuntimeError as error:
            raise self._failed(None, error) from None

    def _drain(self, keep, workers=None) -> None:
        """Receive from each worker of ``workers`` (default: all), one after the other, until
        it sent its PAUSED header; batches on the way go to ``keep``."""
        for worker in range(self.num_workers) if workers is None else workers:
            while True:
                index, frames = self._receive_header(worker)
                if frames == PAUSED:
                    break
                keep(self._receive_batch(index, frames))

    def _receive_header(self, index: int | None) -> tuple[int, int]:
        header = torch.zeros(4, dtype=torch.int64)
        if index is None:
            self._group.recv_anysource([header], HEADER_TAG).wait()
        else:
            self._group.recv([header], index + 1, HEADER_TAG).wait()
        index, frames, version, self._extra = header.tolist()
        self._settle(index, None if frames == PAUSED else version)
        return index, frames

    def _settle(self, index: int, version: int | None) -> None:
        """Let go of the sends worker ``index`` has received: those of weights ``version``
        and before, as its batch shows; all of them (None) once it paused."""
        keep = []
        for entry in self._outgoing.get(index, []):
            if version is None or entry[0] <= version:
                entry[1].wait()  # received already: returns at once
            else:
                keep.append(entry)
        self._outgoing[index] = keep

    def _receive_batch(self, index: int, frames: int) -> TensorDictBase:
        """The batch worker ``index`` sends after its header, into its preallocated buffer
        (cloned: the next one lands there)."""
        if index not in self._buffers:
            layout = pickle.loads(self._rendezvous.store.get(f"layout/{index}"))
            flat = FlatLayout([(shape, dtype) for _, shape, dtype in layout["entries"]])
            data = flat.buffer()
            buffer = TensorDict({}, batch_size=layout["batch_size"])
            for (key, _, _), view in zip(layout["entries"], flat.views(data)):
                buffer.set(key, view)
            self._buffers[index] = (buffer, data)
        buffer, data = self._buffers[index]
        self._group.recv([data], index + 1, DATA_TAG).wait()  # the whole batch, one message
        if self._extra:
            payload = torch.empty(self._extra, dtype=torch.uint8)
            self._group.recv([payload], index + 1, DATA_TAG).wait()
            self.keep_hook_result(pickle.loads(payload.numpy().tobytes()))
        self._frames += frames
        return buffer.clone()

    # ------------------------------------------------------------------ batches
    def _receive_owed(self, index: int) -> TensorDictBase:
        """Sync: the batch worker ``index`` was told to collect."""
        batch = self._receive_batch(index, self._receive_header(index)[1])
        self._owed.discard(index)
        return batch

    def _next_batch(self) -> TensorDictBase:
        try:
            if self.sync:
                for index in range(self.num_workers):
                    self._command(index, COLLECT)
                    self._owed.add(index)
                parts = [self._receive_owed(index) for index in range(self.num_workers)]
                if self._delivery.writes:
                    for index, part in enumerate(parts):
                        self._delivery(part, index)
                    return None
                return torch.stack(parts)
            if not self._streaming:
                for index in range(self.num_workers):
                    self._command(index, START)
                self._streaming = True
            self._check_workers()
            if self._early:
                batch = self._early.pop(0)
            else:
                batch = self._receive_batch(*self._receive_header(None))
        except RuntimeError as error:
            raise self._failed(None, error) from None
        return self._delivery(batch, int(batch.get(WORKER_ID).reshape(-1)[0]))

    # ------------------------------------------------------------------ weights, state
    def update_policy_weights_(self, weights=None) -> None:
        """Send the policy's parameters and buffers (or ``weights``: a module, a state_dict
        or a TensorDict of the same entries) to every worker, version bumped. sync=True: the
        next batch uses them; sync=False: each worker applies them after its batch under way."""
        tensors = self._weights if weights is None else weight_tensors(self.policy, weights)
        self.policy_version += 1
        if not tensors:
            return
        flat = FlatLayout([(list(tensor.shape), tensor.dtype) for tensor in tensors])
        payload = flat.buffer()  # every tensor in one message (a new buffer: a streaming send may still read it)
        with torch.no_grad():
            for view, tensor in zip(flat.views(payload), tensors):
                view.copy_(tensor)
        try:
            for index in range(self.num_workers):
                self._command(index, WEIGHTS)
                work = self._group.send([payload], index + 1, WEIGHTS_TAG)
                if self._streaming:  # the worker reads them after its batch under way: never wait here
                    self._outgoing.setdefault(index, []).append((self.policy_version, work, payload))
                else:
                    work.wait()
        except RuntimeError as error:
            raise self._failed(None, error) from None

    # ------------------------------------------------------------------ shutdown
    def _close(self) -> None:
        if self._group is not None:
            # each worker on its own: one that is failing (alive a moment longer) must not keep
            # the others from their STOP; whatever does not answer, the starter stops
            running = [index for index in range(self.num_workers) if self._starter.failure(index) is None]
            for index in sorted(self._owed.intersection(running)):  # a survivor of a failed round
                if not self._quietly(self._receive_owed, index):  # it sends its batch before it reads a command
                    running.remove(index)
            running = [index for index in running if self._quietly(self._command, index, STOP)]
            if self._streaming:  # each says goodbye after the batch it is sending
                self._quietly(self._drain, lambda data: None, running)
        if self._starter is not None:
            self._starter.stop(self.shutdown_timeout)
        self._group = None
        if self._rendezvous is not None:
            self._rendezvous.close()

    @staticmethod
    def _quietly(action, *args) -> bool:
        """``action(*args)`` at shutdown; False when a worker was gone (the group's error)."""
        try:
            action(*args)
        except (RuntimeError, WorkerError):
            return False
        return True

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_workers={self.num_workers}, collector_class={self.collector_class!r}, "
                f"sync={self.sync}, frames_per_batch={self.frames_per_batch})")


class DistributedSyncCollector(DistributedCollector):
    """The synchronous distributed collector (TorchRL's DistributedSyncDataCollector): every
    worker collects ``frames_per_batch / num_workers`` frames and the trainer gets one
    stacked batch per step, the weights pushed before it included. DistributedCollector
    with ``sync=True``; the same arguments, without ``sync``."""

    def __init__(self, create_env_fn, policy=None, **kwargs) -> None:
        if "sync" in kwargs:
            raise TypeError("DistributedSyncCollector is always synchronous: drop sync=")
        super().__init__(create_env_fn, policy, sync=True, **kwargs)
