"""Public names that moved, and the deprecated aliases that keep their old names working.

A public name (exported from ``rlcollect``, or documented in docs/) that moves keeps its old
name for at least one release: an entry ``old dotted name -> new dotted name`` in ``MOVED``,
and at the old place one of

- ``__getattr__ = moved_getattr(__name__)`` in a module that moved (a module of that name
  left behind, holding only this line): each of its names in ``MOVED`` resolves to the new
  object;
- ``name = MovedAttribute("<old dotted name>")`` in a class whose attribute moved.

Reading an old name gives the new object itself and a DeprecationWarning naming the new name.
tests/test_moved_names.py reads every entry through its old name. An entry and its alias go
together, once they have been deprecated for a release (docs/library.md, "Moved names").
"""
from __future__ import annotations

import warnings
from importlib import import_module
from typing import Any, Callable

# old dotted name -> new dotted name
MOVED = {
    # one template per algorithm: its learner beside it (algos/<algo>.py), its networks in modules/
    "rlcollect.algos.learners.PPOLearner": "rlcollect.algos.ppo.PPOLearner",
    "rlcollect.algos.learners.DQNLearner": "rlcollect.algos.dqn.DQNLearner",
    "rlcollect.algos.sac.SACActor": "rlcollect.modules.sac.SACActor",
    # 31717d4: a circle between schemes.py and the schemes it named
    "rlcollect.weight_sync.WeightSyncScheme.from_backend": "rlcollect.weight_sync.scheme_from_backend",
    # 31717d4: the compare tool left rlcollect.logging for rlcollect.analysis (docs/compare.md, "From Python")
    "rlcollect.logging.compare.compare": "rlcollect.analysis.compare.compare",
    "rlcollect.logging.compare.load_runs": "rlcollect.analysis.compare.load_runs",
    "rlcollect.logging.report.render_comparison": "rlcollect.analysis.report.render_comparison",
    "rlcollect.logging.plots.plot_report": "rlcollect.analysis.plots.plot_report",
    "rlcollect.logging.stats.interval_estimates": "rlcollect.analysis.stats.interval_estimates",
    "rlcollect.logging.stats.performance_profile": "rlcollect.analysis.stats.performance_profile",
    "rlcollect.logging.stats.probability_of_improvement": "rlcollect.analysis.stats.probability_of_improvement",
    "rlcollect.logging.stats.curve_intervals": "rlcollect.analysis.stats.curve_intervals",
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


def moved(old: str, stacklevel: int = 3) -> Any:
    """The object ``MOVED[old]`` names, after a DeprecationWarning that names it
    (``stacklevel``: 3 points at the code that read the old name through an alias)."""
    new = MOVED[old]
    warnings.warn(f"{old} is deprecated: it moved to {new}; the old name will be removed in a future release",
                  DeprecationWarning, stacklevel=stacklevel)
    return resolve(new)


def moved_getattr(module: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a module left behind at ``module``'s old path: its names in
    ``MOVED`` resolve (with the warning); any other is an AttributeError."""

    def __getattr__(name: str) -> Any:
        old = f"{module}.{name}"
        if old not in MOVED:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
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
