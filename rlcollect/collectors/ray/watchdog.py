"""Ends a local Ray instance's processes once the process that started it is gone.

Why: a driver killed with SIGKILL takes down the Ray processes it started itself (Ray
starts them with PR_SET_PDEATHSIG), the raylet among them; the raylet's agents
(ray::DashboardAgent, ray::RuntimeEnvAgent) see it die at once, but then report its death
to the GCS, which died with the driver, and wait out Ray's fixed 60 s RPC timeout before
they exit. No Ray setting shortens that wait or leaves the agents out.

How: ``start_local_ray`` runs this file (stdlib only: ``python -I -S watchdog.py TOKEN
DRIVER_PID``) as a child of the driver, in a session of its own, its stdin a pipe whose
other end only the driver holds, and starts Ray with ``RLCOLLECT_RAY_SESSION=TOKEN`` in
the environment; once Ray is up it writes the instance's session directory into the pipe.
The watchdog sleeps until the driver is gone (end of file on stdin, or this process handed
to another parent), then SIGKILLs the instance's processes, and exits. A process belongs
to the instance when

- its initial environment holds the token (every process Ray starts inherits it; the
  raylet passes it on to its agents and workers), or
- it is titled ``ray::...`` and has a file open in the session directory (its logs): a
  process that retitles itself (the agents, the workers) may overwrite its initial
  environment with the title.

Another Ray instance has another token and session directory, so it is never touched; after
a ``ray.shutdown()`` nothing is left to end.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import time

SESSION_VARIABLE = "RLCOLLECT_RAY_SESSION"
POLL_SECONDS = 0.5  # how often the parent is checked while stdin stays silent
KILL_ROUNDS = 50  # a process the last round's SIGKILL had not yet ended is found again, 0.1 s later


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # gone, or another user's
        return b""


def _has_open_file_under(pid: str, directory: str) -> bool:
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for descriptor in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{descriptor}").startswith(directory):
                return True
        except OSError:
            continue
    return False


def session_processes(token: str, session_dir: str | None = None) -> list[int]:
    """Pids of the live processes of the instance marked with ``token`` (and, once known, with its
    ``session_dir``), this one excepted. A zombie's environment and files read empty: not listed."""
    marker, own = f"{SESSION_VARIABLE}={token}".encode(), str(os.getpid())
    directory = os.path.join(os.path.realpath(session_dir), "") if session_dir else None
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == own:
            continue
        if marker in _read(f"/proc/{pid}/environ").split(b"\0") or (
                directory and _read(f"/proc/{pid}/cmdline").startswith(b"ray::")
                and _has_open_file_under(pid, directory)):
            found.append(int(pid))
    return found


def wait_for_driver(driver_pid: int) -> str | None:
    """Return once the driver is gone, with the last session directory it sent (a line on stdin):
    its end of the pipe closed (end of file), or this process no longer its child (a child the
    driver forked may hold the pipe open)."""
    stdin, received = sys.stdin.fileno(), b""
    while os.getppid() == driver_pid:
        readable, _, _ = select.select([stdin], [], [], POLL_SECONDS)
        if readable:
            data = os.read(stdin, 4096)
            if not data:
                break
            received += data
    lines = [line for line in received.split(b"\n")[:-1] if line]  # complete lines only
    return os.fsdecode(lines[-1]) if lines else None


def kill_session(token: str, session_dir: str | None = None) -> list[int]:
    """SIGKILL the instance's processes until none is found; the pids signalled."""
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        pids = session_processes(token, session_dir)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.1)
    return sorted(killed)


def main(argv: list[str]) -> None:
    token, driver_pid = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the driver; this one outlives it
    kill_session(token, wait_for_driver(driver_pid))


if __name__ == "__main__":
    main(sys.argv[1:])
