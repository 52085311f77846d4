"""Checkpoints: written atomically, read back with ``torch.load(weights_only=True)`` after
each record's checksum (docs/runs.md, "Every run keeps its policy").

Everything saved is tensors, numbers, strings and containers of them (no pickled
objects), so loading a checkpoint cannot run arbitrary code.
"""
from __future__ import annotations

import logging
import os
import pickle
import random
import zipfile
from pathlib import Path

import numpy as np
import torch

from rlcollect.errors import disk_full
from rlcollect.run_files import BEST_FILE, CHECKPOINT_FILE, PREVIOUS_SUFFIX  # noqa: F401  (rlcollect.checkpoint's names)

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded (truncated, garbage, or not weights-only)."""


def previous_path(path: Path) -> Path:
    return path.with_name(path.name + PREVIOUS_SUFFIX)


def checkpoint_exists(path: str | Path) -> bool:
    """Whether ``path`` or the previous checkpoint it falls back to (``path.prev``) is a file."""
    path = Path(path)
    return path.is_file() or previous_path(path).is_file()


def save_checkpoint(path: str | Path, state: dict, *, keep_previous: bool = True) -> None:
    """Write ``state`` to ``path`` and keep the previous checkpoint as ``path.prev`` until
    the new one is complete and verified (read back with weights_only=True, its records'
    checksums first, its tensors memory-mapped: a checkpoint of a replay buffer of
    gigabytes is not held in memory a second time to be checked): a crash or a
    Ctrl-C at any moment leaves a checkpoint that loads (the half-written file is removed).
    ``keep_previous=False``: the previous one is replaced, atomically, without a ``.prev``.
    A full disk (or quota, or the file size limit) is a DiskFullError naming the folder and
    the free bytes, not torch's "unexpected pos" RuntimeError; the previous checkpoint stays."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        _load(partial, mmap=True)
    except BaseException as error:
        full = disk_full(error, path, needed=state_bytes(state)) if isinstance(error, Exception) else None
        partial.unlink(missing_ok=True)
        if full is not None:
            raise full from error
        interrupt = wrapped_interrupt(error)
        if interrupt is not None:  # a Ctrl-C while torch's writer ran: its "unexpected pos" RuntimeError wraps it
            raise interrupt from None
        raise
    if keep_previous and path.exists():
        os.replace(path, previous_path(path))
    os.replace(partial, path)


def wrapped_interrupt(error: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt that ``error`` (an Exception) was raised while handling, if
    any: torch.save turns a Ctrl-C that reaches its writer into a RuntimeError."""
    if not isinstance(error, Exception):
        return None
    seen, cause = set(), error.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None


def state_bytes(state) -> int:
    """The bytes of the tensors and arrays in ``state`` (nested dicts, lists, tuples): about
    what writing it takes."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, np.ndarray):
        return state.nbytes
    if isinstance(state, dict):
        return sum(state_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(value) for value in state)
    return 0


def load_checkpoint(path: str | Path, *, mmap: bool = False, quiet: bool = False) -> dict:
    """The checkpoint at ``path``; if it is corrupt or incomplete, the previous one
    (``path.prev``) when that loads, saying so (``quiet``: not said, by a check whose load
    comes later); else a CheckpointError naming the file. ``mmap``: its tensors mapped from
    the file, not read into memory (what a check reads)."""
    path = Path(path)
    if not checkpoint_exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        return _load(path, mmap=mmap)
    except (CheckpointError, FileNotFoundError) as error:
        previous = previous_path(path)
        if not previous.is_file():
            raise CheckpointError(f"{error}; no previous checkpoint ({previous.name}) to fall back to") from None
        try:
            state = _load(previous, mmap=mmap)
        except CheckpointError as previous_error:
            raise CheckpointError(f"{error}; the previous one is no better: {previous_error}") from None
        if not quiet:
            log.warning("%s; falling back to the previous checkpoint %s", error, previous)
        return state


def damaged_record(path: Path) -> str | None:
    """The first record of the zip archive ``path`` (torch.save's format) whose bytes do not
    match their checksum, the file streamed; None where every one does, or where ``path``
    is no zip archive that reads (torch.load then says what it is)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (OSError, EOFError, zipfile.BadZipFile):
        return None


def _load(path: Path, *, mmap: bool = False) -> dict:
    """torch.load(weights_only=True) after each record's checksum (torch.load reads a damaged
    byte as it is), with a one-line error naming the file when either fails (never torch's
    advice to load with weights_only=False: a checkpoint is data, not code). ``mmap``: the
    tensors mapped from the file, not read into memory."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} is missing")
    size = path.stat().st_size
    damaged = damaged_record(path)
    if damaged is not None:
        raise CheckpointError(f"checkpoint {path} ({size} bytes) is corrupt: its record {damaged} does not match "
                              "its checksum")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:
        raise CheckpointError(f"checkpoint {path} ({size} bytes) is corrupt or incomplete, or holds objects other "
                              "than tensors and plain values (refused: checkpoints load with weights_only=True)"
                              ) from None
    except Exception as error:  # EOFError, RuntimeError (zip), OSError ...: the file is not a whole checkpoint
        raise CheckpointError(f"checkpoint {path} ({size} bytes) is corrupt or incomplete "
                              f"({type(error).__name__})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} ({size} bytes) is corrupt or incomplete (not a dict)")
    return state


def rng_state() -> dict:
    """torch, numpy and python RNG states as plain tensors and lists."""
    kind, keys, position, has_gauss, cached_gauss = np.random.get_state()
    version, python_state, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gauss": float(cached_gauss)},
        "python": {"version": version, "state": list(python_state), "gauss": gauss},
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["position"], n["has_gauss"],
                         n["cached_gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
