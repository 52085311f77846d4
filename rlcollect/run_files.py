"""The names of what a run folder holds, declared once (a leaf: imports nothing of rlcollect).

    config.yaml          the resolved config the run was built from
    metrics.jsonl        one row per batch (and event rows)
    summary.json         how the run ended, with its headline figures
    checkpoint.pt        everything needed to continue (checkpoint.pt.prev: the one before,
                         kept until a new one is complete)
    best.pt              the policy of the best evaluation
    error.log            the traceback of a run that failed
    videos/, replay/     evaluation videos; a memory-mapped replay buffer's files
    .hydra/              what Hydra wrote: the composed config, its own, the overrides
    wandb/               the W&B run (offline by default)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from rlcollect.errors import disk_full

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CHECKPOINT_FILE = "checkpoint.pt"
PREVIOUS_SUFFIX = ".prev"  # checkpoint.pt.prev: the one before, kept until a new one is written and verified
BEST_FILE = "best.pt"  # the policy of a run's best evaluation, with its frames and eval_return
ERROR_LOG = "error.log"
JOB_LOG = "train.log"  # Hydra's job log: <hydra.job.name>.log, the job being rlcollect's train
VIDEO_DIR = "videos"
WANDB_DIR = "wandb"  # where W&B keeps a run given the run folder as its dir
REPLAY_DIR = "replay"  # a LazyMemmapStorage's files, unless buffer.storage.scratch_dir says otherwise
HYDRA_DIR = ".hydra"
OVERRIDES_FILE = Path(HYDRA_DIR) / "overrides.yaml"
HYDRA_FILE = Path(HYDRA_DIR) / "hydra.yaml"
HYDRA_CONFIG_FILE = Path(HYDRA_DIR) / "config.yaml"  # the composed config, written before the run starts
SWEEP_FILE = "multirun.yaml"  # what Hydra writes into a sweep's folder: its config, the launcher's included
PBT_FILE = "pbt.jsonl"  # a population-based training sweep's events, in its folder
# a sweep's own records, in its folder beside its runs' folders (Optuna's sweeper writes its best trial's)
SWEEP_RECORDS = (SWEEP_FILE, PBT_FILE, "optimization_results.yaml")
# what makes a folder a run's: `rlcollect train` writes a new run only into a folder holding none of them
RUN_FILES = (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, CHECKPOINT_FILE, CHECKPOINT_FILE + PREVIOUS_SUFFIX, BEST_FILE,
             HYDRA_DIR)


# a run's own records: its RUN_FILES and what else it writes beside them (the W&B run included)
RUN_RECORDS = (*RUN_FILES, ERROR_LOG, JOB_LOG, VIDEO_DIR, REPLAY_DIR, WANDB_DIR)

# summary.json's "status": how the run ended, or where it stands
FINISHED = "finished"  # trained to total_frames
SOLVED = "solved"  # reached env.solved_return
INTERRUPTED = "interrupted"  # stopped by a signal: it resumes from its checkpoint
FAILED = "failed"  # failed while building or training (its error, and error.log)
REFUSED = "refused"  # a sweep job whose config was refused before it was built
# ended as asked: compare counts them, a study is told their value, a resume extends them only with more total_frames
ENDED_STATUSES = (FINISHED, SOLVED)
# not written: a run whose summary.json says it ended while metrics.jsonl goes past its frames (a resume killed
# with SIGKILL: its rows are written, its summary.json is not)
RESUME_KILLED = "killed while resumed (metrics.jsonl goes past summary.json's frames)"
RUNNING = "running"  # not written: a run folder that a process holds now (``held``), whatever its summary.json says


def owning_run(path: str | os.PathLike[str]) -> tuple[Path, str] | None:
    """``(run folder, record)`` where ``path`` is one of that run's records
    (``RUN_RECORDS``: its config, metrics, summary, checkpoints, best.pt, .hydra/, error
    log, videos, replay files, W&B run), or is inside one (its .hydra/ holds a config.yaml
    of Hydra's); None for any other path (a file a command may write, as the policy.onnx
    beside a run's files)."""
    path = Path(path).absolute()
    for folder in path.parents:
        record = path.relative_to(folder).parts[0]
        if record in RUN_RECORDS and folder.name != HYDRA_DIR and run_files(folder):  # .hydra/ holds a config.yaml
            return folder, record
    return None


def run_files(folder: str | os.PathLike[str]) -> list[str]:
    """The RUN_FILES that ``folder`` holds: none for a folder that holds no run (or does not exist)."""
    folder = Path(folder)
    return [name for name in RUN_FILES if (folder / name).exists()]


def sweep_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a sweep's folder (Hydra's multirun.yaml, and no run of its own)."""
    path = Path(path)
    return (path / SWEEP_FILE).is_file() and not (path / CONFIG_FILE).is_file()


def sweep_of(run_dir: str | os.PathLike[str]) -> Path | None:
    """The sweep folder a run folder lies in (its nearest ``sweep_folder`` above it), else None."""
    return next((folder for folder in Path(run_dir).resolve().parents if sweep_folder(folder)), None)


def write_record(path: Path, text: str) -> None:
    """``text`` to the run record ``path`` whole or not at all (``staged_record``, renamed
    over it): a failed write leaves the earlier file as it was, never one cut short."""
    partial = staged_record(path, text)
    try:
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def staged_record(path: Path, text: str) -> Path:
    """``text`` written to the partial file beside the run record ``path`` (returned), for
    the caller to rename over it; a failed write leaves no partial file, and a full disk (or
    quota, or file size limit) is a DiskFullError naming ``path``."""
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_text(text)
    except BaseException as error:
        partial.unlink(missing_ok=True)
        full = disk_full(error, path) if isinstance(error, OSError) else None
        if full is not None:
            raise full from error
        raise
    return partial


def read_summary(run_dir: str | os.PathLike[str]) -> dict:
    """The run's summary.json ({} where there is none, or it does not read as an object)."""
    try:
        summary = json.loads((Path(run_dir) / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def job_folders(folder: str | os.PathLike[str]) -> list[Path]:
    """The folders Hydra made for the jobs of the sweep in ``folder``: those named
    ``<job number>_<overrides>`` (none where ``folder`` is not there)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [child for child in folder.iterdir() if child.is_dir() and child.name.split("_", 1)[0].isdigit()]


def sweep_runs(folder: str | os.PathLike[str]) -> list[Path]:
    """The run folders of the sweep in ``folder`` (those holding ``run_files``), by job
    number: each under the folder Hydra names ``<job number>_<overrides>``, nested where an
    override names a config group (``0_algo=dqn,buffer/storage=memmap,seed=0``); a run's
    own record folders are not searched."""
    found: list[Path] = []
    for job in job_folders(folder):
        for path, subfolders, _ in os.walk(job):
            if run_files(path):
                found.append(Path(path))
                subfolders.clear()  # a run's own folders (.hydra/, wandb/ ...) hold no other run
    return sorted(found, key=lambda path: (job_number(folder, path), str(path)))


def record_below(folder: str | os.PathLike[str], depth: int = 4, budget: int = 5_000) -> Path | None:
    """The first run or sweep folder below ``folder`` (not ``folder`` itself), searched
    breadth first to ``depth`` levels (a Hydra sweep's jobs lie 3 below ``multirun/``),
    over at most ``budget`` folders (a folder as large as a home holds, searched no
    further); symbolic links not followed. None: none found."""
    level, seen = [Path(folder)], 0
    for _ in range(depth):
        below = []
        for parent in level:
            try:
                children = sorted(entry.path for entry in os.scandir(parent) if entry.is_dir(follow_symlinks=False))
            except OSError:
                continue
            for child in map(Path, children):
                if run_files(child) or sweep_folder(child):
                    return child
                seen += 1
                if seen >= budget:
                    return None
                below.append(child)
        level = below
    return None


def job_number(sweep: str | os.PathLike[str], run_dir: str | os.PathLike[str]) -> int:
    """The job number of the run in ``run_dir`` of the sweep in ``sweep``: the prefix of the
    folder Hydra made for it there (``<job number>_<overrides>``)."""
    return int(Path(run_dir).relative_to(sweep).parts[0].split("_", 1)[0])


def held(folder: str | os.PathLike[str]) -> bool:
    """Whether a process holds ``folder`` now (the exclusive ``flock`` that ``rlcollect
    train`` takes on a run or sweep folder while it trains or resumes it): read from
    /proc/locks, taking no lock itself (a lock taken to test would refuse a resume starting
    that instant). False where the system lists no locks there (not Linux)."""
    try:
        stat = os.stat(folder)
        with open("/proc/locks", encoding="ascii") as locks:
            listed = locks.read().split()
    except OSError:
        return False
    return f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}" in listed
