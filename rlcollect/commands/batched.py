"""The jobs of one group of a batched sweep (``hydra/launcher=batched``, commands/batched_launch.py)
trained as the members of one batched model (rlcollect.sweeps), each ending as a solo job
would (commands/jobs.py)."""
from __future__ import annotations

import gc
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from rlcollect.commands.jobs import (
    NO_VALUE,
    Job,
    failed_to_build,
    finished_lines,
    interrupted_line,
    interrupted_while_starting,
    objective_value,
    refused,
    run_failed,
    stop_on_signals,
    sweep_group,
    sweep_resume_line,
)
from rlcollect.commands.run_folders import hold_run_folder, release_run_folder
from rlcollect.config import check_ranges
from rlcollect.errors import ConfigError
from rlcollect.run_files import INTERRUPTED
from rlcollect.sweeps.pbt_options import PBTOptions


def train_members(members: list[tuple[DictConfig, Job, dict, int]], share: int = 0, *,
                  pbt: PBTOptions | None = None, sweep_dir: str | Path | None = None) -> list[float | None]:
    """The jobs of one group of a batched sweep (hydra/launcher=batched: ``(cfg, job, W&B
    names, job number)`` each, differing in seed and PPO's per-member settings only) trained as the members of one
    batched model (rlcollect.sweeps). Each member ends as a solo sweep job would: refused, failed to
    build, failed, finished or solved, its folder and its line the same; returns each
    job's ``objective`` (None for one that did not finish). ``share``: which of the
    group's shares this is, when it trains in several processes (its progress bar's line).
    ``pbt``: population-based training among the members (on: ``pbt.every_frames`` set),
    its events written to ``sweep_dir``. Each member's folder is held (``hold_run_folder``)
    while it trains."""
    try:
        return train_held_members(members, share, pbt=pbt, sweep_dir=sweep_dir)
    finally:
        for _, job, *_ in members:
            release_run_folder(job.run_dir)


def train_held_members(members: list[tuple[DictConfig, Job, dict, int]], share: int, *, pbt: PBTOptions | None,
                       sweep_dir: str | Path | None) -> list[float | None]:
    """:func:`train_members`, its members' folders held from here on."""
    values: list[float | None] = [NO_VALUE] * len(members)
    live = []
    for index, (cfg, job, *_) in enumerate(members):
        try:
            hold_run_folder(job.run_dir, f"the job in {job.run_dir}")
            check_ranges(cfg)
        except ConfigError as error:
            refused(job, error)
            continue
        live.append(index)
    if not live:
        return values
    from rlcollect.logging.runs import pbt_settings_at
    from rlcollect.pipeline.lifecycle import metric_rows
    from rlcollect.sweeps.pbt import PopulationTraining
    from rlcollect.sweeps.run import build_sweep

    jobs = [members[index][1] for index in live]
    cfgs = [members[index][0] for index in live]
    try:
        population = None
        if pbt is not None and pbt.on:
            population = PopulationTraining(pbt, cfgs, [members[index][3] for index in live], sweep_dir)
        checkpoints = resumed_checkpoints(jobs)
        sweep = build_sweep(cfgs, [job.run_dir for job in jobs], [members[index][2] for index in live],
                            pbt=population, checkpoints=checkpoints)
        if population is not None and checkpoints is not None:
            frames = int(checkpoints[0]["frames"])
            population.resume_at(frames, [pbt_settings_at(metric_rows(job.run_dir), frames) for job in jobs])
    except ConfigError as error:
        for job in jobs:
            refused(job, error)
        return values
    except KeyboardInterrupt:
        interrupted_while_starting(*jobs)
    except Exception as error:
        for job in jobs:
            failed_to_build(job, error)
        return values
    with stop_on_signals() as stop:
        try:
            sweep.run(stop=stop, bar_position=share)
        except KeyboardInterrupt:  # a second Ctrl-C: every member stopped at once
            for member, job in enumerate(jobs):
                print(interrupted_line(job, sweep.pipelines[member].collector.frames,
                                       sweep.pipelines[member].checkpoint_frames), file=sys.stderr)
            raise SystemExit(128 + stop.signal_number) from None
        except Exception:
            pass  # the shared parts failed: every member's error is in sweep.errors
    interrupted = False
    for member, (index, job) in enumerate(zip(live, jobs)):
        summary = sweep.pipelines[member].progress.summary
        if member in sweep.errors:
            error, trace = sweep.errors[member]
            run_failed(job, error, trace, sweep.pipelines[member].checkpoint_frames)
        elif summary["status"] == INTERRUPTED:
            interrupted = True
            print(interrupted_line(job, summary["frames"], summary.get("checkpoint_frames")), file=sys.stderr)
        else:
            print(finished_lines(job, summary))
            values[index] = objective_value(members[index][0], summary, job.run_dir)
    # the members' parts reference one another: collected now, with their envs (ALE's interfaces outlived the
    # interpreter's own clean-up, which reported each as leaked)
    del sweep
    gc.collect()
    if interrupted:
        line = sweep_resume_line(jobs[0].run_dir)
        if share == 0 and line is not None:  # once per command, where its shares are several processes
            print(line, file=sys.stderr)
        raise SystemExit(128 + stop.signal_number)
    return values


def resumed_checkpoints(jobs: list[Job]) -> list[dict] | None:
    """Each member's checkpoint where the members resume (``Job.resume``: ``rlcollect train
    resume=<sweep folder>``), else None; one that does not load is a ConfigError."""
    if not any(job.resume for job in jobs):
        return None
    from rlcollect.checkpoint import CHECKPOINT_FILE, CheckpointError, load_checkpoint

    checkpoints = []
    for job in jobs:
        try:
            checkpoints.append(load_checkpoint(job.run_dir / CHECKPOINT_FILE))
        except CheckpointError as error:
            raise ConfigError(f"resume={job.run_dir}: {error}") from None
    return checkpoints


def member_of_batched_sweep(cfg: DictConfig) -> tuple[DictConfig, Job, dict, int]:
    """A batched sweep's job as Hydra set it up (its folder made, its .hydra/ written):
    ``(cfg, job, W&B names, its job number)`` for ``train_members``; what the launcher's task
    function keeps."""
    job = Job.current(cfg)
    hydra_cfg = HydraConfig.get()
    from rlcollect.pipeline.checks import collector_name

    try:
        job_type = collector_name(cfg)
    except ConfigError:
        job_type = None
    names = {"name": hydra_cfg.job.override_dirname or None, "group": sweep_group(hydra_cfg), "job_type": job_type}
    return cfg, job, names, int(hydra_cfg.job.num)
