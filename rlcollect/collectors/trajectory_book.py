"""The per-env trajectory book: which trajectory each env is in, how long it has run, whether
it waits, and its recurrent state; one set of rules for Collector (and through it the action
servers' groups) and the pool.

    ids        each env's current trajectory id (fresh ids from a TrajectoryPool: never repeated)
    steps      each env's steps in that trajectory (counted only with max_frames_per_traj)
    waiting    reset_policy="wait": envs that finished and stay unstepped until the next batch
    hidden     a recurrent policy's carried state per env, zeroed where an env was reset

Two forms of the same rules. On the host (numpy, indexed by a bool mask, env ids or a slice):
``count_step`` says which envs reached max_frames_per_traj, ``start`` gives envs a fresh
trajectory. On an env's device (a torch env, ``on_device=True``): the same in tensor operations,
never reading a count back; there each (step, env) slot of a batch has its id reserved up
front (``reserve_slots``) and a restarted env takes its slot's id.
"""
from __future__ import annotations

import numpy as np
import torch

from rlcollect.trajectories import TrajectoryPool


class TrajectoryBook:
    """Per-env trajectory bookkeeping of ``num_envs`` envs.

    Args:
        num_envs: how many envs (their flat index is the env id the book uses).
        pool: where fresh trajectory ids come from (shared by a collector's groups).
        max_frames_per_traj: cut a trajectory after this many steps (None: never count).
        track_ids: keep trajectory ids (False: ``ids`` is None).
        ids_device: where ``ids`` lives (the env's device: a collector's carrier holds it).
        on_device: the torch-env form (steps and ids on ``ids_device``, no host reads).
        waiting: reset_policy="wait": the env's own ``waiting`` bool array, which the book
            reads and writes (None: envs are reset as they finish).
    """

    def __init__(self, num_envs: int, pool: TrajectoryPool, *, max_frames_per_traj: int | None,
                 track_ids: bool, ids_device: torch.device | str = "cpu", on_device: bool = False,
                 waiting: np.ndarray | None = None) -> None:
        self.num_envs, self.pool = num_envs, pool
        self.max_frames_per_traj, self.on_device, self.waiting = max_frames_per_traj, on_device, waiting
        device = torch.device(ids_device)
        self.steps = (torch.zeros(num_envs, dtype=torch.int64, device=device) if on_device
                      else np.zeros(num_envs, np.int64))
        self.ids: torch.Tensor | None = torch.zeros(num_envs, dtype=torch.int64, device=device) if track_ids else None
        host = track_ids and device.type == "cpu" and not on_device
        self.host_ids: np.ndarray | None = self.ids.numpy() if host else None  # ``ids`` as numpy, on the host
        self.hidden: dict[str, torch.Tensor] = {}  # hidden-state key -> carrier tensor [*env_batch, L, H]
        self._slot_ids: tuple = ()  # on device: per step t, the ids of the batch's (t, env) slots

    # ------------------------------------------------------------------ every env
    def start_all(self) -> None:
        """Every env starts a trajectory (after a reset of all envs): fresh ids, counts 0,
        none waiting, zero hidden states. ``ids`` and the hidden states are refilled, never
        replaced (write plans point at them)."""
        if self.on_device:
            self.steps.zero_()
        else:
            self.steps[:] = 0
        if self.waiting is not None:
            self.waiting[:] = False
        if self.ids is not None:
            self.ids.copy_(self.pool.take(self.num_envs))
        for state in self.hidden.values():
            state.zero_()

    # ------------------------------------------------------------------ on the host
    def count_step(self, envs: np.ndarray | slice = slice(None), done: np.ndarray | None = None) -> np.ndarray | None:
        """``envs`` (default all) took a step; ``done``: their done mask (None: none finished).
        Returns the mask, aligned with ``envs``, of those that reached max_frames_per_traj and
        did not finish (waiting envs are never cut), or None without max_frames_per_traj."""
        if self.max_frames_per_traj is None:
            return None
        self.steps[envs] += 1
        cut = self.steps[envs] >= self.max_frames_per_traj
        if done is not None:
            cut &= ~done
        if self.waiting is not None:
            cut &= ~self.waiting[envs]
        return cut

    def start(self, envs: np.ndarray, *, env_reset: bool = True) -> None:
        """``envs`` (a bool mask over all envs, or env ids) start a trajectory: count 0, a
        fresh id each, and, where the env was reset (``env_reset``), a zero hidden state
        (a trajectory cut at a batch boundary keeps its env running and its state)."""
        if self.max_frames_per_traj is not None:
            self.steps[envs] = 0
        if self.ids is not None:
            count = int(np.count_nonzero(envs)) if envs.dtype == np.bool_ else len(envs)
            first = self.pool.take_range(count)
            if self.host_ids is not None:
                self.host_ids[envs] = np.arange(first, first + count)
            else:
                new_ids = torch.arange(first, first + count, device=self.ids.device)
                self.ids.masked_scatter_(self._device_mask(envs, self.ids.device), new_ids)
        if env_reset and self.hidden:
            self._zero_hidden(self._device_mask(envs, next(iter(self.hidden.values())).device))

    def _device_mask(self, envs: np.ndarray, device: torch.device) -> torch.Tensor:
        if envs.dtype != np.bool_:
            mask = np.zeros(self.num_envs, np.bool_)
            mask[envs] = True
            envs = mask
        return torch.from_numpy(envs).to(device)

    # ------------------------------------------------------------------ on the env's device
    def reserve_slots(self, time_steps: int) -> None:
        """On device: one id per (step, env) slot of the next batch, so a restarted env takes
        its slot's id without reading a count back."""
        if self.ids is None:
            return
        slots = self.num_envs * time_steps
        first = self.pool.take_range(slots)
        self._slot_ids = torch.arange(first, first + slots, device=self.ids.device).view(time_steps, -1).unbind(0)

    def count_step_on_device(self, done: torch.Tensor) -> torch.Tensor | None:
        """On device: every env took a step; the mask of those that reached
        max_frames_per_traj and did not finish (None without max_frames_per_traj)."""
        if self.max_frames_per_traj is None:
            return None
        self.steps += 1
        return (self.steps >= self.max_frames_per_traj) & ~done.reshape(self.num_envs)

    def start_on_device(self, restarted: torch.Tensor, t: int, *, env_reset: bool = True) -> None:
        """On device: envs where ``restarted`` is True start a trajectory after step t: count
        0, their (t, env) slot's id, a zero hidden state where the env was reset."""
        restarted = restarted.reshape(self.num_envs)
        if self.max_frames_per_traj is not None:
            self.steps.masked_fill_(restarted, 0)
        if self.ids is not None:
            torch.where(restarted, self._slot_ids[t], self.ids, out=self.ids)
        if env_reset and self.hidden:
            self._zero_hidden(restarted)

    def _zero_hidden(self, mask: torch.Tensor) -> None:
        for state in self.hidden.values():
            state.masked_fill_(mask.reshape(*state.shape[:-2], 1, 1).to(state.device), 0)
