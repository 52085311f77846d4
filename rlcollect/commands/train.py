"""`rlcollect train [overrides]`: Hydra composes the config, :func:`train` runs one job.

How a job ends, and what it leaves (docs/errors.md):

    a user's mistake (ConfigError)   one line, exit 2; a single run's folder is removed (nothing
                                     is left), a sweep job's holds only summary.json {refused}
    an error while building the run  "error while building the run: <Type>: <message>", the
                                     traceback in <run>/error.log, exit 1
    a failure while training         one short block, the traceback in <run>/error.log, exit 1
    a full disk                      one line naming the disk, the folder and the free bytes, exit 1;
                                     the last complete checkpoint stays, to resume from
    Ctrl-C / SIGTERM                 stops after the batch, checkpoints, exit 130 / 143; Ctrl-C
                                     before the first batch is one line, exit 130, and a single
                                     run's folder is removed (it held only what Hydra wrote)

A folder that holds a run already is never trained into again (``RunFolders``, a Hydra
callback, refuses it before Hydra writes anything): `resume=<folder>` continues that run,
and `resume=<sweep folder>` every member of a sweep that can go on (commands/sweep_resume.py).

In a sweep no job stops the others: each failed or refused job is listed at the end with
its overrides (``SweepReport``, a Hydra callback), and the command exits 1.
"""
from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import (
    ConfigCompositionException,
    InstantiationException,
    OverrideParseException,
)
from omegaconf import DictConfig

from rlcollect.commands.jobs import (
    COMMAND_PID,
    FULL_ERROR,
    INTERRUPTED_WHILE_STARTING,
    NO_VALUE,
    STOPPED,
    Job,
    continue_sweep,
    ctrl_c_held,
    failed_to_build,
    finished_lines,
    in_launcher_process,
    interrupted_line,
    interrupted_while_starting,
    leave_unstarted,
    objective_value,
    refused,
    run_failed,
    stop_on_signals,
    stopped_sweep,
    sweep_group,
    sweep_resume_line,
)
from rlcollect.commands.overrides import (
    in_resumed_run_folder,
    one_mode,
    one_value_each,
    override_error_line,
    resume_overrides,
    unquoted,
)
from rlcollect.commands.run_folders import (
    STARTING,
    RefusedBeforeStart,
    hold_run_folder,
    leave_unswept,
    release_run_folder,
)
from rlcollect.commands.sweep_report import SWEEP, report_sweep
from rlcollect.commands.terminated import interrupt_exit_code
from rlcollect.config import HYDRA_VERSION_BASE, check_ranges, logs_to_wandb, register_configs
from rlcollect.errors import ConfigError
from rlcollect.logging.wandb_start import start_wandb
from rlcollect.run_files import INTERRUPTED, job_folders, job_number, sweep_folder, sweep_of

register_configs()
log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> float | None:
    """One training job: build the pipeline from ``cfg`` and run it in the Hydra run folder.
    Returns the run's ``objective`` (what a tuning sweep optimises); None for a job of a
    sweep that failed or was refused, or a run without that value (a failed trial)."""
    job = Job.current(cfg)
    if STOPPED.is_set() and in_launcher_process():  # a signal stopped this launcher's process: no job starts here
        leave_unstarted(job)  # its folder: Hydra's records, {interrupted, 0}; resume=<sweep> starts it
        return NO_VALUE
    try:
        return train_job(cfg, job)
    finally:
        release_run_folder(job.run_dir)  # held by build_job: no other process trains it meanwhile


def train_job(cfg: DictConfig, job: Job) -> float | None:
    """:func:`train` of the job ``job``."""
    try:
        built = build_job(cfg, job)
    except ConfigError as error:
        return refused(job, error)
    except KeyboardInterrupt:  # Ctrl-C while torch loads or the envs, workers or logger start: one line
        return interrupted_while_starting(job, stop_command=not in_launcher_process())
    except Exception as error:  # our bug, or one in user code the run calls (an env constructor ...)
        return failed_to_build(job, error)
    from rlcollect import pipeline

    with stop_on_signals() as stop:
        try:
            summary = pipeline.run(built, stop=stop)
        except KeyboardInterrupt:  # a second Ctrl-C: the run stopped at once
            say_interrupted(job, built.collector.frames, built.checkpoint_frames)
            raise SystemExit(128 + stop.signal_number) from None
        except Exception as error:  # a worker, env or policy failed: one short block, the traceback in a file
            run_failed(job, error, traceback.format_exc(), built.checkpoint_frames)
            if job.multirun:
                return NO_VALUE
            raise SystemExit(1) from None
    if summary["status"] == INTERRUPTED:
        say_interrupted(job, summary["frames"], summary.get("checkpoint_frames"))
        if in_launcher_process():  # the command stops once the launcher has every job's end
            return NO_VALUE
        raise SystemExit(128 + stop.signal_number)
    print(finished_lines(job, summary))
    if stop.is_set() and job.multirun and not in_launcher_process():
        # a stop that came with this job's last batch (it finished): the sweep's later jobs do not start
        sweep = sweep_of(job.run_dir)
        if sweep is not None:
            print(f"rlcollect train: stopped after job #{job_number(sweep, job.run_dir)} finished; "
                  f"{continue_sweep(sweep)}", file=sys.stderr)
        raise SystemExit(128 + stop.signal_number)
    return objective_value(cfg, summary, job.run_dir)


def say_interrupted(job: Job, frames: int, checkpoint_frames: int | None) -> None:
    """The lines of an interrupted job: where it stopped and how to continue it, and, for a
    member of a sweep (whose later jobs the stop kept from starting), how to continue the sweep."""
    print(interrupted_line(job, frames, checkpoint_frames), file=sys.stderr)
    line = sweep_resume_line(job.run_dir) if job.multirun and not in_launcher_process() else None  # the command's
    if line is not None:
        print(line, file=sys.stderr)



def build_job(cfg: DictConfig, job: Job):
    """The job's pipeline: built from ``cfg``, or, for ``resume=<run>``, that run's resumed;
    nothing written to the job's folder yet (Pipeline.open does, as the run starts)."""
    hydra_cfg = HydraConfig.get()
    hold_run_folder(job.run_dir, f"resume={job.resume}" if job.resume else f"hydra.run.dir={job.run_dir}")
    if not job.resume:
        check_ranges(cfg)  # a value out of its range is said before torch loads (seconds sooner)
        if logs_to_wandb(cfg):
            start_wandb()  # W&B imported and its service started before torch (rlcollect/logging/wandb_start.py)
    with ctrl_c_held():
        from rlcollect import pipeline  # torch, its first import
    if job.resume:
        built = pipeline.resume(job.resume, overrides=resume_overrides(hydra_cfg.overrides.task, cfg))
        keep_log_in(job.run_dir, hydra_cfg.job.name, f"resume={job.resume}")
        return built
    return pipeline.build(cfg, job.run_dir, name=hydra_cfg.job.override_dirname or None,
                          group=sweep_group(hydra_cfg) if job.multirun else None, job_type=pipeline.collector_name(cfg))



def keep_log_in(run_dir: Path, job_name: str, key: str) -> None:
    """A resumed run logs to stdout until it is known to start (its folder stays untouched
    by a resume that fails), then to its folder's job log too, as Hydra's default does. A
    folder the resume may not write into (read-only) is a ConfigError naming ``key`` (its
    ``resume=``): nothing written."""
    try:
        handler = logging.FileHandler(run_dir / f"{job_name}.log")
    except PermissionError as error:
        raise ConfigError(f"{key}: the run's folder cannot be written ({error.strerror}: {error.filename}): make "
                          "it writable to resume the run") from None
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)



def run_train(args: list[str]) -> int:
    """``rlcollect train``: Hydra composes the config and runs :func:`train`. A folder that
    holds a run already (``RunFolders``) and an override Hydra cannot apply (an unknown key,
    a value of the wrong type, a missing option, bad syntax) are told in one line, exit 2,
    the latter unless HYDRA_FULL_ERROR=1 asks for Hydra's own report. Ctrl-C before the job
    takes it over (Hydra composing, or writing the job's folder) is one line, exit 130, and
    what Hydra wrote of a single run's folder is removed."""
    os.environ[COMMAND_PID] = str(os.getpid())  # a job in a launcher's process knows it is not in this one
    STOPPED.clear()  # a signal an earlier command of this process took (cli.main called again) is not this one's
    if any(arg.startswith("resume=") for arg in args):  # a run or a sweep continued in its folder: no new sweep
        args = [arg for arg in args if arg not in ("--multirun", "-m")]
        try:
            one_value_each(args)
        except ConfigError as error:
            print(f"rlcollect train: invalid configuration: {error}", file=sys.stderr)
            return 2
    sweep = resumed_sweep(args)
    if sweep is not None:  # resume=<sweep folder>: its members, as the sweep trained them
        from rlcollect.commands.sweep_resume import resume_sweep

        try:
            return resume_sweep(sweep, [arg for arg in args if not arg.startswith("resume=")], train)
        except KeyboardInterrupt as error:  # before its members took Ctrl-C over: nothing of theirs changed
            print("rlcollect train: interrupted", file=sys.stderr)
            return interrupt_exit_code(error)
        finally:
            release_run_folder(sweep)  # held by resume_sweep while it resumed
    try:
        one_mode(args)
        sys.argv = ["rlcollect train", *in_resumed_run_folder(args)]
    except ConfigError as error:
        print(f"rlcollect train: invalid configuration: {error}", file=sys.stderr)
        return 2
    SWEEP.jobs, SWEEP.not_finished = 0, []
    STARTING.job, STARTING.sweep_dir, STARTING.sweep_made, STARTING.sweep_file_new = None, None, None, False
    try:
        return compose_and_train()
    except RefusedBeforeStart as refusal:
        print(f"rlcollect train: invalid configuration: {refusal.error}", file=sys.stderr)
        leave_unswept()
        return 2
    except KeyboardInterrupt as error:
        print(interrupted_outside_a_job(), file=sys.stderr)
        return interrupt_exit_code(error)
    finally:
        if STARTING.sweep_dir is not None:  # held by RunFolders while the sweep ran
            release_run_folder(STARTING.sweep_dir)



def resumed_sweep(args: list[str]) -> Path | None:
    """The folder of ``resume=<sweep folder>`` (``run_files.sweep_folder``; with or without
    ``--multirun``), else None."""
    resume = [arg for arg in args if arg.startswith("resume=")]
    if not resume:
        return None
    folder = Path(unquoted(resume[-1].split("=", 1)[1]))
    return folder if folder.parts and sweep_folder(folder) else None


def interrupted_outside_a_job() -> str:
    """The line for a Ctrl-C that landed in Hydra's own work, not in a job's: while composing
    the config or writing a single run's folder (what Hydra wrote is removed: ``leave_unstarted``),
    the start's; between the jobs of a sweep, one that names the sweep's resume; after a
    run, a plain one (every job folder keeps what its job wrote)."""
    if STARTING.sweep_dir is None and (STARTING.job is None or leave_unstarted(STARTING.job)):
        return INTERRUPTED_WHILE_STARTING
    if STARTING.sweep_dir is not None and job_folders(STARTING.sweep_dir):  # jobs of it started: the sweep resumes
        return f"rlcollect train: interrupted; {continue_sweep(STARTING.sweep_dir)}"
    return "rlcollect train: interrupted"



def compose_and_train() -> int:
    """:func:`train` through Hydra, with Hydra's errors as one line (``run_train``)."""
    previous = os.environ.get("HYDRA_FULL_ERROR")
    FULL_ERROR["asked"] = previous == "1"
    # decorated here, not where train is defined: hydra.main sets Hydra's version base for the whole
    # process, and a module that only imports this one (hydra/launcher=batched in another Hydra app)
    # must leave that app's own base, and so its jobs' working dirs, as they were
    app = hydra.main(version_base=HYDRA_VERSION_BASE, config_path="../conf", config_name="train")(train)
    if previous == "1":
        app()
        return sweep_end()
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises instead of printing its multi-line report
    try:
        app()
    except (ConfigCompositionException, OverrideParseException) as error:
        print(f"rlcollect train: {override_error_line(error)}", file=sys.stderr)
        leave_unswept()  # a sweep's job that does not compose: found after Hydra wrote the sweep's multirun.yaml
        return 2
    except InstantiationException as error:  # the sweeper or launcher refused its own options
        refusal = plugin_option_refused(error)
        if refusal is None:
            raise
        print(f"rlcollect train: invalid configuration: {refusal}", file=sys.stderr)
        leave_unswept()
        return 2
    finally:
        if previous is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
    return sweep_end()


def plugin_option_refused(error: InstantiationException) -> str | None:
    """The line for a sweeper or launcher (or a part of one, such as the tuning sweeper's
    sampler) that Hydra could not make from the user's options: its own ConfigError, or
    the TypeError of an option the part does not take (or the ValueError of a value it
    does not take: a sampler's seed below 0), named by its key; None for any
    other failure (ours, reported as it is)."""
    if isinstance(error.__cause__, ConfigError):
        return str(error.__cause__)
    key = next((line.split(":", 1)[1].strip() for line in str(error).splitlines() if line.startswith("full_key:")), "")
    if isinstance(error.__cause__, (TypeError, ValueError)) and key.startswith(("hydra.sweeper", "hydra.launcher")):
        return f"{key}: {str(error.__cause__).splitlines()[0]}"
    return None


def sweep_end() -> int:
    """The command's exit status once Hydra has returned: 130 / 143 when a signal stopped
    the jobs that a launcher ran in processes of its own (``jobs.defer_signals``: each
    checkpointed, and the sweep's resume is named), else 1 when a job failed or was refused
    (each listed), else 0."""
    code = report_sweep()
    stopped = None if STARTING.sweep_dir is None else stopped_sweep(STARTING.sweep_dir)
    return code if stopped is None else stopped
