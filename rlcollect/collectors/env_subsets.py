"""One step of some envs of a batched CPU env: ``Collector.act(t, envs=...)`` and
``record(t, done, envs=...)``, for a slice of the envs or their ids.

    carrier rows envs ──▶ rows envs of step t       the policy runs on those envs alone
    action (numpy)    ──▶ rows envs of step t       and goes back to the caller, to step them
    staged rows envs  ──▶ rows envs of step t       once they stepped; then the time limit and
                                                    new trajectory ids, for them alone

The env pool drives its envs so, a group of workers at a time (collectors/pool.py).
"""
from __future__ import annotations

import numpy as np
import torch

from rlcollect.collectors.carrier import Carrier
from rlcollect.collectors.policy_runner import PolicyRunner
from rlcollect.collectors.rows import put_rows
from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.collectors.trajectory_cuts import TrajectoryCuts
from rlcollect.collectors.write_plan import WritePlan
from rlcollect.envs.spaces import random_actions


class EnvSubsets:
    """Steps of some of ``env``'s envs through a collector's parts (``env_device``: where
    random actions go; ``refused``: the collector's envs wait or keep their bookkeeping on
    a device, which steps every env at once)."""

    def __init__(self, env, carrier: Carrier, book: TrajectoryBook, cuts: TrajectoryCuts, runner: PolicyRunner, *,
                 env_device: torch.device, reset_when_done: bool, refused: bool) -> None:
        self.env, self.carrier, self.book, self.cuts, self.runner = env, carrier, book, cuts, runner
        self.env_device, self.reset_when_done, self.refused = env_device, reset_when_done, refused

    def act(self, plan: WritePlan, t: int, random: bool, envs: np.ndarray | slice) -> np.ndarray:
        """``Collector.act`` for the envs ``envs`` alone; their action as a numpy array."""
        if self.refused or self.runner.graphed is not None:
            raise ValueError("act(envs=...) steps some envs of a batched CPU env; this collector's envs wait "
                             "(reset_policy='wait'), keep their bookkeeping on a device or its policy replays a "
                             "CUDA graph")
        for source, views in plan.carrier:
            put_rows(views[t], envs, source[envs])
        carrier = self.carrier.of(envs)
        if random:
            carrier.set("action", random_actions(self.env.action_space, tuple(carrier.batch_size), self.env_device))
            policy_output = carrier
        else:
            policy_output = self.runner.run(carrier, False)
        action = policy_output.get("action")
        if plan.action_numpy is not None:
            views = plan.action_numpy[t]
            action = action.numpy().reshape(-1, *views.shape[1:])
            views[envs] = action
        else:
            action = action.cpu()
            put_rows(plan.action[t], envs, action)
            action = action.numpy()
        for key, views in plan.other_policy:
            put_rows(views[t], envs, 0 if random else policy_output.get(key))
        for key, state, views in plan.next_hidden:  # as in ``act``: no policy call, the state stays
            next_state = state[envs] if random else policy_output.get(("next", key))
            put_rows(views[t], envs, next_state)
            put_rows(state, envs, next_state)
        return action

    def record(self, plan: WritePlan, t: int, done: np.ndarray, envs: np.ndarray | slice) -> None:
        """``Collector.record`` for the envs ``envs`` alone (``done``: theirs, in their order)."""
        for source, views in plan.next:
            put_rows(views[t], envs, source[envs])
        restarted = done if self.reset_when_done else np.zeros_like(done)
        if self.book.max_frames_per_traj is not None:
            restarted = restarted | self.cuts.time_limit(plan, t, done, envs=envs)
        if restarted.any():
            self.book.start(self.cuts.env_ids[envs][restarted])
