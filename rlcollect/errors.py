"""Whose error it is (a leaf module: only the standard library, nothing of rlcollect).

A user's mistake (a value out of range, a combination that cannot train, a run folder that
cannot be resumed, a package to install) is a :class:`ConfigError`: the command line prints
its message as one line and exits 2, before anything is created. Every other exception is
rlcollect's own bug or one in user code it called, and is reported as such, with its
traceback kept (docs/errors.md). A file that cannot be written because the disk is full is
a :class:`DiskFullError`: said in one line too, as what it is.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path


class ConfigError(ValueError):
    """A user's mistake in a configuration value, an argument or a combination of them;
    the message is one line that names the key (or argument) and what is allowed."""


class MissingDependencyError(ConfigError, ImportError):
    """An optional package the run asks for is not installed; the message names the package,
    the extra that installs it, or the setting that avoids it."""


class UnsupportedSpaceError(ConfigError, TypeError):
    """An env whose observation or action space rlcollect does not handle (a Tuple of actions,
    a Graph, ...): the choice of env is the user's, so a ConfigError; also a TypeError, what
    such a space has always raised in the library."""


def one_line(error: BaseException) -> str:
    """An error as one line: its type and the first line of its message."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


# the errno of a write stopped by a full disk or quota (ENOSPC, EDQUOT) or by the file size limit (EFBIG: `ulimit -f`)
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFullError(OSError):
    """A run's file could not be written because its disk (or the user's quota) is full, or
    because the file size limit (``ulimit -f``) stops it. Not a bug, nor a mistake in the
    config: the message is one line naming the cause, the file's folder and the free bytes
    (or the limit); the file's previous complete version stays."""

    def __str__(self) -> str:
        return self.strerror  # the one line, without OSError's "[Errno N]"


class ResumeNotOpened(RuntimeError):
    """A resumed run that failed as it opened its folder (a full disk as its config.yaml or
    its metrics were written), before any of the run's files changed: they stay as they
    were (no summary.json, no error.log is written); ``__cause__`` is what failed."""


def disk_full(error: BaseException, path: Path, needed: int | None = None) -> DiskFullError | None:
    """``error``, raised while ``path`` was written, as a DiskFullError when a full disk, a full
    quota or the file size limit caused it: an OSError with one of FULL_DISK_ERRNOS, itself or
    behind it (torch's writer raises a RuntimeError over the OSError of the write), or, when no
    such OSError is known, any OSError or RuntimeError raised while fewer than ``needed`` bytes
    are free on the disk. None for any other error. Call it before removing what was written:
    the free bytes are then those the write left."""
    code = next((link.errno for link in causes(error) if isinstance(link, OSError) and link.errno in FULL_DISK_ERRNOS),
                None)
    free = free_bytes(path.parent)
    if code is None and needed is not None and free is not None and free < needed and \
            isinstance(error, (OSError, RuntimeError)):
        code = errno.ENOSPC
    if code is None:
        return None
    if code == errno.EFBIG:
        return DiskFullError(code, f"{os.strerror(code)}: {path.name} in {path.parent} could not be written (the "
                                   f"file size limit, `ulimit -f`, is {file_size_limit()})")
    return DiskFullError(code, f"{os.strerror(code)}: {path.name} in {path.parent} could not be written "
                               f"({'an unknown number of' if free is None else free} bytes free on the disk "
                               f"mounted at {mount_point(path.parent)})")


def causes(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions behind it (its ``__cause__`` or ``__context__``, in turn)."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def free_bytes(folder: Path) -> int | None:
    """The bytes free to this user on ``folder``'s disk (None when it cannot be read)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def mount_point(folder: Path) -> Path:
    """The folder where ``folder``'s disk is mounted."""
    folder = folder.resolve()
    while not os.path.ismount(folder) and folder.parent != folder:
        folder = folder.parent
    return folder


def file_size_limit() -> str:
    """This process's file size limit (RLIMIT_FSIZE) in words."""
    try:
        import resource
    except ImportError:  # not a Unix
        return "unknown"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"
