"""Learning curves of grouped runs: eval return vs frames and vs wall-clock seconds.

Drawn with matplotlib's Agg canvas on a bare Figure (no pyplot, no display, and no change
to the process's matplotlib backend). matplotlib is imported only when a plot is made.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rlcollect.logging.runs import EVAL_RETURN, CompareError, Group, RunRecord, wall_clock

__all__ = ["eval_curve", "mean_curve", "plot_curves"]

# x axes: (row key, axis label, subplot title)
X_AXES = (("step", "frames", "eval return vs frames"),
          ("time", "seconds since the run started logging", "eval return vs wall-clock time"))
GRID_POINTS = 200


def eval_curve(run: RunRecord, x_key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, eval return)`` of the run's evaluation rows (those with a non-null return);
    x is the row's ``"step"`` or, for ``"time"``, its :func:`wall_clock` seconds."""
    xs = wall_clock(run.history) if x_key == "time" else [row.get(x_key) for row in run.history]
    points = [(x, row[EVAL_RETURN]) for row, x in zip(run.history, xs)
              if row.get(EVAL_RETURN) is not None and x is not None]
    x, y = zip(*points) if points else ((), ())
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


def mean_curve(curves: Sequence[tuple[np.ndarray, np.ndarray]],
               points: int = GRID_POINTS) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(grid, mean, low, high)`` of curves on a common x grid, by linear interpolation.

    The grid spans from the earliest to the latest x of all curves; a curve is held at its
    first / last value outside its own range (a run that stopped early, solved, keeps its
    final return). ``low`` / ``high`` are the min / max over the curves.
    """
    curves = [(x, y) for x, y in curves if len(x)]
    grid = np.linspace(min(x[0] for x, _ in curves), max(x[-1] for x, _ in curves), points)
    values = np.stack([np.interp(grid, x, y) for x, y in curves])  # [runs, points]
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def plot_curves(groups: Sequence[Group], path: str | os.PathLike[str]) -> Path:
    """Write a PNG (or any format matplotlib infers from ``path``) with two subplots, eval
    return vs frames and vs seconds: one line per group (mean over its runs) and a min-max band.

    Raises:
        CompareError: if matplotlib is missing or no run has an evaluation row.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CompareError("--plot needs matplotlib: pip install matplotlib") from None
    figure = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2)
    plotted = 0
    for group in groups:
        for ax, (x_key, x_label, title) in zip(axes, X_AXES):
            curves = [eval_curve(run, x_key) for run in group.runs]
            if not any(len(x) for x, _ in curves):
                continue
            grid, mean, low, high = mean_curve(curves)
            line, = ax.plot(grid, mean, label=f"{group.label} ({len(group.runs)} runs)")
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
            ax.set(xlabel=x_label, ylabel="eval return (mean, min-max band)", title=title)
            plotted += 1
    if not plotted:
        raise CompareError(f"nothing to plot: no run logged {EVAL_RETURN!r}")
    axes[0].legend(fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path
