"""A torch env's bookkeeping, kept on its device (docs/envs.md, "Torch envs"): the env returns
its done mask as a tensor there, and ``record`` never reads a value back to the host.

    begin_batch    one trajectory id reserved per (step, env) slot of the batch
    record(t)      restarted = done (reset_when_done) | cut by max_frames_per_traj; the cut
                   ones marked truncated and done at t and reset; each restarted env takes its
                   slot's id, its hidden state zeroed
    at_batch_end   set_truncated: the last step truncated and done; the envs still running
                   start a trajectory without a reset (``mark_init``)

The same rules on the host: the trajectory book's host form, trajectory_cuts.py.
"""
from __future__ import annotations

import torch

from rlcollect.collectors.devices import CollectorDevices
from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.collectors.write_plan import WritePlan


class DeviceRecording:
    """``record``'s bookkeeping for a torch ``env``, in tensor operations on its device
    (``book``: in its on-device form; ``devices``: the collector's)."""

    def __init__(self, env, book: TrajectoryBook, devices: CollectorDevices, reset_when_done: bool) -> None:
        self.env, self.book, self.devices, self.reset_when_done = env, book, devices, reset_when_done
        self.env_batch = tuple(env.batch_size)

    def begin_batch(self, plan: WritePlan) -> None:
        self.book.reserve_slots(plan.time_steps)  # one id per (step, env) slot: no count read back

    def record(self, plan: WritePlan, t: int, done: torch.Tensor) -> None:
        """The time limit, new trajectory ids and hidden-state resets after step t."""
        restarted = done if self.reset_when_done else torch.zeros_like(done)
        cut = self.book.count_step_on_device(done)
        if cut is not None:
            cut_mask = cut.reshape(self.env_batch).to(self.devices.storing, non_blocking=True)
            plan.truncated[t].logical_or_(cut_mask)
            plan.done[t].logical_or_(cut_mask)
            self.env.reset_some(cut)
            restarted = restarted | cut
        self.book.start_on_device(restarted, t)

    def at_batch_end(self, plan: WritePlan, last: int) -> None:
        """set_truncated at step ``last`` (see trajectory_cuts.TrajectoryCuts.at_batch_end)."""
        still_running = ~plan.done[last]
        plan.truncated[last].fill_(True)
        plan.done[last].fill_(True)
        running = still_running.reshape(-1).to(self.devices.env)
        self.env.mark_init(running)
        self.book.start_on_device(running, last, env_reset=False)  # the env runs on: its state stays
