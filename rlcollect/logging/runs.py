"""Read run folders back: the runs ``rlcollect train`` wrote, as :class:`RunRecord`.

A run folder (written by ``rlcollect train``) holds ``config.yaml``, ``metrics.jsonl``,
``summary.json`` and ``.hydra/overrides.yaml``; its W&B offline run (default logger) holds
the same config and the same metric rows (read by :mod:`rlcollect.analysis.wandb_runs`).
Both sources become a :class:`RunRecord` whose ``summary`` is computed from the metric rows
by :func:`summarize_history`, the same way for both, so a comparison read from either
source gives the same numbers.

Why not summary.json: only the rows are in both sources. They agree with it: a row's
``"time"`` is the training loop's clock when its batch's work was done (collected, learnt
from, evaluated), and summary.json's ``seconds`` and ``seconds_to_solve`` are the times of
its last row and of the row that solved it (pipeline/loop.py), so ``frames``,
``seconds``, ``frames_per_second``, ``frames_to_solve``, ``seconds_to_solve``,
``final_eval_return`` and ``best_eval_return`` read here are summary.json's.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcollect.run_files import (
    CONFIG_FILE,
    ENDED_STATUSES,
    HYDRA_CONFIG_FILE,
    HYDRA_DIR,
    HYDRA_FILE,
    METRICS_FILE,
    OVERRIDES_FILE,
    RESUME_KILLED,
    RUN_FILES,
    RUNNING,
    SUMMARY_FILE,
    WANDB_DIR,
    held,
    run_files,
)

__all__ = ["CompareError", "DamagedRowError", "ENDED_STATUSES", "RUN_FILES", "RunRecord", "WANDB_DIR", "find_run_dirs",
           "for_env_id", "hydra_choices", "json_lines", "load_run_dir", "load_runs", "pbt_settings_at", "run_files",
           "solved_return_of", "solved_threshold", "split_events", "summarize_history", "summary_error",
           "summary_status", "wall_clock"]

EVAL_RETURN = "eval/episode_return"
DAMAGED_SUMMARY = "summary.json does not read (not a JSON object)"  # a run's status, where its summary is damaged
PBT_PREFIX = "pbt/"  # a population-based training member's rows: the settings it trained with (pbt/algo.lr)
_SKIPPED_DIRS = {HYDRA_DIR, WANDB_DIR, "__pycache__"}


class CompareError(ValueError):
    """A comparison cannot be made (no runs, unknown metric, ...); the message says why."""


class DamagedRowError(ValueError):
    """A line of a JSON-lines file, other than its last, that is not a whole JSON object: the
    file is damaged (a last line cut short is what a crash or a full disk leaves, and is
    left out instead); the message names the file and the line."""


@dataclass
class RunRecord:
    """One run, as the comparison sees it.

    Attributes:
        path: the run folder (for a W&B run, the run folder that holds its ``wandb/``).
        overrides: the job's command-line overrides as ``"key=value"`` strings, or None
            when unknown (no ``.hydra/overrides.yaml``, no W&B run name).
        config: the resolved config as nested plain values.
        summary: numbers computed from ``history`` by :func:`summarize_history`.
        history: the metric rows in step order; each has ``"step"`` (frames so far).
        status: how the run ended: summary.json's ``status`` (``finished``, ``solved``,
            ``failed``, ``interrupted``); for a W&B run whose folder has no summary.json,
            ``finished`` or ``failed or interrupted`` from its exit code; None when unknown
            (no summary.json, no exit record: still running, or killed).
        choices: the config group choices Hydra made (``{"collector": "multisync", ...}``,
            from ``.hydra/hydra.yaml``; for a W&B run without it, the collector from its job type).
        error: why a run failed or was refused (summary.json's ``error``), else None.
    """

    path: Path
    overrides: list[str] | None
    config: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, Any]]
    status: str | None = None
    choices: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def task(self) -> str | None:
        """The env id the run trained on (its config's ``env.id``)."""
        env = self.config.get("env")
        return env.get("id") if isinstance(env, dict) else None


def summarize_history(history: list[dict[str, Any]], solved_return: float | None) -> dict[str, Any]:
    """The run's summary numbers, from its metric rows.

    ``frames`` and ``seconds`` are the last row's ``"frames"`` and wall-clock time (see
    :func:`wall_clock`), and ``frames_per_second`` their ratio. ``final_eval_return`` /
    ``best_eval_return`` are the last / largest ``eval/episode_return`` (a null one, an
    evaluation with no finished episode, counts as missing). ``frames_to_solve`` /
    ``seconds_to_solve`` are the step and time of the first evaluation whose return reaches
    ``solved_return`` (None if none does).
    """
    seconds_of = wall_clock(history)
    timed = [(row["frames"], seconds) for row, seconds in zip(history, seconds_of)
             if row.get("frames") is not None and seconds is not None]
    frames, seconds = timed[-1] if timed else (None, None)
    evals = [(row, seconds) for row, seconds in zip(history, seconds_of) if row.get(EVAL_RETURN) is not None]
    solved = [(row, seconds) for row, seconds in evals
              if solved_return is not None and row[EVAL_RETURN] >= solved_return]
    return {
        "frames": frames,
        "seconds": seconds,
        "frames_per_second": frames / seconds if timed and seconds > 0 else None,
        "solved_return": solved_return,
        "frames_to_solve": solved[0][0]["step"] if solved else None,
        "seconds_to_solve": solved[0][1] if solved else None,
        "final_eval_return": evals[-1][0][EVAL_RETURN] if evals else None,
        "best_eval_return": max(row[EVAL_RETURN] for row, _ in evals) if evals else None,
    }


def wall_clock(history: list[dict[str, Any]]) -> list[float | None]:
    """Each row's ``"time"`` made cumulative over resumes (None where a row has no time).

    A resumed run's logger restarts its clock at 0; where ``"time"`` goes down, the time
    reached before it is added to the rows after it. (The time between the last row before
    an interruption and the interruption itself is not counted.)
    """
    times: list[float | None] = []
    offset, previous = 0.0, None
    for row in history:
        time = row.get("time")
        if time is None:
            times.append(None)
            continue
        if previous is not None and time < previous:
            offset += previous
        previous = time
        times.append(offset + time)
    return times


def find_run_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """Every run folder at or below ``path`` (a folder holding metrics.jsonl and config.yaml,
    or summary.json alone: a run interrupted while it started), sorted. ``.hydra`` and
    ``wandb`` folders and symlinked folders are not searched.

    Raises:
        CompareError: if ``path`` does not exist.
    """
    root = Path(path)
    if not root.exists():
        raise CompareError(f"no such file or directory: {root}")
    found = []
    for folder, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(name for name in dirnames if name not in _SKIPPED_DIRS)
        if (METRICS_FILE in filenames and CONFIG_FILE in filenames) or SUMMARY_FILE in filenames:
            found.append(Path(folder))
    return sorted(found)


def load_runs(paths: list[str | os.PathLike[str]]) -> list[RunRecord]:
    """Load the run folders found under each of ``paths`` (run, sweep or any folder), once each.

    Raises:
        CompareError: if a path does not exist or holds no run.
    """
    run_dirs: dict[Path, None] = {}
    for path in paths:
        found = find_run_dirs(path)
        if not found:
            raise CompareError(f"no runs (folders with {METRICS_FILE} and {CONFIG_FILE}) under {path}")
        run_dirs.update(dict.fromkeys(run_dir.resolve() for run_dir in found))
    return [load_run_dir(run_dir) for run_dir in sorted(run_dirs)]


def load_run_dir(run_dir: Path) -> RunRecord:
    """Read one run folder: config.yaml, metrics.jsonl and, if present, .hydra/overrides.yaml,
    .hydra/hydra.yaml (the group choices) and summary.json (the status). A run stopped before
    it wrote config.yaml and metrics.jsonl has Hydra's composed config and no rows."""
    config_file = run_dir / CONFIG_FILE if (run_dir / CONFIG_FILE).is_file() else run_dir / HYDRA_CONFIG_FILE
    config = _load_yaml(config_file) if config_file.is_file() else {}
    if not isinstance(config, dict):
        raise CompareError(f"{config_file} is not a mapping")
    metrics_file = run_dir / METRICS_FILE
    history, _ = split_events(_read_jsonl(metrics_file)) if metrics_file.is_file() else ([], [])
    overrides_file = run_dir / OVERRIDES_FILE
    overrides = [str(item) for item in _load_yaml(overrides_file) or []] if overrides_file.is_file() else None
    return RunRecord(path=run_dir, overrides=overrides, config=config,
                     summary=summarize_history(history, solved_return_of(config)), history=history,
                     status=summary_status(run_dir, history), choices=hydra_choices(run_dir),
                     error=summary_error(run_dir))


def hydra_choices(run_dir: Path) -> dict[str, str]:
    """The config group choices (``hydra.runtime.choices``) in the run's .hydra/hydra.yaml,
    without Hydra's own (``hydra/...``); {} without the file."""
    hydra_file = run_dir / HYDRA_FILE
    if not hydra_file.is_file():
        return {}
    hydra = (_load_yaml(hydra_file) or {}).get("hydra") or {}
    choices = (hydra.get("runtime") or {}).get("choices") or {}
    return {str(key): str(value) for key, value in choices.items() if not str(key).startswith("hydra/")
            and value is not None}


def summary_status(run_dir: Path, history: list[dict[str, Any]] | None = None) -> str | None:
    """summary.json's ``status``, or None without the file (or the key); ``running`` for a
    run that a process trains or resumes now (its summary.json says how its last part
    ended, not how this one will). A run said to have ended (``finished``, ``solved``)
    whose ``history`` (its metric rows) goes past summary.json's frames was resumed, and
    that part was killed: ``RESUME_KILLED`` (the rows are not the run summary.json
    describes); a summary.json that does not read: ``DAMAGED_SUMMARY``."""
    if held(run_dir):
        return RUNNING
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return DAMAGED_SUMMARY
    if not isinstance(summary, dict):
        return DAMAGED_SUMMARY
    status, frames = summary.get("status"), summary.get("frames")
    if status in ENDED_STATUSES and history and frames is not None and history[-1]["step"] > float(frames):
        return RESUME_KILLED
    return None if status is None else str(status)


def summary_error(run_dir: Path) -> str | None:
    """summary.json's ``error`` (a failed or refused run's one line), or None."""
    return _summary_entry(run_dir, "error")


def _summary_entry(run_dir: Path, key: str) -> str | None:
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    value = summary.get(key) if isinstance(summary, dict) else None
    return str(value) if value is not None else None


def pbt_settings_at(rows: list[dict[str, Any]], frames: int) -> dict[str, Any]:
    """The settings population-based training had given a member by ``frames``: the
    ``pbt/<key>`` entries of its last metrics row at or before ``frames``, keyed by config
    key (``{"algo.lr": 0.0012}``); empty for a run that was no PBT member."""
    for row in reversed(rows):
        if "event" not in row and row.get("step", 0) <= frames:
            return {key[len(PBT_PREFIX):]: value for key, value in row.items() if key.startswith(PBT_PREFIX)}
    return {}


def split_events(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(metric rows, event rows)`` of a metrics.jsonl: event rows (``"event"``, e.g. a
    worker restart) are not metrics of a step."""
    return [row for row in rows if "event" not in row], [row for row in rows if "event" in row]


def for_env_id(env_id: str | None, value: Any) -> Any:
    """A per-env setting of ``env_id``: ``value`` itself when it is not a mapping (set for
    this run), or its entry for ``env_id`` when it maps env ids to values (the env presets:
    such a setting belongs to one env id, so overriding ``env.id`` drops it: None)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return dict(value).get(env_id)
    return value


def solved_threshold(env_id: str | None, solved_return: Any) -> float | None:
    """The stopping threshold of ``env_id`` (``env.solved_return``, see ``for_env_id``)."""
    value = for_env_id(env_id, solved_return)
    return None if value is None else float(value)


def solved_return_of(config: dict[str, Any]) -> float | None:
    """The config's stopping threshold for its env id (None if absent)."""
    env = config.get("env")
    return solved_threshold(env.get("id"), env.get("solved_return")) if isinstance(env, dict) else None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (a truncated last line is ignored)."""
    try:
        return [row for _, row in json_lines(path)]
    except DamagedRowError as error:
        raise CompareError(str(error)) from None


def json_lines(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(line, row)`` for each row of the JSON-lines file ``path`` (metrics.jsonl), blank
    lines skipped. A last line that does not parse was cut short while it was written (a
    crash, a kill, a full disk) and is left out; any other line that is not a JSON object is a
    DamagedRowError naming the file and the line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                break
            raise DamagedRowError(f"{path} line {number} is not a whole JSON row ({error})") from None
        if not isinstance(row, dict):
            raise DamagedRowError(f"{path} line {number} is not a JSON object ({line[:40]!r})")
        rows.append((line, row))
    return rows


def _load_yaml(path: Path) -> Any:
    """A YAML file as plain values (interpolations, if any, stay strings); libyaml's loader
    when PyYAML has it (several times faster on a sweep's files)."""
    import yaml

    try:
        return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as error:
        what = " ".join(str(error).split())  # a YAML error's lines (the problem, its line and column) as one
        raise CompareError(f"cannot read {path}: {what}") from None
