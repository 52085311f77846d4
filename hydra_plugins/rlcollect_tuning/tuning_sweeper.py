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
SEEDS = 2 ** 32  # a sampler's seed is in [0, 2**32) (numpy's RandomState)
STOP_CODES = (130, 143)  # a job stopped by SIGINT (Ctrl-C) or SIGTERM: 128 + the signal's number


class StudyStopped(Exception):
    """A stop came while a launcher's processes ran a batch of trials: once it returned, the
    trials were told what their folders say, and no other batch is asked."""


class TuningSweeper(Sweeper):
    """Hydra's ``OptunaSweeper`` built from the same ``options``, once they are checked:
    ``n_trials`` and ``n_jobs`` positive ints, ``direction`` minimize or maximize (one: a
    run returns one objective), ``max_failure_rate`` 1.0 (failed trials never stop a study)."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        from rlcollect.errors import ConfigError
        from rlcollect.validation import Range, check_positive_int

        for name in ("n_trials", "n_jobs"):
            check_positive_int(f"hydra.sweeper.{name}", options.get(name))
        direction = options.get("direction")
        if isinstance(direction, (list, tuple, ListConfig)):  # Optuna's multi-objective study: every trial told FAIL
            given = ",".join(str(getattr(value, "name", value)) for value in direction)
            raise ConfigError(f"hydra.sweeper.direction=[{given}]: a run returns one objective (`objective`): give "
                              f"one direction ({' or '.join(DIRECTIONS)})")
        name = getattr(direction, "name", direction)  # a str, or the sweeper's Direction enum
        if name not in DIRECTIONS:
            raise ConfigError(f"hydra.sweeper.direction={name}: choose one of {', '.join(DIRECTIONS)}")
        rate = options.get("max_failure_rate")
        Range.parse("[0, 1]").check("hydra.sweeper.max_failure_rate", rate)
        if rate != 1.0:  # Hydra's sweeper counts a job that returns no value, but stops only for one that raised
            raise ConfigError(f"hydra.sweeper.max_failure_rate={rate}: a failed or refused trial never stops the "
                              "study here (each is told failed and the study goes on): leave it at 1.0")
        from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper

        self.sweeper = OptunaSweeper(**options)
        self.params = dict(options.get("params") or {})
        self.config: DictConfig | None = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.record_trial_jobs()
        self.stop_after_stopped_jobs()

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
        self.leave_given_keys_to_the_command_line(arguments)
        self.seed_past_earlier_trials(0 if study is None else len(study.get_trials(deepcopy=False)))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / SWEEP_FILE)
        try:
            return self.sweeper.sweep(arguments)
        except StudyStopped:  # jobs of a launcher's processes stopped and returned: the command says so (130 / 143)
            return None
        except KeyboardInterrupt:
            self.settle_stopped_trials()
            raise
        except SystemExit as stop:  # a job the command's process ran stopped by a signal (commands/train.py)
            if stop.code in STOP_CODES:
                self.settle_stopped_trials()
            raise
        except ValueError as error:  # Optuna's study.best_trial, for the results file, once the trials are over
            # in memory: "No trials are completed yet"; in a database storage (sqlite ...): "Record does not exist."
            if "No trials are completed yet" not in str(error) and "Record does not exist" not in str(error):
                raise
            print("rlcollect train: no trial of the study completed, so it has no best trial to write "
                  "(optimization_results.yaml)", file=sys.stderr)
            return None

    def leave_given_keys_to_the_command_line(self, arguments: List[str]) -> None:
        """A preset's key given on the command line (a fixed value, or another space) is the
        command line's alone: Hydra's sweeper would keep the preset's space beside it, and
        turn it into a grid (an interval: a traceback) before it drops the fixed keys."""
        from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

        impl = getattr(self.sweeper, "sweeper", None)
        if impl is None or not getattr(impl, "params", None):
            return
        searched, fixed = create_params_from_overrides(list(arguments))
        given = {*searched, *fixed}
        impl.params = OmegaConf.create({key: value for key, value in impl.params.items() if key not in given})

    def stop_after_stopped_jobs(self) -> None:
        """Where a launcher runs the jobs in processes of its own (hydra/launcher=joblib), a
        stop (Ctrl-C) has each job return once it has checkpointed, and Hydra's sweeper would
        tell the trials of the jobs that stopped mid-run failed (no value): here, once the
        batch has returned, the trials whose runs ended are told, those stopped mid-run stay
        RUNNING for the sweep's resume, and the study stops (``StudyStopped``)."""
        from rlcollect.commands.jobs import STOPPED
        from rlcollect.run_files import INTERRUPTED, job_number, read_summary, sweep_runs

        launcher = getattr(getattr(self.sweeper, "sweeper", None), "launcher", None)
        if launcher is None:
            return
        launch = launcher.launch
        sweep_dir = Path(self.config.hydra.sweep.dir)

        def launch_and_stop(job_overrides, initial_job_idx):
            returns = launch(job_overrides, initial_job_idx=initial_job_idx)
            batch = range(initial_job_idx, initial_job_idx + len(job_overrides))
            stopped = [folder for folder in sweep_runs(sweep_dir) if job_number(sweep_dir, folder) in batch
                       and read_summary(folder).get("status") == INTERRUPTED]
            if STOPPED.is_set() or stopped:
                self.settle_stopped_trials()
                raise StudyStopped
            return returns

        launcher.launch = launch_and_stop

    def seed_past_earlier_trials(self, earlier: int) -> None:
        """A seeded sampler of a study that holds ``earlier`` (N) trials already is seeded
        ``seed + N``: with its own seed it would ask the trials the study's first command
        asked, again (a sampler's first draws depend on its seed alone), modulo 2**32 (the
        seeds a sampler takes). A study continued from the same state still asks the same
        trials each time."""
        from hydra.utils import instantiate

        sampler = self.config.hydra.sweeper.sampler
        seed = sampler.get("seed")
        impl = getattr(self.sweeper, "sweeper", None)
        if seed is None or not earlier or impl is None or not hasattr(impl, "sampler"):
            return
        moved = (seed + earlier) % SEEDS  # a sampler's seed is below 2**32: past it, counted from 0 again
        impl.sampler = instantiate(sampler, seed=moved)
        wrapped = "" if moved == seed + earlier else f" modulo 2**32 = {moved}"
        print(f"rlcollect train: the study {self.config.hydra.sweeper.study_name!r} holds {earlier} trial(s): its "
              f"sampler is seeded {seed} + {earlier} = {seed + earlier}{wrapped} for this command's trials (seeded "
              f"{seed}, it would ask the first trials again)", file=sys.stderr)

    def settle_stopped_trials(self) -> None:
        """At a stop: the trials of this sweep's jobs that the sweeper had not told yet are
        told what their folders say (``sweep_study.settle_stopped_trials``): an ended run's
        value, a failed or refused run's failure, and failed for a trial asked whose job
        never got a folder (no resume could continue it); a run stopped mid-way stays
        RUNNING, for the sweep's resume. A study in memory ends here."""
        from rlcollect.commands.sweep_study import jobs_named, settle_stopped_trials

        study = existing_study(self.config.hydra.sweeper)
        if study is None:  # in memory, or not made yet: nothing asked that outlives this command
            return
        settled = settle_stopped_trials(study, Path(self.config.hydra.sweep.dir))
        name = self.config.hydra.sweeper.study_name
        if settled["told"] or settled["failed"]:
            said = [f"took the value{'s' if len(settled['told']) > 1 else ''} of {jobs_named(settled['told'])}"
                    ] if settled["told"] else []
            said += [f"was told that {jobs_named(settled['failed'])} failed"] if settled["failed"] else []
            print(f"rlcollect train: the study {name!r} {'; '.join(said)} (ended before the stop)", file=sys.stderr)
        if settled["unstarted"]:
            print(f"rlcollect train: the study {name!r} was told trial(s) "
                  f"{', '.join(f'#{number}' for number in settled['unstarted'])} "
                  "failed: stopped before their jobs started", file=sys.stderr)

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
        if "objective" in searched:  # the study's direction is set by it, once for all its trials
            raise RefusedBeforeStart(ConfigError(
                "objective: searched per trial, but a study optimises one objective in one direction: give it one "
                "value (objective=final_eval_return), or run a study per objective"))
        grid = str(self.config.hydra.sweeper.sampler.get("_target_")).endswith(".GridSampler")
        if grid:
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
            check_fixed_combination(config, set(searched))
            check_storage_url(self.config.hydra.sweeper.get("storage"))
            check_storage(self.config.hydra.sweeper, study, searched, config.objective)
            if grid and study is not None:
                self.grid_points_left(study, searched)
        except ConfigError as error:
            raise RefusedBeforeStart(error) from None

    def grid_points_left(self, study, searched: dict) -> None:
        """A grid study continued: its sampler asks the points no trial of the study ran (or
        runs) first, then asks run points again (Optuna's GridSampler). The command asks at
        most the points left, one line says so, and a grid every point of which was run is a
        ConfigError (its trials would only repeat earlier ones)."""
        from optuna.samplers import GridSampler

        from rlcollect.errors import ConfigError

        impl = getattr(self.sweeper, "sweeper", None)
        if impl is None or not hasattr(impl, "_to_grid_sampler_choices"):
            return
        sampler = GridSampler({name: impl._to_grid_sampler_choices(space) for name, space in searched.items()})
        taken = {trial.system_attrs["grid_id"] for trial in study.get_trials(deepcopy=False)
                 if "grid_id" in trial.system_attrs and not trial.state.name == "FAIL"
                 and sampler._same_search_space(trial.system_attrs.get("search_space", {}))}
        points = sampler._n_min_trials
        left = points - len(taken & set(range(points)))
        name, storage = self.config.hydra.sweeper.study_name, self.config.hydra.sweeper.storage
        if left == 0:
            raise ConfigError(f"hydra/sweeper/sampler=grid: the study {name!r} ({storage}) has run every point of "
                              f"this grid ({points}): another trial would repeat one; search another grid, or start "
                              "another study (hydra.sweeper.study_name=<new name>)")
        if left < impl.n_trials:
            print(f"rlcollect train: the study {name!r} has run {points - left} of the grid's {points} points: this "
                  f"command asks the {left} left", file=sys.stderr)
            impl.n_trials = left


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


def check_fixed_combination(config: DictConfig, searched: set) -> None:
    """The combinations of options that cannot train (pipeline/checks.py's
    ``check_combination``: ``algo.learning_starts`` not below ``total_frames``, ...) of the
    trial's fixed values: one that names a searched key (``key=``) depends on what each
    trial samples, and fails that trial alone."""
    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import check_combination

    try:
        check_combination(config)
    except ConfigError as error:
        if not any(f"{name}=" in str(error) for name in searched):
            raise


def check_objective(config: DictConfig) -> None:
    """``objective=frames_to_solve`` needs a threshold to solve: without one every trial's
    value would be infinite, and the study's best trial its first."""
    from rlcollect.errors import ConfigError
    from rlcollect.logging.runs import solved_threshold

    if config.objective == "frames_to_solve" and solved_threshold(config.env.id, config.env.solved_return) is None:
        raise ConfigError(f"objective=frames_to_solve: env.solved_return gives {config.env.id} no threshold to solve, "
                          "so every trial's value would be infinite: set env.solved_return, or tune another objective")


SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every sqlite database file


def check_storage_url(storage) -> None:
    """``hydra.sweeper.storage`` as Optuna would open it: a database URL (SQLAlchemy's), and
    for sqlite a path that is not there yet (Optuna makes it) or a sqlite database (not a
    folder, nor another file, which a study would not be written into). Read only."""
    from rlcollect.commands.sweep_study import sqlite_file
    from rlcollect.errors import ConfigError

    if storage is None:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(str(storage))
    except ArgumentError:
        raise ConfigError(f"hydra.sweeper.storage={storage}: not a database URL (sqlite:///<file>, "
                          "postgresql://..., or null for a study in memory)") from None
    where = sqlite_file(str(storage))
    if where is None or not where.exists():
        return
    if where.is_dir():
        raise ConfigError(f"hydra.sweeper.storage={storage}: {where} is a folder, not a sqlite database file")
    try:
        with where.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as error:
        raise ConfigError(f"hydra.sweeper.storage={storage}: cannot read {where} ({error.strerror})") from None
    if header and header != SQLITE_HEADER:  # an empty file is a database sqlite starts
        raise ConfigError(f"hydra.sweeper.storage={storage}: {where} is not a sqlite database (a file of another "
                          "kind, left as it is)")


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
