"""SIGTERM taken as Ctrl-C is while a command starts, before the training loop takes both
signals over (``jobs.stop_on_signals``): the same one line, every folder left as a Ctrl-C
leaves it (a run that never started removed, a sweep's job marked), exit 143 where a
Ctrl-C's is 130 (docs/errors.md). A scheduler, ``timeout`` or ``kill`` sends SIGTERM; its
default action would end the command at once, leaving Hydra's records of a run that never
started in its folder."""
from __future__ import annotations

import os
import signal


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt."""

    signal_number = signal.SIGTERM


def terminate_as_interrupt(number, frame) -> None:
    raise Terminated


def take_sigterm_as_interrupt() -> None:
    """SIGTERM raises ``Terminated`` in this process from now on (where nothing else took it)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, terminate_as_interrupt)


def interrupt_exit_code(error: BaseException | None) -> int:
    """A command stopped by ``error`` (a KeyboardInterrupt: SIGINT; ``Terminated``: SIGTERM)
    exits 128 + that signal's number."""
    return 128 + getattr(error, "signal_number", signal.SIGINT)


def _default_in_a_forked_child() -> None:
    """A forked process (a collector's worker, a batched sweep's share) ends on SIGTERM as a
    process does (``Process.terminate``), not by an exception its code may catch."""
    if signal.getsignal(signal.SIGTERM) is terminate_as_interrupt:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


os.register_at_fork(after_in_child=_default_in_a_forked_child)
