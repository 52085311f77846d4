"""W&B offline runs as :class:`~rlcollect.logging.runs.RunRecord`: ``rlcollect compare --wandb DIR``.

Each ``run-*.wandb`` file below a folder (read by :mod:`rlcollect.logging.wandb_offline`)
becomes the RunRecord its run folder gives (:func:`rlcollect.logging.runs.load_run_dir`):
the same config, the same metric rows (W&B's ``"_step"`` as ``"step"``), the summary
computed by the same :func:`~rlcollect.logging.runs.summarize_history`; the parts of a
resumed run are joined into one history (:func:`resumed_history`). Where the W&B run sits
in its run folder, that folder's summary.json and .hydra/hydra.yaml give the status and the
group choices; elsewhere its exit code and job type do.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rlcollect.logging.runs import (
    WANDB_DIR,
    CompareError,
    RunRecord,
    hydra_choices,
    solved_return_of,
    summarize_history,
    summary_error,
    summary_status,
)
from rlcollect.logging.wandb_offline import find_offline_runs, read_offline_run, resumed_history

__all__ = ["load_wandb_runs", "parse_override_dirname", "resumed_history"]

# override_dirname joins "key=value" items with ","; a value may hold commas ("[1,2]"),
# so split only at a comma that starts the next "key=".
_OVERRIDE_SPLIT = re.compile(r",(?=[+~]{0,2}[A-Za-z_][\w.@/-]*=)")


def load_wandb_runs(root: str | os.PathLike[str]) -> list[RunRecord]:
    """Load every W&B offline run below ``root`` (``run-*.wandb`` files).

    The overrides are parsed from the run's name (Hydra's ``override_dirname``,
    ``"key=value,key=value"``); history rows get ``"step"`` from W&B's ``"_step"``.

    Raises:
        CompareError: if ``root`` does not exist or holds no W&B run.
    """
    try:
        run_files = find_offline_runs(root)
    except FileNotFoundError:
        raise CompareError(f"no such file or directory: {root}") from None
    if not run_files:
        raise CompareError(f"no W&B offline runs (run-*.wandb) under {root}")
    parts: dict[tuple[Path, str], list] = {}  # a resumed run: one file per part, the same run id
    for run_file in run_files:
        try:
            offline = read_offline_run(run_file)
        except ValueError as error:
            raise CompareError(f"cannot read W&B run {run_file}: {error}") from None
        parts.setdefault((_run_folder_of(run_file), offline.run_id), []).append(offline)
    runs = []
    for (folder, _), offline_parts in parts.items():  # files in chronological order (find_offline_runs)
        first, last = offline_parts[0], offline_parts[-1]
        history = [_wandb_row(row) for row in resumed_history([part.history for part in offline_parts])]
        config = last.config
        status = summary_status(folder, history) or _exit_status(last.exit_code)
        choices = hydra_choices(folder) or ({"collector": first.job_type} if first.job_type else {})
        runs.append(RunRecord(path=folder, overrides=parse_override_dirname(first.name), config=config,
                              summary=summarize_history(history, solved_return_of(config)), history=history,
                              status=status, choices=choices, error=summary_error(folder)))
    return sorted(runs, key=lambda run: run.path)


def parse_override_dirname(name: str | None) -> list[str] | None:
    """``"a=1,b=[1,2]"`` -> ``["a=1", "b=[1,2]"]``; None (unknown) for a missing or
    non-override name. An empty name cannot be told from a missing one (W&B drops it)."""
    if not name or "=" not in name:
        return None
    return _OVERRIDE_SPLIT.split(name)


def _wandb_row(row: dict[str, Any]) -> dict[str, Any]:
    """A W&B history row in metrics.jsonl form: ``"_step"`` becomes ``"step"``, first."""
    return {"step": row.get("_step"), **{key: value for key, value in row.items() if key != "_step"}}


def _run_folder_of(run_file: Path) -> Path:
    """``<run>/wandb/offline-run-*/run-*.wandb`` -> ``<run>``; else the offline-run folder."""
    offline_dir = run_file.parent
    return (offline_dir.parent.parent if offline_dir.parent.name == WANDB_DIR else offline_dir).resolve()


def _exit_status(exit_code: int | None) -> str | None:
    """A W&B run's status from its exit code: ``finished`` (0), ``failed or interrupted``
    (rlcollect ends both with 1), None without an exit record."""
    return None if exit_code is None else "finished" if exit_code == 0 else "failed or interrupted"
