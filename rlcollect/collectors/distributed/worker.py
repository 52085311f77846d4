"""A distributed collector's worker: one of rlcollect's collectors in its own process (or
SLURM job), answering the trainer over the process group.

    trainer (rank 0) ──command──▶ worker w (rank w + 1)        [command, version, argument]
        COLLECT  one batch (sync)          START   batches until the next command is read (async)
        WEIGHTS  the policy's tensors follow, packed in one message, in TensorDict.from_module order
        CALL     a pickled (method, args) follows; the answer goes back pickled (while
                 streaming, a PAUSED header first: no batch of this worker is in flight)
        STOP     close the collector and exit
    worker ──header──▶ trainer    [worker, frames, policy version, hook-result bytes]
           ──data────▶ the batch's tensors packed in one byte buffer, in its layout's order (the
                       layout is published once in the store: "layout/<w>"), then the pickled
                       hook result if any

A worker that fails writes its traceback to the store ("error/<w>") before it exits, so
the trainer names it and its cause.
"""
from __future__ import annotations

import contextlib
import copy
import os
import pickle
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.distributed.group import (
    ANSWER_TAG,
    COMMAND_TAG,
    DATA_TAG,
    HEADER_TAG,
    WEIGHTS_TAG,
    FlatLayout,
    GroupSpec,
    connect_store,
    make_group,
    recv_object,
    send_object,
)
from rlcollect.collectors.host_plan import build_hosted_collector, traj_start
from rlcollect.collectors.options import DeliveryOptions
from rlcollect.collectors.processes import initialize_worker
from rlcollect.collectors.worker import stamp_worker_keys

COLLECT, START, WEIGHTS, CALL, STOP = 1, 2, 3, 4, 5
PAUSED = -1  # a header's frame count: "no batch follows" (the answer to a call made while streaming)
CALLS = ("set_seed", "reset", "state_dict", "load_state_dict", "describe")


@dataclass
class HostSpec:
    """What one worker's collector is built from (pickled once, at launch)."""

    index: int
    collector_class: str
    create_env_fn: Any
    frames_per_batch: int
    collector_kwargs: dict = field(default_factory=dict)
    post_collect_hook: Any = None
    seed: int | None = None  # the worker's RNGs (rlcollect/seeding.py: its first env's seed)


@dataclass
class WorkerSpec(HostSpec):
    """A process-group worker's HostSpec, with the group to join."""

    group: GroupSpec | None = None
    torch_threads: int | None = 1


def policy_tensors(policy) -> list[torch.Tensor]:
    """The tensors weights travel as: parameters and buffers, in TensorDict.from_module order."""
    if not isinstance(policy, torch.nn.Module):
        return []
    return [tensor for _, tensor in sorted(TensorDict.from_module(policy).items(True, True), key=lambda kv: str(kv[0]))]


def weight_tensors(policy, weights) -> list[torch.Tensor]:
    """``weights`` (a module, a state_dict or a TensorDict of the policy's entries) as the
    tensors workers expect, in policy_tensors' order."""
    if isinstance(weights, TensorDictBase):
        return [value for _, value in sorted(weights.items(True, True), key=lambda kv: str(kv[0]))]
    if not isinstance(weights, torch.nn.Module):
        module = copy.deepcopy(policy)
        module.load_state_dict(weights)
        weights = module
    return policy_tensors(weights)


def batch_layout(batch) -> dict:
    """What the trainer preallocates from: the batch size and each entry's key, shape, dtype."""
    return {"batch_size": list(batch.batch_size),
            "entries": [(key, list(value.shape), value.dtype) for key, value in batch.items(True, True)]}


class Host:
    """A worker's collector, as the distributed and RPC collectors drive it: its batches
    stamped with the worker and the weights version, and weights loaded from tensors."""

    def __init__(self, spec: HostSpec, policy) -> None:
        self.spec = spec
        self.collector = build_hosted_collector(spec.collector_class, spec.create_env_fn, policy, spec.frames_per_batch,
                                                spec.collector_kwargs, traj_start(spec.index))
        self._weights = policy_tensors(policy)
        self._batches = iter(self.collector)
        self._delivery = Delivery(DeliveryOptions(post_collect_hook=spec.post_collect_hook))
        self.policy_version = 0

    def next_batch(self) -> tuple[TensorDictBase, Any]:
        """The collector's next batch, stamped and through the post-collect hook; and the
        hook's result."""
        batch = stamp_worker_keys(next(self._batches), self.spec.index, self.policy_version)
        self._delivery(batch, 0)
        return batch, self._delivery.last_hook_result

    def load_weights(self, version: int, tensors) -> None:
        """Copy ``tensors`` (in policy_tensors' order) into the policy, on to the
        collector's own copy or worker processes; batches then carry ``version``."""
        with torch.no_grad():
            for own, new in zip(self._weights, tensors):
                own.copy_(new)
        self.collector.update_policy_weights_()
        self.policy_version = version


class Worker(Host):
    """The worker's loop (``run``) around its collector; see the module doc."""

    def __init__(self, spec: WorkerSpec, policy) -> None:
        super().__init__(spec, policy)
        self._layout: list | None = None  # the keys, in the order their tensors are sent

    def run(self, group, store) -> None:
        command = torch.zeros(3, dtype=torch.int64)
        pending = group.recv([command], 0, COMMAND_TAG)
        streaming = False  # async: batches go out back to back, commands are read between them
        doorbell, handled = f"doorbell/{self.spec.index}", 0  # rung once per command sent while streaming
        while True:
            if streaming and store.add(doorbell, 0) == handled:  # (a gloo receive cannot be polled)
                self._send_batch(group, store)
                continue
            pending.wait()
            handled += streaming
            kind, version, _ = command.tolist()
            if kind == STOP:
                if streaming:  # the trainer drains until every worker says goodbye
                    group.send([torch.tensor([self.spec.index, PAUSED, 0, 0])], 0, HEADER_TAG).wait()
                return
            if kind == COLLECT:
                self._send_batch(group, store)
            elif kind == START:
                streaming = True
            elif kind == WEIGHTS:
                self._receive_weights(group, version)
            elif kind == CALL:
                if streaming:  # tell the trainer no batch of ours is in flight any more
                    group.send([torch.tensor([self.spec.index, PAUSED, 0, 0])], 0, HEADER_TAG).wait()
                method, args = recv_object(group, 0, COMMAND_TAG)
                send_object(group, self._call(method, args), 0, ANSWER_TAG)
            pending = group.recv([command], 0, COMMAND_TAG)

    def _call(self, method: str, args: tuple):
        if method not in CALLS:
            raise ValueError(f"unknown call {method!r}")
        if method == "describe":
            return list(self.collector.batch_size), self.collector.frames_per_batch
        return getattr(self.collector, method)(*args)

    def _receive_weights(self, group, version: int) -> None:
        flat = FlatLayout([(list(tensor.shape), tensor.dtype) for tensor in self._weights])
        incoming = flat.buffer()
        group.recv([incoming], 0, WEIGHTS_TAG).wait()  # every tensor, one message
        self.load_weights(version, flat.views(incoming))

    def _send_batch(self, group, store) -> None:
        batch, hook_result = self.next_batch()
        if self._layout is None:
            layout = batch_layout(batch)
            store.set(f"layout/{self.spec.index}", pickle.dumps(layout))
            self._layout = [key for key, _, _ in layout["entries"]]
            flat = FlatLayout([(shape, dtype) for _, shape, dtype in layout["entries"]])
            self._flat = flat.buffer()
            self._flat_views = flat.views(self._flat)
        for key, view in zip(self._layout, self._flat_views):
            view.copy_(batch.get(key))
        extra = b"" if hook_result is None else pickle.dumps(hook_result)
        header = torch.tensor([self.spec.index, batch.numel(), self.policy_version, len(extra)], dtype=torch.int64)
        group.send([header], 0, HEADER_TAG).wait()
        group.send([self._flat], 0, DATA_TAG).wait()  # the whole batch, one message
        if extra:
            group.send([torch.frombuffer(bytearray(extra), dtype=torch.uint8)], 0, DATA_TAG).wait()

    def close(self) -> None:
        self.collector.shutdown()


def worker_main(spec: WorkerSpec, policy) -> None:
    """Process (or job) entry point: join the group, build the collector, serve the trainer;
    a failure leaves its traceback in the store for the trainer."""
    initialize_worker(spec.seed, spec.torch_threads)
    store = connect_store(spec.group)
    try:
        with native_errors_held(keep=lambda error: not trainer_gone(error)):
            group = make_group(spec.group, store, spec.index + 1)  # first: the trainer waits for every rank
    except RuntimeError as error:
        if trainer_gone(error):  # the command stopped while the group formed (Ctrl-C as it starts)
            return
        raise
    worker = None
    try:
        worker = Worker(spec, policy)
        worker.run(group, store)
    except BaseException as error:
        if trainer_gone(error):  # stopped (Ctrl-C) or killed: no one to report to, nothing to say
            return
        store.set(f"error/{spec.index}", traceback.format_exc())
        raise
    finally:
        if worker is not None:
            worker.close()


@contextlib.contextmanager
def native_errors_held(keep):
    """Hold what C++ writes to stderr (file descriptor 2) while the block runs: gloo logs a
    failed connection itself before it raises. Written out after the block, unless it raised
    an error that ``keep(error)`` is false for (the trainer gone: nothing to say)."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        shown = True
        try:
            yield
        except BaseException as error:
            shown = keep(error)
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if shown:
                held.seek(0)
                sys.stderr.write(held.read().decode(errors="replace"))
                sys.stderr.flush()


def trainer_gone(error: BaseException) -> bool:
    """Whether ``error`` is gloo's word that the trainer (rank 0, the worker's only peer)
    closed its connection: its process ended."""
    return isinstance(error, RuntimeError) and any(
        words in str(error) for words in ("Connection closed by peer", "Connection reset by peer"))
