"""Collector options in small groups, each checked once (docs/collectors.md, "Options").

    BatchSpec        frames_per_batch checked and rounded once to T steps of B envs (rlpyt's BatchSpec)
    StepOptions      the per-step loop: truncation, random frames, resets, exploration, ids
    DeviceOptions    where the policy runs, where the env's tensors live, where batches go
    DeliveryOptions  what happens to a batch: split_trajs, postproc, hooks, replay-buffer writes
    WorkerOptions    worker processes: start method, threads, CPU affinity, timeouts

Collector takes every option as a flat keyword argument (TorchRL's front door); the other
collectors take the same names through ``**options`` and route them here with
``split_options``, so an option is declared once: a field of its group, with its doc (read
by ``options_doc`` into each collector's docstring) and its check in ``__post_init__``.
"""
from __future__ import annotations

import logging
import math
import multiprocessing as mp
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

import torch

from rlcollect.choices import EXPLORATION_TYPES, RESET_POLICIES, START_METHODS
from rlcollect.trajectories import TRAJ_FORMATS
from rlcollect.validation import check_non_negative_int, check_positive_int

log = logging.getLogger(__name__)

DeviceLike = str | torch.device | None


# ---------------------------------------------------------------------------- checks
def check_total_frames(total_frames: Any) -> int:
    """A positive int, or -1 for an endless collector."""
    if total_frames != -1:
        try:
            check_positive_int("total_frames", total_frames)
        except ValueError:
            raise ValueError(f"total_frames must be a positive int or -1 (endless), got {total_frames!r}") from None
    return total_frames


def _doc(text: str, default: Any = None, **kwargs):
    return field(default=default, metadata={"doc": text}, **kwargs)


# ---------------------------------------------------------------------------- batch
@dataclass(frozen=True)
class BatchSpec:
    """A batch of ``time_steps`` steps of each of ``num_envs`` envs; ``size`` frames."""

    time_steps: int
    num_envs: int

    @property
    def size(self) -> int:
        return self.time_steps * self.num_envs

    @staticmethod
    def split(frames_per_batch: int, parts: int, name: str = "frames_per_batch") -> int:
        """The frames of each of ``parts`` equal shares of ``frames_per_batch`` frames, rounded
        up (a worker's, a host's, an env's time steps). The library's one check of a
        frames_per_batch argument (a positive int, ``name`` in the error), wherever a
        collector takes one."""
        check_positive_int(name, frames_per_batch)
        return math.ceil(frames_per_batch / parts)

    @classmethod
    def round(cls, frames_per_batch: int, num_envs: int) -> "BatchSpec":
        """The smallest batch of whole time steps holding ``frames_per_batch`` frames."""
        spec = cls(cls.split(frames_per_batch, num_envs), num_envs)
        if spec.size != frames_per_batch:
            log.info("frames_per_batch=%d rounded up to %d (a multiple of %d envs)", frames_per_batch, spec.size,
                     num_envs)
        return spec


# ---------------------------------------------------------------------------- groups
@dataclass(frozen=True)
class StepOptions:
    """How the per-step loop runs (docs/collectors.md)."""

    max_frames_per_traj: int | None = _doc("cut trajectories after this many steps (marked truncated, then reset).")
    init_random_frames: int = _doc("the first frames use uniform random actions (the policy is not called).", 0)
    reset_at_each_iter: bool = _doc("reset every env at the start of every batch.", False)
    reset_when_done: bool = _doc("reset envs that finish (False leaves them to the env).", True)
    exploration_type: str = _doc('"random" or "deterministic", set around the policy call.', "random")
    track_traj_ids: bool = _doc('write ("collector", "traj_ids").', True)
    set_truncated: bool = _doc("mark the last step of each batch truncated (and done); the next batch starts "
                               "new trajectories.", False)
    no_cuda_sync: bool = _doc("skip the explicit CUDA syncs after cross-device copies.", False)
    reset_policy: str = _doc('"immediate": an env that finishes is reset at once; "wait": it waits, unstepped, '
                             'until the next batch starts (its remaining steps padding, ("collector", "mask") '
                             'False).', "immediate")

    def __post_init__(self) -> None:
        if self.reset_policy not in RESET_POLICIES:
            raise ValueError(f"reset_policy must be one of {RESET_POLICIES}, got {self.reset_policy!r}")
        if self.reset_policy == "wait" and not self.reset_when_done:
            raise ValueError("reset_policy='wait' resets finished envs at the next batch: it needs "
                             "reset_when_done=True")
        check_positive_int("max_frames_per_traj", self.max_frames_per_traj, optional=True)
        check_non_negative_int("init_random_frames", self.init_random_frames)
        if self.exploration_type not in EXPLORATION_TYPES:
            raise ValueError(f"exploration_type must be one of {EXPLORATION_TYPES}, got {self.exploration_type!r}")


@dataclass(frozen=True)
class DeviceOptions:
    """Devices, resolved once at construction (collectors/devices.py)."""

    device: DeviceLike = _doc("sets policy_device, env_device and storing_device at once.")
    policy_device: DeviceLike = _doc("where the policy runs (default: its parameters' device).")
    env_device: DeviceLike = _doc("where the env's tensors live (default: the env's own device).")
    storing_device: DeviceLike = _doc("where batches are stored (default: env_device).")


@dataclass(frozen=True)
class DeliveryOptions:
    """What happens to each collected batch, in this order: split_trajs, postproc, the
    post-collect hook, then either yield it or write it into replay_buffer (``Delivery``)."""

    split_trajs: bool = _doc("yield the legacy padded [N_traj, T_max] layout with a mask.", False)
    postproc: Callable | None = _doc("TensorDict -> TensorDict applied to each batch before it is yielded "
                                     "or written.")
    pre_collect_hook: Callable[[], None] | None = _doc("called with no argument before each batch.")
    post_collect_hook: Callable | None = _doc("called with exactly the batch that is yielded (or written).")
    replay_buffer: Any = _doc("write every batch into this buffer (after postproc); iteration then yields None "
                              "and start() collects in the background.")
    trajs_per_batch: int | None = _doc("complete trajectories only: with replay_buffer, each write commits at "
                                       "least this many; without, each yielded batch holds exactly this many, the "
                                       "first to complete first (unfinished ones wait for their end).")
    traj_format: str = _doc('trajs_per_batch without a replay buffer: "cat" (trajectories end to end, flat) or '
                            '"padded" ([N, T_max] with ("collector", "mask")).', "cat")

    def __post_init__(self) -> None:
        if self.replay_buffer is not None and self.split_trajs:
            raise ValueError("split_trajs=True pads batches; a replay_buffer takes the flat layout: drop split_trajs")
        if self.trajs_per_batch is not None and self.split_trajs:
            raise ValueError("trajs_per_batch yields whole trajectories (traj_format='padded' pads them): drop "
                             "split_trajs")
        if self.traj_format not in TRAJ_FORMATS:
            raise ValueError(f"traj_format must be one of {TRAJ_FORMATS}, got {self.traj_format!r}")
        if self.traj_format != "cat" and (self.trajs_per_batch is None or self.replay_buffer is not None):
            raise ValueError("traj_format applies to trajs_per_batch without a replay buffer (writes take the flat "
                             "layout)")
        for name in ("postproc", "pre_collect_hook", "post_collect_hook"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable, got {type(value).__name__}")
        check_positive_int("trajs_per_batch", self.trajs_per_batch, optional=True)

    def in_workers(self) -> "DeliveryOptions":
        """The part a worker process runs on its own batch: the hooks, and with a replay
        buffer postproc and the write too (the main process then gets nothing)."""
        if self.replay_buffer is None:
            return DeliveryOptions(pre_collect_hook=self.pre_collect_hook, post_collect_hook=self.post_collect_hook)
        return self

    def in_main(self) -> "DeliveryOptions":
        """The part the main process runs on the combined batch of its workers."""
        if self.replay_buffer is None:
            return DeliveryOptions(split_trajs=self.split_trajs, postproc=self.postproc,
                                   trajs_per_batch=self.trajs_per_batch, traj_format=self.traj_format)
        return DeliveryOptions()


@dataclass(frozen=True)
class WorkerOptions:
    """Worker processes of a collector (collectors/processes.py)."""

    start_method: str = _doc('"spawn" (safe with torch threads), "forkserver" or "fork".', "spawn")
    worker_torch_threads: int | None = _doc("torch threads in each worker (None: torch's default).", 1)
    worker_cpu_affinity: Sequence[Sequence[int]] | None = _doc("None, or one list of CPU ids per worker to pin "
                                                              "it to.")
    batch_timeout: float | None = _doc("seconds a batch may take before failing (None: no limit; dead workers "
                                       "are detected regardless).")
    shutdown_timeout: float = _doc("seconds workers get to exit before they are terminated.", 5.0)
    max_worker_restarts: int = _doc("workers that may be replaced over the collector's life when one dies, hangs "
                                    "past batch_timeout or (restart_on_env_error) raises while collecting; its "
                                    "partial batch is dropped. 0: fail at the first failure.", 0)
    restart_on_env_error: bool = _doc("also replace a worker whose env or policy raised while collecting "
                                      "(within max_worker_restarts).", False)

    def __post_init__(self) -> None:
        if self.start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {START_METHODS}, got {self.start_method!r}")
        check_positive_int("worker_torch_threads", self.worker_torch_threads, optional=True)
        check_non_negative_int("max_worker_restarts", self.max_worker_restarts)
        for name in ("batch_timeout", "shutdown_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @property
    def mp_context(self):
        return mp.get_context(self.start_method)

    def cpu_sets(self, num_workers: int) -> list[tuple[int, ...]] | None:
        """``worker_cpu_affinity`` checked against this machine: one non-empty set of
        available CPU ids per worker, or None."""
        from rlcollect.collectors.processes import check_cpu_affinity

        return check_cpu_affinity(self.worker_cpu_affinity, num_workers)


OPTION_GROUPS = (StepOptions, DeviceOptions, DeliveryOptions, WorkerOptions)


def check_groups(step: StepOptions, delivery: DeliveryOptions) -> None:
    """Checks that span two groups."""
    if delivery.split_trajs and not step.track_traj_ids:
        raise ValueError("split_trajs=True needs track_traj_ids=True")
    if step.reset_policy == "wait":
        padded = [name for name, value in (("split_trajs", delivery.split_trajs),
                                           ("trajs_per_batch", delivery.trajs_per_batch is not None),
                                           ("replay_buffer", delivery.replay_buffer is not None)) if value]
        if padded:
            raise ValueError(f"reset_policy='wait' pads batches with steps that are not transitions "
                             f"(('collector', 'mask') False); {', '.join(padded)} would take them as real: use "
                             "reset_policy='immediate'")


def split_options(owner: str, options: dict, groups: Sequence[type] = OPTION_GROUPS) -> dict[type, Any]:
    """Route flat keyword arguments to their groups: ``{group: instance}`` for every group
    in ``groups``; an unknown name is a TypeError that lists the accepted ones."""
    names = {f.name: group for group in groups for f in fields(group)}
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(f"{owner} got unexpected arguments {unknown}; the options it takes are {sorted(names)} "
                        f"besides its own arguments (help({owner}))")
    return {group: group(**{f.name: options[f.name] for f in fields(group) if f.name in options})
            for group in groups}


def options_doc(*groups: type) -> str:
    """The ``Args``-style lines documenting every field of ``groups`` (for docstrings)."""
    lines = []
    for group in groups:
        lines.append(f"    {group.__name__} (flat keyword arguments):")
        for f in fields(group):
            lines.append(f"        {f.name} (default {f.default!r}): {f.metadata['doc']}")
    return "\n".join(lines)


def with_options_doc(*groups: type):
    """Class decorator: append the docs of ``groups`` to the class docstring, so
    ``help(cls)`` names every option the class accepts through ``**options``."""
    def decorate(cls):
        cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n\n    Options, by group:\n" + options_doc(*groups) + "\n"
        return cls
    return decorate


__all__ = ["BatchSpec", "DeliveryOptions", "DeviceOptions", "OPTION_GROUPS", "StepOptions", "WorkerOptions",
           "check_groups", "check_total_frames", "options_doc", "split_options", "with_options_doc"]
