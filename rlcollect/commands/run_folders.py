"""A folder that holds a run is never trained into again: the Hydra callback ``RunFolders``
(conf/train.yaml) refuses it before Hydra writes anything, so a refused command leaves every
file as it was; and no two processes train one run at once (``hold_run_folder``)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rlcollect.commands.jobs import MADE_FOLDERS, Job, folder_label, hydra_files, resume_command
from rlcollect.errors import ConfigError
from rlcollect.run_files import (
    CONFIG_FILE,
    HYDRA_DIR,
    SWEEP_FILE,
    job_folders,
    owning_run,
    record_below,
    run_files,
    sweep_folder,
    sweep_runs,
)


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
    sweep_made: Path | None = None  # the outermost folder of sweep_dir that this command makes (None: all there)
    sweep_file_new: bool = False  # sweep_dir held no multirun.yaml: what Hydra writes there is this command's


STARTING = Starting()


class RunFolders(Callback):
    """A Hydra callback (conf/train.yaml): a run is never trained into a folder that holds one
    (any of ``logging.runs.RUN_FILES``), nor a sweep into a folder that holds an earlier
    sweep's runs. Checked before Hydra writes anything (a job's .hydra/ and job log are
    written before the task function runs), so a refused command leaves every file as it
    was; an absent or empty folder is fine, and ``resume=<run>`` continues its run in place."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        resume = config.get("resume")
        if resume is not None:  # continues its run in its own folder (in_resumed_run_folder), which Hydra makes
            if not resume:
                raise RefusedBeforeStart(ConfigError("resume=: name the run folder to continue (resume=<folder>)"))
            if not Path(resume).exists():
                raise RefusedBeforeStart(ConfigError(f"resume={resume}: no such folder"))
            # held before it is read: a run another process trains or starts in it now is that process's
            held_while(Path(resume), f"resume={resume}", "the run", self.check_resumed, resume)
            return
        folder = Path(config.hydra.run.dir)
        made = next((path for path in reversed([folder, *folder.parents]) if not path.exists()), None)
        claim_folder(folder, f"hydra.run.dir={folder}", "the run", self.check_new)
        if made is not None:  # what a run refused or stopped as it starts may remove again (remove_if_empty)
            MADE_FOLDERS[folder.resolve()] = made.resolve()
        STARTING.job = Job(folder, False, list(config.hydra.overrides.task), hydra_files(config.hydra, folder))

    @staticmethod
    def check_resumed(resume: str) -> None:
        """RefusedBeforeStart when ``resume`` is not a run folder to continue."""
        if not (Path(resume) / CONFIG_FILE).is_file():
            if run_files(resume) == [HYDRA_DIR]:  # killed before the run wrote anything of its own
                raise RefusedBeforeStart(ConfigError(
                    f"resume={resume}: the run never started (the folder holds Hydra's records alone: "
                    f"{HYDRA_DIR}/, no {CONFIG_FILE}): nothing to continue; train it anew in another folder, or "
                    f"remove this one (rm -r {resume}) and train into it"))
            raise RefusedBeforeStart(ConfigError(f"resume={resume}: not a run folder (no {CONFIG_FILE})"))
        owner = owning_run(Path(resume) / CONFIG_FILE)
        if owner is not None and owner[0] != Path(resume).absolute():  # a run's .hydra/ (Hydra's config.yaml)
            run, record = owner
            raise RefusedBeforeStart(ConfigError(
                f"resume={resume} is inside the run in {folder_label(run)} (its {record}): continue that run "
                f"with `{resume_command(folder_label(run))}`"))

    @staticmethod
    def check_sweep(folder: Path) -> None:
        """RefusedBeforeStart when a new sweep may not go into ``folder``."""
        refuse_a_run_in(folder, "hydra.sweep.dir", "sweep into")
        jobs = sweep_runs(folder)
        if jobs:
            raise RefusedBeforeStart(ConfigError(
                f"hydra.sweep.dir={folder} holds the runs of an earlier sweep ({len(jobs)} run folder"
                f"{'s' if len(jobs) > 1 else ''}): continue it with `{resume_command(folder)}` (one run: "
                f"resume={folder}/<its folder>), or sweep into another folder (hydra.sweep.dir=<new folder>)"))
        refuse_records_below(folder, "hydra.sweep.dir", "sweep into")

    @staticmethod
    def check_new(folder: Path) -> None:
        """RefusedBeforeStart when a new run may not be trained into ``folder``."""
        refuse_a_run_in(folder, "hydra.run.dir", "train a new run in")
        if sweep_folder(folder):
            raise RefusedBeforeStart(ConfigError(
                f"hydra.run.dir={folder} holds a sweep (its {SWEEP_FILE}): continue it with "
                f"`{resume_command(folder)}`, or train a new run in another folder (hydra.run.dir=<new folder>)"))
        refuse_records_below(folder, "hydra.run.dir", "train a new run in")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        check_joblib_jobs(config.hydra.launcher)
        folder = Path(config.hydra.sweep.dir)
        made = next((path for path in reversed([folder, *folder.parents]) if not path.exists()), None)
        file_new = not (folder / SWEEP_FILE).exists()
        # held while the sweep runs: a resume of it meanwhile would start the jobs it is about to start
        claim_folder(folder, f"hydra.sweep.dir={folder}", "the sweep", self.check_sweep)
        # what this command made, for leave_unswept: set once the folder is its own (one refused because another
        # command holds the folder removes nothing of it, that command's multirun.yaml included)
        STARTING.sweep_dir, STARTING.sweep_made, STARTING.sweep_file_new = folder, made, file_new


def check_joblib_jobs(launcher: DictConfig) -> None:
    """Hydra's joblib launcher (hydra/launcher=joblib) takes ``n_jobs=0`` and fails with
    joblib's traceback once the sweep starts: a RefusedBeforeStart naming the key instead."""
    if not str(launcher.get("_target_", "")).endswith(".JoblibLauncher"):
        return
    n_jobs = launcher.get("n_jobs")
    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0:
        raise RefusedBeforeStart(ConfigError(f"hydra.launcher.n_jobs={n_jobs}: the jobs joblib runs at a time: a "
                                             "positive int, or -1 for one per CPU"))


def leave_unswept() -> None:
    """A sweep refused before any job started (a job's override, a launcher's refusal):
    what Hydra wrote of it (its multirun.yaml, in the folders this command made) removed,
    so that the folder does not then read as a sweep to resume. Nothing is removed where a
    job folder, or anything else, is there."""
    folder = STARTING.sweep_dir
    if folder is None or not STARTING.sweep_file_new or not folder.is_dir():
        return
    if job_folders(folder):
        return  # a job started after all
    (folder / SWEEP_FILE).unlink(missing_ok=True)
    made = STARTING.sweep_made
    for path in [folder, *folder.parents] if made is not None else []:  # the folders it made, where empty now
        if any(path.iterdir()):
            break
        path.rmdir()
        if path == made:
            break


def claim_folder(folder: Path, key: str, what: str, check) -> None:
    """``check(folder)``, then ``folder`` made and held for this command (``hold_run_folder``,
    named by ``key``, holding ``what``) before anything is written into it; a folder that is
    there is held before it is read (``held_while``). Of two commands that start into one
    folder together, one goes on and the other is refused (RefusedBeforeStart) with nothing
    made, written or removed of what the first holds."""
    if folder.is_dir():
        held_while(folder, key, what, check, folder)
    else:
        check(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        hold_run_folder(folder, key, what)
    except ConfigError as error:  # the other holds it (and whatever of it this one made): nothing removed
        raise RefusedBeforeStart(error) from None


def held_while(folder: Path, key: str, what: str, check, *args) -> None:
    """``check(*args)`` with ``folder`` held (``hold_run_folder``, named by ``key``, holding
    ``what``): a folder another process holds is refused before anything of it is read, and
    one that ``check`` refuses is let go again."""
    held_before = str(folder.resolve()) in _HELD
    try:
        hold_run_folder(folder, key, what)
    except ConfigError as error:
        raise RefusedBeforeStart(error) from None
    try:
        check(*args)
    except BaseException:
        if not held_before:
            release_run_folder(folder)
        raise


def refuse_a_run_in(folder: Path, key: str, what: str) -> None:
    """RefusedBeforeStart when ``folder`` (the value of ``key``) holds a run's files, lies
    among another run's records (its videos/, wandb/, .hydra/ ...), or inside another run's
    or sweep's folder; ``what``: what the command does there ("train a new run in", "sweep
    into")."""
    dangling = next((path for path in (folder, *folder.parents) if path.is_symlink() and not path.exists()), None)
    if dangling is not None:  # the folder would be made where the link points: nowhere
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder}: {dangling} is a symbolic link to {os.readlink(dangling)}, which does not "
            f"exist: {what} a folder ({key}=<new folder>)"))
    existing = next(path for path in (folder.absolute(), *folder.absolute().parents) if path.exists())
    if not existing.is_dir():
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder}: {folder_label(existing)} is a file, not a folder: {what} a folder ({key}=<new folder>)"))
    owner = owning_run(folder / CONFIG_FILE)
    if owner is not None and owner[0] != folder.absolute():  # among a run's records (its .hydra/ holds a config.yaml)
        run, record = owner
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder} is inside the run in {folder_label(run)} (its {record}): {what} another folder "
            f"({key}=<new folder>)"))
    held = run_files(folder)
    if held == [HYDRA_DIR]:  # Hydra's records of a run killed before it wrote anything: no run to resume
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder} holds Hydra's records of a run that never started ({HYDRA_DIR}/, no {CONFIG_FILE}): "
            f"remove the folder (rm -r {folder}) to {what} it, or {what} another folder ({key}=<new folder>)"))
    if held:
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder} holds a run already ({', '.join(held)}): continue it with `{resume_command(folder)}`, "
            f"or {what} another folder ({key}=<new folder>)"))
    outer = next((parent for parent in folder.absolute().parents if run_files(parent) or sweep_folder(parent)), None)
    if outer is not None:  # its runs and sweeps would count this one as theirs (compare, resume=<sweep>)
        kind = "sweep" if sweep_folder(outer) else "run"
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder} is inside the {kind} in {folder_label(outer)}: {what} another folder "
            f"({key}=<new folder>)"))


def refuse_records_below(folder: Path, key: str, what: str) -> None:
    """RefusedBeforeStart when a folder below ``folder`` holds a run or a sweep
    (``run_files.record_below``): this run's files would sit above theirs, and compare or
    resume of ``folder`` would read them as one."""
    inner = record_below(folder)
    if inner is not None:
        kind = "sweep" if sweep_folder(inner) else "run"
        raise RefusedBeforeStart(ConfigError(
            f"{key}={folder} holds the {kind} in {folder_label(inner)}: {what} a folder of its own "
            f"({key}=<new folder>)"))


_HELD: dict[str, int] = {}  # the run folders this process trains: resolved path -> the locked descriptor
# how long a command waits for a folder another holds before it says so: a command that only checks the folder
# (to refuse it, or before it trains there) holds it for milliseconds, one that trains there for the whole run
LOCK_WAIT_SECONDS = 3.0


def _not_held_in_a_forked_child() -> None:
    """A forked process (a collector's worker, a batched sweep's share) closes its copies of
    the locked descriptors: the lock stays its parent's, and ends with it, not with the last
    worker to exit."""
    for handle in _HELD.values():
        os.close(handle)
    _HELD.clear()


os.register_at_fork(after_in_child=_not_held_in_a_forked_child)


def hold_run_folder(run_dir: Path, key: str, what: str = "the run") -> None:
    """Lock ``run_dir`` (named by ``key``, e.g. ``resume=<run>``; ``what`` it holds: "the
    run", "the sweep") until ``release_run_folder`` or the end of this process (its forked
    children do not hold it): an exclusive ``flock`` on the folder itself, nothing written
    into it. A second process that would train the same run (a resume while the run trains,
    or while another resume of it does) is refused with a ConfigError, before it reads or
    changes anything, once it has waited ``LOCK_WAIT_SECONDS`` for the folder (another command
    that only checks it lets it go by then). On a filesystem without locks the folder stays
    unlocked."""
    import fcntl

    name = str(run_dir.resolve())
    if name in _HELD or not run_dir.is_dir():
        return
    handle = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:  # another command checking the folder lets it go in milliseconds
                time.sleep(0.02)
                continue
            os.close(handle)
            raise ConfigError(f"{key}: another process is training or resuming {what} in {run_dir} now; wait for it "
                              "to end (or stop it) first") from None
        except OSError:  # no locks here (some network filesystems)
            os.close(handle)
            return
    _HELD[name] = handle


def release_run_folder(run_dir: Path) -> None:
    """Unlock ``run_dir`` (``hold_run_folder``) once its job is over: a process that trains
    the jobs of a sweep one after the other holds only the one it trains."""
    handle = _HELD.pop(str(run_dir.resolve()), None)
    if handle is not None:
        os.close(handle)
