"""The worker process of the multi-process collectors: a Collector driven over a pipe.

The worker owns a Collector (the same per-step loop as in-process collection) whose
preallocated batch is moved to shared memory once and handed to the main process at
start-up. Afterwards the pipe carries only small messages:

    main -> worker   ("collect", [delivery changes]) | ("set_seed", seed) | ("reset",) | ("state_dict",)
                     | ("close",)
    worker -> main   ("ready", batch, frames_per_batch) | ("batch", policy_version, finished_ns, steps, hook results)
                     | ("ok", None or the worker's state_dict) | ("error", traceback text)

Before each batch the worker applies pending weights (its WeightReceivers); while idle it
also wakes up on weight pipes, so a sender never waits on an idle worker. It is set up by
``initialize_worker`` (SIGINT ignored: the main process decides when to stop; RNGs seeded
by the seed rule; threads; CPU affinity), ships any exception to the main process and
exits; it exits as well when the main process goes away (EOF on its pipe).
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

import torch

from rlcollect.collectors.options import DeliveryOptions, DeviceOptions, StepOptions
from rlcollect.collectors.processes import initialize_worker
from rlcollect.keys import POLICY_VERSION, WORKER_ID
from rlcollect.trajectories import TrajectoryPool


@dataclass
class WorkerSpec:
    """Everything a worker needs, pickled once at start-up."""

    worker_id: int
    create_env: Callable  # called in the worker: its env (envs/sources.py EnvSpec)
    policy: Any
    frames_per_batch: int
    step: StepOptions
    devices: DeviceOptions
    delivery: DeliveryOptions  # the workers' part (DeliveryOptions.in_workers)
    traj_pool: TrajectoryPool
    seed: int | None = None  # the worker's RNGs (rlcollect/seeding.py)
    weight_endpoints: dict = field(default_factory=dict)
    torch_threads: int | None = 1
    cpus: tuple[int, ...] | None = None
    preempt: torch.Tensor | None = None  # shared [1] uint8: non-zero asks the worker to end its batch now


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


def stamp_worker_keys(batch, worker_id: int, policy_version: int = 0):
    """Add ("collector", "worker_id") and ("collector", "policy_version") to a worker's batch."""
    batch.set(WORKER_ID, torch.full(batch.shape, worker_id, dtype=torch.int64, device=batch.device))
    batch.set(POLICY_VERSION, torch.full(batch.shape, policy_version, dtype=torch.int64, device=batch.device))
    return batch


def worker_main(handoff: list[WorkerSpec], connection: Connection) -> None:
    """Process entry point; ``handoff`` holds the WorkerSpec (see MultiSyncCollector)."""
    spec = handoff[0]
    collector = None
    try:
        initialize_worker(spec.seed, spec.torch_threads, spec.cpus)
        from rlcollect.collectors.single import Collector

        collector = Collector.from_options(spec.create_env(), spec.policy, frames_per_batch=spec.frames_per_batch,
                                           devices=spec.devices, step=spec.step, delivery=spec.delivery,
                                           traj_pool=spec.traj_pool)
        receivers = {model_id: endpoint.make_receiver(resolve_model(collector, model_id))
                     for model_id, endpoint in spec.weight_endpoints.items()}
        batch = stamp_worker_keys(collector.batch, spec.worker_id)
        if batch.device.type == "cpu":
            collector.share_memory_()
        connection.send(("ready", batch, collector.frames_per_batch))
        _serve(collector, receivers, connection, spec.preempt)
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


def _serve(collector, receivers: dict, connection: Connection, preempt: torch.Tensor | None) -> None:
    weight_connections = [c for receiver in receivers.values() for c in receiver.connections()]
    version = receivers["policy"] if "policy" in receivers else None
    batch = collector.batch
    stop = None
    if preempt is not None:
        flag = preempt.numpy()
        stop = lambda: flag[0] != 0  # noqa: E731 (read once per step: the main process sets it)
    while True:
        wait([connection, *weight_connections])
        for receiver in receivers.values():
            receiver.poll()
        if not connection.poll():
            continue
        command, *args = connection.recv()
        if command == "collect":
            if args:  # hooks or postproc changed in the main process (CollectorBase.set_delivery)
                collector.set_delivery(**args[0])
            for receiver in receivers.values():
                receiver.poll()
            policy_version = version.version if version is not None else 0
            batch.get(POLICY_VERSION).fill_(policy_version)  # the weights this batch starts with
            collected = collector.collect(stop=stop)
            steps = collector.steps_collected  # fewer than T when the main process preempted this batch
            # hooks; with a replay buffer postproc and the write: on the steps collected only
            collector.deliver(collected if steps == collected.batch_size[-1] else collected[..., :steps])
            # when it finished (first come, first served), how many steps it holds, what the hook returned
            connection.send(("batch", policy_version, time.monotonic_ns(), steps, collector.hook_results()))
        elif command == "set_seed":
            collector.set_seed(*args)
            connection.send(("ok", None))
        elif command == "reset":
            collector.reset()
            connection.send(("ok", None))
        elif command == "state_dict":
            state = {**collector.state_dict(), "policy_version": version.version if version is not None else 0}
            if isinstance(collector.policy, torch.nn.Module):
                state["policy"] = {key: value.detach().clone() for key, value in collector.policy.state_dict().items()}
            connection.send(("ok", state))
        elif command == "close":
            return
        else:
            raise ValueError(f"unknown worker command {command!r}")
