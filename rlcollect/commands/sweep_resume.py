"""``rlcollect train resume=<sweep folder> [total_frames=N ...]``: every member of a sweep that
can go on, resumed as the sweep trained it (docs/sweeps.md, "Resuming a sweep").

The members of a ``hydra/launcher=batched`` sweep that trained as one batched model (the
same settings but their own, checkpoints at the same frame) resume as one batched model
again, in the sweep's ``hydra.launcher.processes`` processes, population-based training
going on among them; a member that cannot share a model (its group has no other member that
can go on, its collector does not batch, another launcher ran the sweep) resumes alone, as
``rlcollect train resume=<member folder>`` resumes it, in a process of its own, one after the
other. A member that finished or was solved is left as it is (unless ``total_frames`` takes
it further); one that cannot resume (no checkpoint yet, a damaged file) is said in one line
and the others go on. Nothing of a member's folder changes before its model starts. The jobs
that never trained (a stop came before them) start afterwards, as the sweep would have
started them (sweep_start.py).
"""
from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml
from omegaconf import DictConfig

from rlcollect.commands.jobs import Job
from rlcollect.commands.sweep_record import batched_launcher, sweep_hydra
from rlcollect.commands.sweep_start import jobs_to_start, start_jobs
from rlcollect.commands.sweep_study import Resumed, ended_member, tell_study
from rlcollect.errors import ConfigError
from rlcollect.run_files import CONFIG_FILE, ENDED_STATUSES, REFUSED, job_number, read_summary, sweep_runs
from rlcollect.sweeps.pbt_options import PBTOptions, check_processes, pbt_options
from rlcollect.validation import check_positive_int

log = logging.getLogger(__name__)


@dataclass
class Member:
    """A member of the sweep that can go on: its job number, config (the resume's overrides
    applied), checkpoint frame and W&B names."""

    number: int
    folder: Path
    cfg: DictConfig
    frames: int
    names: dict


def resume_sweep(folder: Path, args: list[str], task_function: Callable[[DictConfig], object]) -> int:
    """Resume the sweep in ``folder`` (``task_function``, commands.train.train: what its jobs
    that never trained run). The command's exit status: 0 when every member that could go
    on finished or was solved; 1 when one failed or could not resume; 2 when nothing can
    resume (one line each), or for a bad override (``hydra.launcher.processes`` > 1 for a
    population-based training); 130 / 143 when stopped by a signal (every member
    checkpointed)."""
    from rlcollect.commands.run_folders import hold_run_folder
    from rlcollect.pipeline.lifecycle import FramesAlready

    logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                        format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    try:
        # held while it resumes: another resume (or the sweep itself, still running) would start the same jobs
        hold_run_folder(folder, f"resume={folder}", "the sweep")
        overrides, processes = parse_overrides(folder, args)
        hydra = sweep_hydra(folder)
        launcher = batched_launcher(hydra)
        if processes is not None and launcher is None:
            raise ConfigError(f"resume={folder}: hydra.launcher.processes={processes}: the sweep ran with "
                              f"{str(hydra.launcher.get('_target_')).rpartition('.')[2]}, not the batched launcher: "
                              "its members resume one by one, leave it out")
        if launcher is not None and processes is not None:  # a population's members exchange weights in one process
            check_processes(pbt_options(launcher.get("pbt")), processes)
    except ConfigError as error:
        print(f"rlcollect train: invalid configuration: {error}", file=sys.stderr)
        return 2
    starting, unstartable = jobs_to_start(folder, hydra)
    restarted = [job.folder for job in starting if job.folder is not None]
    members, refusals, ended, reached = [], [], [], []
    settled: list[Resumed] = []  # ended or refused before the stop: a tuning study whose sweep stopped is told them
    for member_dir in sweep_runs(folder):
        if any(member_dir == job_dir or job_dir in member_dir.parents for job_dir in restarted):
            continue  # it never trained: it starts again (sweep_start)
        summary = read_summary(member_dir)
        status = summary.get("status")
        if status in ENDED_STATUSES and "total_frames" not in overrides:
            frames = summary.get("frames")
            ended.append((member_dir, status, frames if isinstance(frames, int) else 0))
            settled.append(ended_member(job_number(folder, member_dir), member_dir))
            continue
        if status == REFUSED:  # its config was refused before its run started
            settled.append(ended_member(job_number(folder, member_dir), member_dir))
            why = summary.get("error")
            refusals.append(f"resume={member_dir}: the job was refused ({why}): nothing to resume; train it, mended, "
                            "in another folder")
            continue
        if not (member_dir / CONFIG_FILE).is_file():  # Hydra's records alone: it never trained
            refusals.append(f"resume={member_dir}: the job stopped before its run started (no {CONFIG_FILE}): "
                            "nothing to resume; train it in another folder")
            continue
        try:
            free_now(member_dir, folder)
            members.append(member_to_resume(folder, member_dir, overrides))
        except FramesAlready as error:  # said once for all, where no member can go on
            reached.append(error)
        except ConfigError as error:
            refusals.append(str(error))
    if reached and not (members or starting):  # said once for all
        most = max(error.frames for error in reached)
        refusals.append(f"resume={folder}: total_frames={overrides['total_frames']}: every member that can go on has "
                        f"that many frames already (up to {most}); resume it with total_frames > {most}")
    refusals += unstartable
    for line in refusals:
        print(f"rlcollect train: invalid configuration: {line}", file=sys.stderr)
    if not members and not starting:
        tell_study(hydra.sweeper, settled, folder)
        if ended:  # beside a refused member too: the ended ones go on only with more frames
            who = "every member of the sweep has" if not refusals else "the sweep's other members have"
            print(f"rlcollect train: resume={folder}: {who} ended ({len(ended)} finished or solved); to train them on, "
                  f"resume it with total_frames > {max(frames for *_, frames in ended)}", file=sys.stderr)
        elif not refusals:
            print(f"rlcollect train: resume={folder}: the sweep holds no run folder to continue (its jobs stopped "
                  "before Hydra made their folders); run it again", file=sys.stderr)
        return 2
    for member_dir, status, frames in ended:
        log.info("%s: %s at %d frames, nothing to resume", member_dir, status, frames)
    for error in reached:  # past the resume's total_frames already: it stays as it is
        log.info("%s", error)
    run_args = [arg for arg in args if not arg.startswith("hydra.")]  # what a member resumed alone takes
    told = [Resumed(member.number, member.folder, member.cfg) for member in members]
    try:
        failed = resume_members(folder, members, launcher, processes, run_args) if members else False
        if starting:  # after the members that had started: the sweep's order
            failed |= start_jobs(folder, hydra, starting, run_args, processes, task_function, told)
    finally:  # stopped again too: what did finish reaches a tuning sweep's study
        tell_study(hydra.sweeper, [*settled, *told], folder)
    return 1 if failed or refusals else 0


def parse_overrides(folder: Path, args: list[str]) -> tuple[dict, int | None]:
    """The ``key=value`` arguments besides ``resume=`` (YAML values): the keys a resumed run
    may change (config.values.RESUME_OVERRIDES), typed, and ``hydra.launcher.processes`` (None:
    not given)."""
    from rlcollect.config import typed_values
    from rlcollect.config.values import RESUME_OVERRIDES

    overrides = {}
    for arg in args:
        key, equals, value = arg.partition("=")
        if not equals or key not in (*RESUME_OVERRIDES, "hydra.launcher.processes"):
            raise ConfigError(f"resume={folder}: {arg}: a resumed sweep takes only {', '.join(RESUME_OVERRIDES)} "
                              "and hydra.launcher.processes")
        overrides[key] = yaml.safe_load(value)
    processes = overrides.pop("hydra.launcher.processes", None)
    if processes is not None:
        check_positive_int("hydra.launcher.processes", processes)
    return typed_values(overrides), processes  # typed and ranged once, for every member


def free_now(member_dir: Path, folder: Path) -> None:
    """A ConfigError when another process trains the member now (``hold_run_folder``, held
    and let go at once: the process that trains it holds it again)."""
    from rlcollect.commands.run_folders import hold_run_folder, release_run_folder

    hold_run_folder(member_dir, f"resume={folder}")
    release_run_folder(member_dir)


def member_to_resume(folder: Path, member_dir: Path, overrides: dict) -> Member:
    """The member of ``member_dir`` (in the sweep ``folder``) as it resumes, or the ConfigError a resume of it alone
    would give (lifecycle.resume_checks)."""
    from rlcollect.pipeline.lifecycle import resume_checks

    cfg, checkpoint = resume_checks(member_dir, overrides, check_only=True)  # its model's process loads it
    saved = checkpoint.get("run_names", {})
    names = {key: saved.get(key) or None for key in ("name", "group", "job_type")}
    return Member(job_number(folder, member_dir), member_dir, cfg, int(checkpoint["frames"]), names)


def resume_members(folder: Path, members: list[Member], launcher: DictConfig | None, processes: int | None,
                   run_args: list[str]) -> bool:
    """Resume ``members``: those that can share a model batched, in ``processes`` processes
    (None: the sweep's), the others alone with ``run_args``; whether one failed."""
    from rlcollect.commands.batched_launch import group_jobs
    from rlcollect.sweeps.grouping import batch_refusal

    if launcher is None:
        groups = [[index] for index in range(len(members))]
    else:
        groups = group_jobs([member.cfg for member in members], launcher.get("max_members"))
    pbt = None if launcher is None else pbt_options(launcher.get("pbt"))
    failed = False
    for group in groups:
        group_members = [members[index] for index in group]
        refusal = batch_refusal(group_members[0].cfg) if launcher is not None else "another launcher ran the sweep"
        if refusal is not None:
            log.info("job %s resumes alone: %s" if len(group_members) == 1 else "jobs %s resume one by one: %s",
                     numbers_of(group_members), refusal)
            for member in group_members:
                failed |= resume_alone(member, run_args)
            continue
        # population-based training exchanges weights within one process
        model_processes = 1 if pbt.on else processes or launcher.get("processes") or 1
        failed |= resume_models(folder, group_members, pbt, model_processes, run_args)
    return failed


def resume_models(folder: Path, members: list[Member], pbt: PBTOptions, processes: int, run_args: list[str]) -> bool:
    """Members that would share a model, resumed as models of the members at one checkpoint
    frame each (a sweep stopped while its processes were at other batches: each process's
    share), as many at once as ``processes`` allows, each in processes of its own; whether
    one failed. A member of a population-based training sweep that no other member shares
    a frame with (it was resumed alone, or fell back to an older checkpoint) resumes alone,
    with the settings PBT last gave it (``run_args``: the resume's overrides)."""
    from rlcollect.commands.batched_launch import shares

    by_frames: dict[int, list[Member]] = {}
    for member in members:
        by_frames.setdefault(member.frames, []).append(member)
    models = list(by_frames.values())
    failed = False
    if pbt.on:
        for [member] in [model for model in models if len(model) == 1]:
            log.info("job %s resumes alone at frame %d: no other member of its population is at that frame",
                     numbers_of([member]), member.frames)
            failed |= resume_alone(member, run_args)
        models = [model for model in models if len(model) > 1]
    for start in range(0, len(models), processes):
        wave = models[start:start + processes]
        each = max(1, processes // len(wave))  # the processes each model of this wave trains in
        ordered: list[Member] = []
        parts: list[range] = []
        for model in wave:
            parts += [range(len(ordered) + part.start, len(ordered) + part.stop) for part in shares(len(model), each)]
            ordered += model
        described = "; ".join(f"job{'s' if len(model) > 1 else ''} {numbers_of(model)} at frame {model[0].frames}"
                              for model in wave)
        from rlcollect.sweeps.grouping import lockstep_reason

        lockstep = lockstep_reason(ordered[0].cfg)
        if len(ordered) == 1:
            log.info("job %s resumes at frame %d (no other member can share its model)", numbers_of(ordered),
                     ordered[0].frames)
        elif lockstep is not None:
            where = "one process" if len(parts) == 1 else f"{len(parts)} processes"
            log.info("%s resume in lockstep in %s, each member its own model (%s does not stack)", described, where,
                     lockstep)
        elif len(parts) == 1:
            log.info("jobs %s resume at frame %d as one batched model of %d members", numbers_of(ordered),
                     ordered[0].frames, len(ordered))
        else:
            log.info("%s resume as %d batched models (%s members), each in a process of its own", described,
                     len(parts), " + ".join(str(len(part)) for part in parts))
        failed |= resume_batched(folder, ordered, pbt, parts)
    return failed


def numbers_of(members: list[Member]) -> str:
    from rlcollect.commands.batched_launch import job_numbers

    return job_numbers([member.number for member in members])


def resume_batched(folder: Path, members: list[Member], pbt: PBTOptions, parts: list[range]) -> bool:
    """``members`` trained on as batched models (commands.batched.train_members), one per
    part of ``parts``, each in a process of its own, with the sweep's population-based
    training ``pbt``; whether one failed."""
    from rlcollect.commands.batched import train_members
    from rlcollect.commands.batched_launch import train_shares

    train = functools.partial(train_members, pbt=pbt, sweep_dir=folder) if pbt.on else train_members
    jobs = [(member.cfg, Job(member.folder, True, [f"resume={member.folder}"], [], str(member.folder)), member.names,
             member.number) for member in members]
    values = train_shares(train, jobs, len(parts), parts)
    return any(value is None for value in values)


def resume_alone(member: Member, args: list[str]) -> bool:
    """``rlcollect train resume=<member folder> <args>`` in a process of its own (Ctrl-C
    reaches it; this process waits for it to stop and then stops with its status; it ends
    with this one, even killed with SIGKILL); whether it failed."""
    from rlcollect.commands.batched_launch import end_with_parent

    command = [sys.executable, "-m", "rlcollect.cli", "train", f"resume={member.folder}", *args]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the member's process stops after its batch
    try:
        code = subprocess.run(command, check=False, preexec_fn=functools.partial(end_with_parent, os.getpid())
                              ).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        raise SystemExit(code)
    return code != 0
