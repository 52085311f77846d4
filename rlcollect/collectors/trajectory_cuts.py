"""The trajectories the collector ends itself, on the host (the env did not end them):

    max_frames_per_traj   an env whose trajectory reached the limit at step t is marked truncated
                          and done at t, then reset (under reset_policy="wait": left to wait)
    set_truncated         every trajectory at the batch's last step: truncated and done there
                          whatever happened; an env still running starts a new trajectory
                          without a reset (``mark_init``; its state stays)

The same cuts on a torch env's device: device_recording.py.
"""
from __future__ import annotations

import numpy as np
import torch

from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.collectors.write_plan import WritePlan


class TrajectoryCuts:
    """The host's cuts of ``env``'s trajectories, written into the current write plan's
    ``truncated`` and ``done`` views (``env_batch``: the env's batch size; ``storing``: the
    batch's device)."""

    def __init__(self, env, book: TrajectoryBook, env_batch: tuple, storing: torch.device) -> None:
        self.env, self.book, self.env_batch, self.storing = env, book, env_batch, storing
        self.env_ids = np.arange(book.num_envs)  # indexed as envs are (a slice gives a view)

    def time_limit(self, plan: WritePlan, t: int, done: np.ndarray | None, *, reset: bool = True,
                   envs: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Mark truncated (and, with ``reset``, reset) the envs that reached
        max_frames_per_traj at step t; returns them, as a mask aligned with ``envs`` (the envs
        that stepped, ``done`` theirs; default all). Envs that wait (reset_policy="wait") are
        not cut."""
        cut = self.book.count_step(envs, done)
        if cut.any():
            cut_ids = self.env_ids[envs][cut]
            cut_mask = np.zeros(self.book.num_envs, np.bool_)
            cut_mask[cut_ids] = True
            cut_mask = torch.from_numpy(cut_mask).reshape(self.env_batch).to(self.storing)
            plan.truncated[t].logical_or_(cut_mask)
            plan.done[t].logical_or_(cut_mask)
            if reset:
                self.env.reset_some(cut_ids)
        return cut

    def at_batch_end(self, plan: WritePlan, last: int) -> None:
        """set_truncated: cut every trajectory at step ``last``, the batch's last. An env that
        terminated there is both terminated and truncated; the envs still running (and not
        waiting: they restart at the next batch) start new trajectories."""
        still_running = ~plan.done[last]
        plan.truncated[last].fill_(True)
        plan.done[last].fill_(True)
        running = still_running.reshape(-1).cpu().numpy()
        if self.book.waiting is not None:
            running &= ~self.book.waiting
        if running.any():
            self.env.mark_init(np.flatnonzero(running))
            self.book.start(running, env_reset=False)  # the env runs on: its state stays
