"""Interval estimates for few-run RL comparisons (Agarwal et al. 2021; the rliable library).

Scores come per task (env id) as one array of run scores each, ``scores[task] -> [runs]``;
tasks may have different run counts. The aggregates, with rliable's definitions:

- ``iqm``: interquartile mean, the mean of the middle 50% of all run scores pooled over
  tasks (``scipy.stats.trim_mean(scores, 0.25)``);
- ``median``: the median over tasks of each task's mean score (with one task: its mean);
- ``mean``: the mean over tasks of each task's mean score;
- ``optimality_gap``: how far the scores fall short of ``gamma`` on average,
  ``gamma - mean(min(score, gamma))`` (``gamma`` is 1 for normalised scores).

Confidence intervals come from a stratified bootstrap: each replicate resamples the runs of
each task with replacement, separately per task, and the interval is the percentile one
(2.5% and 97.5% of the replicates for 95%). The resampling is vectorised over replicates
and seeded; with equal run counts per task the indices are drawn exactly as rliable's
``StratifiedBootstrap`` draws them after ``np.random.seed(seed)``, so the numbers agree::

    estimates = interval_estimates([np.array([0.2, 0.5, 0.9])], reps=2000, seed=0)
    estimates["iqm"].value, estimates["iqm"].ci       # 0.5, (low, high)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AGGREGATES", "Interval", "aggregate", "area_under_curve", "bootstrap_indices", "curve_intervals",
           "interval_estimates", "normalize", "performance_profile", "probability_of_improvement"]

AGGREGATES = ("iqm", "median", "mean", "optimality_gap")
DEFAULT_REPS = 2000
DEFAULT_SEED = 0
CONFIDENCE = 0.95
_CHUNK_ELEMENTS = 4_000_000  # resampled values held at once by the curve and profile bootstraps

TaskScores = Sequence[np.ndarray]  # one 1-D array of run scores per task


@dataclass(frozen=True)
class Interval:
    """A point estimate and its confidence interval (``ci`` is None when not bootstrapped)."""

    value: float | None
    ci: tuple[float, float] | None = None


def normalize(scores: np.ndarray | float, random: float, max: float) -> np.ndarray:
    """``(score - random) / (max - random)``: 0 at the random policy's score, 1 at ``max``."""
    if max == random:
        raise ValueError(f"reference scores must differ: random={random}, max={max}")
    return (np.asarray(scores, dtype=np.float64) - random) / (max - random)


def aggregate(scores: TaskScores, gamma: float | None = 1.0) -> dict[str, float | None]:
    """The point estimates of :data:`AGGREGATES` (``optimality_gap`` is None without ``gamma``)."""
    batched = [np.asarray(task, dtype=np.float64)[None, :] for task in scores]
    values = _aggregates(batched, gamma)
    return {name: None if value is None else float(value[0]) for name, value in values.items()}


def bootstrap_indices(run_counts: Sequence[int], reps: int, seed: int) -> list[np.ndarray]:
    """For each task, ``[reps, runs]`` indices of its runs drawn with replacement.

    With equal run counts the draw is one ``RandomState(seed).randint(0, runs, (reps, runs,
    tasks))``: replicate after replicate, the same stream rliable's ``StratifiedBootstrap``
    takes from numpy's global generator seeded with ``seed``. Unequal counts draw task by task.
    """
    rng = np.random.RandomState(seed)
    if len(set(run_counts)) == 1:
        drawn = rng.randint(0, run_counts[0], size=(reps, run_counts[0], len(run_counts)))
        return [drawn[:, :, task] for task in range(len(run_counts))]
    return [rng.randint(0, count, size=(reps, count)) for count in run_counts]


def interval_estimates(scores: TaskScores, *, gamma: float | None = 1.0, reps: int = DEFAULT_REPS,
                       seed: int = DEFAULT_SEED, confidence: float = CONFIDENCE) -> dict[str, Interval]:
    """Each of :data:`AGGREGATES` with its stratified bootstrap percentile interval.

    All four share one set of ``reps`` resamples, as rliable computes them when given one
    function returning the four. Raises ValueError for a task without runs.
    """
    scores = _checked(scores)
    points = aggregate(scores, gamma)
    indices = bootstrap_indices([len(task) for task in scores], reps, seed)
    resampled = [task[index] for task, index in zip(scores, indices)]  # [reps, runs] per task
    replicates = _aggregates(resampled, gamma)
    return {name: Interval(points[name], None if replicates[name] is None
                           else _percentile_interval(replicates[name], confidence))
            for name in AGGREGATES}


def performance_profile(scores: TaskScores, taus: np.ndarray, *, reps: int = DEFAULT_REPS, seed: int = DEFAULT_SEED,
                        confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fraction, low, high)`` at each threshold of ``taus``: the fraction of all runs
    (pooled over tasks) whose score is above it, with a stratified bootstrap interval."""
    scores = _checked(scores)
    taus = np.asarray(taus, dtype=np.float64)
    pooled = np.concatenate(scores)
    point = (pooled[:, None] > taus).mean(axis=0)
    indices = bootstrap_indices([len(task) for task in scores], reps, seed)
    fractions = np.empty((reps, len(taus)))
    for start, stop in _chunks(reps, len(pooled) * len(taus)):
        drawn = np.concatenate([task[index[start:stop]] for task, index in zip(scores, indices)], axis=1)
        fractions[start:stop] = (drawn[:, :, None] > taus).mean(axis=1)
    low, high = _percentile_interval(fractions, confidence)
    return point, low, high


def probability_of_improvement(x: TaskScores, y: TaskScores, *, reps: int = DEFAULT_REPS, seed: int = DEFAULT_SEED,
                               confidence: float = CONFIDENCE) -> Interval:
    """P(X > Y): the chance that a run of X scores above a run of Y on the same task (ties
    count half; the Mann-Whitney U over ``runs_x * runs_y``), averaged over tasks, with a
    bootstrap interval resampling the runs of X and of Y independently within each task.

    As rliable, a task where both hold the very same scores counts 0.5. Its resamples draw
    X's then Y's indices replicate by replicate (rliable's ``StratifiedIndependentBootstrap``);
    with equal run counts that is one draw, otherwise one pair of draws per replicate.
    """
    x, y = _checked(x), _checked(y)
    if len(x) != len(y):
        raise ValueError(f"X and Y must have the same tasks: {len(x)} vs {len(y)}")
    point = float(np.mean([_improvement(a[None], b[None])[0] for a, b in zip(x, y)]))
    x_index, y_index = _independent_indices([len(task) for task in x], [len(task) for task in y], reps, seed)
    replicates = np.mean([_improvement(a[i], b[j]) for a, b, i, j in zip(x, y, x_index, y_index)], axis=0)
    return Interval(point, _percentile_interval(replicates, confidence))


def _independent_indices(x_counts: Sequence[int], y_counts: Sequence[int], reps: int,
                         seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per task, ``[reps, runs]`` indices for X and for Y, drawn independently.

    With one run count per side the replicates draw X's ``[runs, tasks]`` then Y's, in
    rliable's order (one draw when the counts are equal); tasks with different run counts
    draw task by task.
    """
    rng = np.random.RandomState(seed)
    tasks = len(x_counts)
    if len(set(x_counts)) == 1 and len(set(y_counts)) == 1:
        nx, ny = x_counts[0], y_counts[0]
        if nx == ny:
            drawn = rng.randint(0, nx, size=(reps, 2, nx, tasks))
            x_drawn, y_drawn = drawn[:, 0], drawn[:, 1]
        else:  # bounds differ: the stream interleaves, one replicate at a time
            pairs = [(rng.randint(0, nx, size=(nx, tasks)), rng.randint(0, ny, size=(ny, tasks))) for _ in range(reps)]
            x_drawn, y_drawn = np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
        return [x_drawn[:, :, t] for t in range(tasks)], [y_drawn[:, :, t] for t in range(tasks)]
    return ([rng.randint(0, count, size=(reps, count)) for count in x_counts],
            [rng.randint(0, count, size=(reps, count)) for count in y_counts])


def curve_intervals(curves: TaskScores, *, reps: int = DEFAULT_REPS, seed: int = DEFAULT_SEED,
                    confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(iqm, low, high)`` at each point of learning curves sampled on one grid:
    ``curves[task]`` is ``[runs, points]``; the same resamples serve every point."""
    curves = [np.asarray(task, dtype=np.float64) for task in curves]
    points = curves[0].shape[1]
    iqm = _iqm(np.concatenate(curves)[None].transpose(0, 2, 1))[0]
    indices = bootstrap_indices([len(task) for task in curves], reps, seed)
    values = np.empty((reps, points))
    runs = sum(len(task) for task in curves)
    for start, stop in _chunks(reps, runs * points):
        drawn = np.concatenate([task[index[start:stop]] for task, index in zip(curves, indices)], axis=1)
        values[start:stop] = _iqm(drawn.transpose(0, 2, 1))  # [chunk, points, runs] -> [chunk, points]
    low, high = _percentile_interval(values, confidence)
    return iqm, low, high


def area_under_curve(x: np.ndarray, y: np.ndarray, start: float, end: float) -> float:
    """The mean of the piecewise-linear curve ``(x, y)`` over ``[start, end]`` (its area
    divided by ``end - start``), held at its first / last value outside its own range."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if end <= start:
        return float(np.interp(start, x, y))
    inside = (x > start) & (x < end)
    knots = np.concatenate([[start], x[inside], [end]])
    return float(np.trapezoid(np.interp(knots, x, y), knots) / (end - start))


def _checked(scores: TaskScores) -> list[np.ndarray]:
    """The tasks' scores as float arrays; ValueError if there are none or a task has none."""
    arrays = [np.asarray(task, dtype=np.float64).ravel() for task in scores]
    if not arrays or any(len(task) == 0 for task in arrays):
        raise ValueError("every task needs at least one run score")
    return arrays


def _aggregates(scores: list[np.ndarray], gamma: float | None) -> dict[str, np.ndarray | None]:
    """The aggregates of batched scores: ``scores[task]`` is ``[batch, runs]`` -> ``[batch]`` each."""
    pooled = np.concatenate(scores, axis=1)  # [batch, all runs]
    task_means = np.stack([task.mean(axis=1) for task in scores], axis=1)  # [batch, tasks]
    return {
        "iqm": _iqm(pooled),
        "median": np.median(task_means, axis=1),
        "mean": task_means.mean(axis=1),
        "optimality_gap": None if gamma is None else gamma - np.minimum(pooled, gamma).mean(axis=1),
    }


def _iqm(values: np.ndarray) -> np.ndarray:
    """The 25%-trimmed mean along the last axis, cut as ``scipy.stats.trim_mean`` cuts."""
    count = values.shape[-1]
    cut = int(0.25 * count)
    return np.sort(values, axis=-1)[..., cut:count - cut].mean(axis=-1)


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(x > y) + P(x = y) / 2 per batch row (``x``: ``[batch, nx]``, ``y``: ``[batch, ny]``);
    0.5 for rows where x and y are the same array."""
    greater = (x[:, :, None] > y[:, None, :]).mean(axis=(1, 2))
    ties = (x[:, :, None] == y[:, None, :]).mean(axis=(1, 2))
    same = np.all(x == y, axis=1) if x.shape == y.shape else np.zeros(len(x), dtype=bool)
    return np.where(same, 0.5, greater + ties / 2)


def _percentile_interval(replicates: np.ndarray, confidence: float):
    """The percentile interval of bootstrap replicates along axis 0 (``np.percentile``'s
    linear interpolation, as arch's ``conf_int(method="percentile")``): floats for ``[reps]``
    replicates, arrays for ``[reps, points]``."""
    alpha = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [alpha, 100 - alpha], axis=0)
    return (float(low), float(high)) if np.ndim(low) == 0 else (low, high)


def _chunks(reps: int, elements_per_rep: int):
    """``(start, stop)`` blocks of replicates holding about _CHUNK_ELEMENTS values each."""
    step = max(1, _CHUNK_ELEMENTS // max(1, elements_per_rep))
    return [(start, min(reps, start + step)) for start in range(0, reps, step)]
