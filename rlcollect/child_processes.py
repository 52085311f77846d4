"""Child processes that leave Ctrl-C to the process that started them.

A Ctrl-C reaches every process of the terminal's group: a collector's workers and the
processes of an ``env.backend=async`` env as well as the command. The command decides how
to stop (after its batch, with a checkpoint); a child that took the signal itself would die
mid-step, or print a KeyboardInterrupt traceback while it still imports. ``sigint_blocked``
starts children with SIGINT blocked: they keep the mask (a collector's worker then ignores
the signal, ``collectors.processes.initialize_worker``), so only the command acts on it.
"""
from __future__ import annotations

import contextlib
import signal


@contextlib.contextmanager
def sigint_blocked(mp_context):
    """SIGINT blocked in this thread inside: a child process started here (by
    ``mp_context``) keeps the mask, so a Ctrl-C while it starts (its interpreter, its
    imports) or runs is the main process's to act on, not a KeyboardInterrupt of the
    child's; here the signal waits until the block ends. The resource tracker that a first
    spawned (or forkserver) process starts is started before: starting it unblocks SIGINT.
    A forked one starts none."""
    if mp_context.get_start_method() != "fork":
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
