"""Compare runs side by side: ``rlcollect compare PATH... [--stats] [--normalize] [--format] [--plot] [--wandb]``.

Runs are grouped by their settings with seeds pooled (:func:`group_runs`); runs that failed
or were interrupted are left out and listed apart (:func:`split_runs`). Each group becomes
one row of mean ± std over its runs (:func:`compare_table`) and, for its final evaluation
return and its area under the learning curve, interval estimates over its runs: IQM,
median, mean and optimality gap with stratified bootstrap confidence intervals
(:func:`interval_table`, numbers from :mod:`rlcollect.logging.stats`). Over several envs,
scores are normalised per env (``(score - random) / (max - random)``) and aggregated over
the envs as tasks::

    comparison = compare(load_runs(["multirun/2026-01-01/12-00-00"]), bootstrap=True)
    print(render_comparison(comparison, "markdown"))     # or "table", "csv", "json", "html"
    plot_report(comparison, "curves.png")                 # curves, profile (PNG and SVG)
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlcollect.logging import stats as st
from rlcollect.logging.plots import plot_curves, score_curve
from rlcollect.logging.runs import (
    EVAL_RETURN,
    INCLUDED_STATUSES,
    CompareError,
    Group,
    RunRecord,
    for_env_id,
    load_runs,
    load_wandb_runs,
    solved_return_of,
)

__all__ = ["CompareError", "Comparison", "Excluded", "Group", "GroupStats", "Improvement", "Row", "RunRecord",
           "Stat", "FORMATS", "SUMMARY_COLUMNS", "compare", "compare_runs", "compare_table", "final_scores",
           "group_runs", "interval_table", "load_runs", "load_wandb_runs", "parse_normalize", "plot_curves", "render",
           "score_ranges", "split_runs"]

SEED_KEY = "seed"
# keys that change how a run is run or recorded, never its result: left out of group labels
# (unless --group-by names them); a key names itself and everything under it
NOT_RESULT_KEYS = ("progress", "logger", "checkpoint_every_frames", "torch_threads", "resume", "objective",
                   "eval.video", "collector.batch_timeout", "collector.shutdown_timeout",
                   "collector.worker_cpu_affinity", "collector.worker_torch_threads", "collector.start_method")


def changes_results(key: str) -> bool:
    """Whether the setting ``key`` can change a run's result (see NOT_RESULT_KEYS)."""
    return key != SEED_KEY and not any(key == other or key.startswith(other + ".") for other in NOT_RESULT_KEYS)
DEFAULT_LABEL = "default"
UNSET_VALUE = "-"  # a key a run neither sets nor holds in its config
FORMATS = ("table", "markdown", "csv", "json", "html")
TABLE_FORMATS = ("table", "markdown", "csv", "json")  # render()'s: the mean ± std table alone
# Built-in columns, from RunRecord.summary, with their titles and number formats.
SUMMARY_COLUMNS = {
    "final_eval_return": ("final eval return", ".1f"),
    "best_eval_return": ("best eval return", ".1f"),
    "frames_per_second": ("frames/s", ".0f"),
    "frames_to_solve": ("frames to solve", ".0f"),
    "seconds_to_solve": ("seconds to solve", ".2f"),
}
TO_THRESHOLD = ("frames_to_solve", "seconds_to_solve")
METRIC_FORMAT = ".4g"
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
    """A group's interval estimates (:data:`rlcollect.logging.stats.AGGREGATES` each).

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
    """``(runs that count, runs left out)``: a run that failed or was interrupted (its
    :attr:`RunRecord.status`) is left out of the comparison and listed apart."""
    counted, excluded = [], []
    for run in runs:
        if run.status in INCLUDED_STATUSES:
            counted.append(run)
        else:
            reason = run.status or "unknown status"
            excluded.append(Excluded(path=run.path, reason=f"{reason} ({run.error})" if run.error else reason))
    return counted, sorted(excluded, key=lambda run: run.reason.split(" ", 1)[0])  # by status


def group_runs(runs: Sequence[RunRecord], group_by: Sequence[str] | None = None) -> list[Group]:
    """Group ``runs`` by their settings with ``seed`` removed, in order of first appearance.

    The settings are the runs' overrides; a run without known overrides (no
    .hydra/overrides.yaml, no W&B run name) adds the config keys in which it differs from the
    others, a node whose ``_target_`` or ``name`` differs standing for its whole subtree
    (``collector=multisync``). A key one run sets and another does not takes, for the other,
    its config's value or, for a config group (``collector``), the group choice Hydra made
    (see :attr:`RunRecord.choices`). An overridden value is compared as the config holds it,
    so ``algo.lr=3e-4`` and ``algo.lr=0.0003`` are one setting. When the runs span several
    envs, the keys that only name the env (``env``, ``env.*``, ``eval.*`` that follow the
    env id) are left out: each group pools its runs over the envs (the tasks).

    The label holds only the keys whose value differs across groups, group choices first:
    ``collector=multisync, algo.lr=0.0003`` ("default" when none differs). ``group_by``
    names the keys to group by instead (all of them in the label).
    """
    if group_by:
        keys = list(dict.fromkeys(group_by))
        per_run = [{key: _run_value(run, key, _override_settings(run)) for key in keys} for run in runs]
        chosen_keys = keys
    else:
        per_run = _settings_of(runs)
        chosen_keys = [key for key in _label_order({key for settings in per_run for key in settings})
                       if len({settings.get(key) for settings in per_run}) > 1]
    groups: dict[tuple[str | None, ...], Group] = {}
    for run, settings in zip(runs, per_run):
        chosen = {key: settings.get(key, UNSET_VALUE) for key in chosen_keys}
        group_key = tuple(chosen.values())
        if group_key not in groups:
            label = ", ".join(f"{key}={value}" for key, value in chosen.items()) or DEFAULT_LABEL
            groups[group_key] = Group(label=label, settings=chosen)
        groups[group_key].runs.append(run)
    return list(groups.values())


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


def render(rows: Sequence[Row], fmt: str = "table") -> str:
    """The rows as an aligned text table, a markdown pipe table, CSV (with a header) or JSON
    (a list of group dicts: group, settings, runs and per column mean, std, n).

    Raises:
        CompareError: for an unknown ``fmt``.
    """
    if fmt not in TABLE_FORMATS:
        raise CompareError(f"unknown format {fmt!r}: choose one of {', '.join(TABLE_FORMATS)}")
    columns = list(rows[0].stats) if rows else list(SUMMARY_COLUMNS)
    if fmt == "json":
        return json.dumps([_row_dict(row, columns) for row in rows], indent=2)
    if fmt == "csv":
        return _render_csv(rows, columns)
    header, *cells = table_cells(rows)
    if fmt == "markdown":
        lines = [header, ["---", *["---:"] * (len(header) - 1)], *cells]
        return "\n".join("| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines)
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    lines = [header, ["-" * width for width in widths], *cells]
    return "\n".join("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(line, widths))).rstrip()
                     for line in lines)


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
    """P(X > Y) of the final scores of groups ``x`` and ``y`` (labels, or a text naming one
    group), over the envs both have, with its stratified bootstrap CI.

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
    """Leave out failed and interrupted runs, group, tabulate and estimate: a Comparison.

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
        raise CompareError("no run to compare: every run failed or was interrupted ("
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


def table_cells(rows: Sequence[Row]) -> list[list[str]]:
    """The mean ± std table as text cells: a header line, then one line per row."""
    columns = list(rows[0].stats) if rows else list(SUMMARY_COLUMNS)
    header = ["group", "runs", *(SUMMARY_COLUMNS.get(column, (column,))[0] for column in columns)]
    return [header, *([row.label, str(row.runs), *(_cell(column, row.stats[column]) for column in columns)]
                      for row in rows)]


def compare_runs(paths: Sequence[str | os.PathLike[str]] = (), *, wandb_dir: str | os.PathLike[str] | None = None,
                 metrics: Sequence[str] = (), sort: str = "final_eval_return", fmt: str = "table",
                 plot: str | os.PathLike[str] | None = None, group_by: Sequence[str] | None = None,
                 bootstrap: bool | None = None, normalize: Sequence[str] = (),
                 versus: Sequence[tuple[str, str]] = (), reps: int = st.DEFAULT_REPS) -> str:
    """What ``rlcollect compare`` prints: load (run folders, or W&B runs under ``wandb_dir``),
    :func:`compare`, render; with ``plot``, also write the figures there (PNG and SVG).

    Raises:
        CompareError: for no source or both, no runs, an unknown metric, sort, format or group.
    """
    from rlcollect.logging.report import render_comparison

    if bool(paths) == (wandb_dir is not None):
        raise CompareError("give run folders (PATH...) or --wandb DIR, not both" if paths
                           else "give at least one run folder (PATH...) or --wandb DIR")
    if fmt not in FORMATS:
        raise CompareError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    runs = load_wandb_runs(wandb_dir) if wandb_dir is not None else load_runs(list(paths))
    comparison = compare(runs, metrics=metrics, sort=sort, group_by=group_by, bootstrap=bootstrap,
                         normalize=parse_normalize(normalize), versus=versus, reps=reps)
    text = render_comparison(comparison, fmt)
    if plot is not None:
        from rlcollect.logging.plots import plot_report

        plot_report(comparison, plot)
    return text


def _estimates(scores: list[np.ndarray], gamma: float | None, bootstrap: bool, reps: int,
               seed: int) -> dict[str, st.Interval]:
    """The interval estimates of per-env scores (points only without ``bootstrap``; None without scores)."""
    if not scores:
        return {name: st.Interval(None) for name in st.AGGREGATES}
    if bootstrap:
        return st.interval_estimates(scores, gamma=gamma, reps=reps, seed=seed)
    return {name: st.Interval(value) for name, value in st.aggregate(scores, gamma).items()}


def _find_group(groups: Sequence[Group], name: str) -> Group:
    """The group labelled ``name``, else the one group whose label contains it."""
    exact = [group for group in groups if group.label == name]
    found = exact or [group for group in groups if name in group.label]
    if len(found) != 1:
        labels = ", ".join(repr(group.label) for group in groups)
        raise CompareError(f"--versus {name!r} names {'no group' if not found else 'several groups'} "
                           f"(groups: {labels})")
    return found[0]


def _settings_of(runs: Sequence[RunRecord]) -> list[dict[str, str]]:
    """Each run's settings (see :func:`group_runs`), without seed and, over several envs, the env keys."""
    overridden = [_override_settings(run) for run in runs]
    keys = {key for settings in overridden for key in settings}
    if any(run.overrides is None for run in runs):
        flat = [_flatten(run.config) for run in runs]
        keys |= {key for key in _collapse(flat, runs) if not any(_covers(known, key) for known in keys)}
    per_run = [{key: _run_value(run, key, settings) for key in keys} for run, settings in zip(runs, overridden)]
    tasks = [run.task for run in runs]
    if len(set(tasks)) > 1:
        for key in [key for key in keys if _names_the_task(key, per_run, tasks)]:
            for settings in per_run:
                del settings[key]
    return per_run


def _collapse(flat: list[dict[str, str]], runs: Sequence[RunRecord]) -> list[str]:
    """The flattened config keys that differ across runs, a top-level node whose
    ``_target_`` or ``name`` differs standing for all of its keys."""
    keys = sorted(key for key in {key for settings in flat for key in settings} if changes_results(key))
    differing = [key for key in keys if len({settings.get(key) for settings in flat}) > 1]
    nodes = {key.split(".", 1)[0] for key in differing if key.rsplit(".", 1)[-1] in ("_target_", "name")
             and key.count(".") == 1}
    return sorted(nodes | {key for key in differing if key.split(".", 1)[0] not in nodes})


def _covers(known: str, key: str) -> bool:
    """Whether override key ``known`` already holds config key ``key`` (the same key, or a node above or below)."""
    return key == known or key.startswith(known + ".") or known.startswith(key + ".")


def _names_the_task(key: str, per_run: list[dict[str, str]], tasks: list[str | None]) -> bool:
    """An env or eval key whose value follows the env id (one value per env id)."""
    if not (key == "env" or key.startswith(("env.", "eval."))):
        return False
    values: dict[str | None, set[str | None]] = {}
    for settings, task in zip(per_run, tasks):
        values.setdefault(task, set()).add(settings.get(key))
    return all(len(seen) == 1 for seen in values.values())


def _label_order(keys: set[str]) -> list[str]:
    """Config group choices (no dot) first, then dotted keys, each sorted."""
    return sorted(keys, key=lambda key: ("." in key, key))


def _run_value(run: RunRecord, key: str, overridden: dict[str, str]) -> str:
    """The run's value of ``key``: as overridden, else its config's value (a per-env mapping's
    entry for its env id), else its group choice (from Hydra, or the node's ``name`` /
    ``_target_`` class), else "-"."""
    if key in overridden:
        return overridden[key]
    value = _config_value(run.config, key)
    if value is not None:
        return value
    if key in run.choices:
        return run.choices[key]
    node = _config_node(run.config, key)
    if isinstance(node, dict) and run.task in node:  # a per-env setting of the presets: {env id: value}
        return _format_value(node[run.task])
    if isinstance(node, dict):
        if node.get("name") is not None:
            return _format_value(node["name"])
        if node.get("_target_"):
            return str(node["_target_"]).rsplit(".", 1)[-1]
    return UNSET_VALUE


def _override_settings(run: RunRecord) -> dict[str, str]:
    """A run's overrides as {key: value as its config holds it}, without seed; a group
    override (``collector=multisync``) keeps its value."""
    settings = {}
    for item in run.overrides or []:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if changes_results(key):
            settings[key] = (_config_value(run.config, key) or value) if sep else "<deleted>"
    return settings


def _config_node(config: dict[str, Any], dotted_key: str) -> Any:
    """The config's node at ``a.b.c``, or None."""
    node: Any = config
    for part in dotted_key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _config_value(config: dict[str, Any], dotted_key: str) -> str | None:
    """The config's value at ``a.b.c``, formatted; None if absent or a mapping (a group)."""
    node = _config_node(config, dotted_key)
    return None if node is None and not _has_key(config, dotted_key) or isinstance(node, dict) else _format_value(node)


def _has_key(config: dict[str, Any], dotted_key: str) -> bool:
    """Whether ``a.b.c`` is in the config (its value may be null)."""
    parent, _, leaf = dotted_key.rpartition(".")
    node = _config_node(config, parent) if parent else config
    return isinstance(node, dict) and leaf in node


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"} (values formatted)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = _format_value(value)
    return flat


def _format_value(value: Any) -> str:
    """A config value as text that is the same from config.yaml and from W&B's config
    (which writes 475.0 as 475): integral floats lose their ``.0``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


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


def _cell(column: str, stat: Stat) -> str:
    """``mean ± std``, with ``(count/runs)`` for to-threshold columns and partial columns."""
    spec = SUMMARY_COLUMNS.get(column, (column, METRIC_FORMAT))[1]
    text = "-" if stat.mean is None else f"{stat.mean:{spec}} ± {stat.std:{spec}}"
    if column in TO_THRESHOLD or stat.count < stat.runs:
        text += f" ({stat.count}/{stat.runs})"
    return text


def _row_dict(row: Row, columns: Sequence[str]) -> dict[str, Any]:
    """A Row as JSON-ready plain values."""
    return {"group": row.group, **({"task": row.task} if row.task else {}), "settings": row.settings, "runs": row.runs,
            **{column: {"mean": row.stats[column].mean, "std": row.stats[column].std, "n": row.stats[column].count}
               for column in columns}}


def _render_csv(rows: Sequence[Row], columns: Sequence[str]) -> str:
    """CSV with a header: group, runs, then <column>_mean, <column>_std, <column>_n."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["group", "runs", *(f"{column}_{part}" for column in columns for part in ("mean", "std", "n"))])
    for row in rows:
        numbers = []
        for column in columns:
            stat = row.stats[column]
            numbers += ["" if stat.mean is None else repr(stat.mean), "" if stat.std is None else repr(stat.std),
                        stat.count]
        writer.writerow([row.label, row.runs, *numbers])
    return buffer.getvalue()


def _known(keys: set[str], shown: int = 12) -> str:
    """A short, sorted list of logged keys for an error message."""
    names = sorted(key for key in keys if key != "step")
    return ", ".join(names[:shown]) + (f", ... ({len(names)} in all)" if len(names) > shown else "")
