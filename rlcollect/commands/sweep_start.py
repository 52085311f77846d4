"""The jobs of a stopped sweep that never trained, started by ``rlcollect train
resume=<sweep folder>`` as the sweep would have started them (docs/sweeps.md, "Resuming a
sweep").

A stop (Ctrl-C, SIGTERM, a lost machine) can come before some of a sweep's jobs started:
those of a later group have no folder, and one stopped while it loaded holds only what Hydra
writes before a job runs (its ``.hydra/``, its job log) and the summary.json
``{"status": "interrupted", "frames": 0}`` it was left with. The resume starts each of them
with its own job number and overrides, as Hydra's basic sweeper numbered them from the
sweep's multirun.yaml, through the launcher the sweep used (a batched sweep's jobs train as
one batched model again), into the sweep's folder. The jobs of a tuning study are the
study's to ask for again; they are not started here.
"""
from __future__ import annotations

import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from rlcollect.commands.jobs import UNSTARTED, defer_signals, stopped_sweep
from rlcollect.commands.sweep_record import batched_launcher, sweep_jobs
from rlcollect.config.registry import HYDRA_VERSION_BASE
from rlcollect.run_files import (
    ENDED_STATUSES,
    HYDRA_DIR,
    JOB_LOG,
    SUMMARY_FILE,
    job_folders,
    job_number,
    read_summary,
)

log = logging.getLogger(__name__)

@dataclass
class NewJob:
    """A job of the sweep that never trained: its number, its overrides (as the sweep gave
    them) and the folder a stop left it with (None: the sweep made none)."""

    number: int
    overrides: list[str]
    folder: Path | None

    def describe(self) -> str:
        return f"job #{self.number} ({' '.join(self.overrides)})"


def jobs_to_start(folder: Path, hydra: DictConfig) -> list[NewJob]:
    """The jobs of the sweep in ``folder`` (its multirun.yaml's ``hydra`` node) that never
    trained, by job number; none where another sweeper than Hydra's basic one ran it (a tuning
    study asks for its trials one batch at a time) or its overrides no longer parse."""
    made = {job_number(folder, child): child for child in job_folders(folder)}
    return [NewJob(number, overrides, made.get(number)) for number, overrides in enumerate(sweep_jobs(hydra))
            if number not in made or never_trained(made[number])]


def never_trained(job_dir: Path) -> bool:
    """Whether the job folder ``job_dir`` holds only what a job stopped before its run started
    leaves: Hydra's records (``.hydra/``, the job log) and, at most, the summary.json
    ``jobs.UNSTARTED``; anything else there (the run's config.yaml,
    an error log, a file of the user's) keeps it as it is."""
    for path in job_dir.rglob("*"):
        if path.is_dir() or HYDRA_DIR in path.relative_to(job_dir).parts[:-1] or path.name == JOB_LOG:
            continue
        if path.name == SUMMARY_FILE and read_summary(path.parent) == UNSTARTED:
            continue
        return False
    return True


def start_jobs(folder: Path, hydra: DictConfig, jobs: list[NewJob], run_args: list[str], processes: int | None,
               task_function: Callable[[DictConfig], object]) -> bool:
    """Train ``jobs`` (``task_function``: commands.train.train) into the sweep's ``folder``
    with the sweep's launcher (``processes``: a
    batched sweep's processes, None: the sweep's), each with ``run_args`` (the resume's
    ``key=value`` overrides: total_frames ...) in place of its own value of those keys;
    jobs of consecutive numbers are launched together, as the sweep launched them. Whether
    one did not finish (failed or refused: its own lines said why)."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.plugins import Plugins
    from hydra.errors import ConfigCompositionException, OverrideParseException
    from hydra.types import HydraContext

    from rlcollect.commands.overrides import override_error_line

    try:
        app, cfg = sweep_app(folder, hydra, processes if batched_launcher(hydra) is not None else None)
    except (ConfigCompositionException, OverrideParseException) as error:  # its config files changed since
        print(f"rlcollect train: resume={folder}: {', '.join(f'job #{job.number}' for job in jobs)} cannot start: the "
              f"sweep's config does not compose any more ({override_error_line(error)})", file=sys.stderr)
        return True
    context = HydraContext(config_loader=app.config_loader, callbacks=Callbacks(cfg))
    launcher = Plugins.instance().instantiate_launcher(config=cfg, hydra_context=context, task_function=task_function)
    defer_signals(cfg.hydra.launcher)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        for run in consecutive(jobs):
            for job in run:
                log.info("%s %s: starting it", job.describe(), "never started" if job.folder is None else
                         "stopped before its run started")
                if job.folder is not None:  # Hydra's records of a job that never ran: written anew
                    shutil.rmtree(job.folder)
            launcher.launch([with_args(job.overrides, run_args) for job in run], initial_job_idx=run[0].number)
    finally:  # Hydra logged the last job into its folder's job log: what this command says next is not the job's
        root.handlers, root.level = handlers, level
    stopped = stopped_sweep(folder)
    if stopped is not None:  # jobs of a launcher's processes, each checkpointed
        raise SystemExit(stopped)
    made = {job_number(folder, child): child for child in job_folders(folder)}
    return any(not finished(made.get(job.number)) for job in jobs)


def sweep_app(folder: Path, hydra: DictConfig, processes: int | None):
    """Hydra (its config loader) as the sweep's command set it up, and the sweep's config
    composed again from its overrides, with ``hydra.sweep.dir`` the folder as named now (and
    ``hydra.launcher.processes``, where given)."""
    from hydra import version
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra._internal.hydra import Hydra
    from hydra.core.plugins import Plugins
    from hydra.core.utils import setup_globals
    from hydra.types import RunMode

    from rlcollect.commands.overrides import quoted

    version.setbase(HYDRA_VERSION_BASE)
    setup_globals()
    Plugins.instance()  # its config sources registered
    search_path = ConfigSearchPathImpl()
    for source in hydra.runtime.config_sources:
        search_path.append(source.provider, f"{source.schema}://{source.path}")
    app = Hydra.create_main_hydra2(task_name=hydra.job.name, config_search_path=search_path)
    pinned = {"hydra.sweep.dir": quoted(str(folder))}
    if processes is not None:
        pinned["hydra.launcher.processes"] = str(processes)
    overrides = with_args(list(hydra.overrides.hydra), [f"{key}={value}" for key, value in pinned.items()])
    cfg = app.compose_config(hydra.job.config_name, overrides=[*overrides, *hydra.overrides.task],
                             run_mode=RunMode.MULTIRUN)
    return app, cfg


def with_args(overrides: list[str], args: list[str]) -> list[str]:
    """``overrides`` with each ``key=value`` of ``args`` in place of the override of its key
    (where there is one, in its place; else at the end)."""
    given = dict(arg.split("=", 1) for arg in args)
    result = [f"{key}={given.pop(key)}" if key in given else override
              for override, key in ((override, override.split("=", 1)[0]) for override in overrides)]
    return result + [f"{key}={value}" for key, value in given.items()]


def consecutive(jobs: list[NewJob]) -> list[list[NewJob]]:
    """``jobs`` (by number) in runs of consecutive numbers."""
    runs: list[list[NewJob]] = []
    for job in jobs:
        if runs and runs[-1][-1].number == job.number - 1:
            runs[-1].append(job)
        else:
            runs.append([job])
    return runs


def finished(job_dir: Path | None) -> bool:
    """Whether the job folder ``job_dir`` holds a run that finished or was solved (every run in it)."""
    if job_dir is None:
        return False
    summaries = [read_summary(summary.parent) for summary in job_dir.rglob(SUMMARY_FILE)]
    return bool(summaries) and all(summary.get("status") in ENDED_STATUSES for summary in summaries)
