"""``Collector.collect(rollout=...)``: a rollout's rows as a write plan, so that the loop writes
an on-policy learner's data in place, with no intermediate batch.

    rollout [*env_batch, T + 1]          RolloutBuffer.start_rollout() ([1, T + 1] for a single env)
      rows[..., :T] ──transition_view──▶ target [*env_batch, T] ──WritePlan──▶ the loop writes there
      rows[..., T]  ◀──bootstrap── ("next", "observation") of step T - 1

Entries the rollout lacks (trajectory ids, what the policy writes besides action, log-prob and
value) are added to it once; its plan is cached (a RolloutBuffer hands out the same TensorDict
every time).
"""
from __future__ import annotations

from typing import Callable

import torch
from tensordict import TensorDictBase

from rlcollect.buffers.rollout import transition_view
from rlcollect.collectors.write_plan import WritePlan


class RolloutPlans:
    """The write plans of the rollouts a collector wrote into, cached.

    Args:
        batch: the collector's batch: the entries, dtypes and feature shapes every rollout
            gets.
        env_batch: the collector's env batch size.
        make_plan: the collector's write plan of a ``[*env_batch, T]`` target.
    """

    def __init__(self, batch: TensorDictBase, env_batch: tuple, make_plan: Callable[[TensorDictBase], WritePlan]):
        self.batch, self.env_batch, self.make_plan = batch, env_batch, make_plan
        self.plans: dict = {}  # (id, data pointer, T) of a rollout -> (its rows, their write plan)

    def plan_of(self, rollout: TensorDictBase, num_steps: int | None) -> tuple[TensorDictBase, WritePlan]:
        """``(rows, plan)`` of ``rollout``: its ``[*env_batch, T + 1]`` rows and the plan of
        their ``[*env_batch, T]`` transitions (checked against ``num_steps`` when given)."""
        single = not self.env_batch and rollout.batch_dims == 2 and rollout.batch_size[0] == 1
        env_batch = tuple(rollout.batch_size[1:-1] if single else rollout.batch_size[:-1])
        steps = rollout.batch_size[-1] - 1 if rollout.batch_dims else 0
        if env_batch != self.env_batch or steps < 1:
            raise ValueError(f"rollout has batch size {list(rollout.batch_size)}; this collector's env batch is "
                             f"{list(self.env_batch)}: expected [*env_batch, num_steps + 1] ([1, num_steps + 1] "
                             "for a single env)")
        if num_steps is not None and num_steps != steps:
            raise ValueError(f"num_steps={num_steps} but the rollout holds {steps} steps (+ 1 bootstrap slot)")
        key = (id(rollout), rollout.get("is_init").data_ptr(), steps)  # a leaf of every rollout
        if key not in self.plans:
            self._add_entries(rollout)
            rows = rollout[0] if single else rollout
            self.plans[key] = (rows, self.make_plan(transition_view(rows)))
        return self.plans[key]

    def _add_entries(self, rollout: TensorDictBase) -> None:
        """Give ``rollout`` the batch's entries it lacks (zeros); refuse one it holds in
        another dtype or feature shape."""
        batch_dims = self.batch.batch_dims
        for name, stored in self.batch.items(True, True):
            feature = stored.shape[batch_dims:]
            if name not in rollout.keys(True, True):
                rollout.set(name, torch.zeros((*rollout.batch_size, *feature), dtype=stored.dtype,
                                              device=rollout.device))
                continue
            given = rollout.get(name)
            if given.dtype != stored.dtype or given.shape[rollout.batch_dims:] != feature:
                raise ValueError(f"rollout entry {name!r} is {given.dtype} "
                                 f"{list(given.shape[rollout.batch_dims:])}; the collector writes {stored.dtype} "
                                 f"{list(feature)}")


def bootstrap(rows: TensorDictBase, plan: WritePlan) -> None:
    """Put the observation that follows the last step written into the rows' last slot."""
    last = (slice(None),) * (rows.batch_dims - 1) + (-1,)
    rows.get("observation")[last].copy_(plan.target.get(("next", "observation"))[last])  # a tensor, or nested ones
