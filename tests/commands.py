"""``rlcollect`` commands run as a user runs them: a process of their own, W&B offline,
Hydra's one-line errors. Commands that do not depend on each other run side by side
(``rlcollect_all``): each in its own folder, their results checked one by one.

A command that runs to its end (``rlcollect``, ``rlcollect_all``) is a child forked by the
command server (tests/command_server.py), a process that imported torch, tensordict, Hydra
and the pipeline once for the whole test session: each child is the process ``python -m
rlcollect.cli`` would be (its folder, environment, file descriptors, exit), started without
its seconds of imports. A new interpreter runs instead with ``fresh=True`` (what a test of
the start-up itself needs: which modules a command imports, say), for a ``pythonpath`` with
a start-up hook (sitecustomize.py), and for a command that a test interrupts or kills
(``start_rlcollect``)."""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = Path(__file__).with_name("command_server.py")


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


def rlcollect(cwd, *args, pythonpath=None, env: dict | None = None, timeout: float = 300, fresh: bool = False):
    """``rlcollect <args>`` in ``cwd``: its CompletedProcess (stdout and stderr as text).
    ``fresh``: in a new interpreter rather than a child of the command server."""
    if fresh or not CommandServer.serves(pythonpath):
        return subprocess.run(command_line(args), cwd=cwd, env=_environment(pythonpath, env), capture_output=True,
                              text=True, timeout=timeout)
    [result] = CommandServer.instance().run_all([(list(args), cwd, _environment(pythonpath, env))], timeout)
    return result


def command_line(args) -> list[str]:
    return [sys.executable, "-m", "rlcollect.cli", *args]


def start_rlcollect(cwd, *args, pythonpath=None, env: dict | None = None, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, **popen):
    """``rlcollect <args>`` started in ``cwd`` and left running (a test that interrupts or
    kills it): its Popen, text mode; ``popen``: more of Popen's arguments."""
    return subprocess.Popen(command_line(args), cwd=cwd, env=_environment(pythonpath, env),
                            stdout=stdout, stderr=stderr, text=True, **popen)


def rlcollect_all(cwd, commands: list, pythonpath=None, timeout: float = 300, at_once: int | None = None) -> list:
    """Each of ``commands`` (argument lists, or ``(arguments, pythonpath)`` pairs) run side by
    side in ``cwd`` (a folder, or one per command), ``at_once`` at a time (None: all); their
    CompletedProcesses, in the commands' order, once all ended."""
    folders = cwd if isinstance(cwd, (list, tuple)) else [cwd] * len(commands)
    at_once = at_once or max(1, len(commands))
    runs = [(*((command, pythonpath) if not isinstance(command, tuple) else command), folder)
            for command, folder in zip(commands, folders)]
    results = []
    for start in range(0, len(runs), at_once):
        batch = runs[start:start + at_once]
        if all(CommandServer.serves(path) for _, path, _ in batch):
            server = CommandServer.instance()
            results += server.run_all([(args, folder, _environment(path)) for args, path, folder in batch], timeout)
        else:
            results += _run_side_by_side(batch, timeout)
    return results


def _run_side_by_side(batch: list, timeout: float) -> list:
    """``batch`` (arguments, pythonpath, folder) as new interpreters side by side."""
    processes, results = [], []
    try:
        for args, path, folder in batch:
            process = subprocess.Popen(command_line(args), cwd=folder, env=_environment(path), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            processes.append((command_line(args), process))
        for argv, process in processes:
            stdout, stderr = process.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(argv, process.returncode, stdout, stderr))
    finally:
        for _, process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return results


class CommandServer:
    """This test process's command server (tests/command_server.py), started at its first
    command and ended with this process (its stdin closed)."""

    _instance: CommandServer | None = None

    @staticmethod
    def serves(pythonpath) -> bool:
        """Whether a command with ``pythonpath`` runs as the server's child: not where the
        OS cannot fork it, nor with a start-up hook (a sitecustomize module), which only an
        interpreter's start runs."""
        hook = pythonpath is not None and (Path(pythonpath) / "sitecustomize.py").exists()
        return hasattr(os, "fork") and hasattr(os, "pidfd_open") and not hook

    @classmethod
    def instance(cls) -> CommandServer:
        if cls._instance is None or cls._instance.process.poll() is not None:
            cls._instance = cls()
        return cls._instance

    def __init__(self) -> None:
        self.outputs = tempfile.TemporaryDirectory(prefix="rlcollect-commands-")
        self.process = subprocess.Popen([sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=_environment())
        atexit.register(self.close)
        self.next_id = 0
        self.pids: dict[int, int] = {}
        self.statuses: dict[int, int] = {}
        self.unread = b""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()
        self.outputs.cleanup()

    def run_all(self, commands: list[tuple[list[str], object, dict]], timeout: float) -> list:
        """``commands`` (arguments, folder, environment) side by side: their CompletedProcesses
        once all ended; past ``timeout`` seconds each still running is killed and
        TimeoutExpired raised, as subprocess.run does."""
        started = []
        for args, folder, environment in commands:
            request_id, self.next_id = self.next_id, self.next_id + 1
            out, err = (str(Path(self.outputs.name) / f"{request_id}.{name}") for name in ("out", "err"))
            request = {"id": request_id, "args": [str(arg) for arg in args], "cwd": str(Path(folder).resolve()),
                       "env": environment, "out": out, "err": err}
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            started.append((request_id, args, out, err))
        self.process.stdin.flush()
        ids = [request_id for request_id, *_ in started]
        try:
            self.wait(ids, time.monotonic() + timeout)
        except subprocess.TimeoutExpired:
            for request_id in ids:
                if request_id not in self.statuses:
                    self.wait_for_pid(request_id)
                    os.kill(self.pids[request_id], signal.SIGKILL)
            self.wait(ids, None)
            raise subprocess.TimeoutExpired(command_line(started[0][1]), timeout) from None
        results = []
        for request_id, args, out, err in started:
            code = os.waitstatus_to_exitcode(self.statuses.pop(request_id))
            self.pids.pop(request_id, None)
            results.append(subprocess.CompletedProcess(command_line(args), code, Path(out).read_text(),
                                                       Path(err).read_text()))
            for path in (out, err):
                os.unlink(path)
        return results

    def wait_for_pid(self, request_id: int) -> None:
        while request_id not in self.pids and request_id not in self.statuses:
            self.read(None)

    def wait(self, ids: list[int], deadline: float | None) -> None:
        while any(request_id not in self.statuses for request_id in ids):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired("rlcollect", 0)
            self.read(remaining)

    def read(self, timeout: float | None) -> None:
        """The server's next messages (waiting at most ``timeout`` seconds for them)."""
        stdout = self.process.stdout.fileno()
        if not select.select([stdout], [], [], timeout)[0]:
            return
        chunk = os.read(stdout, 1 << 16)
        if not chunk:
            raise RuntimeError(f"the command server ({SERVER.name}) ended with {self.process.wait()}")
        self.unread += chunk
        while b"\n" in self.unread:
            line, self.unread = self.unread.split(b"\n", 1)
            message = json.loads(line)
            if "pid" in message:
                self.pids[message["id"]] = message["pid"]
            else:
                self.statuses[message["id"]] = message["status"]
