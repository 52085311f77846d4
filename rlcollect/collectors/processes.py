"""Worker processes of a collector: start, message, watch, report, stop.

Shared by the multi-process collectors (collectors/multi.py) and the action-server
collectors (collectors/action_server.py). Each worker gets a duplex pipe for control
messages; the main process never waits on a worker without watching it:

    receive(ids, expect)   waits on the pipes and the process sentinels together
    report(id)             a worker that stopped: its shipped traceback, else how it died
    close(ask)             ask every worker to stop, join (bounded), terminate, kill

Any failure shuts the owning collector down (``on_failure``) first, then raises
``WorkerError`` naming the worker and the cause (its traceback text, or the signal that
killed it), so nothing is left running behind the error.
"""
from __future__ import annotations

import os
import random
import signal
import time
from multiprocessing.connection import wait
from typing import Callable, Iterable, Iterator, NoReturn, Sequence

import numpy as np
import torch

from rlcollect.child_processes import killed_at_exit, sigint_blocked

WAIT_SLICE_SECONDS = 0.5  # how often a waiting main process checks that its workers live


class WorkerError(RuntimeError):
    """A worker process failed: ``worker_id`` names it, the message carries the cause."""

    def __init__(self, worker_id: int, message: str) -> None:
        super().__init__(f"collector worker {worker_id}: {message}")
        self.worker_id = worker_id


class WorkerLost(Exception):
    """A worker failed in a way its collector chose to recover from (``recover``): nothing
    was shut down; the collector replaces the worker. ``kind``: "died" (killed, crashed,
    exited), "raised" (shipped an exception) or "timeout" (no answer within batch_timeout)."""

    def __init__(self, worker_id: int, kind: str, message: str) -> None:
        super().__init__(f"collector worker {worker_id}: {message}")
        self.worker_id, self.kind, self.message = worker_id, kind, message
        self.found: list = []  # WorkerProcesses.ready: the other workers' messages


def raised_message(traceback_text: str) -> str:
    """What a worker that shipped ``traceback_text`` raised: its exception's line first (the
    line a one-line error shows), then the traceback."""
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    return f"raised an exception: {lines[-1].strip() if lines else '(no message)'}\n{traceback_text}"


def initialize_worker(seed: int | None = None, torch_threads: int | None = 1,
                      cpus: Sequence[int] | None = None) -> None:
    """Set up a worker process (rlpyt's ``initialize_worker``): ignore SIGINT and SIGTERM
    (the main process decides when to stop: a Ctrl-C or ``timeout``'s SIGTERM reaches the
    whole process group; a collector stops its workers by a message, or kills them), pin
    to ``cpus``, seed Python's, numpy's and torch's RNGs (``None``: fresh OS entropy, so
    forked workers do not share their parent's stream) and limit torch's intra-op
    threads. Arguments, never environment variables."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    seed_rngs(seed)
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)


def seed_rngs(seed: int | None) -> None:
    """Seed torch's, numpy's and Python's RNGs (``None``: fresh OS entropy, so forked
    processes do not share their parent's stream)."""
    if seed is None:
        torch.seed()
        np.random.seed()
        random.seed()
    else:
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)


def one_set_per_worker(cpu_affinity, num_workers: int) -> bool:
    """Whether ``cpu_affinity`` holds one non-empty set of CPU ids per worker."""
    return len(cpu_affinity) == num_workers and all(cpu_affinity)


def check_cpu_affinity(cpu_affinity, num_workers: int) -> list[tuple[int, ...]] | None:
    """``None``, or one non-empty set of CPU ids per worker, each available to this process."""
    if cpu_affinity is None:
        return None
    available = os.sched_getaffinity(0)
    sets = [tuple(int(cpu) for cpu in cpus) for cpus in cpu_affinity]
    if not one_set_per_worker(sets, num_workers):
        raise ValueError(f"worker_cpu_affinity must hold one non-empty list of CPU ids per worker "
                         f"({num_workers}), got {cpu_affinity!r}")
    unknown = sorted({cpu for cpus in sets for cpu in cpus} - available)
    if unknown:
        raise ValueError(f"worker_cpu_affinity names CPUs {unknown} this process cannot use "
                         f"(available: {sorted(available)})")
    return sets


class WorkerProcesses:
    """The worker processes of one collector and their pipes.

    Args:
        mp_context: the multiprocessing context the workers start with.
        on_failure: called before a ``WorkerError`` is raised (the collector's shutdown).
        name: process name prefix (``{name}-{worker_id}``).
        recover: ``recover(worker_id, kind) -> bool``, asked first on a failure: True raises
            ``WorkerLost`` instead (nothing shut down; the caller replaces the worker).
    """

    def __init__(self, mp_context, on_failure: Callable[[], None], name: str = "rlcollect-worker",
                 recover: Callable[[int, str], bool] | None = None) -> None:
        self.mp_context = mp_context
        self.processes: list = []
        self.connections: list = []
        killed_at_exit(self, self.processes)
        self._on_failure = on_failure
        self._name = name
        self.recover = recover

    def __len__(self) -> int:
        return len(self.processes)

    def start(self, target: Callable, spec, worker_id: int | None = None) -> int:
        """Start ``target(handoff, connection)`` where ``handoff == [spec]``; returns the
        worker id. The handoff list is emptied once the child has it (pickled at start for
        spawn, inherited for fork), so the Process object keeps no shared lock or tensor
        of the spec alive after the collector lets go of it. ``worker_id``: replace that
        worker (which must have stopped: see ``stop``) instead of adding one."""
        main_end, worker_end = self.mp_context.Pipe()
        handoff = [spec]
        index = len(self.processes) if worker_id is None else worker_id
        process = self.mp_context.Process(target=target, args=(handoff, worker_end), daemon=True,
                                          name=f"{self._name}-{index}")
        with sigint_blocked(self.mp_context, sigterm=True):
            process.start()
        handoff.clear()
        worker_end.close()
        if worker_id is None:
            self.processes.append(process)
            self.connections.append(main_end)
        else:
            self.processes[worker_id], self.connections[worker_id] = process, main_end
        return index

    def stop(self, worker_id: int) -> None:
        """Make sure one worker is gone (killed if it still runs) and close its pipe."""
        process = self.processes[worker_id]
        if process.is_alive():
            process.kill()
        process.join(timeout=5.0)
        self.connections[worker_id].close()

    # ------------------------------------------------------------------ messaging
    def send(self, worker_id: int, *message) -> None:
        try:
            self.connections[worker_id].send(message)
        except (BrokenPipeError, OSError):
            self.fail(worker_id, self.death_message(worker_id))

    def receive(self, worker_ids: Iterable[int], expect: str, timeout: float | None = None
                ) -> Iterator[tuple[int, tuple]]:
        """Yield ``(worker_id, message)`` from each of ``worker_ids`` as it arrives,
        watching the workers' liveness; an error message, a death, an unexpected message
        or ``timeout`` seconds without every answer fail (shut down, raise)."""
        pending = set(worker_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            handles = {self.connections[i]: i for i in pending}
            sentinels = {self.processes[i].sentinel: i for i in pending}
            ready = wait([*handles, *sentinels], timeout=WAIT_SLICE_SECONDS)
            for handle in ready:
                worker_id = handles.get(handle, sentinels.get(handle))
                if worker_id not in pending:
                    continue
                message = self._expected(worker_id, expect)
                pending.discard(worker_id)
                yield worker_id, message
            if deadline is not None and time.monotonic() > deadline and pending:
                self.fail(min(pending), f"no {expect!r} within batch_timeout={timeout} s", kind="timeout")

    def ready(self, worker_ids: Iterable[int], expect: str) -> list[tuple[int, tuple]]:
        """``(worker_id, message)`` of each of ``worker_ids`` that has a message now (no
        waiting); checked as in ``receive``. A WorkerLost it raises carries the messages
        read from the other workers (``found``)."""
        worker_ids = list(worker_ids)
        handles = {self.connections[i]: i for i in worker_ids}
        sentinels = {self.processes[i].sentinel: i for i in worker_ids}
        found, lost = {}, None
        for handle in wait([*handles, *sentinels], timeout=0):
            worker_id = handles.get(handle, sentinels.get(handle))
            if worker_id in found or (lost is not None and lost.worker_id == worker_id):
                continue
            try:
                found[worker_id] = self._expected(worker_id, expect)
            except WorkerLost as error:  # the others' messages are read first (none dropped)
                lost = lost or error
        if lost is not None:
            lost.found = list(found.items())
            raise lost
        return list(found.items())

    def _expected(self, worker_id: int, expect: str) -> tuple:
        """The worker's next message, which must be ``expect`` (else: fail with its error)."""
        message = self.recv(worker_id)
        if message[0] == "error":
            self.fail(worker_id, raised_message(message[1]), kind="raised")
        if message[0] != expect:
            self.fail(worker_id, f"sent {message[0]!r} while {expect!r} was expected", kind="protocol")
        return message

    def recv(self, worker_id: int):
        """The worker's next message; fails with its death message if it died without one."""
        connection = self.connections[worker_id]
        try:
            if connection.poll():
                return connection.recv()
        except (EOFError, OSError):
            pass
        except Exception:  # a message cut off by the worker's death (e.g. its tensors' fds gone)
            self.processes[worker_id].join(timeout=1.0)
            if self.processes[worker_id].is_alive():
                raise
        self.fail(worker_id, self.death_message(worker_id))

    # ------------------------------------------------------------------ failures
    def death_message(self, worker_id: int) -> str:
        process = self.processes[worker_id]
        process.join(timeout=1.0)
        code = process.exitcode
        if code is not None and code < 0:
            return f"died from signal {signal.Signals(-code).name} (pid {process.pid})"
        return f"exited unexpectedly with code {code} (pid {process.pid})"

    def report(self, worker_id: int) -> NoReturn:
        """Fail for a worker that stopped serving: with the traceback it shipped, if any,
        else with how it died."""
        message = self.recv(worker_id)  # fails with the death message when there is none
        if message[0] == "error":
            self.fail(worker_id, raised_message(message[1]), kind="raised")
        self.fail(worker_id, f"sent {message[0]!r} and stopped serving", kind="protocol")

    def fail(self, worker_id: int, message: str, kind: str = "died") -> NoReturn:
        """Raise WorkerLost when ``recover`` takes the failure, else shut the collector down
        and raise WorkerError."""
        if self.recover is not None and self.recover(worker_id, kind):
            raise WorkerLost(worker_id, kind, message)
        self._on_failure()
        raise WorkerError(worker_id, message)

    def is_alive(self, worker_id: int) -> bool:
        return self.processes[worker_id].is_alive()

    def check_alive(self, worker_ids: Iterable[int] | None = None) -> None:
        for worker_id in range(len(self.processes)) if worker_ids is None else worker_ids:
            if not self.processes[worker_id].is_alive():
                self.report(worker_id)

    # ------------------------------------------------------------------ shutdown
    def close(self, timeout: float, ask: Callable[[int], None] | None = None) -> None:
        """Ask every live worker to stop (``ask(worker_id)``; default: send ("close",)),
        give them ``timeout`` seconds together, then terminate and kill the rest. Idempotent."""
        for worker_id, process in enumerate(self.processes):
            if process.is_alive():
                try:
                    ask(worker_id) if ask is not None else self.connections[worker_id].send(("close",))
                except (BrokenPipeError, OSError):
                    pass
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.processes:  # a worker ignores SIGTERM (initialize_worker): the rest are killed
            if process.is_alive():
                process.kill()
                process.join()
        for connection in self.connections:
            connection.close()
