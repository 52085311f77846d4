"""The end of a sweep: every job that failed or was refused, listed with its overrides
(``SweepReport``, a Hydra callback in conf/train.yaml, whatever the launcher)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rlcollect.run_files import FAILED, OVERRIDES_FILE, REFUSED, SUMMARY_FILE, sweep_runs


@dataclass
class SweepOutcome:
    """The jobs of the last sweep that did not finish: ``(status, overrides, message, job
    folder)``, the job folder being the one Hydra made in the sweep folder."""

    jobs: int = 0
    not_finished: list[tuple[str, str, str, Path]] = field(default_factory=list)


SWEEP = SweepOutcome()


class SweepReport(Callback):
    """A Hydra callback (conf/train.yaml): at the end of a sweep, whatever its launcher, it
    reads every job folder's summary.json and keeps those that failed or were refused, with
    their overrides, for ``run_train`` to list."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        SWEEP.jobs, SWEEP.not_finished = 0, []
        for run_dir in sweep_runs(sweep_dir):  # nested where an override names a config group
            summary_file = run_dir / SUMMARY_FILE
            if not summary_file.is_file():
                continue
            SWEEP.jobs += 1
            try:
                summary = json.loads(summary_file.read_text())
            except (OSError, ValueError):
                continue
            if summary.get("status") in (FAILED, REFUSED):
                overrides = summary.get("overrides") or read_overrides(summary_file.parent)
                job_dir = sweep_dir / run_dir.relative_to(sweep_dir).parts[0]  # Hydra's <job number>_<overrides>
                SWEEP.not_finished.append((summary["status"], ",".join(overrides) or "(no overrides)",
                                           summary.get("error") or "", job_dir))


def read_overrides(job_dir: Path) -> list[str]:
    import yaml

    path = job_dir / OVERRIDES_FILE
    try:
        return [str(item) for item in yaml.safe_load(path.read_text()) or []]
    except (OSError, yaml.YAMLError):
        return []


def sweep_report() -> list[str]:
    """The lines listing the last sweep's failed and refused jobs (none when all finished)."""
    if not SWEEP.not_finished:
        return []
    sweep_dir = SWEEP.not_finished[0][3].parent
    lines = [f"rlcollect train: {len(SWEEP.not_finished)} of {SWEEP.jobs} sweep jobs did not finish "
             f"(job folders in {sweep_dir}):"]
    for status, overrides, message, folder in SWEEP.not_finished:
        lines.append(f"  {status:<8} job {folder.name.split('_', 1)[0]} ({overrides}): {message}")
    return lines


def report_sweep() -> int:
    lines = sweep_report()
    for line in lines:
        print(line, file=sys.stderr)
    return 1 if lines else 0
