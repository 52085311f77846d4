"""How a distributed collector's workers are started: local processes ("mp") or SLURM jobs
through submitit ("submitit"; ``cluster="local"`` runs them as local processes, a dry run
of the SLURM path). A launcher starts ``worker_main(spec, policy)`` once per worker, tells
whether each is still running, and stops them."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any, Callable

LAUNCHERS = ("mp", "submitit")


class ProcessLauncher:
    """Workers as child processes of this one (``start_method``: spawn, fork or forkserver)."""

    def __init__(self, start_method: str = "spawn") -> None:
        self._context = multiprocessing.get_context(start_method)
        self.processes: list = []

    def start(self, target: Callable, args_per_worker: list[tuple]) -> None:
        for index, args in enumerate(args_per_worker):
            # not daemonic: a worker may run a multi-process collector of its own
            process = self._context.Process(target=target, args=args, name=f"rlcollect-distributed-{index}")
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


class SubmititLauncher:
    """Workers as submitit jobs: SLURM (``cluster=None`` picks it where sbatch exists) or
    ``cluster="local"`` (local processes, submitit's LocalExecutor). ``slurm_kwargs`` go
    to ``executor.update_parameters`` (e.g. ``timeout_min``, ``slurm_partition``,
    ``cpus_per_task``, ``gpus_per_node``); logs land in ``folder``."""

    def __init__(self, folder: str | Path = "submitit", cluster: str | None = None,
                 slurm_kwargs: dict[str, Any] | None = None) -> None:
        try:
            import submitit
        except ImportError:
            raise ImportError("launcher='submitit' needs submitit: pip install 'rlcollect[slurm]'") from None
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


def make_launcher(launcher: str, *, start_method: str = "spawn", folder: str | Path = "submitit",
                  cluster: str | None = None, slurm_kwargs: dict | None = None):
    if launcher == "mp":
        return ProcessLauncher(start_method)
    if launcher == "submitit":
        return SubmititLauncher(folder, cluster, slurm_kwargs)
    raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}; got {launcher!r}")
