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
module (its ``__all__``) resolves under the old module's name. A module that stays but lost
a name to another name keeps ``__getattr__ = moved_getattr(__name__)`` too (it is asked only
for the names the module no longer has).

A keyword argument of a public class that was renamed is an entry of ``RENAMED_ARGUMENTS``
(``class -> {old keyword: new keyword}``): the constructor keeps the old keyword, default
None, and calls ``renamed_argument``, which warns naming the new keyword and returns the
value to use. A config key renamed with it stays declared in its schema
(``rlcollect.config.renamed``) and is moved to its new key by the pipeline, with a warning.

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
    # one template per algorithm: its learner beside it (algos/<algo>.py), its networks in modules/
    "rlcollect.algos.learners.PPOLearner": "rlcollect.algos.ppo.PPOLearner",
    "rlcollect.algos.learners.DQNLearner": "rlcollect.algos.dqn.DQNLearner",
    "rlcollect.algos.sac.SACActor": "rlcollect.modules.sac.SACActor",
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
    # issue 41: DistributedCollector's "launcher" option is start_workers_with (RENAMED_ARGUMENTS)
    "rlcollect.collectors.distributed.LAUNCHERS": "rlcollect.collectors.distributed.STARTERS",
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
    # the W&B offline reader beside the W&B writer (logging/run_logger.py), which reads it when
    # a run resumes (the rows its earlier parts lack); rlcollect.logging imports nothing of analysis
    "rlcollect.analysis.wandb_offline": "rlcollect.logging.wandb_offline",
}


# class -> {old keyword argument: new keyword argument}: the constructor still takes the old
# keyword (default None), with a DeprecationWarning naming the new one (renamed_argument)
RENAMED_ARGUMENTS = {
    # issue 41: collector=ray and collector=distributed name their count of hosts alike
    "rlcollect.collectors.ray.collector.RayCollector": {"num_collectors": "num_workers"},
    # issue 41: "launcher" is Hydra's (hydra/launcher=...); this option says how the workers start
    "rlcollect.collectors.distributed.collector.DistributedCollector": {"launcher": "start_workers_with"},
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
        if name == "__all__" and module in MOVED_MODULES:  # ``from old import *``: each name read warns
            return public_names(MOVED_MODULES[module])
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


def renamed_argument(owner: type, old: str, old_value: Any, new_value: Any, new_default: Any = None) -> Any:
    """The value of ``owner``'s keyword argument that was called ``old`` (RENAMED_ARGUMENTS),
    called from ``owner.__init__``: ``new_value``, or, when the caller gave the old keyword
    (``old_value`` not None), ``old_value`` after a DeprecationWarning naming the new keyword,
    pointed at the code that built the object (past the ``__init__`` of subclasses). A
    TypeError when both are given and differ (``new_default``: the new keyword's default,
    which counts as not given)."""
    new = RENAMED_ARGUMENTS[f"{owner.__module__}.{owner.__qualname__}"][old]
    if old_value is None:
        return new_value
    if new_value is not None and new_value != new_default and new_value != old_value:
        raise TypeError(f"{owner.__name__}() got {old}={old_value!r} and {new}={new_value!r}: {old} is the old name "
                        f"of {new}; give {new} only")
    stacklevel, frame = 3, sys._getframe(2)  # 1: owner.__init__; 2: what called it
    while frame is not None and frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), owner):
        stacklevel, frame = stacklevel + 1, frame.f_back  # a subclass's __init__ passing it on
    warnings.warn(f"{owner.__name__}({old}=...) is deprecated: the argument is {new} now; the old name will be "
                  "removed in a future release", DeprecationWarning, stacklevel=stacklevel)
    return old_value
