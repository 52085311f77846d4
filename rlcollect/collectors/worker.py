"""The worker process of the multi-process collectors: a Collector driven over a pipe.

The worker owns a Collector (the same per-step loop as in-process collection) whose
preallocated batch is moved to shared memory once and handed to the main process at
start-up. Afterwards the pipe carries only small messages:

    main -> worker   ("collect",) | ("set_seed", seed) | ("reset",) | ("close",)
    worker -> main   ("ready", batch, frames_per_batch) | ("batch", policy_version)
                     | ("ok", None) | ("error", traceback text)

Before each batch the worker applies pending weights (its WeightReceivers); while idle it
also wakes up on weight pipes, so a sender never waits on an idle worker. It ignores
SIGINT (the main process decides when to stop), ships any exception to the main process
and exits; it exits as well when the main process goes away (EOF on its pipe).
"""
from __future__ import annotations

import signal
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

import torch

from rlcollect.keys import POLICY_VERSION, WORKER_ID
from rlcollect.trajectories import TrajectoryPool



@dataclass
class WorkerSpec:
    """Everything a worker needs, pickled once at start-up."""

    worker_id: int
    create_env_fn: Any
    policy: Any
    frames_per_batch: int
    collector_kwargs: dict
    traj_pool: TrajectoryPool
    weight_endpoints: dict = field(default_factory=dict)
    torch_threads: int = 1
    pre_collect_hook: Callable[[], None] | None = None
    post_collect_hook: Callable | None = None
    replay_buffer: Any = None  # shared: the worker writes its batches into it (after postproc)
    trajs_per_batch: int | None = None
    postproc: Callable | None = None


def resolve_model(owner, model_id: str) -> torch.nn.Module:
    """The module at the dotted attribute path ``model_id`` of ``owner`` ("policy",
    "policy.critic", ...); a clear error when it resolves to nothing."""
    target = owner
    for name in model_id.split("."):
        target = getattr(target, name, None)
        if target is None:
            break
    if not isinstance(target, torch.nn.Module):
        raise ValueError(f"weight_sync_schemes: model id {model_id!r} resolves to "
                         f"{type(target).__name__ if target is not None else 'nothing'} on "
                         f"{type(owner).__name__}, not an nn.Module")
    return target


def stamp_worker_keys(batch, worker_id: int):
    """Add ("collector", "worker_id") and ("collector", "policy_version") to a worker's batch."""
    batch.set(WORKER_ID, torch.full(batch.shape, worker_id, dtype=torch.int64, device=batch.device))
    batch.set(POLICY_VERSION, torch.zeros(batch.shape, dtype=torch.int64, device=batch.device))
    return batch


def worker_main(handoff: list[WorkerSpec], connection: Connection) -> None:
    """Process entry point; ``handoff`` holds the WorkerSpec (see _MultiCollector._start_workers)."""
    spec = handoff[0]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(spec.torch_threads)
    collector = None
    try:
        from rlcollect.collectors.single import Collector

        writes = spec.replay_buffer is not None
        collector = Collector(spec.create_env_fn, spec.policy, frames_per_batch=spec.frames_per_batch,
                              total_frames=-1, traj_pool=spec.traj_pool, pre_collect_hook=spec.pre_collect_hook,
                              replay_buffer=spec.replay_buffer, trajs_per_batch=spec.trajs_per_batch,
                              postproc=spec.postproc, post_collect_hook=spec.post_collect_hook if writes else None,
                              **spec.collector_kwargs)
        receivers = {model_id: endpoint.make_receiver(resolve_model(collector, model_id))
                     for model_id, endpoint in spec.weight_endpoints.items()}
        batch = stamp_worker_keys(collector._batch, spec.worker_id)
        if batch.device.type == "cpu":
            collector.share_memory_()
        connection.send(("ready", batch, collector.frames_per_batch))
        _serve(spec, collector, receivers, connection)
    except (EOFError, BrokenPipeError):
        pass  # the main process went away: nothing to report to
    except BaseException:
        try:
            connection.send(("error", traceback.format_exc()))
        except (OSError, EOFError):
            pass
    finally:
        if collector is not None:
            collector.shutdown()


def _serve(spec: WorkerSpec, collector, receivers: dict, connection: Connection) -> None:
    weight_connections = [c for receiver in receivers.values() for c in receiver.connections()]
    version = receivers["policy"] if "policy" in receivers else None
    batch = collector._batch
    while True:
        wait([connection, *weight_connections])
        for receiver in receivers.values():
            receiver.poll()
        if not connection.poll():
            continue
        command, *args = connection.recv()
        if command == "collect":
            for receiver in receivers.values():
                receiver.poll()
            policy_version = version.version if version is not None else 0
            batch.get(POLICY_VERSION).fill_(policy_version)  # the weights this batch starts with
            if spec.replay_buffer is not None:
                collector._next_batch()  # postproc, hook, write into the shared buffer
            else:
                collector._collect()  # the main process reads the shared batch
                if spec.post_collect_hook is not None:
                    spec.post_collect_hook(batch)
            connection.send(("batch", policy_version))
        elif command == "set_seed":
            collector.set_seed(*args)
            connection.send(("ok", None))
        elif command == "reset":
            collector.reset()
            connection.send(("ok", None))
        elif command == "close":
            return
        else:
            raise ValueError(f"unknown worker command {command!r}")
