"""Public names that moved keep their old names for a release (rlcollect/moved.py): each old
name in MOVED, and each public name of a module in MOVED_MODULES read at its old module, still
gives the object of its new name, with a DeprecationWarning naming the new one, pointed at the
code that read it."""
import importlib
import re
import warnings

import pytest

from rlcollect.moved import (
    MOVED,
    MOVED_MODULES,
    RENAMED_ARGUMENTS,
    MovedAttribute,
    moved_names,
    public_names,
    renamed_argument,
    resolve,
)


def read_old(old: str):
    """``old`` read as code reads it: the longest module prefix imported, then attributes."""
    parts = old.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for part in parts[split:]:
            value = getattr(value, part)
        return value
    raise AssertionError(f"no module in {old}")


def test_the_moved_names_are_listed():
    assert MOVED == {
        "rlcollect.algos.learners.PPOLearner": "rlcollect.algos.ppo.PPOLearner",
        "rlcollect.algos.learners.DQNLearner": "rlcollect.algos.dqn.DQNLearner",
        "rlcollect.algos.sac.SACActor": "rlcollect.modules.sac.SACActor",
        "rlcollect.weight_sync.WeightSyncScheme.from_backend": "rlcollect.weight_sync.scheme_from_backend",
        "rlcollect.logging.compare.compare": "rlcollect.analysis.api.compare",
        "rlcollect.logging.compare.load_runs": "rlcollect.analysis.api.load_runs",
        "rlcollect.logging.report.render_comparison": "rlcollect.analysis.report.render_comparison",
        "rlcollect.logging.plots.plot_report": "rlcollect.analysis.plots.plot_report",
        "rlcollect.logging.stats.interval_estimates": "rlcollect.analysis.stats.interval_estimates",
        "rlcollect.logging.stats.performance_profile": "rlcollect.analysis.stats.performance_profile",
        "rlcollect.logging.stats.probability_of_improvement": "rlcollect.analysis.stats.probability_of_improvement",
        "rlcollect.logging.stats.curve_intervals": "rlcollect.analysis.stats.curve_intervals",
        "rlcollect.collectors.distributed.LAUNCHERS": "rlcollect.collectors.distributed.STARTERS",
    }
    assert MOVED_MODULES == {
        "rlcollect.samplers": "rlcollect.rlpyt",
        "rlcollect.samplers.base": "rlcollect.rlpyt.base_sampler",
        "rlcollect.samplers.collectors": "rlcollect.rlpyt.sampler_collectors",
        "rlcollect.samplers.samplers": "rlcollect.rlpyt.samplers",
        "rlcollect.analysis.compare": "rlcollect.analysis.api",
        "rlcollect.analysis.wandb_offline": "rlcollect.logging.wandb_offline",
    }


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_name_gives_the_new_object_and_warns_naming_it(old, new):
    check_old_name(old, new)


def check_old_name(old: str, new: str) -> None:
    """Reading ``old`` gives ``new``'s object, with the warning naming ``new``, pointed here."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name itself does not warn
        target = resolve(new)
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} is deprecated: it moved to {re.escape(new)};") \
            as record:
        value = read_old(old)
    assert value is target
    assert [warning.filename for warning in record] == [__file__]  # the reader's line, not the alias's


@pytest.mark.parametrize("old_module, new_module", sorted(MOVED_MODULES.items()))
def test_every_public_name_of_a_moved_module_reads_at_its_old_module(old_module, new_module):
    names = public_names(new_module)
    assert names, f"{new_module}.__all__ is empty"
    for name in names:
        check_old_name(f"{old_module}.{name}", f"{new_module}.{name}")
    assert {old: new for old, new in moved_names().items() if old.rpartition(".")[0] == old_module} == \
        {f"{old_module}.{name}": f"{new_module}.{name}" for name in names}


def test_a_moved_module_is_imported_by_its_old_name_and_its_names_read_as_before():
    """``import`` of the old package and ``from old import name`` work as they did; only the
    names read warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import rlcollect.samplers
        import rlcollect.samplers.collectors  # noqa: F401 - the old submodule still imports
    from rlcollect.rlpyt import CpuSampler as new_cpu_sampler
    from rlcollect.rlpyt import GpuWaitResetCollector as new_collector_class

    with pytest.warns(DeprecationWarning, match=r"^rlcollect\.samplers\.CpuSampler is deprecated: it moved to "
                                                r"rlcollect\.rlpyt\.CpuSampler;") as record:
        from rlcollect.samplers import CpuSampler
    assert CpuSampler is new_cpu_sampler and [warning.filename for warning in record] == [__file__]
    with pytest.warns(DeprecationWarning, match="rlcollect.rlpyt.sampler_collectors.GpuWaitResetCollector"):
        from rlcollect.samplers.collectors import GpuWaitResetCollector
    assert GpuWaitResetCollector is new_collector_class
    with pytest.warns(DeprecationWarning, match="rlcollect.analysis.api.compare_runs"):
        from rlcollect.analysis.compare import compare_runs
    from rlcollect.analysis.api import compare_runs as new_compare_runs
    assert compare_runs is new_compare_runs
    namespace: dict = {}
    with pytest.warns(DeprecationWarning) as record:
        exec("from rlcollect.samplers import *", namespace)  # a star import, as a module would write it
    assert namespace["CpuSampler"] is new_cpu_sampler and len(record) == len(public_names("rlcollect.rlpyt"))
    with pytest.raises(AttributeError, match="module 'rlcollect.samplers' has no attribute 'Nothing'"):
        rlcollect.samplers.Nothing  # noqa: B018 - the read is the test
    with pytest.raises(AttributeError, match="has no attribute 'EnvFactory'"):
        rlcollect.samplers.EnvFactory  # noqa: B018 - public in rlcollect.rlpyt.base_sampler, not in rlcollect.rlpyt


def test_the_renamed_arguments_are_listed_and_each_class_still_takes_the_old_keyword():
    """Each old keyword stays in its class's signature (default None), beside the new one;
    tests/collectors/test_ray.py and test_distributed.py build each class with it."""
    import inspect

    assert RENAMED_ARGUMENTS == {
        "rlcollect.collectors.ray.collector.RayCollector": {"num_collectors": "num_workers"},
        "rlcollect.collectors.distributed.collector.DistributedCollector": {"launcher": "start_workers_with"},
    }
    for owner, renames in RENAMED_ARGUMENTS.items():
        parameters = inspect.signature(resolve(owner)).parameters
        for old, new in renames.items():
            assert parameters[old].default is None and new in parameters, (owner, old)
            assert old in resolve(owner).__doc__ and new in resolve(owner).__doc__  # help() says both


def test_renamed_argument_gives_the_value_to_use():
    from rlcollect.collectors.ray.collector import RayCollector

    assert renamed_argument(RayCollector, "num_collectors", None, 4) == 4  # the old keyword not given: no warning
    with pytest.raises(KeyError):
        renamed_argument(RayCollector, "num_actors", 3, None)  # not a renamed argument of it


def test_the_old_names_work_as_they_did():
    from rlcollect.weight_sync import NoWeightSyncScheme, SharedMemWeightSyncScheme, WeightSyncScheme

    with pytest.warns(DeprecationWarning, match="rlcollect.weight_sync.scheme_from_backend"):
        assert isinstance(WeightSyncScheme.from_backend("none"), NoWeightSyncScheme)
    with pytest.warns(DeprecationWarning, match="rlcollect.weight_sync.scheme_from_backend"):
        assert isinstance(SharedMemWeightSyncScheme().from_backend("shared"), SharedMemWeightSyncScheme)
    with pytest.warns(DeprecationWarning, match="rlcollect.analysis.stats.interval_estimates"):
        from rlcollect.logging.stats import interval_estimates
    from rlcollect.analysis.stats import interval_estimates as new_interval_estimates
    assert interval_estimates is new_interval_estimates


def test_a_module_left_behind_has_only_its_moved_names():
    import rlcollect.logging.stats

    with pytest.raises(AttributeError, match="module 'rlcollect.logging.stats' has no attribute 'DEFAULT_REPS'"):
        rlcollect.logging.stats.DEFAULT_REPS  # noqa: B018 - the read is the test
    with pytest.raises(KeyError, match="not in rlcollect.moved.MOVED"):
        MovedAttribute("rlcollect.weight_sync.WeightSyncScheme.nothing")
    with pytest.raises(AttributeError, match="has no __all__"):
        public_names("rlcollect.keys")
