"""The processes below a process and their states, read from /proc (tests that check what a
command or a cluster started, and what it left, or wait for a process to reach a state)."""
import time
from pathlib import Path


def descendants(root_pid: int) -> set[int]:
    """Pids of every live process below ``root_pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = set(), [root_pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def state(pid: int) -> str:
    """The state letter of process ``pid`` (``R`` running, ``S`` asleep in a wait, ...)."""
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_for(condition, timeout: float = 60.0) -> None:
    """Poll ``condition()`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def ctrl_c_group_when(process, ready, timeout: float = 120.0, signal_number: int | None = None) -> str:
    """Once ``ready()`` holds, Ctrl-C the process group of ``process`` (started with
    ``start_new_session=True``: a terminal's Ctrl-C reaches every process of the command)
    while it still runs (``signal_number``: another signal, e.g. ``timeout``'s SIGTERM);
    its stderr once it has ended. A process left running is killed."""
    import os
    import signal

    try:
        wait_for(lambda: process.poll() is not None or ready(), timeout)
        assert process.poll() is None, process.communicate()
        os.killpg(process.pid, signal.SIGINT if signal_number is None else signal_number)
        _, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return stderr
