"""Public names that moved keep their old names for a release (rlcollect/moved.py): each old
name in MOVED still gives the object of its new name, with a DeprecationWarning naming the
new one, pointed at the code that read it."""
import importlib
import re
import warnings

import pytest

from rlcollect.moved import MOVED, MovedAttribute, resolve


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
        "rlcollect.logging.compare.compare": "rlcollect.analysis.compare.compare",
        "rlcollect.logging.compare.load_runs": "rlcollect.analysis.compare.load_runs",
        "rlcollect.logging.report.render_comparison": "rlcollect.analysis.report.render_comparison",
        "rlcollect.logging.plots.plot_report": "rlcollect.analysis.plots.plot_report",
        "rlcollect.logging.stats.interval_estimates": "rlcollect.analysis.stats.interval_estimates",
        "rlcollect.logging.stats.performance_profile": "rlcollect.analysis.stats.performance_profile",
        "rlcollect.logging.stats.probability_of_improvement": "rlcollect.analysis.stats.probability_of_improvement",
        "rlcollect.logging.stats.curve_intervals": "rlcollect.analysis.stats.curve_intervals",
    }


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_name_gives_the_new_object_and_warns_naming_it(old, new):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name itself does not warn
        target = resolve(new)
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} is deprecated: it moved to {re.escape(new)};") \
            as record:
        value = read_old(old)
    assert value is target
    assert [warning.filename for warning in record] == [__file__]  # the reader's line, not the alias's


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
