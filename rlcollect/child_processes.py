"""Child processes that leave Ctrl-C (and SIGTERM) to the process that started them.

A Ctrl-C reaches every process of the terminal's group: a collector's workers and the
processes of an ``env.backend=async`` env as well as the command; so does the SIGTERM that
``timeout``, a batch scheduler or a container runtime sends to the group. The command
decides how to stop (after its batch, with a checkpoint); a child that took the signal
itself would die mid-step, or print a KeyboardInterrupt traceback while it still imports.
``sigint_blocked`` starts children with SIGINT (and, for a collector's workers, SIGTERM)
blocked: they keep the mask (a collector's worker then ignores the signals,
``collectors.processes.initialize_worker``), so only the command acts on them.
"""
from __future__ import annotations

import contextlib
import os
import signal
import weakref


@contextlib.contextmanager
def sigint_blocked(mp_context, sigterm: bool = False):
    """SIGINT (and SIGTERM with ``sigterm``: a collector's workers, which their collector
    stops by a message or a kill) blocked in this thread inside: a child process started
    here (by ``mp_context``) keeps the mask, so a Ctrl-C while it starts (its interpreter,
    its imports) or runs is the main process's to act on, not a KeyboardInterrupt of the
    child's; here the signal waits until the block ends. The resource tracker that a first
    spawned (or forkserver) process starts is started before: starting it unblocks SIGINT.
    A forked one starts none."""
    if mp_context.get_start_method() != "fork":
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM} if sigterm else {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def killed_at_exit(owner, processes: list) -> None:
    """Kill whichever of ``processes`` (a list the owner keeps adding to) still runs when
    ``owner`` is collected or the interpreter exits: a collector's workers ignore SIGTERM
    (and start with it blocked), so multiprocessing's own clean-up at exit, which
    terminates them, would not end a worker its collector never got to stop (a command
    interrupted while they start). Registered after multiprocessing's, it runs before it."""
    weakref.finalize(owner, _kill_alive, processes, os.getpid())


def _kill_alive(processes: list, parent: int) -> None:
    if os.getpid() != parent:  # a forked child holds a copy of the finalizer: the processes are not its own
        return
    for process in processes:
        if process.pid is not None and process.is_alive():
            process.kill()
            process.join(5)
