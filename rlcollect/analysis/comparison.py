"""The comparison of runs, as numbers: ``compare(runs)`` gives a :class:`Comparison`.

Only runs that finished or were solved count; every other run (failed, interrupted,
refused, still running or killed: no summary.json) is left out and listed apart with its
status (:func:`split_runs`). The counted runs are grouped by their settings with seeds pooled
(:func:`rlcollect.analysis.grouping.group_runs`). Each group becomes one row of mean ± std
over its runs (:func:`compare_table`) and, for its final evaluation return and its area
under the learning curve, interval estimates over its runs: IQM, median, mean and
optimality gap with stratified bootstrap confidence intervals (:func:`interval_table`,
numbers from :mod:`rlcollect.analysis.stats`). Over several envs, scores are normalised per
env (``(score - random) / (max - random)``) and aggregated over the envs as tasks.
Text and figures of a Comparison: :mod:`rlcollect.analysis.report`, :mod:`rlcollect.analysis.plots`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlcollect.analysis import stats as st
from rlcollect.analysis.grouping import Group, group_runs
from rlcollect.logging.runs import (
    ENDED_STATUSES,
    EVAL_RETURN,
    CompareError,
    RunRecord,
    for_env_id,
    solved_return_of,
    wall_clock,
)

__all__ = ["Comparison", "Excluded", "GroupStats", "Improvement", "NO_STATUS", "Row",
           "STATS_MIN_RUNS", "SUMMARY_COLUMNS", "Stat", "TO_THRESHOLD", "compare", "compare_table", "eval_curve",
           "final_scores", "improvement", "interval_table", "parse_normalize", "reference_scores_of", "score_curve",
           "score_ranges", "split_runs"]

# why a run without a status is left out: no summary.json (nor, for a W&B run, an exit record)
NO_STATUS = "no status (no summary.json: still running, or killed)"
# Built-in columns, from RunRecord.summary, with their titles and number formats.
SUMMARY_COLUMNS = {
    "final_eval_return": ("final eval return", ".1f"),
    "best_eval_return": ("best eval return", ".1f"),
    "frames_per_second": ("frames/s", ".0f"),
    "frames_to_solve": ("frames to solve", ".0f"),
    "seconds_to_solve": ("seconds to solve", ".2f"),
}
TO_THRESHOLD = ("frames_to_solve", "seconds_to_solve")
SCORE_COLUMN = "final_eval_return"  # the score the interval estimates are of
STATS_MIN_RUNS = 3  # --stats defaults to on when a group has this many runs
ScoreRange = tuple[float, float]  # (random, max) reference scores of one env
_NORMALIZE = re.compile(r"^(?:(?P<task>.+):)?(?P<pairs>(?:random|max)=[^,:]+,(?:random|max)=[^,:]+)$")


@dataclass(frozen=True)
class Stat:
    """Mean and (population) std of one number over the runs of a group that have it.

    ``count`` runs have the number (reached the threshold, logged the metric) out of ``runs``;
    mean and std are None when ``count`` is 0.
    """

    mean: float | None
    std: float | None
    count: int
    runs: int


@dataclass
class Row:
    """One group's line of the mean ± std table: ``stats`` maps a column name to its Stat.
    Over several envs a group has one row per env (``task``)."""

    group: str
    settings: dict[str, str]
    runs: int
    stats: dict[str, Stat]
    task: str | None = None

    @property
    def label(self) -> str:
        """The group's label, with the env id when the rows are per env."""
        return self.group if self.task is None else f"{self.group} [{self.task}]"


@dataclass(frozen=True)
class Excluded:
    """A run left out, and why (its status, or no evaluation for the interval estimates)."""

    path: Path
    reason: str


@dataclass
class GroupStats:
    """A group's interval estimates (:data:`rlcollect.analysis.stats.AGGREGATES` each).

    Attributes:
        group, settings: as the Group's label and settings.
        runs: the runs counted (those with an evaluation).
        tasks: runs counted per env id.
        final: of each run's final evaluation return (normalised when the env has reference scores).
        auc: of each run's area under its learning curve divided by the frames it spans:
            its mean score over the env's frame range, a run that stopped early held at its
            final score.
    """

    group: str
    settings: dict[str, str]
    runs: int
    tasks: dict[str, int]
    final: dict[str, st.Interval]
    auc: dict[str, st.Interval]


@dataclass(frozen=True)
class Improvement:
    """P(x > y): how likely a run of group ``x`` scores above a run of group ``y`` (final score)."""

    x: str
    y: str
    probability: st.Interval


@dataclass
class Comparison:
    """Everything ``rlcollect compare`` reports.

    Attributes:
        groups: the groups of counted runs; rows: their mean ± std table.
        stats: per group interval estimates (CIs only when ``bootstrap``).
        excluded: runs left out and why.
        improvements: the ``--versus`` pairs.
        ranges: each env id's reference scores (None: raw returns).
        spans: each env id's frame range for the area under the curve.
        gamma: the optimality gap's target (1 on normalised scores; the env's
            ``solved_return`` on raw returns of one env; None without one).
        bootstrap, reps, seed: whether and how the CIs were computed.
        notes: lines for the reader (why statistics were skipped, ...).
    """

    groups: list[Group]
    rows: list[Row]
    stats: list[GroupStats]
    excluded: list[Excluded]
    improvements: list[Improvement] = field(default_factory=list)
    ranges: dict[str, ScoreRange | None] = field(default_factory=dict)
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    gamma: float | None = None
    bootstrap: bool = False
    reps: int = st.DEFAULT_REPS
    seed: int = st.DEFAULT_SEED
    notes: list[str] = field(default_factory=list)

    @property
    def normalized(self) -> bool:
        """Whether the scores are normalised (every env has reference scores)."""
        return bool(self.ranges) and all(value is not None for value in self.ranges.values())


def split_runs(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], list[Excluded]]:
    """``(runs that count, runs left out)``: only a run whose :attr:`RunRecord.status` is
    finished or solved counts; any other (failed, interrupted, refused, still running or
    killed: no status) is left out and listed apart with its status, in order of status."""
    counted, excluded = [], []
    for run in runs:
        if run.status in ENDED_STATUSES:
            counted.append(run)
        else:
            reason = run.status or NO_STATUS
            excluded.append(Excluded(path=run.path, reason=f"{reason} ({run.error})" if run.error else reason))
    return counted, sorted(excluded, key=lambda run: run.reason.split(" ", 1)[0])  # by status


def compare_table(groups: Sequence[Group], metrics: Sequence[str] = (),
                  sort: str = "final_eval_return") -> list[Row]:
    """One Row per group with the SUMMARY_COLUMNS and the final value of each of ``metrics``
    (metrics.jsonl / W&B history keys), sorted by ``sort``.

    ``sort`` is a summary column or a metric (added to the columns if not in ``metrics``).
    Returns and throughput sort descending; to-threshold numbers and losses ascending, with
    the groups where more runs reached the threshold first. Groups lacking the number go last.

    Raises:
        CompareError: for a metric no run logged, a non-numeric metric, or an unknown sort.
    """
    logged = {key for group in groups for run in group.runs for row in run.history for key in row}
    metrics = list(dict.fromkeys(metrics))
    if sort not in SUMMARY_COLUMNS and sort not in metrics:
        if sort not in logged:
            raise CompareError(f"unknown sort metric {sort!r}: choose one of {', '.join(SUMMARY_COLUMNS)} "
                               f"or a logged metric ({_known(logged)})")
        metrics.append(sort)
    for metric in metrics:
        if metric not in logged:
            raise CompareError(f"unknown metric {metric!r}: no run logged it (logged: {_known(logged)})")
    tasks = list(dict.fromkeys(run.task for group in groups for run in group.runs))
    rows = []
    for group in groups:
        for task in tasks if len(tasks) > 1 else [None]:
            runs = [run for run in group.runs if task is None or run.task == task]
            if not runs:
                continue
            stats = {column: _stat([run.summary.get(column) for run in runs]) for column in SUMMARY_COLUMNS}
            stats.update({metric: _stat([_final_value(run, metric) for run in runs]) for metric in metrics})
            rows.append(Row(group=group.label, settings=group.settings, runs=len(runs), stats=stats, task=task))
    return sorted(rows, key=lambda row: (tasks.index(row.task) if row.task else 0, *_sort_key(row, sort)))


def parse_normalize(specs: Sequence[str]) -> dict[str | None, ScoreRange]:
    """``--normalize`` values as ``{env id or None (every env): (random, max)}``:
    ``random=R,max=M`` for every env, ``ENV_ID:random=R,max=M`` for one.

    Raises:
        CompareError: for a malformed value or equal references.
    """
    ranges: dict[str | None, ScoreRange] = {}
    for spec in specs:
        match = _NORMALIZE.match(spec.strip())
        if not match:
            raise CompareError(f"--normalize {spec!r}: expected random=R,max=M or ENV_ID:random=R,max=M")
        pairs = dict(item.split("=", 1) for item in match["pairs"].split(","))
        try:
            random, best = float(pairs["random"]), float(pairs["max"])
        except (KeyError, ValueError):
            raise CompareError(f"--normalize {spec!r}: random and max must both be numbers") from None
        if random == best:
            raise CompareError(f"--normalize {spec!r}: random and max must differ")
        ranges[match["task"]] = (random, best)
    return ranges


def score_ranges(runs: Sequence[RunRecord], given: dict[str | None, ScoreRange] | None = None
                 ) -> dict[str, ScoreRange | None]:
    """Each env id's reference scores: ``given`` for that env id, else ``given[None]``,
    else the run config's ``env.reference_scores`` (the env presets'), else None (raw returns)."""
    given = given or {}
    ranges: dict[str, ScoreRange | None] = {}
    for run in runs:
        task = run.task
        if task in ranges and ranges[task] is not None:
            continue
        ranges[task] = given.get(task) or given.get(None) or reference_scores_of(run.config)
    return ranges


def reference_scores_of(config: dict[str, Any]) -> ScoreRange | None:
    """``env.reference_scores`` of a run config for its env id: ``{random: R, max: M}`` set
    for the run, or ``{env id: {random: R, max: M}}`` (the presets); None if absent."""
    env = config.get("env")
    if not isinstance(env, dict) or not env.get("reference_scores"):
        return None
    value = env["reference_scores"]
    if not (isinstance(value, dict) and set(value) == {"random", "max"}):
        value = for_env_id(env.get("id"), value)
    if not isinstance(value, dict) or value.get("random") is None or value.get("max") is None:
        return None
    random, best = float(value["random"]), float(value["max"])
    return None if random == best else (random, best)


def eval_curve(run: RunRecord, x_key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, eval return)`` of the run's evaluation rows (those with a non-null return);
    x is the row's ``"step"`` or, for ``"time"``, its :func:`~rlcollect.logging.runs.wall_clock` seconds."""
    xs = wall_clock(run.history) if x_key == "time" else [row.get(x_key) for row in run.history]
    points = [(x, row[EVAL_RETURN]) for row, x in zip(run.history, xs)
              if row.get(EVAL_RETURN) is not None and x is not None]
    x, y = zip(*points) if points else ((), ())
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


def score_curve(run: RunRecord, ranges: dict[Any, ScoreRange | None] | None,
                x_key: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """The run's :func:`eval_curve`, its scores normalised when ``ranges`` has its env's
    reference scores ``(random, max)``."""
    x, y = eval_curve(run, x_key)
    score_range = (ranges or {}).get(run.task)
    return (x, y) if score_range is None else (x, st.normalize(y, *score_range))


def interval_table(groups: Sequence[Group], ranges: dict[str, ScoreRange | None], *, bootstrap: bool = True,
                   reps: int = st.DEFAULT_REPS, seed: int = st.DEFAULT_SEED
                   ) -> tuple[list[GroupStats], list[Excluded], dict[str, tuple[float, float]], float | None]:
    """Each group's interval estimates of its final score and its area under the learning
    curve, best IQM first; ``(stats, runs without evaluation, frame span per env, gamma)``.

    Scores are normalised per env with ``ranges`` (from :func:`score_ranges`); with one env
    and no reference scores they stay returns and the optimality gap is to the env's
    ``solved_return`` (None without one). Without ``bootstrap`` only the point estimates.

    Raises:
        CompareError: for several envs of which one has no reference scores.
    """
    runs = [run for group in groups for run in group.runs]
    missing = sorted(str(task) for task, span in ranges.items() if span is None)
    if missing and len(ranges) > 1:
        raise CompareError(f"scores of several envs need reference scores to be compared: none for "
                           f"{', '.join(missing)} (give --normalize ENV_ID:random=R,max=M)")
    gamma = 1.0 if not missing else solved_return_of(runs[0].config) if runs else None
    curves = {id(run): score_curve(run, ranges) for run in runs}
    spans = {}
    for task in ranges:
        xs = [curves[id(run)][0] for run in runs if run.task == task and len(curves[id(run)][0])]
        if xs:
            spans[task] = (float(min(x[0] for x in xs)), float(max(x[-1] for x in xs)))
    table = []
    for group in groups:
        per_task: dict[Any, list[RunRecord]] = {}
        for run in group.runs:
            if len(curves[id(run)][0]):
                per_task.setdefault(run.task, []).append(run)
        final = [np.array([curves[id(run)][1][-1] for run in task_runs]) for task_runs in per_task.values()]
        auc = [np.array([st.area_under_curve(*curves[id(run)], *spans[task]) for run in task_runs])
               for task, task_runs in per_task.items()]
        table.append(GroupStats(group=group.label, settings=group.settings, runs=sum(len(task) for task in final),
                                tasks={str(task): len(task_runs) for task, task_runs in per_task.items()},
                                final=_estimates(final, gamma, bootstrap, reps, seed),
                                auc=_estimates(auc, gamma, bootstrap, reps, seed)))
    table.sort(key=lambda row: (row.final["iqm"].value is None, -(row.final["iqm"].value or 0.0), row.group))
    excluded = [Excluded(path=run.path, reason=f"no {EVAL_RETURN} logged (left out of the interval estimates)")
                for run in runs if not len(curves[id(run)][0])]
    return table, excluded, spans, gamma


def final_scores(group: Group, ranges: dict[str, ScoreRange | None]) -> dict[str | None, np.ndarray]:
    """The group's final scores (last evaluation, normalised when its env has reference
    scores) per env id, in order of appearance; runs without evaluation left out."""
    per_task: dict[Any, list[float]] = {}
    for run in group.runs:
        x, y = score_curve(run, ranges)
        if len(x):
            per_task.setdefault(run.task, []).append(float(y[-1]))
    return {task: np.array(scores) for task, scores in per_task.items()}


def improvement(groups: Sequence[Group], x: str, y: str, ranges: dict[str, ScoreRange | None], *,
                reps: int = st.DEFAULT_REPS, seed: int = st.DEFAULT_SEED) -> Improvement:
    """P(X > Y) of the final scores of groups ``x`` and ``y`` (each a label, a setting or
    its value, or a text naming one group), over the envs both have, with
    its stratified bootstrap CI.

    Raises:
        CompareError: for a label that names no group or several, or groups with no env in common.
    """
    group_x, group_y = _find_group(groups, x), _find_group(groups, y)
    scores_x, scores_y = final_scores(group_x, ranges), final_scores(group_y, ranges)
    tasks = [task for task in scores_x if task in scores_y]
    if not tasks:
        raise CompareError(f"--versus {x!r} {y!r}: the two groups have no evaluated env in common")
    probability = st.probability_of_improvement([scores_x[task] for task in tasks], [scores_y[task] for task in tasks],
                                                reps=reps, seed=seed)
    return Improvement(x=group_x.label, y=group_y.label, probability=probability)


def compare(runs: Sequence[RunRecord], *, metrics: Sequence[str] = (), sort: str = "final_eval_return",
            group_by: Sequence[str] | None = None, bootstrap: bool | None = None,
            normalize: dict[str | None, ScoreRange] | None = None, versus: Sequence[tuple[str, str]] = (),
            reps: int = st.DEFAULT_REPS, seed: int = st.DEFAULT_SEED) -> Comparison:
    """Leave out the runs that did not finish or solve (:func:`split_runs`), group,
    tabulate and estimate: a Comparison.

    ``bootstrap`` None (the default) computes the confidence intervals when a group has at
    least STATS_MIN_RUNS runs, and skips them (with a note) when several envs lack
    reference scores; True insists (and raises), False gives the point estimates only.

    Raises:
        CompareError: for no counted run, an unknown metric, sort, group or ``reps``.
    """
    if reps < 1:
        raise CompareError(f"--reps must be a positive number of resamples, got {reps}")
    counted, excluded = split_runs(runs)
    if not counted:
        raise CompareError("no run to compare: none finished or was solved ("
                           + "; ".join(f"{item.path}: {item.reason}" for item in excluded) + ")")
    groups = group_runs(counted, group_by)
    rows = compare_table(groups, metrics, sort)
    ranges = score_ranges(counted, normalize)
    notes = []
    want = bootstrap if bootstrap is not None else any(len(group.runs) >= STATS_MIN_RUNS for group in groups)
    try:
        table, no_eval, spans, gamma = interval_table(groups, ranges, bootstrap=want, reps=reps, seed=seed)
    except CompareError as error:
        if bootstrap:
            raise
        notes.append(f"no interval estimates: {error}")
        table, no_eval, spans, gamma, want = [], [], {}, None, False
    improvements = [improvement(groups, x, y, ranges, reps=reps, seed=seed) for x, y in versus]
    return Comparison(groups=groups, rows=rows, stats=table, excluded=excluded + no_eval, improvements=improvements,
                      ranges=ranges, spans=spans, gamma=gamma, bootstrap=want, reps=reps, seed=seed, notes=notes)


def _estimates(scores: list[np.ndarray], gamma: float | None, bootstrap: bool, reps: int,
               seed: int) -> dict[str, st.Interval]:
    """The interval estimates of per-env scores (points only without ``bootstrap``; None without scores)."""
    if not scores:
        return {name: st.Interval(None) for name in st.AGGREGATES}
    if bootstrap:
        return st.interval_estimates(scores, gamma=gamma, reps=reps, seed=seed)
    return {name: st.Interval(value) for name, value in st.aggregate(scores, gamma).items()}


def _find_group(groups: Sequence[Group], name: str) -> Group:
    """The group labelled ``name``; else the one group with ``name`` as a whole setting
    (``collector=sync``) or a setting's value (``sync``: not ``collector=multisync``); else
    the one group whose label contains it."""
    exact = [group for group in groups if group.label == name]
    setting = [group for group in groups
               if any(name in (value, f"{key}={value}") for key, value in group.settings.items())]
    found = exact or setting or [group for group in groups if name in group.label]
    if len(found) != 1:
        labels = ", ".join(repr(group.label) for group in groups)
        raise CompareError(f"--versus {name!r} names {'no group' if not found else 'several groups'} "
                           f"(groups: {labels})")
    return found[0]


def _final_value(run: RunRecord, metric: str) -> float | None:
    """The last non-null value of ``metric`` in the run's history."""
    for row in reversed(run.history):
        value = row.get(metric)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CompareError(f"metric {metric!r} is not a number in {run.path}: {value!r}")
            return value
    return None


def _stat(values: Sequence[float | None]) -> Stat:
    """Mean and population std of the non-missing (not None, not NaN) values."""
    present = [float(value) for value in values if value is not None and not math.isnan(value)]
    if not present:
        return Stat(mean=None, std=None, count=0, runs=len(values))
    mean = math.fsum(present) / len(present)
    std = math.sqrt(math.fsum((value - mean) ** 2 for value in present) / len(present))
    return Stat(mean=mean, std=std, count=len(present), runs=len(values))


def _ascending(column: str) -> bool:
    """To-threshold numbers and losses are better small; returns and throughput large."""
    return column in TO_THRESHOLD or "loss" in column.rsplit("/", 1)[-1]


def _sort_key(row: Row, column: str) -> tuple:
    """Best first; for to-threshold columns more runs reached first; missing last; then label."""
    stat = row.stats[column]
    if stat.mean is None:
        return (1, 0.0, 0.0, row.label)
    reached = -stat.count / stat.runs if column in TO_THRESHOLD else 0.0
    return (0, reached, stat.mean if _ascending(column) else -stat.mean, row.label)


def _known(keys: set[str], shown: int = 12) -> str:
    """A short, sorted list of logged keys for an error message."""
    names = sorted(key for key in keys if key != "step")
    return ", ".join(names[:shown]) + (f", ... ({len(names)} in all)" if len(names) > shown else "")
