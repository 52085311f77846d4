"""The jobs of a stopped sweep that never trained, started by ``rlcollect train
resume=<sweep folder>`` as the sweep would have started them (docs/sweeps.md, "Resuming a
sweep").

A stop (Ctrl-C, SIGTERM, a lost machine) can come before some of a sweep's jobs started:
those of a later group have no folder, and one stopped while it loaded holds only what Hydra
writes before a job runs (its ``.hydra/``, its job log) and the summary.json
``{"status": "interrupted", "frames": 0}`` it was left with. The resume starts each of them
with its own job number and overrides (a folder's from its records; a job without one's as
Hydra's basic sweeper lists the sweep's jobs again from its multirun.yaml), through the
launcher the sweep used (a batched sweep's jobs train as one batched model again), into the
sweep's folder. A tuning study's trial stopped while it loaded starts again (and its value
reaches the study); the trials the study never asked for are not started here.
"""
from __future__ import annotations

import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from rlcollect.commands.jobs import UNSTARTED, defer_signals, stopped_sweep
from rlcollect.commands.sweep_record import job_overrides, search_path, sweep_jobs
from rlcollect.commands.sweep_study import Resumed
from rlcollect.config.registry import HYDRA_VERSION_BASE
from rlcollect.errors import one_line
from rlcollect.run_files import (
    CONFIG_FILE,
    ENDED_STATUSES,
    SUMMARY_FILE,
    SWEEP_FILE,
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

    def describe(self, run_args: list[str] = ()) -> str:
        """``job #N (its overrides)``, with ``run_args`` in place of its own value of their keys."""
        return f"job #{self.number} ({' '.join(with_args(self.overrides, list(run_args)))})"


def jobs_to_start(folder: Path, hydra: DictConfig) -> tuple[list[NewJob], list[str]]:
    """The jobs of the sweep in ``folder`` (its multirun.yaml's ``hydra`` node) that never
    trained, by job number, and the lines for those it cannot start. A job folder a stop
    left with Hydra's records alone starts with the overrides those records hold, whatever
    the sweeper. The jobs without a folder are those of the job list Hydra's basic sweeper
    makes again (``sweep_jobs``) that no job folder holds, matched by their overrides (a
    ``shuffle`` draws another order each time), numbered by the numbers no folder has; none
    where another sweeper ran it (a tuning study asks for its trials itself), or where the
    list no longer matches the folders (its config files changed since)."""
    made = {job_number(folder, child): child for child in job_folders(folder)}
    launched = {number: job_overrides(job_dir, hydra) for number, job_dir in made.items()}
    starting = [NewJob(number, launched[number], job_dir) for number, job_dir in sorted(made.items())
                if launched[number] is not None and never_trained(job_dir, hydra)]
    try:
        every = sweep_jobs(hydra)
    except Exception as error:  # noqa: BLE001 - overrides that no longer parse: said, the rest goes on
        return starting, [f"resume={folder}: its jobs cannot be listed again from its {SWEEP_FILE} "
                          f"({one_line(error)}): a job it never started, if any, is not started; train such a job in "
                          "another folder"]
    if every is None:
        return starting, []
    left = [identity(job) for job in every]  # each job once, taken by the folder that holds it
    for overrides in launched.values():
        if overrides is None or identity(overrides) not in left:
            return starting, [f"resume={folder}: its job folders no longer match the jobs its {SWEEP_FILE} makes: a "
                              "job it never started, if any, is not started; train such a job in another folder"]
        left.remove(identity(overrides))
    rest = []  # the jobs no folder holds, in the list's order
    for job in every:
        if identity(job) in left:
            left.remove(identity(job))
            rest.append(job)
    unused = [number for number in range(len(every)) if number not in made]
    starting += [NewJob(number, job, None) for number, job in zip(unused, rest)]
    return sorted(starting, key=lambda job: job.number), []


def identity(overrides: list[str]) -> list[str]:
    """What tells a job of a sweep from the others: its overrides, in any order, but those a
    resume may give every job anew (config.values.RESUME_OVERRIDES: total_frames ...)."""
    from rlcollect.config.values import RESUME_OVERRIDES

    return sorted(override for override in overrides if override.split("=", 1)[0].lstrip("+~") not in RESUME_OVERRIDES)


def never_trained(job_dir: Path, hydra: DictConfig) -> bool:
    """Whether the job folder ``job_dir`` holds only what a job stopped before its run started
    leaves: Hydra's records (its ``hydra.output_subdir``, its ``<hydra.job.name>.log``) and,
    at most, the summary.json ``jobs.UNSTARTED``; anything else there (the run's config.yaml,
    an error log, a file of the user's) keeps it as it is."""
    subdir, log_name = hydra.get("output_subdir"), f"{hydra.job.name}.log"
    for path in job_dir.rglob("*"):
        if path.is_dir() or (subdir and subdir in path.relative_to(job_dir).parts[:-1]) or path.name == log_name:
            continue
        if path.name == SUMMARY_FILE and read_summary(path.parent) == UNSTARTED:
            continue
        return False
    return True


def start_jobs(folder: Path, hydra: DictConfig, jobs: list[NewJob], run_args: list[str], processes: int | None,
               task_function: Callable[[DictConfig], object], trained: list[Resumed]) -> bool:
    """Train ``jobs`` (``task_function``: commands.train.train) into the sweep's ``folder``
    with the sweep's launcher (``processes``: a batched sweep's processes, None: the sweep's;
    resume_sweep refuses it for another launcher), each with ``run_args`` (the resume's
    ``key=value`` overrides: total_frames ...) in place of its own value of those keys;
    jobs of consecutive numbers are launched together, as the sweep launched them; each run
    that trained is added to ``trained`` (what a tuning sweep's study is told). Whether one
    did not finish (failed or refused: its own lines said why)."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.plugins import Plugins
    from hydra.errors import ConfigCompositionException, OverrideParseException
    from hydra.types import HydraContext

    from rlcollect.commands.overrides import override_error_line

    try:
        app, cfg = sweep_app(folder, hydra, processes)
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
                log.info("%s %s: starting it", job.describe(run_args), "never started" if job.folder is None else
                         "stopped before its run started")
                if job.folder is not None:  # Hydra's records of a job that never ran: written anew
                    shutil.rmtree(job.folder)
            launcher.launch([with_args(job.overrides, run_args) for job in run], initial_job_idx=run[0].number)
    finally:  # Hydra logged the last job into its folder's job log: what this command says next is not the job's
        root.handlers, root.level = handlers, level
        made = {job_number(folder, child): child for child in job_folders(folder)}
        for job in jobs:  # stopped too: a trial that trained reaches its study
            trained += [Resumed(job.number, run_dir, OmegaConf.load(run_dir / CONFIG_FILE))
                        for run_dir in trained_runs(made.get(job.number))]
    stopped = stopped_sweep(folder)
    if stopped is not None:  # jobs of a launcher's processes, each checkpointed
        raise SystemExit(stopped)
    return any(not finished(made.get(job.number)) for job in jobs)


def sweep_app(folder: Path, hydra: DictConfig, processes: int | None):
    """Hydra (its config loader) as the sweep's command set it up, and the sweep's config
    composed again from its overrides, with ``hydra.sweep.dir`` the folder as named now (and
    ``hydra.launcher.processes``, where given)."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra.core.utils import setup_globals
    from hydra.types import RunMode

    from rlcollect.commands.overrides import quoted

    version.setbase(HYDRA_VERSION_BASE)
    setup_globals()
    app = Hydra.create_main_hydra2(task_name=hydra.job.name, config_search_path=search_path(hydra))
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


def trained_runs(job_dir: Path | None) -> list[Path]:
    """The run folders in the job folder ``job_dir`` (nested where the job's overrides name a
    config group) that trained: a config.yaml beside a summary.json."""
    if job_dir is None:
        return []
    return sorted(path.parent for path in job_dir.rglob(CONFIG_FILE) if (path.parent / SUMMARY_FILE).is_file())


def finished(job_dir: Path | None) -> bool:
    """Whether the job folder ``job_dir`` holds a run that finished or was solved (every run in it)."""
    if job_dir is None:
        return False
    summaries = [read_summary(summary.parent) for summary in job_dir.rglob(SUMMARY_FILE)]
    return bool(summaries) and all(summary.get("status") in ENDED_STATUSES for summary in summaries)
