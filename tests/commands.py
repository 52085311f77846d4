"""``rlcollect`` commands run as a user runs them: a process of their own, W&B offline,
Hydra's one-line errors. Commands that do not depend on each other run side by side
(``rlcollect_all``): each in its own folder, their results checked one by one."""
from __future__ import annotations

import os
import subprocess
import sys


def _environment(pythonpath=None, env: dict | None = None) -> dict:
    """This process's environment, W&B offline, plus ``env`` (a None value unsets that
    variable) and ``pythonpath`` put first in PYTHONPATH (before this process's own, which
    may name the checkout under test: a folder of user modules adds to it). Without
    WANDB_SERVICE: a test that ran W&B in this process leaves its service's address there,
    and a command given it would share that service as a user's shell never does (a run
    killed with SIGKILL keeps its run id there: its resume is refused as 'run ID ... is in use')."""
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0",
                   "WANDB_SERVICE": None, **(env or {})}
    if pythonpath is not None:
        environment["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {key: value for key, value in environment.items() if value is not None}


def rlcollect(cwd, *args, pythonpath=None, env: dict | None = None, timeout: float = 300):
    """``rlcollect <args>`` in ``cwd``: its CompletedProcess (stdout and stderr as text)."""
    return subprocess.run([sys.executable, "-m", "rlcollect.cli", *args], cwd=cwd,
                          env=_environment(pythonpath, env), capture_output=True, text=True, timeout=timeout)


def start_rlcollect(cwd, *args, pythonpath=None, env: dict | None = None, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, **popen):
    """``rlcollect <args>`` started in ``cwd`` and left running (a test that interrupts or
    kills it): its Popen, text mode; ``popen``: more of Popen's arguments."""
    return subprocess.Popen([sys.executable, "-m", "rlcollect.cli", *args], cwd=cwd, env=_environment(pythonpath, env),
                            stdout=stdout, stderr=stderr, text=True, **popen)


def rlcollect_all(cwd, commands: list, pythonpath=None, timeout: float = 300, at_once: int | None = None) -> list:
    """Each of ``commands`` (argument lists, or ``(arguments, pythonpath)`` pairs) run side by
    side in ``cwd`` (a folder, or one per command), ``at_once`` at a time (None: all); their
    CompletedProcesses, in the commands' order, once all ended."""
    folders = cwd if isinstance(cwd, (list, tuple)) else [cwd] * len(commands)
    at_once = at_once or max(1, len(commands))
    results = []
    for start in range(0, len(commands), at_once):
        processes = []
        try:
            for command, folder in zip(commands[start:start + at_once], folders[start:start + at_once]):
                args, path = command if isinstance(command, tuple) else (command, pythonpath)
                argv = [sys.executable, "-m", "rlcollect.cli", *args]
                processes.append((argv, subprocess.Popen(argv, cwd=folder, env=_environment(path),
                                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
            for argv, process in processes:
                stdout, stderr = process.communicate(timeout=timeout)
                results.append(subprocess.CompletedProcess(argv, process.returncode, stdout, stderr))
        finally:
            for _, process in processes:
                if process.poll() is None:
                    process.kill()
                    process.communicate()
    return results
