"""A tuning sweep's Optuna study, told what ``rlcollect train resume=<sweep folder>`` finished
(docs/tuning.md, "A stopped study").

A study stopped by Ctrl-C (or a kill) leaves its trials that were training as RUNNING in
its storage: the sweeper that would have told their values has stopped. Once the sweep's
resume has trained them on, each such trial (found by its mark, ``TRIAL_JOB``, or in a
study of an earlier version by its sampled values, the overrides of its run folder) is
told its run's ``objective`` (``jobs.objective_value``, what the sweeper tells), or told
failed where its run failed or returns no value; a trial whose run was stopped again stays
RUNNING for the next resume. A study without storage lived in the stopped process: there
is nothing to tell, and one line says so.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from rlcollect.run_files import CONFIG_FILE, ENDED_STATUSES, FAILED, INTERRUPTED, REFUSED, read_summary

log = logging.getLogger(__name__)

# a trial's user attribute naming its job: {"sweep": the sweep folder, resolved, "job": its job number}
# (the tuning sweeper sets it as the trial is launched; a study of an earlier version has none)
TRIAL_JOB = "rlcollect_job"


@dataclass
class Resumed:
    """A member the sweep's resume trained on: its job number, folder and config."""

    number: int
    folder: Path
    cfg: DictConfig
    trained_on: bool = True  # False: a member that had ended (or was refused) before the stop, told as it is


def ended_member(number: int, folder: Path) -> Resumed:
    """A member the resume leaves as it is (it had finished, was solved or refused before the
    sweep stopped): its trial, RUNNING where the sweep stopped before telling it, is told
    its run's value (its config, to read the objective, from its folder; None where it has none)."""
    from omegaconf import OmegaConf

    config = folder / CONFIG_FILE
    return Resumed(number, folder, OmegaConf.load(config) if config.is_file() else None, trained_on=False)


def tuning_sweeper(sweeper: DictConfig) -> bool:
    """Whether ``sweeper`` (a sweep's ``hydra.sweeper``) is the tune presets' (its
    ``study_name`` and ``storage`` say where the study is)."""
    from hydra_plugins.rlcollect_tuning.tuning_sweeper import TuningSweeper
    from rlcollect.commands.sweep_record import targets

    return targets(sweeper, TuningSweeper)


def tell_study(sweeper: DictConfig, members: list[Resumed], sweep_dir: Path) -> None:
    """Tell the study of the sweep's ``sweeper`` (its ``hydra.sweeper``, where it is the tune
    presets') the values of the trials of ``members``, the runs its resume trained on (the
    sweep in ``sweep_dir``); one line says what it told, and one which trials keep the
    value they were told before their runs trained on (a study's told values stay)."""
    if not tuning_sweeper(sweeper) or not members:
        return
    if sweeper.storage is None:
        log.info("the sweep's Optuna study was kept in memory (hydra.sweeper.storage=null) and ended with the "
                 "stopped sweep: the resumed trials' values are in their runs, no study takes them")
        return
    optuna = quiet_optuna()
    where = sqlite_file(sweeper.storage)
    if where is not None and not where.is_file():  # a relative path, resumed from another folder: not made anew
        log.warning("the sweep's study storage %s is not there from %s: the resumed trials' values are in their "
                    "runs; resume the sweep from the folder the study ran in to tell them", sweeper.storage,
                    Path.cwd())
        return
    try:
        study = optuna.load_study(study_name=sweeper.study_name, storage=sweeper.storage)
    except Exception as error:  # noqa: BLE001 - a storage gone or changed: the runs stand, said in one line
        log.warning("cannot load the sweep's study %r from %s (%s): the resumed trials' values are in their runs",
                    sweeper.study_name, sweeper.storage, " ".join(str(error).split()))
        return
    trials = study.get_trials(deepcopy=False)
    running = [trial for trial in trials if trial.state == optuna.trial.TrialState.RUNNING]
    told, failed, kept = [], [], []
    sweep = str(sweep_dir.resolve())
    for member in members:
        summary = read_summary(member.folder)
        status = summary.get("status")
        if status is None or status == INTERRUPTED:
            continue  # stopped again: still running, for the next resume
        trial = matching_trial(running, member, sweep)
        if trial is None:  # told already (trained on since: its value stays), or not a trial of this study
            earlier = marked_trial(trials, member.number, sweep)
            if (member.trained_on and earlier is not None and earlier.state == optuna.trial.TrialState.COMPLETE
                    and status in ENDED_STATUSES):
                kept.append(member.number)
            continue
        running.remove(trial)
        value = trial_value(member, summary) if status in ENDED_STATUSES and member.cfg is not None else None
        if value is None:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            failed.append(member.number)
        else:
            study.tell(trial.number, value)
            told.append(member.number)
    if told or failed:
        said = [f"took the value{'s' if len(told) > 1 else ''} of {jobs_named(told)}"] if told else []
        said += [f"was told that {jobs_named(failed)} failed"] if failed else []
        log.info("the study %r (%s) %s", sweeper.study_name, sweeper.storage, "; ".join(said))
    if kept:
        log.warning("the study %r (%s) keeps the value%s %s had when %s ended first: a study's told values stay, "
                    "so it does not know the runs trained on (their run folders do)", sweeper.study_name,
                    sweeper.storage, "s" if len(kept) > 1 else "", jobs_named(kept), "they" if len(kept) > 1 else "it")


def settle_stopped_trials(study, sweep_dir: Path) -> dict[str, list[int]]:
    """At a stop (Ctrl-C, SIGTERM) of the sweep in ``sweep_dir``: each trial of ``study``
    still RUNNING and marked as one of its jobs (``TRIAL_JOB``) is told what its job's folder
    says: its run's value where the run ended (finished or solved before the stop: the
    sweeper that would have told it stopped), failed where the run failed or was refused,
    or where the job has no folder (asked, never started: no resume could continue it).
    A job stopped mid-run (interrupted) stays RUNNING: the sweep's resume tells it. The job
    numbers told, by what they were told (``told``, ``failed``, ``unstarted``)."""
    from rlcollect.run_files import job_folders, job_number, sweep_runs

    optuna = quiet_optuna()
    where = str(sweep_dir.resolve())
    started = {job_number(sweep_dir, folder) for folder in job_folders(sweep_dir)}
    runs = {job_number(sweep_dir, folder): folder for folder in sweep_runs(sweep_dir)}
    settled: dict[str, list[int]] = {"told": [], "failed": [], "unstarted": []}
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        mark = trial.user_attrs.get(TRIAL_JOB) or {}
        if mark.get("sweep") != where:
            continue
        number = mark.get("job")
        if number not in started:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            settled["unstarted"].append(trial.number)
            continue
        folder = runs.get(number)
        status = read_summary(folder).get("status") if folder is not None else None
        if status in ENDED_STATUSES:
            member = ended_member(number, folder)
            value = None if member.cfg is None else trial_value(member, read_summary(folder))
            if value is not None:
                study.tell(trial.number, value)
                settled["told"].append(number)
                continue
        if status in (*ENDED_STATUSES, FAILED, REFUSED):
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            settled["failed"].append(number)
    return settled


def quiet_optuna():
    """The optuna module, with alembic's INFO lines off (its plugins' setup as optuna loads,
    a storage's schema checks)."""
    logging.getLogger("alembic").setLevel(logging.WARNING)
    import optuna

    return optuna


def jobs_named(numbers: list[int]) -> str:
    """``job #3`` or ``jobs #0-#2, #5``."""
    from rlcollect.commands.batched_launch import job_numbers

    return f"job{'s' if len(numbers) > 1 else ''} {job_numbers(numbers)}"


def sqlite_file(storage: str) -> Path | None:
    """The database file of a ``sqlite:///<path>`` storage URL, else None."""
    prefix = "sqlite:///"
    return Path(storage[len(prefix):]) if storage.startswith(prefix) else None


def trial_value(member: Resumed, summary: dict) -> float | None:
    """What the sweeper would have told for the member's run (``summary``): its ``objective``."""
    from rlcollect.commands.jobs import objective_value

    return objective_value(member.cfg, summary, member.folder)


def marked_trial(trials: list, number: int, sweep: str):
    """The trial of ``trials`` marked as job ``number`` of the sweep in ``sweep`` (``TRIAL_JOB``), else None."""
    return next((trial for trial in trials if trial.user_attrs.get(TRIAL_JOB) == {"sweep": sweep, "job": number}),
                None)


def matching_trial(trials: list, member: Resumed, sweep: str):
    """The trial of ``trials`` that is the member's job of the sweep in ``sweep``: the one
    marked so (``TRIAL_JOB``), else, of the trials marked as no job (a study of an earlier
    version), the one whose sampled values are the run's overrides (as the sweeper wrote
    them: ``name=str(value)``); None when there is none."""
    from rlcollect.commands.sweep_report import read_overrides

    marked = marked_trial(trials, member.number, sweep)
    if marked is not None:
        return marked
    overrides = dict(line.split("=", 1) for line in read_overrides(member.folder) if "=" in line)
    return next((trial for trial in trials if TRIAL_JOB not in trial.user_attrs and trial.params and all(
        overrides.get(name) == str(value) for name, value in trial.params.items())), None)
