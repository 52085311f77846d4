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
callback, refuses it before Hydra writes anything): `resume=<folder>` continues that run.

In a sweep no job stops the others: each failed or refused job is listed at the end with
its overrides (``SweepReport``, a Hydra callback), and the command exits 1.
"""
from __future__ import annotations

import contextlib
import difflib
import errno
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import (
    ConfigCompositionException,
    InstantiationException,
    MissingConfigException,
    OverrideParseException,
)
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlcollect.config import check_ranges, logs_to_wandb, register_configs
from rlcollect.errors import ConfigError, DiskFullError, MissingDependencyError, causes, one_line
from rlcollect.logging.wandb_start import start_wandb
from rlcollect.run_files import ERROR_LOG, SUMMARY_FILE, run_files

register_configs()
FAILED = None  # what a sweep job that failed or was refused returns (Optuna records a failed trial, goes on)
log = logging.getLogger(__name__)


class StopRequest(threading.Event):
    """Set by SIGINT or SIGTERM: the training loop finishes its batch, checkpoints and stops."""

    signal_number = signal.SIGINT


@contextlib.contextmanager
def stop_on_signals():
    """The first SIGINT (Ctrl-C) or SIGTERM asks the loop to stop after its batch; a second
    one stops at once (the default handlers are back)."""
    stop = StopRequest()
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def request(number, frame) -> None:
        stop.signal_number = number
        stop.set()
        for restored, handler in previous.items():
            signal.signal(restored, handler)
        print(f"\nrlcollect train: {signal.Signals(number).name}: stopping after this batch (again to stop now)",
              file=sys.stderr)

    for number in previous:
        signal.signal(number, request)
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@dataclass
class Job:
    """One ``rlcollect train`` job as Hydra started it."""

    run_dir: Path
    multirun: bool
    overrides: list[str]
    hydra_files: list[Path]  # what Hydra wrote into run_dir before the job started
    resume: str | None = None

    @classmethod
    def current(cls, cfg: DictConfig) -> "Job":
        hydra_cfg = HydraConfig.get()
        run_dir = Path(cfg.resume) if cfg.resume else Path(hydra_cfg.runtime.output_dir)
        return cls(run_dir, hydra_cfg.mode.name == "MULTIRUN", list(hydra_cfg.overrides.task),
                   hydra_files(hydra_cfg, run_dir), cfg.resume)

    @property
    def label(self) -> str:
        return ",".join(self.overrides) or "(no overrides)"


def hydra_files(hydra_cfg: DictConfig, run_dir: Path) -> list[Path]:
    """What Hydra writes into a job's folder before the job starts: its job log and .hydra/."""
    files = [run_dir / f"{hydra_cfg.job.name}.log"]
    if hydra_cfg.output_subdir is not None:
        files.append(run_dir / hydra_cfg.output_subdir)
    return files


def train(cfg: DictConfig) -> float | None:
    """One training job: build the pipeline from ``cfg`` and run it in the Hydra run folder.
    Returns the run's ``objective`` (what a tuning sweep optimises); None for a job of a
    sweep that failed or was refused, or a run without that value (a failed trial)."""
    job = Job.current(cfg)
    try:
        built = build_job(cfg, job)
    except ConfigError as error:
        return refused(job, error)
    except KeyboardInterrupt:  # Ctrl-C while torch loads or the envs, workers or logger start: one line
        interrupted_while_starting(job)
    except Exception as error:  # our bug, or one in user code the run calls (an env constructor ...)
        return failed_to_build(job, error)
    from rlcollect import pipeline

    with stop_on_signals() as stop:
        try:
            summary = pipeline.run(built, stop=stop)
        except KeyboardInterrupt:  # a second Ctrl-C: the run stopped at once
            print(interrupted_line(job, built.collector.frames, built.checkpoint_frames), file=sys.stderr)
            raise SystemExit(128 + stop.signal_number) from None
        except Exception as error:  # a worker, env or policy failed: one short block, the traceback in a file
            run_failed(job, error, traceback.format_exc(), built.checkpoint_frames)
            if job.multirun:
                return FAILED
            raise SystemExit(1) from None
    if summary["status"] == "interrupted":
        print(interrupted_line(job, summary["frames"], summary.get("checkpoint_frames")), file=sys.stderr)
        raise SystemExit(128 + stop.signal_number)
    print(finished_lines(job, summary))
    return objective_value(cfg, summary, job.run_dir)


def build_job(cfg: DictConfig, job: Job):
    """The job's pipeline: built from ``cfg``, or, for ``resume=<run>``, that run's resumed;
    nothing written to the job's folder yet (Pipeline.open does, as the run starts)."""
    hydra_cfg = HydraConfig.get()
    if not job.resume:
        check_ranges(cfg)  # a value out of its range is said before torch loads (seconds sooner)
        if logs_to_wandb(cfg):
            start_wandb()  # W&B imported and its service started before torch (rlcollect/logging/wandb_start.py)
    with ctrl_c_held():
        from rlcollect import pipeline  # torch, its first import
    if job.resume:
        built = pipeline.resume(job.resume, overrides=resume_overrides(hydra_cfg.overrides.task, cfg))
        keep_log_in(job.run_dir, hydra_cfg.job.name)
        return built
    return pipeline.build(cfg, job.run_dir, name=hydra_cfg.job.override_dirname or None,
                          group=sweep_group(hydra_cfg) if job.multirun else None, job_type=pipeline.collector_name(cfg))


@contextlib.contextmanager
def ctrl_c_held():
    """Ctrl-C (Python's own handler) held while the block runs, then raised as KeyboardInterrupt:
    importing torch runs Python code from its C++ code, where a KeyboardInterrupt aborts the
    process (std::terminate) or marks it to die by SIGINT at its exit whatever it then does."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    received = []
    signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if received:
        raise KeyboardInterrupt


INTERRUPTED_WHILE_STARTING = "rlcollect train: interrupted while starting, before the first batch"


def interrupted_while_starting(*jobs: Job) -> None:
    """Ctrl-C before the first batch: each job's folder left as ``leave_unstarted`` says,
    one line, exit 130 (no traceback)."""
    for job in jobs:
        leave_unstarted(job)
    print(INTERRUPTED_WHILE_STARTING, file=sys.stderr)
    raise SystemExit(128 + signal.SIGINT) from None


def leave_unstarted(job: Job) -> bool:
    """The folder of a job stopped before its first batch: a resumed run's as it was; a sweep
    job's with summary.json ``{"status": "interrupted", "frames": 0}`` (the sweep's record of
    it); a single run's, which then holds only what Hydra wrote, removed with it (as a
    refused run's is). True when the job's folder was left so; False when it holds a run's
    files besides Hydra's (Ctrl-C landed after the job): then it is not touched."""
    if job.resume or set(run_files(job.run_dir)) - {path.name for path in job.hydra_files}:
        return False
    if job.multirun:
        (job.run_dir / SUMMARY_FILE).write_text(json.dumps({"status": "interrupted", "frames": 0}))
        return True
    remove_hydra_files(job)
    remove_if_empty(job.run_dir)
    return True


def run_failed(job: Job, error: BaseException, trace: str, checkpoint_frames: int | None = None) -> None:
    """A run that failed while training: one short block, the traceback in its error.log;
    a full disk (``checkpoint_frames``: the run's last complete checkpoint) is one line."""
    full = next((link for link in causes(error) if isinstance(link, DiskFullError)), None)
    if full is not None:
        print(disk_full_line(job, full, checkpoint_frames), file=sys.stderr)
        return
    log_file = job.run_dir / ERROR_LOG
    log_file.write_text(trace)
    print(f"rlcollect train: the run failed: {one_line(error)}\n"
          f"  full traceback: {log_file}\n  run status: failed (summary.json)", file=sys.stderr)


def disk_full_line(job: Job, error: DiskFullError, checkpoint_frames: int | None) -> str:
    """What a run stopped by a full disk says (its traceback would only repeat it, and the disk
    may not take an error.log): the disk, the folder, the free bytes, and how to go on."""
    remedy = "raise the file size limit" if error.errno == errno.EFBIG else "free some space"
    if checkpoint_frames is None:
        then = f"it has no complete checkpoint to continue from: {remedy} and train it again in a new folder"
    else:
        then = (f"its last complete checkpoint (frame {checkpoint_frames}) stays: {remedy}, then continue with "
                f"`rlcollect train resume={job.resume or job_dir_label(job)}`")
    return f"rlcollect train: the run failed: {error}; {then}"


def finished_lines(job: Job, summary: dict) -> str:
    """What a finished or solved run says: its folder, frames, seconds, evaluation, solve."""
    threshold = summary.get("solved_return")
    target = (f"eval return >= {threshold} on {summary.get('env_id')}" if threshold is not None
              else f"no threshold for {summary.get('env_id')}")
    return (f"run folder: {job.run_dir}\n"
            f"frames: {summary['frames']}  seconds: {summary['seconds']:.1f}  "
            f"final eval return: {summary['final_eval_return']}  "
            f"frames to solve: {summary['frames_to_solve']} ({target})  seconds to solve: "
            f"{'-' if summary['seconds_to_solve'] is None else format(summary['seconds_to_solve'], '.1f')}")


def train_members(members: list[tuple[DictConfig, Job, dict]], share: int = 0) -> list[float | None]:
    """The jobs of one group of a batched sweep (hydra/launcher=batched: ``(cfg, job, W&B
    names)`` each, differing in seed and PPO's per-member settings only) trained as the members of one batched model
    (rlcollect.sweeps). Each member ends as a solo sweep job would: refused, failed to
    build, failed, finished or solved, its folder and its line the same; returns each
    job's ``objective`` (None for one that did not finish). ``share``: which of the
    group's shares this is, when it trains in several processes (its progress bar's line)."""
    values: list[float | None] = [FAILED] * len(members)
    live = []
    for index, (cfg, job, _) in enumerate(members):
        try:
            check_ranges(cfg)
        except ConfigError as error:
            refused(job, error)
            continue
        live.append(index)
    if not live:
        return values
    from rlcollect.sweeps.run import build_sweep

    jobs = [members[index][1] for index in live]
    try:
        sweep = build_sweep([members[index][0] for index in live], [job.run_dir for job in jobs],
                            [members[index][2] for index in live])
    except ConfigError as error:
        for job in jobs:
            refused(job, error)
        return values
    except KeyboardInterrupt:
        interrupted_while_starting(*jobs)
    except Exception as error:
        for job in jobs:
            failed_to_build(job, error)
        return values
    with stop_on_signals() as stop:
        try:
            sweep.run(stop=stop, bar_position=share)
        except KeyboardInterrupt:  # a second Ctrl-C: every member stopped at once
            for member, job in enumerate(jobs):
                print(interrupted_line(job, sweep.pipelines[member].collector.frames,
                                       sweep.pipelines[member].checkpoint_frames), file=sys.stderr)
            raise SystemExit(128 + stop.signal_number) from None
        except Exception:
            pass  # the shared parts failed: every member's error is in sweep.errors
    interrupted = False
    for member, (index, job) in enumerate(zip(live, jobs)):
        summary = sweep.pipelines[member].progress.summary
        if member in sweep.errors:
            error, trace = sweep.errors[member]
            run_failed(job, error, trace, sweep.pipelines[member].checkpoint_frames)
        elif summary["status"] == "interrupted":
            interrupted = True
            print(interrupted_line(job, summary["frames"], summary.get("checkpoint_frames")), file=sys.stderr)
        else:
            print(finished_lines(job, summary))
            values[index] = objective_value(members[index][0], summary, job.run_dir)
    if interrupted:
        raise SystemExit(128 + stop.signal_number)
    return values


def member_of_batched_sweep(cfg: DictConfig) -> tuple[DictConfig, Job, dict]:
    """A batched sweep's job as Hydra set it up (its folder made, its .hydra/ written):
    ``(cfg, job, W&B names)`` for ``train_members``; what the launcher's task function keeps."""
    job = Job.current(cfg)
    hydra_cfg = HydraConfig.get()
    from rlcollect.pipeline.checks import collector_name

    try:
        job_type = collector_name(cfg)
    except ConfigError:
        job_type = None
    names = {"name": hydra_cfg.job.override_dirname or None, "group": sweep_group(hydra_cfg), "job_type": job_type}
    return cfg, job, names


def objective_value(cfg: DictConfig, summary: dict, run_dir: Path) -> float | None:
    """The run's ``objective``: its final or best eval return, the mean of its eval returns
    over the frames up to total_frames (eval_auc: the area under its eval curve, held at
    its last value after a solved run stopped), or its frames to solve (infinite when it
    was not solved: the worst value to minimise). None where the run has no such value."""
    if cfg.objective == "frames_to_solve":
        return float(summary["frames_to_solve"]) if summary.get("frames_to_solve") is not None else math.inf
    if cfg.objective == "eval_auc":
        from rlcollect.analysis.stats import area_under_curve
        from rlcollect.logging.runs import EVAL_RETURN, load_run_dir

        evaluations = [(row["step"], row[EVAL_RETURN]) for row in load_run_dir(run_dir).history
                       if row.get(EVAL_RETURN) is not None]
        if not evaluations:
            return None
        frames, returns = zip(*evaluations)
        return area_under_curve(list(frames), list(returns), frames[0], max(cfg.total_frames, frames[-1]))
    value = summary.get(cfg.objective)
    return float(value) if value is not None and math.isfinite(value) else None


def interrupted_line(job: Job, frames: int, checkpoint_frames: int | None) -> str:
    """What an interrupted run says: where it stopped, its checkpoint when that is older (a
    second Ctrl-C stopped the one being written), and how to continue."""
    if checkpoint_frames is None:
        return f"rlcollect train: interrupted at frame {frames}, before its first checkpoint"
    behind = f" (its last complete checkpoint is at frame {checkpoint_frames})" if checkpoint_frames != frames else ""
    return (f"rlcollect train: interrupted at frame {frames}{behind}; continue with "
            f"`rlcollect train resume={job.resume or job_dir_label(job)}`")


def job_dir_label(job: Job) -> str:
    """The job's folder as a user types it: relative to the working folder when inside it."""
    cwd = Path.cwd().resolve()
    folder = job.run_dir.resolve()
    return str(folder.relative_to(cwd)) if cwd in folder.parents else str(folder)


def sweep_group(hydra_cfg) -> str:
    """A sweep's W&B group: its folder's name."""
    return hydra_cfg.sweep.dir.rstrip("/").split("/")[-1]


def refused(job: Job, error: ConfigError) -> float:
    """A user's mistake: one line. A single run leaves nothing behind (the folder Hydra made
    for it is removed); a sweep job's folder keeps only its summary.json (status
    ``refused``, the message) and the sweep goes on."""
    what = "missing dependency" if isinstance(error, MissingDependencyError) else "invalid configuration"
    print(f"rlcollect train: {what}: {error}", file=sys.stderr)
    if job.resume:  # the resumed run's folder is as it was
        raise SystemExit(2) from None
    remove_hydra_files(job)
    if not job.multirun:
        remove_if_empty(job.run_dir)
        raise SystemExit(2) from None
    (job.run_dir / SUMMARY_FILE).write_text(json.dumps(
        {"status": "refused", "error": f"{what}: {error}", "overrides": job.overrides}, indent=2))
    return FAILED


def failed_to_build(job: Job, error: Exception) -> float:
    """Not a user's mistake: said as what it is, the traceback kept (in the run folder, or,
    for a resumed run, whose files stay as they were, in a file of its own)."""
    trace = traceback.format_exc()
    if job.resume:
        handle, name = tempfile.mkstemp(prefix="rlcollect-resume-", suffix=".log")
        with os.fdopen(handle, "w") as file:
            file.write(trace)
        log_file = Path(name)
    else:
        log_file = job.run_dir / ERROR_LOG
        log_file.write_text(trace)
        (job.run_dir / SUMMARY_FILE).write_text(json.dumps(
            {"status": "failed", "frames": 0, "error": f"error while building the run: {one_line(error)}"}, indent=2))
    if FULL_ERROR.get("asked"):
        print(trace, file=sys.stderr, end="")
    print(f"rlcollect train: error while building the run: {one_line(error)} (traceback in {log_file})",
          file=sys.stderr)
    if job.multirun:
        return FAILED
    raise SystemExit(1) from None


def remove_hydra_files(job: Job) -> None:
    """What Hydra wrote into a job's folder before the job started (its job log, .hydra/)."""
    for path in job.hydra_files:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it is empty, then each parent left empty (up to the working folder)."""
    folder, stop = folder.resolve(), Path.cwd().resolve()
    while folder != stop and stop in folder.parents and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def keep_log_in(run_dir: Path, job_name: str) -> None:
    """A resumed run logs to stdout until it is known to start (its folder stays untouched
    by a resume that fails), then to its folder's job log too, as Hydra's default does."""
    handler = logging.FileHandler(run_dir / f"{job_name}.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)


def resume_overrides(task_overrides, cfg: DictConfig) -> dict:
    """``{key: value}`` of the config keys given on a ``resume=`` command line (besides
    ``resume`` and Hydra's own), their values as composed."""
    keys = [override.split("=", 1)[0].lstrip("+~") for override in task_overrides]
    return {key: OmegaConf.select(cfg, key) for key in keys if key != "resume" and not key.startswith("hydra.")}


def quoted(value: str) -> str:
    """``value`` as a quoted Hydra override value (a path holding ``=`` or ``,``, as a
    sweep member's folder does, is then one string, not a sweep)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace("\\" + value[0], value[0]).replace("\\\\", "\\")
    return value


def in_resumed_run_folder(args: list[str]) -> list[str]:
    """A ``resume=<run>`` command line runs in that run folder, not a new outputs/<date>/<time>/,
    leaving its .hydra/ as the first part wrote it and logging to its job log only once the
    resume is known to start (``keep_log_in``). The folder is passed quoted, so any folder
    name works (a sweep member's ``multirun/.../algo.lr=0.001,seed=1`` included)."""
    resume = [index for index, arg in enumerate(args) if arg.startswith("resume=")]
    if not resume:
        return args
    folder = unquoted(args[resume[-1]].split("=", 1)[1])
    args = [*args[:resume[-1]], f"resume={quoted(folder)}", *args[resume[-1] + 1:]]
    if any(arg.startswith("hydra.run.dir=") for arg in args):
        return args
    return [*args, f"hydra.run.dir={quoted(folder)}", "hydra.output_subdir=null", "hydra/job_logging=stdout"]


# ---------------------------------------------------------------------------- run folders
class RefusedBeforeStart(BaseException):
    """A ConfigError found by a Hydra callback (``RunFolders``) before any job starts, carried
    out of Hydra as a BaseException (Hydra turns an Exception raised in a callback into a
    warning and goes on); ``run_train`` says it in one line, exit 2."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class Starting:
    """What ``RunFolders`` let start, for a Ctrl-C that lands before a job takes it over
    (``run_train``): the single run whose folder it found free, before Hydra wrote into it,
    or the sweep (its folder)."""

    job: Job | None = None
    sweep_dir: Path | None = None


STARTING = Starting()


class RunFolders(Callback):
    """A Hydra callback (conf/train.yaml): a run is never trained into a folder that holds one
    (any of ``logging.runs.RUN_FILES``), nor a sweep into a folder that holds an earlier
    sweep's runs. Checked before Hydra writes anything (a job's .hydra/ and job log are
    written before the task function runs), so a refused command leaves every file as it
    was; an absent or empty folder is fine, and ``resume=<run>`` continues its run in place."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if config.get("resume"):  # continues its run in its own folder (in_resumed_run_folder)
            return
        folder = Path(config.hydra.run.dir)
        refuse_a_run_in(folder, "hydra.run.dir", "train a new run in")
        STARTING.job = Job(folder, False, list(config.hydra.overrides.task), hydra_files(config.hydra, folder))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        folder = Path(config.hydra.sweep.dir)
        refuse_a_run_in(folder, "hydra.sweep.dir", "sweep into")
        jobs = sorted(job for job in folder.iterdir() if job.is_dir() and run_files(job)) if folder.is_dir() else []
        if jobs:
            raise RefusedBeforeStart(ConfigError(
                f"hydra.sweep.dir={folder} holds the runs of an earlier sweep ({len(jobs)} run folder"
                f"{'s' if len(jobs) > 1 else ''}): continue one with `rlcollect train resume={folder}/<its folder>`, "
                f"or sweep into another folder (hydra.sweep.dir=<new folder>)"))
        STARTING.sweep_dir = folder


def refuse_a_run_in(folder: Path, key: str, what: str) -> None:
    """RefusedBeforeStart when ``folder`` (the value of ``key``) holds a run's files; ``what``:
    what the command does there ("train a new run in", "sweep into")."""
    held = run_files(folder)
    if held:
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder} holds a run already ({', '.join(held)}): continue it with `rlcollect train "
            f"resume={folder}`, or {what} another folder ({key}=<new folder>)"))


# ---------------------------------------------------------------------------- sweeps
@dataclass
class SweepOutcome:
    """The jobs of the last sweep that did not finish: ``(status, overrides, message, folder)``."""

    jobs: int = 0
    not_finished: list[tuple[str, str, str, Path]] = field(default_factory=list)


SWEEP = SweepOutcome()


class SweepReport(Callback):
    """A Hydra callback (conf/train.yaml): at the end of a sweep, whatever its launcher, it
    reads every job folder's summary.json and keeps those that failed or were refused, with
    their overrides, for ``run_train`` to list."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        SWEEP.jobs, SWEEP.not_finished = 0, []
        for summary_file in sorted(sweep_dir.glob(f"*/{SUMMARY_FILE}"), key=job_number):
            SWEEP.jobs += 1
            try:
                summary = json.loads(summary_file.read_text())
            except (OSError, ValueError):
                continue
            if summary.get("status") in ("failed", "refused"):
                overrides = summary.get("overrides") or read_overrides(summary_file.parent)
                SWEEP.not_finished.append((summary["status"], ",".join(overrides) or "(no overrides)",
                                           summary.get("error") or "", summary_file.parent))


def job_number(summary_file: Path) -> tuple[int, str]:
    """Sweep job folders in launch order (``<num>_<overrides>``)."""
    number = summary_file.parent.name.split("_", 1)[0]
    return (int(number) if number.isdigit() else 1 << 30, summary_file.parent.name)


def read_overrides(job_dir: Path) -> list[str]:
    import yaml

    path = job_dir / ".hydra" / "overrides.yaml"
    try:
        return [str(item) for item in yaml.safe_load(path.read_text()) or []]
    except (OSError, yaml.YAMLError):
        return []


def sweep_report() -> list[str]:
    """The lines listing the last sweep's failed and refused jobs (none when all finished)."""
    if not SWEEP.not_finished:
        return []
    sweep_dir = SWEEP.not_finished[0][3].parent
    lines = [f"rlcollect train: {len(SWEEP.not_finished)} of {SWEEP.jobs} sweep jobs did not finish "
             f"(job folders in {sweep_dir}):"]
    for status, overrides, message, folder in SWEEP.not_finished:
        lines.append(f"  {status:<8} job {folder.name.split('_', 1)[0]} ({overrides}): {message}")
    return lines


# ---------------------------------------------------------------------------- the command
FULL_ERROR: dict[str, bool] = {}  # whether the user asked for full tracebacks (HYDRA_FULL_ERROR=1)


def run_train(args: list[str]) -> int:
    """``rlcollect train``: Hydra composes the config and runs :func:`train`. A folder that
    holds a run already (``RunFolders``) and an override Hydra cannot apply (an unknown key,
    a value of the wrong type, a missing option, bad syntax) are told in one line, exit 2,
    the latter unless HYDRA_FULL_ERROR=1 asks for Hydra's own report. Ctrl-C before the job
    takes it over (Hydra composing, or writing the job's folder) is one line, exit 130, and
    what Hydra wrote of a single run's folder is removed."""
    sys.argv = ["rlcollect train", *in_resumed_run_folder(args)]
    SWEEP.jobs, SWEEP.not_finished = 0, []
    STARTING.job, STARTING.sweep_dir = None, None
    try:
        return compose_and_train()
    except RefusedBeforeStart as refusal:
        print(f"rlcollect train: invalid configuration: {refusal.error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted_outside_a_job(), file=sys.stderr)
        return 128 + signal.SIGINT


def interrupted_outside_a_job() -> str:
    """The line for a Ctrl-C that landed in Hydra's own work, not in a job's: while composing
    the config or writing a single run's folder (what Hydra wrote is removed: ``leave_unstarted``),
    the start's; between the jobs of a sweep, or after a run, a plain one (every job folder
    keeps what its job wrote)."""
    if STARTING.sweep_dir is None and (STARTING.job is None or leave_unstarted(STARTING.job)):
        return INTERRUPTED_WHILE_STARTING
    return "rlcollect train: interrupted"


def compose_and_train() -> int:
    """:func:`train` through Hydra, with Hydra's errors as one line (``run_train``)."""
    previous = os.environ.get("HYDRA_FULL_ERROR")
    FULL_ERROR["asked"] = previous == "1"
    # decorated here, not where train is defined: hydra.main sets Hydra's version base for the whole
    # process, and a module that only imports this one (hydra/launcher=batched in another Hydra app)
    # must leave that app's own base, and so its jobs' working dirs, as they were
    app = hydra.main(version_base="1.3", config_path="../conf", config_name="train")(train)
    if previous == "1":
        app()
        return report_sweep()
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises instead of printing its multi-line report
    try:
        app()
    except (ConfigCompositionException, OverrideParseException) as error:
        print(f"rlcollect train: {override_error_line(error)}", file=sys.stderr)
        return 2
    except InstantiationException as error:  # the sweeper or launcher refused its own options
        if not isinstance(error.__cause__, ConfigError):
            raise
        print(f"rlcollect train: invalid configuration: {error.__cause__}", file=sys.stderr)
        return 2
    finally:
        if previous is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
    return report_sweep()


def report_sweep() -> int:
    lines = sweep_report()
    for line in lines:
        print(line, file=sys.stderr)
    return 1 if lines else 0


def override_error_line(error: Exception) -> str:
    """One line for an override Hydra could not apply, naming it, with the options or the
    closest keys where there are some."""
    if isinstance(error, MissingConfigException):
        first = str(error).splitlines()[0].split(": ", 1)[-1]  # "In 'train': Could not find 'collector/x'"
        options = f" (options: {', '.join(error.options)})" if error.options else ""
        extra = plugin_extra(error.missing_cfg_file)
        if extra is not None:  # a launcher or sweeper whose Hydra plugin is not installed
            group, _, option = error.missing_cfg_file.rpartition("/")
            return (f"missing dependency: {group}={option} is a Hydra plugin of the {extra} extra, not installed: "
                    f"pip install 'rlcollect[{extra}]'{options.replace('options', 'installed options', 1)}")
        return f"invalid override: {first}{options}"
    if isinstance(error, OverrideParseException):
        return f"invalid override {error.override!r}: {str(error).splitlines()[0]}"
    cause = error.__cause__
    full_key = getattr(cause, "full_key", None)
    if cause is None or full_key is None:
        return f"invalid override: {' '.join(str(error).split())}"
    line = f"invalid override {full_key}: {str(cause).splitlines()[0]}"
    if "not in" not in line:
        return line
    similar = similar_keys(getattr(cause, "parent_node", None), full_key)  # an unknown key: what it may have meant
    hint = f"did you mean {' or '.join(similar)}?" if similar else "`rlcollect train --cfg job` lists the keys"
    return f"{line} ({hint})"


# the Hydra plugins that extras of pyproject.toml install: the configs they bring (a path prefix) -> the extra
PLUGIN_EXTRAS = {"hydra/launcher/ray": "raylauncher", "hydra/launcher/joblib": "sweep",
                 "hydra/launcher/submitit_": "slurm", "hydra/sweeper/optuna": "tune", "hydra/sweeper/sampler/": "tune"}


def plugin_extra(missing: str | None) -> str | None:
    """The extra whose Hydra plugin brings the config ``missing`` (``hydra/launcher/ray``:
    raylauncher; hydra/sweeper=tune_ppo builds on the Optuna sweeper's), else None."""
    return next((extra for prefix, extra in PLUGIN_EXTRAS.items() if missing and missing.startswith(prefix)), None)


def similar_keys(node, full_key: str) -> list[str]:
    """Keys of the config ``node`` belongs to that ``full_key`` may have meant: the same name
    elsewhere in the config, else close spellings beside it."""
    if not isinstance(node, DictConfig):
        return []
    root = node._get_root() if hasattr(node, "_get_root") else node  # omegaconf 2.3 gives no public accessor
    paths = []

    def walk(config: dict, prefix: str) -> None:
        for key, value in config.items():
            paths.append(f"{prefix}{key}")
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")

    walk({key: value for key, value in OmegaConf.to_container(root, resolve=False).items() if key != "hydra"}, "")
    parent, _, name = full_key.rpartition(".")
    same_name = [path for path in paths if path.rpartition(".")[2] == name]
    siblings = {path.rpartition(".")[2]: path for path in paths if path.rpartition(".")[0] == parent}
    return same_name[:2] or [siblings[key] for key in difflib.get_close_matches(name, siblings, n=2, cutoff=0.6)]

