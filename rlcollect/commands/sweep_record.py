"""What a sweep's multirun.yaml says, read back by ``rlcollect train resume=<sweep folder>``:
its ``hydra`` node (launcher, sweeper, overrides), whether the batched launcher ran it, and
its jobs as Hydra's basic sweeper numbered them."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from rlcollect.errors import ConfigError
from rlcollect.run_files import SWEEP_FILE


def sweep_hydra(folder: Path) -> DictConfig:
    """The ``hydra`` node of the sweep's multirun.yaml (its launcher, sweeper and overrides),
    read once; a damaged or foreign file is a ConfigError in one line."""
    try:
        hydra = OmegaConf.load(folder / SWEEP_FILE).hydra
        missing = [key for key in ("launcher", "sweeper", "overrides") if key not in hydra]
        if missing:
            raise KeyError(f"no hydra.{missing[0]}")
    except Exception as error:  # noqa: BLE001 - a damaged or foreign file: said in one line
        raise ConfigError(f"resume={folder}: cannot read its {SWEEP_FILE} ({' '.join(str(error).split())})") from None
    return hydra


def batched_launcher(hydra: DictConfig) -> DictConfig | None:
    """The launcher that ran the sweep (its ``hydra.launcher``) where it is the batched one,
    else None (its members resume one by one)."""
    from hydra_plugins.rlcollect_batched.batched_launcher import BatchedLauncher

    batched = f"{BatchedLauncher.__module__}.{BatchedLauncher.__qualname__}"  # the _target_ its config names
    return hydra.launcher if hydra.launcher.get("_target_") == batched else None


def sweep_jobs(hydra: DictConfig) -> list[list[str]]:
    """Every job's overrides, in job-number order, as Hydra's basic sweeper makes them from
    the sweep's parameters and task overrides; [] for another sweeper."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        if hydra.sweeper.get("_target_") != f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}":
            return []
        arguments = [f"{key}={value}" for key, value in (hydra.sweeper.get("params") or {}).items()]
        overrides = OverridesParser.create().parse_overrides([*arguments, *hydra.overrides.task])
        return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    except Exception:  # noqa: BLE001 - what cannot be read back says nothing of missing jobs
        return []
