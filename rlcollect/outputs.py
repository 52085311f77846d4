"""The files a command writes where its user says (``eval --out``, ``export --out``,
``compare --plot``): checked before any work (never one of a run's own records, its
checkpoint, summary, config, job log ...: ``run_files.owning_run``, nor a sweep's
multirun.yaml or pbt.jsonl; a folder that can hold it),
then written whole or not at all, its folder made only then.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from rlcollect.errors import ConfigError
from rlcollect.run_files import SWEEP_RECORDS, owning_run, sweep_folder


def output_path(option: str, path: str | os.PathLike[str]) -> Path:
    """``path`` as a file ``option`` may write, checked before any work: a ConfigError
    naming ``option`` for one of a run's own records, a folder, or a path whose folder
    cannot be made (its nearest existing folder is a file or not writable)."""
    path = Path(path)
    target = Path(os.path.realpath(path))  # the file written: symlinks followed, "missing/.." taken out
    owner = owning_run(target)
    if owner is not None:
        run, record = owner
        raise ConfigError(f"{option} {path}: would overwrite the run in {run} (its {record}); write to another file")
    if target.name in SWEEP_RECORDS and sweep_folder(target.parent):
        raise ConfigError(f"{option} {path}: would overwrite the sweep in {path.parent} (its {target.name}); write "
                          "to another file")
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; name a file")
    existing = next(folder for folder in path.absolute().parents if folder.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: cannot write in {existing} ("
                          f"{'not a folder' if not existing.is_dir() else 'permission denied'})")
    return path


@contextlib.contextmanager
def folder_made(option: str, path: Path):
    """The folder ``path`` goes in, created with its parents if missing, for the block; one
    that cannot be is a ConfigError naming ``option``. A block that fails removes the
    folders it made again (those still empty): a refused command leaves nothing behind."""
    made = [folder for folder in path.parents if not folder.exists()]  # the nearest first
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"{option} {path}: cannot create its folder {path.parent} "
                          f"({error.strerror or error})") from None
    try:
        yield
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # not empty (another process wrote there meanwhile), or gone
                break
        raise


def write_text_whole(option: str, path: Path, text: str) -> None:
    """``text`` to ``path`` (its folder made), through a partial file renamed over it: a
    failed write leaves any earlier file as it was."""
    with folder_made(option, path), written_whole(option, path) as partial:
        partial.write_text(text)


@contextlib.contextmanager
def written_whole(option: str, path: Path):
    """The partial file to write ``path``'s content to, renamed over ``path`` once the block
    ends (a failed write leaves any earlier file as it was); the system refusing to write
    there (a full disk, a read-only or special filesystem) is a ConfigError naming ``option``."""
    partial = path.with_name(path.name + ".partial")
    try:
        yield partial
        os.replace(partial, path)
    except OSError as error:
        if error.filename not in (str(partial), str(path)):
            raise
        raise ConfigError(f"{option} {path}: cannot write it ({error.strerror or error})") from None
    finally:
        partial.unlink(missing_ok=True)
