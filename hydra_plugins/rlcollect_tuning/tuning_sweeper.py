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
        self.record_trial_jobs()

    def record_trial_jobs(self) -> None:
        """Each trial the study asks is marked with its job (``TRIAL_JOB``: the sweep folder
        and the job number), so that a resume of the sweep tells each trial its own run's
        value, not that of another sweep's trial with the same sampled values (a seeded
        sampler asks them again when a study goes on). The mark is set where Hydra's Optuna
        sweeper configures the trials it has just asked, in their jobs' order; a version of
        it without that step leaves them unmarked (found by their values, as before)."""
        from rlcollect.commands.sweep_study import TRIAL_JOB

        impl = getattr(self.sweeper, "sweeper", None)
        configure = getattr(impl, "_configure_trials", None)
        if configure is None:
            return
        sweep_dir = str(Path(self.config.hydra.sweep.dir).resolve())

        def configure_and_mark(trials, *args, **kwargs):
            overrides = configure(trials, *args, **kwargs)
            for offset, trial in enumerate(trials):  # launched next as jobs job_idx, job_idx + 1, ...
                trial.set_user_attr(TRIAL_JOB, {"sweep": sweep_dir, "job": impl.job_idx + offset})
            return overrides

        impl._configure_trials = configure_and_mark

    def sweep(self, arguments: List[str]) -> Any:
        from rlcollect.run_files import SWEEP_FILE

        study = existing_study(self.config.hydra.sweeper)  # read once, as the sweep found it (None: not made yet)
        self.check_a_trial(arguments, study)  # before the study is made or opened: a refused command leaves it be
        self.seed_past_earlier_trials(0 if study is None else len(study.get_trials(deepcopy=False)))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / SWEEP_FILE)
        try:
            return self.sweeper.sweep(arguments)
        except KeyboardInterrupt:
            self.fail_unstarted_trials()
            raise
        except ValueError as error:  # Optuna's study.best_trial, for the results file, once the trials are over
            # in memory: "No trials are completed yet"; in a database storage (sqlite ...): "Record does not exist."
            if "No trials are completed yet" not in str(error) and "Record does not exist" not in str(error):
                raise
            print("rlcollect train: no trial of the study completed, so it has no best trial to write "
                  "(optimization_results.yaml)", file=sys.stderr)
            return None

    def seed_past_earlier_trials(self, earlier: int) -> None:
        """A seeded sampler of a study that holds ``earlier`` (N) trials already is seeded
        ``seed + N``: with its own seed it would ask the trials the study's first command
        asked, again (a sampler's first draws depend on its seed alone). A study continued
        from the same state still asks the same trials each time."""
        from hydra.utils import instantiate

        sampler = self.config.hydra.sweeper.sampler
        seed = sampler.get("seed")
        impl = getattr(self.sweeper, "sweeper", None)
        if seed is None or not earlier or impl is None or not hasattr(impl, "sampler"):
            return
        impl.sampler = instantiate(sampler, seed=seed + earlier)
        print(f"rlcollect train: the study {self.config.hydra.sweeper.study_name!r} holds {earlier} trial(s): its "
              f"sampler is seeded {seed} + {earlier} = {seed + earlier} for this command's trials (seeded {seed}, it "
              "would ask the first trials again)", file=sys.stderr)

    def fail_unstarted_trials(self) -> None:
        """A Ctrl-C after the study asked for trials and before their jobs'
        folders were made: those trials are told failed. Left RUNNING, they would stay so for
        good (the sweep's resume continues jobs from their folders, and these have none);
        the trials whose jobs started are the resume's to tell. A study in memory ends here."""
        from rlcollect.commands.sweep_study import TRIAL_JOB, quiet_optuna
        from rlcollect.run_files import job_folders, job_number

        study = existing_study(self.config.hydra.sweeper)
        if study is None:  # in memory, or not made yet: nothing asked that outlives this command
            return
        optuna = quiet_optuna()
        sweep_dir = Path(self.config.hydra.sweep.dir)
        started = {job_number(sweep_dir, folder) for folder in job_folders(sweep_dir)}
        where = str(sweep_dir.resolve())
        unstarted = [trial.number for trial in study.get_trials(deepcopy=False,
                                                                 states=(optuna.trial.TrialState.RUNNING,))
                     if (trial.user_attrs.get(TRIAL_JOB) or {}).get("sweep") == where
                     and trial.user_attrs[TRIAL_JOB].get("job") not in started]
        for number in unstarted:
            study.tell(number, state=optuna.trial.TrialState.FAIL)
        if unstarted:
            print(f"rlcollect train: the study {self.config.hydra.sweeper.study_name!r} was told trial(s) "
                  f"{', '.join(f'#{number}' for number in unstarted)} failed: stopped before their jobs started",
                  file=sys.stderr)

    def check_a_trial(self, arguments: List[str], study) -> None:
        """The config of a trial as the study would ask for it (each searched key at the
        middle of its space, ``middle``; the fixed ones as given), composed, and its fixed
        values range-checked: a key the config does not have (a preset's key of another
        algorithm: ``hydra/sweeper=tune_dqn`` without ``algo=dqn``) or a fixed value out of
        its range is Hydra's error, or a RefusedBeforeStart, in one line; so is a grid
        sampler given a continuous interval to search."""
        from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

        from rlcollect.commands.run_folders import RefusedBeforeStart
        from rlcollect.config import check_ranges
        from rlcollect.errors import ConfigError

        given = [*(f"{key}={value}" for key, value in self.params.items()), *arguments]
        for override in given:  # a space Optuna cannot make (low above high, a log scale from 0): the override named
            try:
                create_params_from_overrides([override])
            except ValueError as error:
                raise RefusedBeforeStart(ConfigError(f"{override}: {error}")) from None
        searched, fixed = create_params_from_overrides(given)
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
            check_ranges(config, skip=set(searched))  # the root (objective, ...) keeps its schema here
            check_objective(config)
            check_storage(self.config.hydra.sweeper, study, searched, config.objective)
        except ConfigError as error:
            raise RefusedBeforeStart(error) from None


def existing_study(sweeper: DictConfig):
    """The study the sweep opens, as its storage holds it now, else None (no storage, a
    sqlite file not there yet, no study of that name, a storage that cannot be read: Optuna
    makes the one, or says why not, as the study starts). Read only: no sqlite file is made."""
    from rlcollect.commands.sweep_study import quiet_optuna, sqlite_file

    storage = sweeper.get("storage")
    where = None if storage is None else sqlite_file(str(storage))
    if storage is None or (where is not None and not where.is_file()):
        return None
    try:
        return quiet_optuna().load_study(study_name=sweeper.study_name, storage=str(storage))
    except Exception:  # noqa: BLE001 - no study of that name yet (KeyError), or a storage that cannot be read
        return None


def check_objective(config: DictConfig) -> None:
    """``objective=frames_to_solve`` needs a threshold to solve: without one every trial's
    value would be infinite, and the study's best trial its first."""
    from rlcollect.errors import ConfigError
    from rlcollect.logging.runs import solved_threshold

    if config.objective == "frames_to_solve" and solved_threshold(config.env.id, config.env.solved_return) is None:
        raise ConfigError(f"objective=frames_to_solve: env.solved_return gives {config.env.id} no threshold to solve, "
                          "so every trial's value would be infinite: set env.solved_return, or tune another objective")


def check_storage(sweeper: DictConfig, study, searched: dict, objective: str) -> None:
    """The study's storage as the sweep would open it: a sqlite file's folder there, and the
    study already in it (``study``, ``existing_study``'s; None: none yet) searching the same
    kind of space for each key in the same direction (Optuna would fail once a trial had
    started, leaving it RUNNING for good). Read only: a storage not there yet is not made (a
    sqlite file), nor a study."""
    from rlcollect.commands.sweep_study import sqlite_file
    from rlcollect.errors import ConfigError

    storage = sweeper.get("storage")
    where = None if storage is None else sqlite_file(str(storage))
    if where is not None and not where.is_file() and not where.absolute().parent.is_dir():
        raise ConfigError(f"hydra.sweeper.storage={storage}: no folder {where.absolute().parent} to make the "
                          "study's database in")
    if study is None:
        return
    from optuna.distributions import CategoricalDistribution

    directions = [getattr(direction, "name", direction).lower() for direction in study.directions]
    wanted = sweeper.direction if isinstance(sweeper.direction, (list, ListConfig)) else [sweeper.direction]
    if [str(getattr(direction, "name", direction)).lower() for direction in wanted] != directions:
        raise ConfigError(f"hydra.sweeper.direction={'/'.join(str(d) for d in wanted)} (objective={objective}): "
                          f"the study {sweeper.study_name!r} ({storage}) is to {'/'.join(directions)} (a study keeps "
                          "its direction, set by its objective): keep it, or start another study "
                          "(hydra.sweeper.study_name=<new name>)")
    for trial in study.get_trials(deepcopy=False):
        for name, distribution in searched.items():
            earlier = trial.distributions.get(name)
            if earlier is None:
                continue
            if type(earlier) is not type(distribution) or (  # Optuna's rule: one kind per key, one set of choices
                    isinstance(earlier, CategoricalDistribution) and earlier.choices != distribution.choices):
                raise ConfigError(
                    f"{name}: the study {sweeper.study_name!r} ({storage}) searched it as {earlier}, and a study "
                    "keeps one kind of space per key (and one set of choices): search it so, or start another "
                    "study (hydra.sweeper.study_name=<new name>)")


def middle(distribution) -> Any:
    """A value inside an Optuna distribution: its first choice, or the middle of its range
    (the geometric one on a log scale; an int range's rounded down)."""
    from optuna.distributions import CategoricalDistribution

    if isinstance(distribution, CategoricalDistribution):
        return distribution.choices[0]
    low, high = distribution.low, distribution.high
    value = (low * high) ** 0.5 if "Log" in type(distribution).__name__ else (low + high) / 2
    return int(value) if "Int" in type(distribution).__name__ else value
