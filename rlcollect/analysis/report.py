"""A Comparison as text: ``rlcollect compare --format table|markdown|csv|json|html``.

- table / markdown: the mean ± std table, then (with confidence intervals) the interval
  estimates of the final score and of the area under the learning curve, the ``--versus``
  probabilities, the runs left out and any notes;
- csv: one line per row of the mean ± std table, its group's estimates appended
  (``iqm``, ``iqm_low``, ``iqm_high``, ..., ``auc_iqm``, ...);
- json: ``{"groups": [...], "excluded": [...], "improvements": [...], "score": {...},
  "notes": [...]}``; each group is ``{"label", "settings", "runs", "tasks", "iqm": {"value",
  "ci": [low, high]}, "median", "mean", "optimality_gap", "auc": {the same four},
  "summary": [its mean ± std rows]}`` (``ci`` null without bootstrap);
- html: one self-contained page with the tables and the figures inline (SVG).
"""
from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Sequence
from typing import Any

from rlcollect.analysis import stats as st
from rlcollect.analysis.comparison import SUMMARY_COLUMNS, TO_THRESHOLD, Comparison, GroupStats, Row, Stat
from rlcollect.analysis.plots import figure_svgs
from rlcollect.logging.runs import CompareError

__all__ = ["FORMATS", "TABLE_FORMATS", "render", "render_comparison", "table_cells"]

FORMATS = ("table", "markdown", "csv", "json", "html")
TABLE_FORMATS = ("table", "markdown", "csv", "json")  # render()'s: the mean ± std table alone
METRIC_FORMAT = ".4g"  # a logged metric's cells (SUMMARY_COLUMNS give the built-in columns' formats)
TITLES = {"iqm": "IQM", "median": "median", "mean": "mean", "optimality_gap": "optimality gap"}


def render_comparison(comparison: Comparison, fmt: str = "table") -> str:
    """The comparison in ``fmt`` (one of :data:`FORMATS`).

    Raises:
        CompareError: for an unknown ``fmt``.
    """
    if fmt not in FORMATS:
        raise CompareError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(_json(comparison), indent=2)
    if fmt == "csv":
        return _csv(comparison)
    if fmt == "html":
        return _html(comparison)
    markdown = fmt == "markdown"
    parts = [render(comparison.rows, fmt)]
    if comparison.bootstrap and comparison.stats:
        parts.append(_intro(comparison))
        for what in ("final", "auc"):
            parts.append(_heading(_title(comparison, what), markdown) + "\n" + _grid(_stats_cells(comparison, what),
                                                                                   markdown))
    if comparison.improvements:
        parts.append(_heading("probability of improvement", markdown) + "\n"
                     + "\n".join(("- " if markdown else "") + _improvement_line(item, comparison)
                                 for item in comparison.improvements))
    if comparison.excluded:
        parts.append(_heading(f"left out ({_runs(len(comparison.excluded))})", markdown) + "\n"
                     + "\n".join(f"{'- ' if markdown else '  '}{item.path}: {item.reason}"
                                 for item in comparison.excluded))
    if comparison.notes:
        parts.append("\n".join(f"note: {note}" for note in comparison.notes))
    return "\n\n".join(parts)


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


def table_cells(rows: Sequence[Row]) -> list[list[str]]:
    """The mean ± std table as text cells: a header line, then one line per row."""
    columns = list(rows[0].stats) if rows else list(SUMMARY_COLUMNS)
    header = ["group", "runs", *(SUMMARY_COLUMNS.get(column, (column,))[0] for column in columns)]
    return [header, *([row.label, str(row.runs), *(_cell(column, row.stats[column]) for column in columns)]
                      for row in rows)]


def _intro(comparison: Comparison) -> str:
    """What the interval tables hold: the scores, the optimality gap's target, the bootstrap."""
    if comparison.normalized:
        scores = "scores normalised per env, (return - random) / (max - random): " + "; ".join(
            f"{task} random={low:g} max={high:g}" for task, (low, high) in comparison.ranges.items())
    else:
        scores = "scores: eval returns"
    gap = "" if comparison.gamma is None else f"; optimality gap to {comparison.gamma:g}"
    return (f"interval estimates over each group's runs, 95% stratified bootstrap CIs ({comparison.reps:,} "
            f"resamples, seed {comparison.seed}); {scores}{gap}")


def _title(comparison: Comparison, what: str) -> str:
    """The heading of one interval table."""
    if what == "final":
        return "final score"
    spans = ", ".join(f"{task} {start:,.0f}-{end:,.0f}" for task, (start, end) in comparison.spans.items())
    return f"area under the learning curve (mean score over frames {spans})"


def _stats_cells(comparison: Comparison, what: str) -> list[list[str]]:
    """Header and one line per group of an interval table."""
    spec = ".3f" if comparison.normalized else ".1f"
    header = ["group", "runs", *(TITLES[name] for name in st.AGGREGATES)]
    lines = [[row.group, _runs_text(row), *(_interval_text(getattr(row, what)[name], spec) for name in st.AGGREGATES)]
             for row in comparison.stats]
    return [header, *lines]


def _runs(count: int) -> str:
    """``1 run``, ``2 runs``."""
    return f"{count} run" if count == 1 else f"{count} runs"


def _runs_text(row: GroupStats) -> str:
    """``3``, or ``6 (3 envs)`` over several envs."""
    return str(row.runs) + (f" ({len(row.tasks)} envs)" if len(row.tasks) > 1 else "")


def _interval_text(interval: st.Interval, spec: str) -> str:
    """``0.812 [0.610, 0.950]``; ``-`` without a value."""
    if interval.value is None:
        return "-"
    text = format(interval.value, spec)
    return text if interval.ci is None else f"{text} [{interval.ci[0]:{spec}}, {interval.ci[1]:{spec}}]"


def _improvement_line(item, comparison: Comparison) -> str:
    """``P(a > b) = 0.72 [0.51, 0.90]``."""
    return f"P({item.x} > {item.y}) = {_interval_text(item.probability, '.3f')}"


def _heading(text: str, markdown: bool) -> str:
    """A section title."""
    return f"**{text}**" if markdown else text


def _grid(lines: list[list[str]], markdown: bool) -> str:
    """An aligned text table or a markdown pipe table (first column left, others right)."""
    if markdown:
        lines = [lines[0], ["---", *["---:"] * (len(lines[0]) - 1)], *lines[1:]]
        return "\n".join("| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines)
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    lines = [lines[0], ["-" * width for width in widths], *lines[1:]]
    return "\n".join("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(line, widths))).rstrip() for line in lines)


def _interval_dict(interval: st.Interval) -> dict[str, Any]:
    """``{"value", "ci": [low, high] or None}``."""
    return {"value": interval.value, "ci": None if interval.ci is None else list(interval.ci)}


def _group_dict(row: GroupStats, rows: Sequence[Row]) -> dict[str, Any]:
    """A group as JSON: its label, runs counted, estimates and mean ± std rows."""
    columns = list(rows[0].stats) if rows else []
    return {"label": row.group, "settings": row.settings, "runs": row.runs, "tasks": row.tasks,
            **{name: _interval_dict(row.final[name]) for name in st.AGGREGATES},
            "auc": {name: _interval_dict(row.auc[name]) for name in st.AGGREGATES},
            "summary": [{"task": item.task, "runs": item.runs,
                         **{column: {"mean": item.stats[column].mean, "std": item.stats[column].std,
                                     "n": item.stats[column].count} for column in columns}}
                        for item in rows if item.group == row.group]}


def _json(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready values."""
    stats = comparison.stats or [_no_stats(group.label, group.settings) for group in comparison.groups]
    return {
        "groups": [_group_dict(row, comparison.rows) for row in stats],
        "excluded": [{"path": str(item.path), "reason": item.reason} for item in comparison.excluded],
        "improvements": [{"x": item.x, "y": item.y, **_interval_dict(item.probability)}
                         for item in comparison.improvements],
        "score": {"normalized": comparison.normalized,
                  "reference_scores": {str(task): None if span is None else {"random": span[0], "max": span[1]}
                                       for task, span in comparison.ranges.items()},
                  "optimality_gap_to": comparison.gamma, "bootstrap": comparison.bootstrap,
                  "reps": comparison.reps, "seed": comparison.seed, "confidence": st.CONFIDENCE},
        "notes": comparison.notes,
    }


def _no_stats(label: str, settings: dict[str, str]) -> GroupStats:
    """A group's estimates when none could be made (several envs without reference scores)."""
    empty = {name: st.Interval(None) for name in st.AGGREGATES}
    return GroupStats(group=label, settings=settings, runs=0, tasks={}, final=empty, auc=dict(empty))


def _csv(comparison: Comparison) -> str:
    """The mean ± std table as CSV, each line with its group's estimates appended."""
    table = list(csv.reader(io.StringIO(render(comparison.rows, "csv"))))
    by_group = {row.group: row for row in comparison.stats}
    names = [f"{prefix}{name}" for prefix in ("", "auc_") for name in st.AGGREGATES]
    header = table[0] + [f"{name}{part}" for name in names for part in ("", "_low", "_high")]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for line, row in zip(table[1:], comparison.rows):
        estimates = by_group.get(row.group)
        cells = []
        for prefix in ("", "auc_"):
            for name in st.AGGREGATES:
                interval = (estimates.auc if prefix else estimates.final)[name] if estimates else st.Interval(None)
                cells += ["" if interval.value is None else repr(interval.value),
                          *(["", ""] if interval.ci is None else [repr(interval.ci[0]), repr(interval.ci[1])])]
        writer.writerow(line + cells)
    return buffer.getvalue()


def _html(comparison: Comparison) -> str:
    """One self-contained HTML page: the tables, then the figures as inline SVG."""
    body = [f"<h1>rlcollect compare: {len(comparison.groups)} groups, "
            f"{sum(len(group.runs) for group in comparison.groups)} runs</h1>",
            "<h2>mean ± std over each group's runs</h2>", _html_table(table_cells(comparison.rows))]
    if comparison.stats:
        body.append(f"<p>{html.escape(_intro(comparison))}</p>")
        for what in ("final", "auc"):
            body += [f"<h2>{html.escape(_title(comparison, what))}</h2>",
                     _html_table(_stats_cells(comparison, what))]
    if comparison.improvements:
        body += ["<h2>probability of improvement</h2><ul>",
                 *(f"<li>{html.escape(_improvement_line(item, comparison))}</li>" for item in comparison.improvements),
                 "</ul>"]
    if comparison.excluded:
        body += [f"<h2>left out ({_runs(len(comparison.excluded))})</h2><ul>",
                 *(f"<li><code>{html.escape(str(item.path))}</code>: {html.escape(item.reason)}</li>"
                   for item in comparison.excluded), "</ul>"]
    body += [f"<p>note: {html.escape(note)}</p>" for note in comparison.notes]
    try:
        figures = figure_svgs(comparison)
    except CompareError as error:  # no evaluation to draw, or no matplotlib
        figures = []
        body.append(f"<p>no figures: {html.escape(str(error))}</p>")
    body += [f'<figure id="{name}">{svg}</figure>' for name, svg in figures]
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rlcollect compare</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}"
            "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}th:first-child,td:first-child"
            "{text-align:left}figure{margin:1em 0}svg{max-width:100%;height:auto}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _html_table(lines: list[list[str]]) -> str:
    """A header line and body lines as an HTML table."""
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in lines[0])
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in line) + "</tr>" for line in lines[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


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
