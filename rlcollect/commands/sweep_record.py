"""What a sweep's multirun.yaml says, read back by ``rlcollect train resume=<sweep folder>``:
its ``hydra`` node (launcher, sweeper, overrides), whether the batched launcher ran it, its
jobs as Hydra's basic sweeper made them, where its configs were found, and what each job
folder says it was launched with."""
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


def targets(node: DictConfig, *classes: type) -> bool:
    """Whether the config ``node`` (a sweep's ``hydra.launcher``, ``hydra.sweeper``) names one
    of ``classes`` as its ``_target_``."""
    return node.get("_target_") in {f"{cls.__module__}.{cls.__qualname__}" for cls in classes}


def batched_launcher(hydra: DictConfig) -> DictConfig | None:
    """The launcher that ran the sweep (its ``hydra.launcher``) where it is the batched one,
    else None (its members resume one by one)."""
    from hydra_plugins.rlcollect_batched.batched_launcher import BatchedLauncher

    return hydra.launcher if targets(hydra.launcher, BatchedLauncher) else None


def sweep_jobs(hydra: DictConfig) -> list[list[str]] | None:
    """Every job's overrides, as Hydra's basic sweeper makes them from the sweep's parameters
    and task overrides (in job-number order, but where a ``shuffle`` drew it); None for
    another sweeper (a tuning study asks for its trials one batch at a time). Overrides that
    no longer parse raise Hydra's error."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not targets(hydra.sweeper, BasicSweeper):
        return None
    arguments = [f"{key}={value}" for key, value in (hydra.sweeper.get("params") or {}).items()]
    parser = OverridesParser.create(config_loader=config_loader(hydra))  # glob() lists a group's options
    overrides = parser.parse_overrides([*arguments, *hydra.overrides.task])
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def search_path(hydra: DictConfig):
    """Where the sweep's command found its configs (``hydra.runtime.config_sources``), as
    Hydra's config search path."""
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra.core.plugins import Plugins

    Plugins.instance()  # the kinds of config source registered
    path = ConfigSearchPathImpl()
    for source in hydra.runtime.config_sources:
        path.append(source.provider, f"{source.schema}://{source.path}")
    return path


def config_loader(hydra: DictConfig):
    """Hydra's config loader over the sweep's ``search_path``."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    return ConfigLoaderImpl(config_search_path=search_path(hydra))


def job_overrides(job_dir: Path, hydra: DictConfig) -> list[str] | None:
    """The overrides the job in ``job_dir`` was launched with: its ``<output_subdir>/overrides.yaml``
    (nested where the job's run folder is), or, for a refused job, which keeps no Hydra records,
    its summary.json's; None where neither is there."""
    import yaml

    from rlcollect.run_files import read_summary

    subdir = hydra.get("output_subdir")
    for path in sorted(job_dir.rglob(f"{subdir}/overrides.yaml")) if subdir else []:
        try:
            return [str(item) for item in yaml.safe_load(path.read_text()) or []]
        except (OSError, yaml.YAMLError):
            return None
    for path in sorted(job_dir.rglob("summary.json")):
        overrides = read_summary(path.parent).get("overrides")
        if isinstance(overrides, list):
            return [str(item) for item in overrides]
    return None
