"""reset_policy="wait": an env that finishes waits, unstepped, until the next batch starts
(rlpyt's wait-reset collectors; docs/collectors.md).

    record(t)      env i done at step t (or cut by max_frames_per_traj) ──▶ waiting[i] = True,
                   mask[i, t + 1:] = False: its later steps of the batch are padding
                   (the env's stage_step(auto_reset=False) leaves it unstepped)
    begin_batch    the waiting envs are reset, each starting a trajectory; every step real

``waiting`` is the env's own array (envs/staging.py), shared with the trajectory book.
"""
from __future__ import annotations

import numpy as np
import torch

from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.collectors.trajectory_cuts import TrajectoryCuts
from rlcollect.collectors.write_plan import WritePlan


def waiting_array(env) -> np.ndarray:
    """``env``'s ``waiting`` array, which the loop sets where an env finished and clears at
    the next batch; a ValueError for an env that cannot leave envs unstepped."""
    waiting = getattr(env, "waiting", None)
    if waiting is None:
        raise ValueError(f"reset_policy='wait' leaves finished envs unstepped until the next batch; {env!r} "
                         "cannot (it needs a GymEnv with backend='list', or the action server's workers)")
    return waiting


class WaitReset:
    """The bookkeeping of reset_policy="wait" for ``env``'s envs (the book's ``waiting``:
    ``waiting_array(env)``; ``cuts``: max_frames_per_traj's, or None), written into the
    current write plan's ``mask``."""

    def __init__(self, env, book: TrajectoryBook, cuts: TrajectoryCuts | None) -> None:
        self.env, self.book, self.cuts = env, book, cuts
        self.waiting = book.waiting
        self.env_batch = tuple(env.batch_size)

    def record(self, plan: WritePlan, t: int, done: np.ndarray | None) -> None:
        """An env that finished at step t (done, or cut by max_frames_per_traj) waits,
        unstepped, for the next batch; its steps after t are padding (mask False)."""
        waiting = self.waiting
        finished = None if done is None else done & ~waiting
        if self.cuts is not None:
            cut = self.cuts.time_limit(plan, t, done, reset=False)
            finished = cut if finished is None else finished | cut
        if finished is not None and finished.any():
            waiting |= finished
            mask = plan.mask
            if not self.env_batch:
                mask[t + 1:] = False
            else:
                rows = torch.from_numpy(finished).reshape(self.env_batch).to(mask.device)
                mask[rows, t + 1:] = False

    def begin_batch(self, plan: WritePlan) -> None:
        """Reset the envs that wait, each starting a trajectory; every step of the new batch
        starts real (mask True)."""
        waiting = self.waiting
        if waiting.any():
            restarted = waiting.copy()
            self.env.reset_some(np.flatnonzero(restarted))
            waiting[:] = False
            self.book.start(restarted)
        plan.mask.fill_(True)
