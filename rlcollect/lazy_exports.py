"""Package attributes imported on first access (PEP 562), so light commands stay light."""
from __future__ import annotations

import functools
import os
from importlib import import_module
from typing import Callable


def lazy_getattr(package: str, exports: dict[str, str], namespace: dict) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first use
    and caches the attribute in ``namespace`` (the package's globals)."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(exports[name]), name)
        namespace[name] = value
        return value

    __getattr__.exports = exports  # what it loads (tests/test_layering.py reads a table built at import here)
    return __getattr__


class Stub:
    """A package's public names as its ``__init__.pyi`` declares them, one ``from M import N
    as N`` each, under group headers (a comment ``# <what the group holds>``, continued on
    comment lines that start ``#   ``): what type checkers read, and what the package reads at
    import (``read_stub``) for its ``__all__``, its lazy attributes and its help text."""

    def __init__(self, exports: dict[str, str], groups: list[tuple[str, list[str]]]) -> None:
        self.exports = exports  # public name -> the module it loads from
        self.groups = groups  # (the group's header, its names in the stub's order)

    def listing(self, width: int = 92) -> str:
        """The groups as help text: each header, then its names (lines of at most ``width``)."""
        text = ""
        for header, names in self.groups:
            lines = [f"\n- {header}:"]
            for name in names:
                word = f" ``{name}``,"
                if len(lines[-1]) + len(word) > width:
                    lines.append(" ")
                lines[-1] += word
            text += "\n".join(lines)[:-1] + ".\n"
        return text


def read_stub(path: str) -> Stub:
    """The ``Stub`` of the ``__init__.pyi`` at ``path``."""
    import ast

    with open(path, encoding="utf-8") as file:
        text = file.read()
    lines = text.splitlines()
    headers: dict[int, str] = {}  # the line (1-based) each header starts on -> its text
    start = None
    for number, line in enumerate(lines, 1):
        if line.startswith("#   ") and start is not None:
            headers[start] += " " + line[4:].strip()
        elif line.startswith("# ") and not line.startswith(("#  ", "# ruff:")):
            start = number
            headers[start] = line[2:].strip()
        else:
            start = None
    exports: dict[str, str] = {}
    groups: dict[int, list[str]] = {}
    for node in ast.parse(text).body:
        if not isinstance(node, ast.ImportFrom):
            continue
        header = max((line for line in headers if line < node.lineno), default=None)
        if header is None:
            raise ValueError(f"{path}:{node.lineno}: an import before any group header")
        for alias in node.names:
            if alias.asname != alias.name or alias.name in exports:
                raise ValueError(f"{path}:{node.lineno}: {alias.name} must be imported once, as itself")
            exports[alias.name] = node.module
            groups.setdefault(header, []).append(alias.name)
    return Stub(exports, [(headers[line], names) for line, names in groups.items()])


@functools.lru_cache(maxsize=None)
def rlcollect_stub() -> Stub:
    """rlcollect's own ``Stub`` (rlcollect/__init__.pyi), read once per process: the package
    and the subpackages that re-export its names (``public_exports``) share it."""
    return read_stub(os.path.join(os.path.dirname(__file__), "__init__.pyi"))


def public_exports(prefix: str) -> dict[str, str]:
    """The public names of rlcollect (its ``__init__.pyi``) that load from a module under
    ``prefix`` (e.g. ``"rlcollect.collectors."``): what a subpackage re-exports without a
    list of its own."""
    return {name: module for name, module in rlcollect_stub().exports.items() if module.startswith(prefix)}
