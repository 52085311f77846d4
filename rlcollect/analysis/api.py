"""The compare tool's entry point and one import: ``rlcollect compare PATH... [--stats]
[--normalize] [--format] [--plot] [--wandb]`` runs :func:`compare_runs`, and a script imports
the tool's public names from here.

:func:`compare_runs` is the command: load the runs (run folders, :mod:`rlcollect.logging.runs`;
or W&B offline runs, :mod:`rlcollect.analysis.wandb_runs`), compare them
(:mod:`rlcollect.analysis.comparison`: groups with seeds pooled, mean ± std, interval
estimates), render the comparison (:mod:`rlcollect.analysis.report`) and draw its figures
(:mod:`rlcollect.analysis.plots`). This module also gathers the public names of those
modules, so one import serves a script::

    from rlcollect.analysis.api import compare, load_runs, plot_report, render_comparison

    comparison = compare(load_runs(["multirun/2026-01-01/12-00-00"]), bootstrap=True)
    print(render_comparison(comparison, "markdown"))     # or "table", "csv", "json", "html"
    plot_report(comparison, "curves.png")                 # curves, profile (PNG and SVG)

It was ``rlcollect.analysis.compare``, a name too close to comparison.py's; that name still
works for a release, with a DeprecationWarning (rlcollect/moved.py).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from rlcollect.analysis import stats as st
from rlcollect.analysis.comparison import (
    STATS_MIN_RUNS,
    SUMMARY_COLUMNS,
    Comparison,
    Excluded,
    GroupStats,
    Improvement,
    Row,
    Stat,
    compare,
    compare_table,
    final_scores,
    interval_table,
    parse_normalize,
    score_ranges,
    split_runs,
)
from rlcollect.analysis.grouping import Group, group_runs
from rlcollect.analysis.plots import plot_curves, plot_report
from rlcollect.analysis.report import FORMATS, render, render_comparison
from rlcollect.analysis.wandb_runs import load_wandb_runs
from rlcollect.logging.runs import CompareError, RunRecord, load_runs

__all__ = ["CompareError", "Comparison", "Excluded", "Group", "GroupStats", "Improvement", "Row", "RunRecord",
           "Stat", "FORMATS", "STATS_MIN_RUNS", "SUMMARY_COLUMNS", "compare", "compare_runs", "compare_table",
           "final_scores", "group_runs", "interval_table", "load_runs", "load_wandb_runs", "parse_normalize",
           "plot_curves", "plot_report", "render", "render_comparison", "score_ranges", "split_runs"]


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
        plot_report(comparison, plot)
    return text
