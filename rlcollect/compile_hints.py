"""tensordict imported without torch's compiler: its compile hints wait until the compiler loads.

At import, tensordict marks a few of its functions for ``torch.compile``
(``torch.compiler.allow_in_graph``, ``torch.compiler.assume_constant_result``). Each call
imports ``torch._dynamo``, about 1.5 s, a third of every rlcollect process's start-up
(the command, each spawned worker), for hints that only a compiled program reads. Both
hints leave the function itself unchanged (the first records its id in the compiler's
tables, the second sets an attribute), so they can be given later without any change in
eager behaviour: ``install()`` (run by ``import rlcollect``) lets tensordict's import record
them, and gives them all when ``torch._dynamo`` is imported (by ``torch.compile``,
``torch.export`` or anyone), before that import returns. A hint asked for once the
compiler is loaded is given at once; with tensordict or the compiler already imported,
nothing changes.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

HINTS = ("allow_in_graph", "assume_constant_result")  # torch.compiler's decorators tensordict calls at import
_deferred: list[tuple[str, object]] = []  # (hint, function), in the order tensordict asked for them


def install() -> None:
    """Defer tensordict's compile hints (see the module docstring); idempotent."""
    if "tensordict" in sys.modules or any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())


def deferred() -> list[tuple[str, object]]:
    """The hints recorded and not given yet (empty once ``torch._dynamo`` is imported)."""
    return list(_deferred)


def _give_deferred() -> None:
    import torch.compiler

    while _deferred:
        hint, function = _deferred.pop(0)
        getattr(torch.compiler, hint)(function)


def _recording(hint: str, real):
    def record(function):
        if "torch._dynamo" in sys.modules:
            return real(function)
        _deferred.append((hint, function))
        return function

    return record


class _Loader(importlib.abc.Loader):
    """The module's own loader, with something to do around its execution."""

    def __init__(self, loader, around) -> None:
        self.loader, self.around = loader, around

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.around(lambda: self.loader.exec_module(module))

    def __getattr__(self, name: str):  # the rest (get_resource_reader, get_source, ...): the module's own
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loaders of ``tensordict`` (its import records the hints) and
    ``torch._dynamo`` (its import gives them)."""

    def find_spec(self, name, path, target=None):
        if name not in ("tensordict", "torch._dynamo"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, _import_tensordict if name == "tensordict" else _import_dynamo)
        return spec


def _import_tensordict(execute) -> None:
    import torch.compiler

    real = {hint: getattr(torch.compiler, hint) for hint in HINTS}
    for hint in HINTS:
        setattr(torch.compiler, hint, _recording(hint, real[hint]))
    try:
        execute()
    finally:
        for hint in HINTS:
            setattr(torch.compiler, hint, real[hint])


def _import_dynamo(execute) -> None:
    execute()
    _give_deferred()
