"""``hydra/launcher=batched`` (its class: hydra_plugins.rlcollect_batched): the jobs of a
sweep that differ only in ``seed`` and PPO's per-member settings train as the members of one
batched model, in this process (docs/sweeps.md).

Every job is set up as Hydra's basic launcher sets it up (its folder, .hydra/, job log,
callbacks); the jobs are then grouped by their composed configs without ``seed`` and PPO's
per-member settings (MEMBER_OPTIONS, ``shared_settings``). A group of two jobs or more whose runs can
batch (``rlcollect.sweeps.grouping.batch_refusal``) trains as one batched sweep
(``rlcollect.commands.batched.train_members``), or as ``processes`` of them at once
(``train_shares``), each member returning its job's value; the
jobs of any other group (a job alone among them: the batched path would only add its
overhead) run one after the other, each as the basic launcher runs it.
"""
from __future__ import annotations

import copy
import ctypes
import functools
import logging
import multiprocessing
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable, Sequence

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from rlcollect.errors import ConfigError

log = logging.getLogger(__name__)


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """``Launcher.launch`` of hydra_plugins.rlcollect_batched.BatchedLauncher (``launcher``:
    its config, hydra_context, task_function, max_members and processes)."""
    from rlcollect.commands.batched import member_of_batched_sweep, train_members
    from rlcollect.sweeps.grouping import batch_refusal, lockstep_reason

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    configs = []
    for offset, overrides in enumerate(job_overrides):
        config = launcher.hydra_context.config_loader.take(launcher.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = config.hydra.job.num = initial_job_idx + offset
        configs.append(config)
    results: list[JobReturn | None] = [None] * len(configs)
    tasks = [task_config(config) for config in configs]
    groups = group_jobs(tasks, launcher.max_members)
    cut = {index for group in group_jobs(tasks) if len(group) > (launcher.max_members or len(group))
           for index in group}  # the jobs of a group that max_members cut
    pbt = launcher.pbt if launcher.pbt is not None and launcher.pbt.on else None
    train = train_members
    if pbt is not None:
        refuse_pbt([[configs[index] for index in group] for group in groups])
        train = functools.partial(train_members, pbt=pbt, sweep_dir=sweep_dir)
    for whole_group in groups:
        # a job whose values are out of range is refused as its folder is made: not a member, nor counted as one
        out_of_range = {index: error for index in whole_group
                        if (error := range_error(tasks[index])) is not None}
        for index, error in out_of_range.items():
            results[index] = run_one(launcher, configs[index], functools.partial(refuse_job, error=error))
        group = [index for index in whole_group if index not in out_of_range]
        if not group:
            continue
        numbers = job_numbers([configs[index].hydra.job.num for index in group])
        # (a job alone in its group is asked too, for its line, where it is rlcollect train's: not Hydra's test apps')
        refusal = batch_refusal(tasks[group[0]]) if len(group) > 1 or "collector" in tasks[group[0]] else None
        if len(group) == 1:
            why = (refusal or ("the other jobs that could share its model are refused" if len(whole_group) > 1 else
                               f"hydra.launcher.max_members={launcher.max_members} cut it from its group"
                               if group[0] in cut else "no other job of the sweep can share its model"))
            log.info("job %s runs as a solo run (%s)", numbers, why)
        elif refusal is not None:
            log.info("jobs %s run one by one: %s", numbers, refusal)
        if len(group) == 1 or refusal is not None:
            for index in group:
                results[index] = run_one(launcher, configs[index], launcher.task_function)
            continue
        parts = shares(len(group), launcher.processes)
        sizes = " + ".join(str(len(part)) for part in parts)
        lockstep = lockstep_reason(tasks[group[0]])
        if lockstep is not None:
            where = "one process" if len(parts) == 1 else f"{len(parts)} processes ({sizes} members)"
            log.info("jobs %s train in lockstep in %s, each member its own model (%s does not stack)", numbers,
                     where, lockstep)
        elif len(parts) == 1:
            log.info("jobs %s train as one batched model of %d members", numbers, len(group))
        else:
            log.info("jobs %s train as %d batched models (%s members), each in a process of its own", numbers,
                     len(parts), sizes)
        members: list = []

        def keep(cfg, members=members) -> None:  # the job's folder, .hydra/ and callbacks are Hydra's
            members.append(member_of_batched_sweep(cfg))

        for index in group:
            results[index] = run_one(launcher, configs[index], keep)
        values = train_shares(train, members, launcher.processes)
        for index, value in zip(group, values):
            if results[index].status == JobStatus.COMPLETED:
                results[index].return_value = value
        configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    return results


def range_error(cfg: DictConfig) -> ConfigError | None:
    """The ConfigError of a job's values out of their ranges (``check_ranges``), else None."""
    from rlcollect.config import check_ranges

    try:
        check_ranges(cfg)
    except ConfigError as error:
        return error
    return None


def refuse_job(cfg: DictConfig, error: ConfigError) -> None:
    """The task of a job refused before its group trains: its folder keeps the refusal."""
    from rlcollect.commands.jobs import Job, refused

    refused(Job.current(cfg), error)


def job_numbers(numbers: Sequence[int]) -> str:
    """Job numbers as a log line names them: a run of four or more consecutive numbers as a
    range (``#0-#1023``, not a thousand numbers), the others one by one (``#0-#3, #7, #9, #10``;
    ``#0, #1, #2``)."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(f"#{run[0]}-#{run[-1]}" if len(run) > 3 else ", ".join(f"#{n}" for n in run) for run in runs)


def refuse_pbt(groups: list[list[DictConfig]]) -> None:
    """With population-based training on, every group of jobs (their configs, Hydra's node
    included) must train as one batched model whose members differ in a float setting:
    else RefusedBeforeStart (one line, exit 2), before any job starts."""
    from rlcollect.commands.run_folders import RefusedBeforeStart
    from rlcollect.errors import ConfigError
    from rlcollect.sweeps.grouping import batch_refusal
    from rlcollect.sweeps.pbt import pbt_refusal

    for group in groups:
        numbers = job_numbers([config.hydra.job.num for config in group])
        cfgs = [task_config(config) for config in group]
        if len(group) == 1:
            refusal = ("population-based training exchanges weights between the members of one batched model, and no "
                       "other job of the sweep can share its model")
        else:
            refusal = batch_refusal(cfgs[0]) or pbt_refusal(cfgs)
        if refusal is not None:
            raise RefusedBeforeStart(ConfigError(f"hydra.launcher.pbt: job{'s' if len(group) > 1 else ''} {numbers}: "
                                                 f"{refusal}"))


class ComposeOnce:
    """Hydra's ConfigLoader (``loader``; every other method its own), composing each job's
    config once, and a sweep over seeds once in all: Hydra's sweeper composes every job of a
    batch to check that it can (``Sweeper.validate_batch_is_legal``, through
    ``load_sweep_config``), then the launcher ``take``s the job's config: the one the
    sweeper composed (which it discards), else a new one. Only what the sweeper composed is
    kept, and each is handed out once.

    A job whose overrides differ from an earlier job's only in a plain ``seed=<int>`` is
    that job's config with ``seed``, ``hydra.overrides.task`` and
    ``hydra.job.override_dirname`` set as composing it would set them (``reseeded``): a
    copy costs about a twentieth of a composition, which is most of a large sweep's start.
    """

    def __init__(self, loader) -> None:
        self.loader = loader
        self.composed: dict[tuple, DictConfig] = {}
        self.by_pattern: dict[tuple, DictConfig] = {}  # (master, overrides with the seed's blanked): a composed job

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        seed = seed_override(sweep_overrides)
        pattern = None
        if seed is not None:
            pattern = (id(master_config), seed[0], *(o for i, o in enumerate(sweep_overrides) if i != seed[0]))
        earlier = self.by_pattern.get(pattern)
        if earlier is not None:
            config = reseeded(earlier, master_config, sweep_overrides[seed[0]], seed[1])
        else:
            config = self.loader.load_sweep_config(master_config, sweep_overrides)
            if pattern is not None:  # a copy: the launcher and run_job write into the job's own config
                self.by_pattern[pattern] = copy.deepcopy(config)
        self.composed[(id(master_config), tuple(sweep_overrides))] = config
        return config

    def take(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """The job's config for the launcher (``load_sweep_config``'s result)."""
        config = self.composed.pop((id(master_config), tuple(sweep_overrides)), None)
        return self.loader.load_sweep_config(master_config, sweep_overrides) if config is None else config

    def __getattr__(self, name: str):
        return getattr(self.loader, name)


def seed_override(overrides: Sequence[str]) -> tuple[int, int] | None:
    """(index, value) of the one plain ``seed=<int>`` among ``overrides`` (no prefix, no
    package, no sweep), else None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    found = None
    for index, text in enumerate(overrides):
        if not text.startswith("seed="):
            continue
        override = OverridesParser.create().parse_override(text)
        value = override.value()
        if (override.type != OverrideType.CHANGE or override.package is not None or override.is_sweep_override()
                or not isinstance(value, int) or isinstance(value, bool) or found is not None):
            return None
        found = (index, value)
    return found


def reseeded(composed: DictConfig, master_config: DictConfig, seed_text: str, seed: int) -> DictConfig:
    """A copy of the ``composed`` job's config as composing it with ``seed_text``
    (``seed=<seed>``) in place of its own seed override would give."""
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser

    config = copy.deepcopy(composed)
    with open_dict(config):
        config.seed = seed
        task = [seed_text if text.startswith("seed=") else text for text in config.hydra.overrides.task]
        config.hydra.overrides.task = task
        dirname = config.hydra.job.config.override_dirname
        config.hydra.job.override_dirname = get_overrides_dirname(
            overrides=OverridesParser.create().parse_overrides(task), kv_sep=dirname.kv_sep,
            item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys)
    OmegaConf.copy_cache(from_config=master_config, to_config=config)
    return config


def shares(count: int, processes: int) -> list[range]:
    """``range(count)`` cut into at most ``processes`` runs of consecutive indices, as even as can be."""
    processes = max(1, min(processes, count))
    bounds = [count * share // processes for share in range(processes + 1)]
    return [range(start, end) for start, end in zip(bounds, bounds[1:])]


def train_shares(train: Callable[[list, int], list], members: list, processes: int,
                 parts: Sequence[range] | None = None) -> list:
    """``train(members, 0)`` (``train_members``: each member's value) with the members cut
    into ``processes`` shares (or the consecutive ``parts`` given) trained at once, share
    ``i`` as ``train(its members, i)``, each as a batched model of its own: the first in
    this process, each other in a process forked from it (it has every import, the
    members' configs and folders; it sends back its values). The processes share nothing
    else, so each member trains as it would in one model. A share stopped by a signal
    (exit 130, 143) stops the command with its code once every share has ended; a share
    whose process died leaves its members as far as they got, reported in one line. No share
    outlives this process: each ends with it, even killed with SIGKILL (``end_with_parent``)."""
    parts = list(parts) if parts is not None else shares(len(members), processes)
    if len(parts) == 1:
        return train(members, 0)
    context = multiprocessing.get_context("fork")
    sys.stdout.flush()  # a fork copies unwritten output: written once, here
    sys.stderr.flush()
    children = []
    for share, part in enumerate(parts[1:], start=1):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=train_share,
                                args=(train, [members[index] for index in part], share, send, os.getpid()),
                                name=f"rlcollect batched share {part.start}-{part.stop - 1}")
        child.start()
        send.close()
        children.append((child, receive))
    outcomes = [outcome(train, [members[index] for index in parts[0]], 0)]
    for child, receive in children:
        try:
            sent = receive.recv()
        except EOFError:  # it died before sending (killed, out of memory)
            sent = None
        child.join()
        outcomes.append(("died", child.exitcode) if sent is None else sent)
    values: list = []
    exit_code = 0
    for part, (kind, value) in zip(parts, outcomes):
        if kind == "values":
            values += value
            continue
        values += [None] * len(part)
        if kind == "exit":
            exit_code = max(exit_code, value if isinstance(value, int) else 1)
        elif kind == "died":
            from rlcollect.commands.jobs import sweep_resume_line

            died = [members[index] for index in part]
            print(f"rlcollect train: the process training jobs {job_numbers([member[3] for member in died])} of a "
                  f"batched model ended with exit code {value}; their folders hold what it wrote, to their last "
                  "checkpoints", file=sys.stderr)
            line = sweep_resume_line(died[0][1].run_dir)
            if line is not None:
                print(line, file=sys.stderr)
            exit_code = max(exit_code, 1)
        else:
            raise RuntimeError(f"a batched sweep's process failed (a bug in rlcollect):\n{value}")
    if exit_code:
        raise SystemExit(exit_code)
    return values


def outcome(train: Callable[[list, int], list], members: list, share: int) -> tuple[str, object]:
    """``train(members, share)`` as ``("values", its values)``, ``("exit", code)``
    (SystemExit) or ``("error", traceback)``."""
    try:
        return "values", train(members, share)
    except SystemExit as stop:
        return "exit", stop.code
    except BaseException:  # noqa: BLE001 - handed to the parent, which raises it as rlcollect's bug
        return "error", traceback.format_exc()


def train_share(train: Callable[[list, int], list], members: list, share: int, send, parent: int) -> None:
    """A forked process's share of ``train_shares``: its outcome, sent to the parent (pid
    ``parent``), with which it ends."""
    end_with_parent(parent)
    send.send(outcome(train, members, share))
    send.close()


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when the thread that forked it ends


def end_with_parent(parent: int) -> None:
    """This process (forked by ``parent``'s main thread) gets SIGKILL as soon as its parent
    ends, however it ends (Linux's parent-death signal; elsewhere nothing is set); if the
    parent already ended (before the signal was set), it ends now. Its own children end
    with it as they would with any parent: the envs of gymnasium's async backend at the end
    of their pipes, rlcollect's collector workers as they see their parent gone, W&B's
    service as it watches its parent's pid."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("a child process could not ask to end with its parent (prctl: %s)",
                    os.strerror(ctypes.get_errno()))
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def task_config(config: DictConfig) -> DictConfig:
    """A job's config without Hydra's own node (what the task function gets)."""
    return OmegaConf.masked_copy(config, [key for key in config if key != "hydra"])


def group_jobs(configs: list[DictConfig], max_members: int | None = None) -> list[list[int]]:
    """The jobs' indices grouped by their shared settings (their configs without seed and
    PPO's per-member settings), in launch order, each group cut into groups of at
    most ``max_members`` (None: no cap)."""
    from rlcollect.sweeps.grouping import shared_settings

    groups: dict[str, list[int]] = {}
    for index, config in enumerate(configs):
        groups.setdefault(repr(shared_settings(config)), []).append(index)
    return [group[start:start + (max_members or len(group))] for group in groups.values()
            for start in range(0, len(group), max_members or len(group))]


def run_one(launcher, config: DictConfig, task_function) -> JobReturn:
    """One job as Hydra's basic launcher runs it: its logging (into its folder's job log)
    ends with it, so that what the launcher says next is not in that job's log."""
    log.info("\t#%s : %s", config.hydra.job.num, " ".join(filter_overrides(config.hydra.overrides.task)))
    try:
        return run_job(hydra_context=launcher.hydra_context, task_function=task_function, config=config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    finally:
        configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
