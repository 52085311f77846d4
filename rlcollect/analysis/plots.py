"""The comparison's figures: learning curves (sample efficiency) over frames and over
wall-clock seconds, the performance profile, and the probability of improvement.

Curves and profile show the interquartile mean over a group's runs with a 95% stratified
bootstrap band (:mod:`rlcollect.analysis.stats`); scores are normalised per env when the
comparison has reference scores. Each figure is written as PNG and SVG. Drawn with
matplotlib's Agg canvas on a bare Figure (no pyplot, no display, and no change to the
process's matplotlib backend); matplotlib is imported only when a plot is made.
"""
from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlcollect.analysis import stats as st
from rlcollect.analysis.comparison import Comparison, final_scores, score_curve
from rlcollect.analysis.grouping import Group
from rlcollect.errors import ConfigError
from rlcollect.logging.runs import EVAL_RETURN, CompareError
from rlcollect.outputs import folder_made, written_whole

__all__ = ["curves_figure", "figure_svgs", "improvement_figure", "plot_curves", "plot_report", "profile_figure",
           "save_figure"]

# x axes: (row key, axis label, subplot title)
X_AXES = (("step", "frames", "eval score vs frames"),
          ("time", "seconds since the run started logging", "eval score vs wall-clock time"))
GRID_POINTS = 100
PROFILE_POINTS = 101
FORMATS = (".png", ".svg")

ScoreRanges = dict[Any, Any]  # env id -> (random, max) or None


def curves_figure(groups: Sequence[Group], ranges: ScoreRanges | None = None, *, reps: int = st.DEFAULT_REPS,
                  seed: int = st.DEFAULT_SEED):
    """Two subplots, eval score vs frames and vs seconds: per group the IQM over its runs
    on a common grid (a run is held at its first / last score outside its own range, so a
    run that stopped early, solved, keeps its final score) with a 95% bootstrap band.

    Raises:
        CompareError: if matplotlib is missing or no run has an evaluation row.
    """
    figure, axes = _figure(1, 2, (12, 4.8))
    ranges = ranges or {}
    normalized = bool(ranges) and all(value is not None for value in ranges.values())
    plotted = 0
    for ax, (x_key, x_label, title) in zip(axes, X_AXES):
        curves = {id(run): score_curve(run, ranges, x_key) for group in groups for run in group.runs}
        drawn = [curve for curve in curves.values() if len(curve[0])]
        if not drawn:
            continue
        grid = np.linspace(min(x[0] for x, _ in drawn), max(x[-1] for x, _ in drawn), GRID_POINTS)
        for group in groups:
            per_task: dict[Any, list[np.ndarray]] = {}
            for run in group.runs:
                x, y = curves[id(run)]
                if len(x):
                    per_task.setdefault(run.task, []).append(np.interp(grid, x, y))
            if not per_task:
                continue
            iqm, low, high = st.curve_intervals([np.stack(rows) for rows in per_task.values()], reps=reps, seed=seed)
            runs = sum(len(rows) for rows in per_task.values())
            line, = ax.plot(grid, iqm, label=f"{group.label} ({runs} runs)")
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
            plotted += 1
        ax.set(xlabel=x_label, ylabel=f"{'normalised score' if normalized else 'eval return'} (IQM, 95% CI)",
               title=title)
        ax.grid(alpha=0.3)
    if not plotted:
        raise CompareError(f"nothing to plot: no run logged {EVAL_RETURN!r}")
    axes[0].legend(fontsize="small")
    return figure


def profile_figure(comparison: Comparison):
    """The performance profile: per group, the fraction of its runs whose final score is
    above each threshold (pooled over envs), with a 95% bootstrap band."""
    scores = {group.label: list(final_scores(group, comparison.ranges).values()) for group in comparison.groups}
    scores = {label: per_task for label, per_task in scores.items() if per_task}
    if not scores:
        raise CompareError(f"nothing to plot: no run logged {EVAL_RETURN!r}")
    pooled = np.concatenate([np.concatenate(per_task) for per_task in scores.values()])
    taus = np.linspace(pooled.min(), pooled.max(), PROFILE_POINTS) if pooled.max() > pooled.min() else \
        np.linspace(pooled.min() - 1, pooled.max() + 1, PROFILE_POINTS)
    figure, (ax,) = _figure(1, 1, (7, 4.8))
    for label, per_task in scores.items():
        fraction, low, high = st.performance_profile(per_task, taus, reps=comparison.reps, seed=comparison.seed)
        line, = ax.plot(taus, fraction, label=f"{label} ({sum(len(task) for task in per_task)} runs)")
        ax.fill_between(taus, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set(xlabel="normalised score τ" if comparison.normalized else "eval return τ",
           ylabel="fraction of runs with score > τ", title="performance profile (final score, 95% CI)",
           ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return figure


def improvement_figure(comparison: Comparison):
    """The ``--versus`` pairs: P(X > Y) of their final scores with its 95% CI, against 0.5."""
    figure, (ax,) = _figure(1, 1, (10, 1.6 + 0.8 * len(comparison.improvements)))
    for row, item in enumerate(comparison.improvements):
        value, (low, high) = item.probability.value, item.probability.ci
        ax.barh(row, high - low, left=low, height=0.5, alpha=0.35, color="C0")
        ax.plot([value], [row], marker="o", color="C0")  # seen even where the interval has no width
        ax.annotate(f"{value:.3f} [{low:.3f}, {high:.3f}]", (value, row), xytext=(0, 10), textcoords="offset points",
                    ha="right" if value > 0.8 else "left" if value < 0.2 else "center", fontsize="small")
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(comparison.improvements)),
                  [f"P({item.x}\n  > {item.y})" for item in comparison.improvements], fontsize="small")
    ax.set(xlim=(-0.02, 1.02), xlabel="P(X > Y), final score (95% CI)", title="probability of improvement")
    ax.invert_yaxis()
    return figure


def save_figure(figure, path: str | os.PathLike[str]) -> list[Path]:
    """Write ``figure`` to ``path`` and, for a .png or .svg path, to the other of the two,
    each whole or not at all (an earlier file stays as it was if a write fails; folders made
    for them are removed again)."""
    path = Path(path)
    paths = [path] + ([path.with_suffix(other) for other in FORMATS if other != path.suffix]
                      if path.suffix in FORMATS else [])
    try:
        with folder_made("--plot", path):
            for target in paths:
                with written_whole("--plot", target) as partial:
                    figure.savefig(partial, dpi=100, format=target.suffix[1:] or None)
    except ConfigError as error:  # a read-only or special filesystem: the user's path
        raise CompareError(str(error)) from None
    return paths


def plot_curves(groups: Sequence[Group], path: str | os.PathLike[str], ranges: ScoreRanges | None = None, *,
                reps: int = st.DEFAULT_REPS, seed: int = st.DEFAULT_SEED) -> Path:
    """Write the learning curves (:func:`curves_figure`) to ``path`` (PNG and SVG); returns ``path``."""
    return save_figure(curves_figure(groups, ranges, reps=reps, seed=seed), path)[0]


def plot_report(comparison: Comparison, path: str | os.PathLike[str]) -> list[Path]:
    """Write the learning curves to ``path``, the performance profile to
    ``<stem>-profile<suffix>`` and, with ``--versus`` pairs, the probability of improvement
    to ``<stem>-improvement<suffix>``, each also as SVG (PNG) for a .png (.svg) path."""
    path = Path(path)
    written = []
    for name, figure in _figures(comparison):
        written += save_figure(figure, path if name == "curves" else path.with_name(f"{path.stem}-{name}{path.suffix}"))
    return written


def figure_svgs(comparison: Comparison) -> list[tuple[str, str]]:
    """``(name, SVG text)`` of each figure, for an HTML report."""
    svgs = []
    for name, figure in _figures(comparison):
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
        text = buffer.getvalue()
        svgs.append((name, text[text.index("<svg"):]))
    return svgs


def _figures(comparison: Comparison):
    """``(name, Figure)`` of the report's figures."""
    yield "curves", curves_figure(comparison.groups, comparison.ranges, reps=comparison.reps, seed=comparison.seed)
    yield "profile", profile_figure(comparison)
    if comparison.improvements:
        yield "improvement", improvement_figure(comparison)


def check_plot_path(path: str | os.PathLike[str]) -> None:
    """A CompareError naming ``--plot`` where ``path`` names no kind of file matplotlib
    writes (its suffix: without one, matplotlib would write ``path.png`` instead), before
    any run is read."""
    suffix = Path(path).suffix.lstrip(".").lower()
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        raise CompareError("--plot needs matplotlib: pip install matplotlib") from None
    kinds = FigureCanvasAgg.get_supported_filetypes()
    if suffix not in kinds:
        said = f"matplotlib writes no .{suffix} files" if suffix else "no suffix to say which kind of file"
        raise CompareError(f"--plot {path}: {said}; name one of "
                           f"{', '.join(f'.{kind}' for kind in sorted(kinds))} (.png and .svg: both are written)")


def _figure(rows: int, columns: int, size: tuple[float, float]):
    """A bare Agg Figure and its axes, flat."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CompareError("--plot needs matplotlib: pip install matplotlib") from None
    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, list(axes.ravel())
