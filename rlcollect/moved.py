"""Public names that moved, and the deprecated aliases that keep their old names working.

A public name (exported from ``rlcollect``, or documented in docs/) that moves keeps its old
name for at least one release: an entry ``old dotted name -> new dotted name`` in ``MOVED``,
and at the old place one of

- ``__getattr__ = moved_getattr(__name__)`` in a module that moved (a module of that name
  left behind, holding only this line): each of its names in ``MOVED`` resolves to the new
  object;
- ``name = MovedAttribute("<old dotted name>")`` in a class whose attribute moved.

A whole module (or package) that moved is one entry ``old module -> new module`` in
``MOVED_MODULES`` instead, with the same module left behind: every public name of the new
module (its ``__all__``) resolves under the old module's name.

Reading an old name gives the new object itself and a DeprecationWarning naming the new name.
tests/test_moved_names.py reads every entry through its old name (every public name of a
moved module). An entry and its alias go together, once they have been deprecated for a
release (docs/library.md, "Moved names").
"""
from __future__ import annotations

import sys
import warnings
from importlib import import_module
from typing import Any, Callable

# old dotted name -> new dotted name
MOVED = {
    # 31717d4: a circle between schemes.py and the schemes it named
    "rlcollect.weight_sync.WeightSyncScheme.from_backend": "rlcollect.weight_sync.scheme_from_backend",
    # 31717d4: the compare tool left rlcollect.logging for rlcollect.analysis (docs/compare.md, "From Python")
    "rlcollect.logging.compare.compare": "rlcollect.analysis.api.compare",
    "rlcollect.logging.compare.load_runs": "rlcollect.analysis.api.load_runs",
    "rlcollect.logging.report.render_comparison": "rlcollect.analysis.report.render_comparison",
    "rlcollect.logging.plots.plot_report": "rlcollect.analysis.plots.plot_report",
    "rlcollect.logging.stats.interval_estimates": "rlcollect.analysis.stats.interval_estimates",
    "rlcollect.logging.stats.performance_profile": "rlcollect.analysis.stats.performance_profile",
    "rlcollect.logging.stats.probability_of_improvement": "rlcollect.analysis.stats.probability_of_improvement",
    "rlcollect.logging.stats.curve_intervals": "rlcollect.analysis.stats.curve_intervals",
    # issue 41: the compare tool's one import is rlcollect.analysis.api (MOVED_MODULES, below)
}

# old module -> new module: every public name of the new module (its __all__) resolves at the
# old module, which is left behind holding only ``__getattr__ = moved_getattr(__name__)``
MOVED_MODULES = {
    # issue 41: rlpyt's sampler interface, named for what it is (beside the replay samplers of
    # rlcollect.buffers.samplers and the collectors of rlcollect.collectors); docs/rlpyt.md
    "rlcollect.samplers": "rlcollect.rlpyt",
    "rlcollect.samplers.base": "rlcollect.rlpyt.base_sampler",
    "rlcollect.samplers.collectors": "rlcollect.rlpyt.sampler_collectors",
    "rlcollect.samplers.samplers": "rlcollect.rlpyt.samplers",
    # issue 41: the compare tool's entry point and one import (analysis/api.py), beside the
    # comparison it computes (analysis/comparison.py); docs/compare.md, "From Python"
    "rlcollect.analysis.compare": "rlcollect.analysis.api",
}


def resolve(dotted: str) -> Any:
    """The object at ``dotted``: its longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module = ".".join(parts[:split])
        try:
            value = import_module(module)
        except ModuleNotFoundError as error:
            if error.name is None or not f"{module}.".startswith(f"{error.name}."):  # a dependency is missing
                raise
            continue
        for part in parts[split:]:
            value = getattr(value, part)
        return value
    raise ModuleNotFoundError(f"no module in {dotted!r}")


def public_names(module: str) -> list[str]:
    """The public names of ``module``: its ``__all__``, which a module in MOVED_MODULES's
    values must have."""
    names = getattr(import_module(module), "__all__", None)
    if names is None:
        raise AttributeError(f"{module} has no __all__: a module that others moved to lists its public names")
    return list(names)


def new_name(old: str) -> str | None:
    """The new dotted name of ``old``: its MOVED entry, or the same name in the module its
    module moved to (MOVED_MODULES), when that is a public name there; None: not moved."""
    if old in MOVED:
        return MOVED[old]
    module, _, name = old.rpartition(".")
    new_module = MOVED_MODULES.get(module)
    if new_module is not None and name in public_names(new_module):
        return f"{new_module}.{name}"
    return None


def moved_names() -> dict[str, str]:
    """Every old name and its new one: MOVED's entries, and each public name of each moved
    module (imports the new modules)."""
    names = dict(MOVED)
    for old_module, new_module in MOVED_MODULES.items():
        names.update({f"{old_module}.{name}": f"{new_module}.{name}" for name in public_names(new_module)})
    return names


def moved(old: str, stacklevel: int = 3) -> Any:
    """The object ``old``'s new name names (``new_name``), after a DeprecationWarning that
    names it (``stacklevel``: 3 points at the code that read the old name through an alias)."""
    new = new_name(old)
    if new is None:
        raise KeyError(f"{old!r} did not move (rlcollect.moved: MOVED, MOVED_MODULES)")
    warnings.warn(f"{old} is deprecated: it moved to {new}; the old name will be removed in a future release",
                  DeprecationWarning, stacklevel=stacklevel)
    return resolve(new)


def moved_getattr(module: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a module left behind at ``module``'s old path: its names in
    ``MOVED``, or every public name of the module it moved to (``MOVED_MODULES``), resolve
    (with the warning); any other is an AttributeError."""

    def __getattr__(name: str) -> Any:
        old = f"{module}.{name}"
        if name.startswith("__") or new_name(old) is None:  # dunders: what import and help() look up
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if sys._getframe(1).f_code.co_name == "_handle_fromlist":
            # ``from package import name`` asks the package first whether it has the name (a
            # submodule to import otherwise), then reads it: the read warns, the question not
            return resolve(new_name(old))
        return moved(old)

    return __getattr__


class MovedAttribute:
    """A class attribute that moved (``MOVED[old]``, ``old`` its dotted name): reading it,
    from the class or an instance, gives the new object, with the warning."""

    def __init__(self, old: str) -> None:
        if old not in MOVED:
            raise KeyError(f"{old!r} is not in rlcollect.moved.MOVED")
        self.old = old

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        return moved(self.old)
