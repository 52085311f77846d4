"""How a distributed collector's workers are started (its ``start_workers_with`` option):
local processes ("mp"), SLURM jobs through submitit ("submitit"; ``cluster="local"`` runs
them as local processes, a dry run of the SLURM path) or Ray tasks ("ray": on a running Ray
cluster, or a local Ray bound to loopback). A starter starts ``worker_main(spec, policy)``
once per worker, tells whether each is still running, and stops them.

(This module was launchers.py, and the option ``launcher``: a word that, in rlcollect's
command line, means Hydra's launcher plugins, ``hydra/launcher=...``.)"""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any, Callable

from rlcollect.child_processes import killed_at_exit, sigint_blocked
from rlcollect.choices import DISTRIBUTED_WORKER_STARTERS as STARTERS
from rlcollect.errors import MissingDependencyError


class ProcessStarter:
    """Workers as child processes of this one (``start_method``: spawn, fork or forkserver)."""

    def __init__(self, start_method: str = "spawn") -> None:
        self._context = multiprocessing.get_context(start_method)
        self.processes: list = []
        killed_at_exit(self, self.processes)

    def start(self, target: Callable, args_per_worker: list[tuple]) -> None:
        for index, args in enumerate(args_per_worker):
            # not daemonic: a worker may run a multi-process collector of its own
            process = self._context.Process(target=target, args=args, name=f"rlcollect-distributed-{index}")
            with sigint_blocked(self._context, sigterm=True):  # a Ctrl-C / SIGTERM as it starts: this process's
                process.start()
            self.processes.append(process)

    def failure(self, index: int) -> str | None:
        """Why worker ``index`` stopped (None while it runs)."""
        process = self.processes[index]
        if process.is_alive():
            return None
        return f"died (exit code {process.exitcode})"

    def stop(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.kill()
                process.join(5)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]


class SubmititStarter:
    """Workers as submitit jobs: SLURM (``cluster=None`` picks it where sbatch exists) or
    ``cluster="local"`` (local processes, submitit's LocalExecutor). ``slurm_kwargs`` go
    to ``executor.update_parameters`` (e.g. ``timeout_min``, ``slurm_partition``,
    ``cpus_per_task``, ``gpus_per_node``); logs land in ``folder``."""

    def __init__(self, folder: str | Path = "submitit", cluster: str | None = None,
                 slurm_kwargs: dict[str, Any] | None = None) -> None:
        try:
            import submitit
        except ImportError:
            raise MissingDependencyError("start_workers_with='submitit' needs submitit: pip install 'rlcollect[slurm]'"
                                         ) from None
        self._executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
        self._executor.update_parameters(**dict(slurm_kwargs or {}))
        self.jobs: list = []

    def start(self, target: Callable, args_per_worker: list[tuple]) -> None:
        for args in args_per_worker:
            self.jobs.append(self._executor.submit(target, *args))

    def failure(self, index: int) -> str | None:
        job = self.jobs[index]
        if not job.done():
            return None
        return f"job {job.job_id} ended ({job.state})"

    def stop(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(job.done() for job in self.jobs):
            time.sleep(0.1)
        for job in self.jobs:
            if not job.done():
                job.cancel(check=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(job.done() for job in self.jobs):
            time.sleep(0.1)

    @property
    def pids(self) -> list[int]:
        return []


class RayStarter:
    """Workers as Ray tasks (one CPU each): on the cluster this process is connected to, or
    at ``ray_address``, or (None) on a Ray started here bound to loopback, stopped at the end."""

    def __init__(self, ray_address: str | None = None) -> None:
        from rlcollect.collectors.ray.startup import import_ray, join_ray, start_local_ray

        self._ray = import_ray()
        self._started = False
        if not self._ray.is_initialized():
            if ray_address is None:
                start_local_ray()
                self._started = True
            else:
                join_ray(self._ray, ray_address)
        self.tasks: list = []

    def start(self, target: Callable, args_per_worker: list[tuple]) -> None:
        remote = self._ray.remote(num_cpus=1, max_retries=0)(target)
        self.tasks = [remote.remote(*args) for args in args_per_worker]

    def failure(self, index: int) -> str | None:
        ready, _ = self._ray.wait([self.tasks[index]], timeout=0)
        if not ready:
            return None
        try:
            self._ray.get(ready[0])
            return "task ended"
        except Exception as error:  # the task's own error, or its worker process dying
            return f"task failed ({type(error).__name__})"

    def stop(self, timeout: float) -> None:
        if self.tasks:
            _, running = self._ray.wait(self.tasks, num_returns=len(self.tasks), timeout=timeout)
            for task in running:
                self._ray.cancel(task, force=True)
        if self._started:
            self._ray.shutdown()

    @property
    def pids(self) -> list[int]:
        return []


def make_starter(start_workers_with: str, *, start_method: str = "spawn", folder: str | Path = "submitit",
                 cluster: str | None = None, slurm_kwargs: dict | None = None, ray_address: str | None = None):
    """The starter of ``start_workers_with`` (one of STARTERS), with its own options."""
    if start_workers_with == "mp":
        return ProcessStarter(start_method)
    if start_workers_with == "submitit":
        return SubmititStarter(folder, cluster, slurm_kwargs)
    if start_workers_with == "ray":
        return RayStarter(ray_address)
    raise ValueError(f"start_workers_with must be one of {', '.join(STARTERS)}; got {start_workers_with!r}")
