"""RPCCollector: rlcollect's collectors in worker processes driven over torch.distributed.rpc
(TensorPipe), on this machine, every listener on loopback.

The rendezvous is a file (``init_method="file://..."``: no TCP store at all) and TensorPipe's
sockets are bound to the loopback interface (``TP_SOCKET_IFNAME=lo``, its "uv" transport),
so nothing listens on another interface. One RPC agent per process: one RPCCollector at a
time in a process, and torch.distributed.rpc starts only once in a process: one
RPCCollector per process.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
import traceback

import torch
from tensordict import TensorDictBase

from rlcollect.collectors.distributed.starters import ProcessStarter
from rlcollect.collectors.distributed.worker import Host, HostSpec, policy_tensors, weight_tensors
from rlcollect.collectors.hosted_collector import HostedCollector
from rlcollect.collectors.options import DeliveryOptions
from rlcollect.collectors.processes import WorkerError, initialize_worker

LOOPBACK_INTERFACE = "lo"
_STARTED = []  # RPC agents this process started (torch.distributed.rpc does not start twice in a process)
POLL_SECONDS = 0.0005  # sync=False: how often the futures in flight are looked at


def _backend_options(init_file: str, timeout: float):
    from torch.distributed import rpc

    return rpc.TensorPipeRpcBackendOptions(init_method=f"file://{init_file}", rpc_timeout=timeout,
                                           _transports=["uv"], _channels=["basic"])


class RPCHost(Host):
    """Lives in a worker (created there by ``rpc.remote``): its collector, and the weights
    that arrive between batches (applied at the start of the next one)."""

    def __init__(self, spec: HostSpec, policy) -> None:
        super().__init__(spec, policy)
        self._pending: tuple | None = None  # (version, tensors) not applied yet
        self._lock = threading.Lock()  # one call at a time touches the collector

    def describe(self) -> list[int]:
        return list(self.collector.batch_size)

    def receive_weights(self, version: int, tensors: list[torch.Tensor]) -> None:
        self._pending = (version, tensors)  # a batch under way keeps the weights it started with

    def collect(self):
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                self.load_weights(*pending)
            return self.next_batch()

    def call(self, method: str, args: tuple):
        with self._lock:
            return getattr(self.collector, method)(*args)

    def close(self) -> None:
        with self._lock:
            self.collector.shutdown()


def _rpc_worker_main(index: int, world_size: int, init_file: str, timeout: float, torch_threads, seed) -> None:
    """A worker process: join the RPC group and serve until the trainer shuts it down."""
    from torch.distributed import rpc

    os.environ["TP_SOCKET_IFNAME"] = LOOPBACK_INTERFACE
    initialize_worker(seed, torch_threads)
    rpc.init_rpc(f"worker{index}", rank=index + 1, world_size=world_size,
                 rpc_backend_options=_backend_options(init_file, timeout))
    rpc.shutdown()  # returns once the trainer shuts down


def _create_host(spec: HostSpec, policy) -> RPCHost:
    return RPCHost(spec, policy)


class RPCCollector(HostedCollector):
    """``num_workers`` worker processes, each running one of rlcollect's collectors, driven
    by torch.distributed.rpc from this process (TensorPipe on loopback; one machine).

    ``sync=True`` stacks one batch per worker (``[W, ...]``, ``frames_per_batch`` split across
    them); ``sync=False`` yields each worker's batch first come first served, keeping one
    request in flight per worker. ``update_policy_weights_()`` sends the policy's
    parameters and buffers to every worker (an RPC each), applied before its next batch.
    The other arguments are DistributedCollector's (its workers are local processes: start_workers_with
    "mp" only). docs/collectors.md.
    """

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
        start_method: str = "spawn",
        timeout: float = 60.0,
        worker_torch_threads: int | None = 1,
        post_collect_hook=None,
        shutdown_timeout: float = 10.0,
    ) -> None:
        super().__init__(DeliveryOptions(post_collect_hook=post_collect_hook))
        from torch.distributed import rpc

        self._rpc, self._hosts, self._starter, self._initialized = rpc, [], None, False
        if not rpc.is_available():
            raise RuntimeError("RPCCollector needs torch.distributed.rpc, which this torch build lacks")
        if _STARTED:
            raise RuntimeError("torch.distributed.rpc starts once per process (a second init_rpc hangs): build one "
                               "RPCCollector per process, or use DistributedCollector")
        if start_method == "fork":
            raise ValueError("start_method='fork' would copy this process's RPC state into the workers (after an "
                             "RPCCollector, a forked worker cannot join a new group): use 'spawn' or 'forkserver'")
        plan = self._plan(create_env_fn, num_workers, frames_per_batch=frames_per_batch, total_frames=total_frames,
                          sync=sync, collector_class=collector_class, envs_per_worker=envs_per_worker, seed=seed,
                          env_kwargs=env_kwargs, collector_kwargs=collector_kwargs)
        self.num_workers, self.policy = self.num_hosts, policy
        self.timeout, self.shutdown_timeout = timeout, shutdown_timeout
        self.policy_version = 0
        self._weights = policy_tensors(policy)
        self._in_flight: dict = {}  # sync=False: worker -> its collect future
        os.environ.setdefault("TP_SOCKET_IFNAME", LOOPBACK_INTERFACE)  # this process's TensorPipe too
        self._init_file = tempfile.mktemp(prefix="rlcollect-rpc-")
        try:
            world_size = self.num_workers + 1
            self._starter = ProcessStarter(start_method)
            self._starter.start(_rpc_worker_main, [(index, world_size, self._init_file, timeout,
                                                     worker_torch_threads, plan.seeds[index])
                                                    for index in range(self.num_workers)])
            _STARTED.append(self)
            rpc.init_rpc("trainer", rank=0, world_size=world_size,
                         rpc_backend_options=_backend_options(self._init_file, timeout))
            self._initialized = True
            specs = [HostSpec(index, collector_class, plan.env_sources[index], plan.host_frames,
                              plan.collector_kwargs[index], post_collect_hook, plan.seeds[index])
                     for index in range(self.num_workers)]
            self._hosts = [rpc.remote(f"worker{index}", _create_host, args=(spec, policy))
                           for index, spec in enumerate(specs)]
            self._set_host_shapes(self._gather([host.rpc_async(timeout=timeout).describe() for host in self._hosts]))
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------ calls
    def _failed(self, index: int, error: BaseException) -> WorkerError:
        reason = self._starter.failure(index)
        if reason is not None:
            return WorkerError(index, reason)
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        return WorkerError(index, f"raised an exception:\n{text}")

    def _gather(self, futures: list) -> list:
        results = []
        for index, future in enumerate(futures):
            try:
                results.append(future.wait())
            except Exception as error:
                raise self._failed(index, error) from None
        return results

    def _collect(self, index: int):
        return self._hosts[index].rpc_async(timeout=self.timeout).collect()

    def _keep(self, result) -> TensorDictBase:
        batch, hook_result = result
        self.keep_hook_result(hook_result)
        self._frames += batch.numel()
        return batch

    def _next_batch(self) -> TensorDictBase:
        if self.sync:
            results = self._gather([self._collect(index) for index in range(self.num_workers)])
            return torch.stack([self._keep(result) for result in results])
        for index in range(self.num_workers):
            if index not in self._in_flight:
                self._in_flight[index] = self._collect(index)
        while True:
            for index, future in list(self._in_flight.items()):
                if future.done():
                    del self._in_flight[index]
                    try:
                        result = future.wait()
                    except Exception as error:
                        raise self._failed(index, error) from None
                    self._in_flight[index] = self._collect(index)  # keep it busy
                    return self._keep(result)
            time.sleep(POLL_SECONDS)

    def update_policy_weights_(self, weights=None) -> None:
        """Send the policy's parameters and buffers to every worker (applied before its next batch)."""
        tensors = self._weights if weights is None else weight_tensors(self.policy, weights)
        self.policy_version += 1
        if tensors:
            payload = [tensor.detach().clone() for tensor in tensors]
            self._gather([host.rpc_async(timeout=self.timeout).receive_weights(self.policy_version, payload)
                          for host in self._hosts])

    def _call_all(self, method: str, args_per_worker: list[tuple] | None = None) -> list:
        args_per_worker = args_per_worker or [()] * self.num_workers
        return self._gather([host.rpc_async(timeout=self.timeout).call(method, tuple(args))
                             for host, args in zip(self._hosts, args_per_worker)])

    # ------------------------------------------------------------------ shutdown
    def _close(self) -> None:
        rpc = self._rpc
        healthy = self._starter is not None and all(self._starter.failure(index) is None
                                                     for index in range(self.num_workers))
        if self._initialized:
            try:
                for future in self._in_flight.values():
                    future.wait()
                if healthy:
                    self._gather([host.rpc_async(timeout=self.shutdown_timeout).close() for host in self._hosts])
            except Exception:
                healthy = False
            self._hosts, self._in_flight = [], {}
            rpc.shutdown(graceful=healthy)
            self._initialized = False
        if self._starter is not None:
            self._starter.stop(self.shutdown_timeout)
        if os.path.exists(self._init_file):
            os.unlink(self._init_file)

    @property
    def worker_pids(self) -> list[int]:
        return self._starter.pids

    def __repr__(self) -> str:
        return (f"RPCCollector(num_workers={self.num_workers}, collector_class={self.collector_class!r}, "
                f"sync={self.sync}, frames_per_batch={self.frames_per_batch})")
