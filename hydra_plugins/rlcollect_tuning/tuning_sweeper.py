"""``hydra/sweeper=tune_ppo``'s sweeper (rlcollect/conf/hydra/sweeper/tune_ppo.yaml): Hydra's
Optuna sweeper (the tune extra), its own options checked first (docs/tuning.md).

Optuna would take ``n_trials=0`` or ``direction=sideways`` and fail with a traceback once
the study starts or ends; here they are a ConfigError naming the option, before any trial.
Like Hydra's basic sweeper (and unlike Optuna's), it writes the sweep's config into the
sweep folder (``multirun.yaml``) before the first trial: what makes the folder a sweep's to
``rlcollect train resume=<sweep folder>``, which tells the study the values of the trials it
finishes (rlcollect/commands/sweep_study.py).
This module imports without the tune extra: Hydra imports every module of hydra_plugins
to list its plugins.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, ListConfig, OmegaConf

DIRECTIONS = ("minimize", "maximize")


class TuningSweeper(Sweeper):
    """Hydra's ``OptunaSweeper`` built from the same ``options``, once they are checked:
    ``n_trials`` and ``n_jobs`` positive ints, ``direction`` minimize or maximize (or a
    list of them), ``max_failure_rate`` in [0, 1]."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        from rlcollect.errors import ConfigError
        from rlcollect.validation import Range, check_positive_int

        for name in ("n_trials", "n_jobs"):
            check_positive_int(f"hydra.sweeper.{name}", options.get(name))
        direction = options.get("direction")
        for value in direction if isinstance(direction, (list, tuple, ListConfig)) else [direction]:
            name = getattr(value, "name", value)  # a str, or the sweeper's Direction enum
            if name not in DIRECTIONS:
                raise ConfigError(f"hydra.sweeper.direction={name}: choose one of {', '.join(DIRECTIONS)}")
        Range.parse("[0, 1]").check("hydra.sweeper.max_failure_rate", options.get("max_failure_rate"))
        from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

        self.sweeper = OptunaSweeper(**options)
        self.params = dict(options.get("params") or {})
        self.config: DictConfig | None = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        from rlcollect.run_files import SWEEP_FILE

        self.check_a_trial(arguments)  # before the study is made or opened: a refused command leaves the storage be
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / SWEEP_FILE)
        try:
            return self.sweeper.sweep(arguments)
        except ValueError as error:  # Optuna's study.best_trial, for the results file, once the trials are over
            # in memory: "No trials are completed yet"; in a database storage (sqlite ...): "Record does not exist."
            if "No trials are completed yet" not in str(error) and "Record does not exist" not in str(error):
                raise
            print("rlcollect train: no trial of the study completed, so it has no best trial to write "
                  "(optimization_results.yaml)", file=sys.stderr)
            return None

    def check_a_trial(self, arguments: List[str]) -> None:
        """The config of a trial as the study would ask for it (each searched key at the
        middle of its space, ``middle``; the fixed ones as given), composed, and its fixed
        values range-checked: a key the config does not have (a preset's key of another
        algorithm: ``hydra/sweeper=tune_dqn`` without ``algo=dqn``) or a fixed value out of
        its range is Hydra's error, or a RefusedBeforeStart, in one line; so is a grid
        sampler given a continuous interval to search."""
        from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

        from rlcollect.commands.batched_launch import task_config
        from rlcollect.commands.run_folders import RefusedBeforeStart
        from rlcollect.config import check_ranges
        from rlcollect.errors import ConfigError

        searched, fixed = create_params_from_overrides([*(f"{key}={value}" for key, value in self.params.items()),
                                                        *arguments])
        searched = {name: space for name, space in searched.items() if name not in fixed}  # a value given: fixed
        if str(self.config.hydra.sweeper.sampler.get("_target_")).endswith(".GridSampler"):
            from optuna import distributions

            gridded = (distributions.CategoricalDistribution, distributions.DiscreteUniformDistribution,
                       distributions.IntUniformDistribution)
            spans = [name for name, space in searched.items() if not isinstance(space, gridded)]
            if spans:  # Optuna's grid would stop with a traceback once the study starts
                raise RefusedBeforeStart(ConfigError(
                    f"hydra/sweeper/sampler=grid: {spans[0]} is searched over a continuous interval; a grid takes "
                    f"choice(...) and range(...) alone: give it one ({spans[0]}=choice(...))"))
        values = {name: middle(distribution) for name, distribution in searched.items()}
        overrides = [f"{name}={value}" for name, value in {**values, **fixed}.items()]
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        try:  # the searched keys are each trial's own: a value out of range fails that trial alone
            check_ranges(task_config(config), skip=set(searched))
        except ConfigError as error:
            raise RefusedBeforeStart(error) from None


def middle(distribution) -> Any:
    """A value inside an Optuna distribution: its first choice, or the middle of its range
    (the geometric one on a log scale; an int range's rounded down)."""
    from optuna.distributions import CategoricalDistribution

    if isinstance(distribution, CategoricalDistribution):
        return distribution.choices[0]
    low, high = distribution.low, distribution.high
    value = (low * high) ** 0.5 if "Log" in type(distribution).__name__ else (low + high) / 2
    return int(value) if "Int" in type(distribution).__name__ else value
