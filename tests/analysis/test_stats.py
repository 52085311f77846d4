"""rlcollect.analysis.stats: the aggregates by hand, and the bootstrap intervals against rliable's."""
import numpy as np
import pytest

from rlcollect.analysis import stats


def test_aggregates_of_one_task_by_hand_where_the_iqm_is_not_the_mean():
    # 5 runs: trim_mean cuts int(0.25 * 5) = 1 score at each end -> IQM = mean(2, 3, 4) = 3.
    # mean = 20 / 5 = 4; median over tasks of the task means (one task) = 4;
    # optimality gap to 5 = 5 - mean(min(score, 5)) = 5 - (1 + 2 + 3 + 4 + 5) / 5 = 2.
    values = stats.aggregate([np.array([1.0, 2.0, 3.0, 4.0, 10.0])], gamma=5.0)
    assert values == {"iqm": 3.0, "median": 4.0, "mean": 4.0, "optimality_gap": 2.0}
    assert stats.aggregate([np.array([1.0])], gamma=None)["optimality_gap"] is None


def test_aggregates_over_tasks_pool_runs_for_the_iqm_and_average_task_means():
    # tasks A = [0, 1], B = [2, 3, 7]: pooled [0, 1, 2, 3, 7], cut 1 each end -> IQM = 2;
    # task means 0.5 and 4 -> mean 2.25, median 2.25; gap to 1: 1 - (0 + 1 + 1 + 1 + 1) / 5 = 0.2.
    values = stats.aggregate([np.array([0.0, 1.0]), np.array([2.0, 3.0, 7.0])])
    assert values == {"iqm": 2.0, "median": 2.25, "mean": 2.25, "optimality_gap": pytest.approx(0.2, abs=1e-15)}


def test_normalize_and_area_under_curve():
    assert stats.normalize(np.array([22.0, 261.0, 500.0]), 22.0, 500.0).tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="must differ"):
        stats.normalize(1.0, 2.0, 2.0)
    # 0 until frame 100, a line to 1 at 200, held at 1 to 300: area 0 + 50 + 100 = 150 over 300 frames.
    assert stats.area_under_curve(np.array([100.0, 200.0]), np.array([0.0, 1.0]), 0.0, 300.0) == 0.5
    assert stats.area_under_curve(np.array([100.0, 200.0]), np.array([0.0, 1.0]), 100.0, 200.0) == 0.5


def test_the_same_seed_gives_the_same_intervals_and_the_interval_holds_the_point():
    scores = [np.array([0.1, 0.4, 0.35, 0.9]), np.array([0.2, 0.3, 0.8, 0.5])]
    first = stats.interval_estimates(scores, reps=500, seed=3)
    assert first == stats.interval_estimates(scores, reps=500, seed=3)
    assert first != stats.interval_estimates(scores, reps=500, seed=4)
    for interval in first.values():
        assert interval.ci[0] <= interval.value <= interval.ci[1]


def test_probability_of_improvement_by_hand():
    # x = [1, 2, 3], y = [0, 2, 2]: pairs with x > y: 1>0; 2>0; 3>0, 3>2, 3>2 -> 5; ties 2=2 twice -> 2.
    # P = (5 + 2 / 2) / 9 = 2 / 3. Identical samples count 0.5.
    assert stats.probability_of_improvement([np.array([1.0, 2.0, 3.0])], [np.array([0.0, 2.0, 2.0])],
                                            reps=10).value == pytest.approx(2 / 3, abs=1e-15)
    same = np.array([1.0, 5.0])
    assert stats.probability_of_improvement([same], [same.copy()], reps=10).value == 0.5


# Against rliable (a dev dependency): the same score matrices, the same seed, the same numbers.

def rliable_aggregates(matrix):
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(matrix), metrics.aggregate_median(matrix), metrics.aggregate_mean(matrix),
                     metrics.aggregate_optimality_gap(matrix, 1.0)])


@pytest.mark.parametrize("shape", [(5, 1), (4, 3), (10, 2)])
def test_interval_estimates_equal_rliables(shape):
    library = pytest.importorskip("rliable.library")
    matrix = np.random.RandomState(sum(shape)).gamma(2.0, 0.3, size=shape)  # skewed: IQM != mean
    matrix[0, 0] = 3.0  # an outlier well above the others
    np.random.seed(11)
    points, intervals = library.get_interval_estimates({"x": matrix}, rliable_aggregates, reps=2000)
    ours = stats.interval_estimates([matrix[:, task] for task in range(shape[1])], reps=2000, seed=11)
    for index, name in enumerate(stats.AGGREGATES):
        assert ours[name].value == pytest.approx(points["x"][index], rel=1e-12, abs=1e-12), name
        assert ours[name].ci == pytest.approx(tuple(intervals["x"][:, index]), rel=1e-12, abs=1e-12), name
    assert abs(ours["iqm"].value - ours["mean"].value) > 0.05


def test_performance_profile_equals_rliables():
    library = pytest.importorskip("rliable.library")
    matrix = np.random.RandomState(5).uniform(size=(6, 2))
    taus = np.linspace(0.0, 1.0, 11)
    np.random.seed(2)
    points, intervals = library.create_performance_profile({"x": matrix}, taus, reps=2000)
    fraction, low, high = stats.performance_profile([matrix[:, 0], matrix[:, 1]], taus, reps=2000, seed=2)
    assert fraction == pytest.approx(points["x"], abs=1e-12)
    assert low == pytest.approx(intervals["x"][0], abs=1e-12) and high == pytest.approx(intervals["x"][1], abs=1e-12)


@pytest.mark.parametrize("runs_y", [4, 3])
def test_probability_of_improvement_equals_rliables(runs_y):
    library = pytest.importorskip("rliable.library")
    from rliable import metrics

    rng = np.random.RandomState(runs_y)
    x, y = rng.normal(size=(4, 2)), rng.normal(size=(runs_y, 2)) - 0.3
    np.random.seed(9)
    points, intervals = library.get_interval_estimates({"p": [x, y]}, metrics.probability_of_improvement, reps=2000)
    ours = stats.probability_of_improvement([x[:, 0], x[:, 1]], [y[:, 0], y[:, 1]], reps=2000, seed=9)
    assert ours.value == pytest.approx(points["p"], abs=1e-12)
    assert ours.ci == pytest.approx(tuple(intervals["p"][:, 0]), abs=1e-12)
