"""Compare runs side by side: ``rlcollect compare PATH... [--sort] [--metric] [--format] [--plot] [--wandb]``.

Runs are grouped by their settings with seeds pooled: two runs are in one group when their
overrides (``.hydra/overrides.yaml``, or the W&B run name) agree once ``seed`` is removed.
Each group becomes one row of mean ± std over its runs::

    runs = load_runs(["multirun/2026-01-01/12-00-00"])      # or load_wandb_runs(folder)
    rows = compare_table(group_runs(runs), metrics=["train/loss_value"], sort="final_eval_return")
    print(render(rows, "markdown"))
    plot_curves(group_runs(runs), "curves.png")
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlcollect.logging.plots import plot_curves
from rlcollect.logging.runs import CompareError, Group, RunRecord, load_runs, load_wandb_runs

__all__ = ["CompareError", "Group", "Row", "RunRecord", "Stat", "FORMATS", "SUMMARY_COLUMNS", "compare_runs",
           "compare_table", "group_runs", "load_runs", "load_wandb_runs", "plot_curves", "render"]

SEED_KEY = "seed"
DEFAULT_LABEL = "default"
DEFAULT_VALUE = "<default>"  # an override key a run did not set and its config does not hold as a value
FORMATS = ("table", "markdown", "csv", "json")
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
    """One group's line of the comparison: ``stats`` maps a column name to its Stat."""

    group: str
    settings: dict[str, str]
    runs: int
    stats: dict[str, Stat]


def group_runs(runs: Sequence[RunRecord]) -> list[Group]:
    """Group ``runs`` by their settings with ``seed`` removed, in order of first appearance.

    The settings are the runs' overrides when every run has them, else (fallback) their
    flattened resolved configs. A key one run overrides and another does not takes, for
    the other, its config's value (or "<default>" for a config group choice such as
    ``collector=multisync``), and an overridden value is compared as the config holds it,
    so ``algo.lr=3e-4`` and ``algo.lr=0.0003`` are one setting. Only the keys whose value
    differs across runs make up the label.
    """
    if all(run.overrides is not None for run in runs):
        per_run = [_override_settings(run) for run in runs]
        keys = sorted({key for settings in per_run for key in settings})
        per_run = [{key: settings.get(key) or _config_value(run.config, key) or DEFAULT_VALUE for key in keys}
                   for run, settings in zip(runs, per_run)]
    else:
        per_run = [_flatten(run.config) for run in runs]
        for settings in per_run:
            settings.pop(SEED_KEY, None)
    keys = sorted({key for settings in per_run for key in settings})
    differing = [key for key in keys if len({settings.get(key) for settings in per_run}) > 1]
    groups: dict[tuple[str | None, ...], Group] = {}
    for run, settings in zip(runs, per_run):
        chosen = {key: settings.get(key, DEFAULT_VALUE) for key in differing}
        group_key = tuple(chosen.values())
        if group_key not in groups:
            label = ",".join(f"{key}={value}" for key, value in chosen.items()) or DEFAULT_LABEL
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
    rows = []
    for group in groups:
        stats = {column: _stat([run.summary.get(column) for run in group.runs]) for column in SUMMARY_COLUMNS}
        stats.update({metric: _stat([_final_value(run, metric) for run in group.runs]) for metric in metrics})
        rows.append(Row(group=group.label, settings=group.settings, runs=len(group.runs), stats=stats))
    return sorted(rows, key=lambda row: _sort_key(row, sort))


def render(rows: Sequence[Row], fmt: str = "table") -> str:
    """The rows as an aligned text table, a markdown pipe table, CSV (with a header) or JSON
    (a list of group dicts: group, settings, runs and per column mean, std, n).

    Raises:
        CompareError: for an unknown ``fmt``.
    """
    if fmt not in FORMATS:
        raise CompareError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    columns = list(rows[0].stats) if rows else list(SUMMARY_COLUMNS)
    if fmt == "json":
        return json.dumps([_row_dict(row, columns) for row in rows], indent=2)
    if fmt == "csv":
        return _render_csv(rows, columns)
    header = ["group", "runs", *(SUMMARY_COLUMNS.get(column, (column,))[0] for column in columns)]
    cells = [[row.group, str(row.runs), *(_cell(column, row.stats[column]) for column in columns)] for row in rows]
    if fmt == "markdown":
        lines = [header, ["---", *["---:"] * (len(header) - 1)], *cells]
        return "\n".join("| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines)
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    lines = [header, ["-" * width for width in widths], *cells]
    return "\n".join("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(line, widths))).rstrip()
                     for line in lines)


def compare_runs(paths: Sequence[str | os.PathLike[str]] = (), *, wandb_dir: str | os.PathLike[str] | None = None,
                 metrics: Sequence[str] = (), sort: str = "final_eval_return", fmt: str = "table",
                 plot: str | os.PathLike[str] | None = None) -> str:
    """What ``rlcollect compare`` prints: load (run folders, or W&B runs under ``wandb_dir``),
    group, tabulate, render; with ``plot``, also write the learning curves there.

    Raises:
        CompareError: for no source or both, no runs, an unknown metric, sort or format.
    """
    if bool(paths) == (wandb_dir is not None):
        raise CompareError("give run folders (PATH...) or --wandb DIR, not both" if paths
                           else "give at least one run folder (PATH...) or --wandb DIR")
    if fmt not in FORMATS:
        raise CompareError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    runs = load_wandb_runs(wandb_dir) if wandb_dir is not None else load_runs(list(paths))
    groups = group_runs(runs)
    table = render(compare_table(groups, metrics, sort), fmt)
    if plot is not None:
        plot_curves(groups, plot)
    return table


def _override_settings(run: RunRecord) -> dict[str, str]:
    """A run's overrides as {key: value as its config holds it}, without seed."""
    settings = {}
    for item in run.overrides or []:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if key != SEED_KEY:
            settings[key] = (_config_value(run.config, key) or value) if sep else "<deleted>"
    return settings


def _config_value(config: dict[str, Any], dotted_key: str) -> str | None:
    """The config's value at ``a.b.c``, formatted; None if absent or a mapping (a group)."""
    node: Any = config
    for part in dotted_key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return None if isinstance(node, dict) else _format_value(node)


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
        return (1, 0.0, 0.0, row.group)
    reached = -stat.count / stat.runs if column in TO_THRESHOLD else 0.0
    return (0, reached, stat.mean if _ascending(column) else -stat.mean, row.group)


def _cell(column: str, stat: Stat) -> str:
    """``mean ± std``, with ``(count/runs)`` for to-threshold columns and partial columns."""
    spec = SUMMARY_COLUMNS.get(column, (column, METRIC_FORMAT))[1]
    text = "-" if stat.mean is None else f"{stat.mean:{spec}} ± {stat.std:{spec}}"
    if column in TO_THRESHOLD or stat.count < stat.runs:
        text += f" ({stat.count}/{stat.runs})"
    return text


def _row_dict(row: Row, columns: Sequence[str]) -> dict[str, Any]:
    """A Row as JSON-ready plain values."""
    return {"group": row.group, "settings": row.settings, "runs": row.runs,
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
        writer.writerow([row.group, row.runs, *numbers])
    return buffer.getvalue()


def _known(keys: set[str], shown: int = 12) -> str:
    """A short, sorted list of logged keys for an error message."""
    names = sorted(key for key in keys if key != "step")
    return ", ".join(names[:shown]) + (f", ... ({len(names)} in all)" if len(names) > shown else "")
