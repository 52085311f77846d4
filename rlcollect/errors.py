"""Whose error it is (a leaf module: imports nothing of rlcollect).

A user's mistake (a value out of range, a combination that cannot train, a run folder that
cannot be resumed, a package to install) is a :class:`ConfigError`: the command line prints
its message as one line and exits 2, before anything is created. Every other exception is
rlcollect's own bug or one in user code it called, and is reported as such, with its
traceback kept (docs/errors.md).
"""
from __future__ import annotations


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
