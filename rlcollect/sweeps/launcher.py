"""``hydra/launcher=batched`` (its class: hydra_plugins.rlcollect_batched): the jobs of a
sweep that differ only in ``seed`` train as the members of one batched model, in this
process (docs/sweeps.md).

Every job is set up as Hydra's basic launcher sets it up (its folder, .hydra/, job log,
callbacks); the jobs are then grouped by their composed configs without ``seed`` and PPO's
per-member float settings (``shared_settings``). A group of two jobs or more whose runs can
batch (``rlcollect.sweeps.run.batch_refusal``) trains as one batched sweep
(``rlcollect.commands.train.train_members``), each member returning its job's value; the
jobs of any other group (a job alone among them: the batched path would only add its
overhead) run one after the other, each as the basic launcher runs it.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """``Launcher.launch`` of hydra_plugins.rlcollect_batched.BatchedLauncher (``launcher``:
    its config, hydra_context, task_function and max_members)."""
    from rlcollect.commands.train import member_of_batched_sweep, train_members
    from rlcollect.sweeps.run import batch_refusal

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    configs = []
    for offset, overrides in enumerate(job_overrides):
        config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = config.hydra.job.num = initial_job_idx + offset
        configs.append(config)
    results: list[JobReturn | None] = [None] * len(configs)
    for group in group_jobs([task_config(config) for config in configs], launcher.max_members):
        numbers = ", ".join(f"#{configs[index].hydra.job.num}" for index in group)
        refusal = None if len(group) == 1 else batch_refusal(task_config(configs[group[0]]))
        if len(group) == 1:
            log.info("job %s runs as a solo run (no other job of the sweep can share its model)", numbers)
        elif refusal is not None:
            log.info("jobs %s run one by one: %s", numbers, refusal)
        if len(group) == 1 or refusal is not None:
            for index in group:
                results[index] = run_one(launcher, configs[index], launcher.task_function)
            continue
        log.info("jobs %s train as one batched model of %d members", numbers, len(group))
        members: list = []

        def keep(cfg, members=members) -> None:  # the job's folder, .hydra/ and callbacks are Hydra's
            members.append(member_of_batched_sweep(cfg))

        for index in group:
            results[index] = run_one(launcher, configs[index], keep)
        values = train_members(members)
        for index, value in zip(group, values):
            if results[index].status == JobStatus.COMPLETED:
                results[index].return_value = value
        configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    return results


def task_config(config: DictConfig) -> DictConfig:
    """A job's config without Hydra's own node (what the task function gets)."""
    return OmegaConf.masked_copy(config, [key for key in config if key != "hydra"])


def group_jobs(configs: list[DictConfig], max_members: int | None = None) -> list[list[int]]:
    """The jobs' indices grouped by their shared settings (their configs without seed and
    PPO's per-member float settings), in launch order, each group cut into groups of at
    most ``max_members`` (None: no cap)."""
    from rlcollect.sweeps.run import shared_settings

    groups: dict[str, list[int]] = {}
    for index, config in enumerate(configs):
        groups.setdefault(repr(shared_settings(config)), []).append(index)
    return [group[start:start + (max_members or len(group))] for group in groups.values()
            for start in range(0, len(group), max_members or len(group))]


def run_one(launcher, config: DictConfig, task_function) -> JobReturn:
    """One job as Hydra's basic launcher runs it."""
    log.info("\t#%s : %s", config.hydra.job.num, " ".join(filter_overrides(config.hydra.overrides.task)))
    return run_job(hydra_context=launcher.hydra_context, task_function=task_function, config=config,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
