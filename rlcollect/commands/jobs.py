"""How an ``rlcollect train`` job ends, and what it leaves (docs/errors.md): refused (a user's
mistake, one line), failed to build (our bug or user code, the traceback kept), failed while
training, interrupted, finished or solved; the signals that stop a run after its batch; the
objective a tuning sweep reads. Shared by a solo job (commands/train.py) and the members of a
batched sweep (commands/batched.py)."""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rlcollect.commands.terminated import Terminated, interrupt_exit_code, terminate_as_interrupt
from rlcollect.errors import ConfigError, DiskFullError, MissingDependencyError, ResumeNotOpened, causes, one_line
from rlcollect.run_files import (
    ERROR_LOG,
    FAILED,
    INTERRUPTED,
    REFUSED,
    SUMMARY_FILE,
    run_files,
    sweep_of,
    write_record,
)

NO_VALUE = None  # what a sweep job that failed or was refused returns (Optuna records a failed trial, goes on)
UNSTARTED = {"status": INTERRUPTED, "frames": 0}  # the summary.json of a sweep job stopped before its first batch


COMMAND_PID = "RLCOLLECT_COMMAND_PID"  # environment: the pid of the `rlcollect train` command the jobs are of


class StopRequest(threading.Event):
    """Set by SIGINT or SIGTERM: the training loop finishes its batch, checkpoints and stops."""

    signal_number = signal.SIGINT


STOPPED = StopRequest()  # set once a signal stopped a job of this process (a launcher's worker starts no more)


def in_launcher_process() -> bool:
    """Whether this job runs in a process of the sweep launcher's own (joblib's workers, a Ray
    task ...), not in the ``rlcollect train`` command's: such a job that a signal stops
    returns, and the launcher gathers every job's end, where raising SystemExit there would
    have the launcher abort the other jobs, mid-checkpoint."""
    pid = os.environ.get(COMMAND_PID)
    return pid is not None and pid != str(os.getpid())


def defer_signals(launcher: DictConfig) -> None:
    """In the command of a sweep whose ``launcher`` (its config) runs the jobs in processes of
    its own (joblib's workers ...; not Hydra's basic launcher nor the batched one, which run
    them, or stop their shares, themselves): the first SIGINT (Ctrl-C, which the terminal
    sends every process of the command) or SIGTERM is kept in ``STOPPED``, not raised, while
    each job stops after its batch and checkpoints, and the launcher gathers them; a second
    one stops the command at once (the default handlers). A signal sent to this process
    alone does not reach the jobs: the second one then stops them as it always did."""
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    from hydra_plugins.rlcollect_batched.batched_launcher import BatchedLauncher
    from rlcollect.commands.sweep_record import targets

    if targets(launcher, BasicLauncher, BatchedLauncher):
        return

    def request(number, frame) -> None:
        # the default handlers back first: a second signal, even one that lands while this one is taken (inside
        # Event.set, whose lock a second call of this handler would wait on for good), stops the command at once
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        STOPPED.signal_number = number
        STOPPED.set()
        try:
            print(f"\nrlcollect train: {signal.Signals(number).name}: the jobs under way stop after their batch and no "
                  "other starts (again to stop now)", file=sys.stderr)
        except OSError:  # stderr gone: the stop stands, unsaid
            pass

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, request)


@contextlib.contextmanager
def stop_on_signals():
    """The first SIGINT (Ctrl-C) or SIGTERM asks the loop to stop after its batch; a second
    one stops at once (the default handlers are back)."""
    stop = StopRequest()
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def request(number, frame) -> None:
        # the handlers before back first: a second signal, even one that lands while this one is taken (inside
        # Event.set, whose lock a second call of this handler would wait on for good), stops the run at once
        for restored, handler in previous.items():
            signal.signal(restored, handler)
        stop.signal_number = STOPPED.signal_number = number
        stop.set()
        STOPPED.set()
        try:
            print(f"\nrlcollect train: {signal.Signals(number).name}: stopping after this batch (again to stop now)",
                  file=sys.stderr)
        except OSError:  # stderr gone (a pipe whose reader the same Ctrl-C stopped): the stop stands, unsaid
            pass  # raised here, it would land wherever the loop was, mid-update, and fail the run

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


@contextlib.contextmanager
def ctrl_c_held():
    """Ctrl-C (Python's own handler; SIGTERM too, where it is taken as Ctrl-C) held while the
    block runs, then raised as KeyboardInterrupt (``Terminated``):
    importing torch runs Python code from its C++ code, where a KeyboardInterrupt aborts the
    process (std::terminate) or marks it to die by SIGINT at its exit whatever it then does."""
    held = {number: handler for number, handler in ((signal.SIGINT, signal.default_int_handler),
                                                     (signal.SIGTERM, terminate_as_interrupt))
            if signal.getsignal(number) is handler}  # SIGTERM too, where it is taken as Ctrl-C (terminated.py)
    if not held:
        yield
        return
    received = []
    for number in held:
        signal.signal(number, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        for number, handler in held.items():
            signal.signal(number, handler)
    if received:
        raise Terminated if received[0] == signal.SIGTERM else KeyboardInterrupt


INTERRUPTED_WHILE_STARTING = "rlcollect train: interrupted while starting, before the first batch"


def interrupted_while_starting(*jobs: Job, stop_command: bool = True) -> float | None:
    """Ctrl-C (or SIGTERM, ``terminated.py``) before the first batch: each job's folder left
    as ``leave_unstarted`` says, one line, exit 130 (143) (no traceback); ``stop_command`` False (a job in a launcher's
    process, ``in_launcher_process``): ``NO_VALUE`` returned instead."""
    for job in jobs:
        leave_unstarted(job)
    print(INTERRUPTED_WHILE_STARTING, file=sys.stderr)
    STOPPED.set()
    if not stop_command:
        return NO_VALUE
    line = sweep_resume_line(jobs[0].run_dir) if jobs and jobs[0].multirun else None  # it starts them again
    if line is not None:
        print(line, file=sys.stderr)
    raise SystemExit(interrupt_exit_code(sys.exc_info()[1])) from None  # in the handler of the Ctrl-C or SIGTERM


def leave_unstarted(job: Job) -> bool:
    """The folder of a job stopped before its first batch: a resumed run's as it was; a sweep
    job's with summary.json ``UNSTARTED`` (the sweep's record of
    it); a single run's, which then holds only what Hydra wrote, removed with it (as a
    refused run's is). True when the job's folder was left so; False when it holds a run's
    files besides Hydra's (Ctrl-C landed after the job): then it is not touched."""
    if job.resume or set(run_files(job.run_dir)) - {path.name for path in job.hydra_files}:
        return False
    if job.multirun:
        write_record(job.run_dir / SUMMARY_FILE, json.dumps(UNSTARTED))
        return True
    remove_hydra_files(job)
    remove_if_empty(job.run_dir)
    return True


def run_failed(job: Job, error: BaseException, trace: str, checkpoint_frames: int | None = None) -> None:
    """A run that failed while training: one short block, the traceback in its error.log;
    a full disk (``checkpoint_frames``: the run's last complete checkpoint) is one line. A
    resume that could not open its run's files (ResumeNotOpened) leaves them as they were:
    one line, its traceback in a file of its own."""
    full = next((link for link in causes(error) if isinstance(link, DiskFullError)), None)
    if isinstance(error, ResumeNotOpened):
        remedy = "" if full is None else f" ({disk_remedy(full)}, then run the same command again)"
        kept = trace_file(trace) if full is None else None  # a full disk takes no traceback either
        print(f"rlcollect train: {error}; the run's files are as they were{remedy}"
              + ("" if kept is None else f" (traceback in {kept})"), file=sys.stderr)
        return
    if full is not None:
        print(disk_full_line(job, full, checkpoint_frames), file=sys.stderr)
        return
    if not job.run_dir.is_dir():  # nothing of the run is left to write to, nor to resume from
        print(f"rlcollect train: the run failed: its folder {job.run_dir} was removed while it trained "
              f"({one_line(error)})", file=sys.stderr)
        return
    log_file = job.run_dir / ERROR_LOG
    try:
        write_record(log_file, trace)
    except OSError:  # the folder takes no file (it was removed, or the disk is full): the traceback elsewhere
        log_file = trace_file(trace)
    print(f"rlcollect train: the run failed: {one_line(error)}\n"
          f"  full traceback: {log_file or 'not kept (no file could be written)'}\n"
          f"  run status: failed (summary.json)", file=sys.stderr)


def trace_file(trace: str) -> Path | None:
    """A file of its own holding ``trace`` (a traceback that the run's folder does not keep);
    None where none can be written (a full disk, a file size limit)."""
    handle, name = tempfile.mkstemp(prefix="rlcollect-resume-", suffix=".log")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(trace)
    except OSError:
        Path(name).unlink(missing_ok=True)
        return None
    return Path(name)


def disk_remedy(error: DiskFullError) -> str:
    """What lets a write that ``error`` refused go through."""
    return "raise the file size limit" if error.errno == errno.EFBIG else "free some space"


def disk_full_line(job: Job, error: DiskFullError, checkpoint_frames: int | None) -> str:
    """What a run stopped by a full disk says (its traceback would only repeat it, and the disk
    may not take an error.log): the disk, the folder, the free bytes, and how to go on."""
    remedy = disk_remedy(error)
    if checkpoint_frames is None:
        then = f"it has no complete checkpoint to continue from: {remedy} and train it again in a new folder"
    else:
        then = (f"its last complete checkpoint (frame {checkpoint_frames}) stays: {remedy}, then continue with "
                f"`{resume_command(job.resume or job_dir_label(job))}`")
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
            f"`{resume_command(job.resume or job_dir_label(job))}`")


class SweepSignals(Callback):
    """A Hydra callback (conf/train.yaml): a sweep whose launcher runs the jobs in processes
    of its own lets them end their batch and checkpoint on Ctrl-C (``defer_signals``)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        defer_signals(config.hydra.launcher)


def stopped_sweep(sweep_dir: Path) -> int | None:
    """Where a signal stopped the jobs of the sweep in ``sweep_dir`` (``STOPPED``), which the
    launcher has all gathered: the line naming how to continue it said, and the exit status
    (130 / 143); else None."""
    if not STOPPED.is_set():
        return None
    print(f"rlcollect train: {continue_sweep(sweep_dir)}", file=sys.stderr)
    return 128 + STOPPED.signal_number


def sweep_resume_line(run_dir: Path) -> str | None:
    """The line that names the command continuing every member of the sweep that ``run_dir``
    lies in (said after an interrupted member's own line); None where it lies in none."""
    sweep = sweep_of(run_dir)
    return None if sweep is None else f"rlcollect train: or {continue_sweep(sweep)}"


def continue_sweep(sweep_dir: Path) -> str:
    """How a stopped sweep goes on: the words that name its resume (``resume_command``)."""
    return f"continue every member of the sweep as it trained: `{resume_command(folder_label(sweep_dir))}`"


def resume_command(folder: str | Path) -> str:
    """The command that continues the run or sweep in ``folder``, as a shell takes it (a
    folder with spaces quoted)."""
    return f"rlcollect train {shlex.quote(f'resume={folder}')}"


def job_dir_label(job: Job) -> str:
    """The job's folder as a user types it (``folder_label``)."""
    return folder_label(job.run_dir)


def folder_label(path: Path) -> str:
    """``path`` as a user types it: relative to the working folder when inside it."""
    cwd = Path.cwd().resolve()
    folder = path.resolve()
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
    write_record(job.run_dir / SUMMARY_FILE, json.dumps(
        {"status": REFUSED, "error": f"{what}: {error}", "overrides": job.overrides}, indent=2))
    return NO_VALUE


def failed_to_build(job: Job, error: Exception) -> float:
    """Not a user's mistake: said as what it is, the traceback kept (in the run folder, or,
    for a resumed run, whose files stay as they were, in a file of its own)."""
    trace = traceback.format_exc()
    if job.resume:
        log_file = trace_file(trace)
    else:
        log_file = job.run_dir / ERROR_LOG
        write_record(log_file, trace)
        write_record(job.run_dir / SUMMARY_FILE, json.dumps(
            {"status": FAILED, "frames": 0, "error": f"error while building the run: {one_line(error)}"}, indent=2))
    if FULL_ERROR.get("asked"):
        print(trace, file=sys.stderr, end="")
    print(f"rlcollect train: error while building the run: {one_line(error)} "
          f"({'traceback not kept: no file could be written' if log_file is None else f'traceback in {log_file}'})",
          file=sys.stderr)
    if job.multirun:
        return NO_VALUE
    raise SystemExit(1) from None


def remove_hydra_files(job: Job) -> None:
    """What Hydra wrote into a job's folder before the job started (its job log, .hydra/)."""
    for path in job.hydra_files:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


# a single run's folder -> the outermost folder this command made for it (RunFolders, before Hydra wrote there)
MADE_FOLDERS: dict[Path, Path] = {}


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it is empty, then each parent left empty, as far as the folders
    this command made for it go (``MADE_FOLDERS``): a folder that was there (an empty one a
    user made for the run) stays."""
    folder = folder.resolve()
    made = MADE_FOLDERS.get(folder)
    if made is None:
        return
    while folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        if folder == made:
            break
        folder = folder.parent


FULL_ERROR: dict[str, bool] = {}  # whether the user asked for full tracebacks (HYDRA_FULL_ERROR=1)
