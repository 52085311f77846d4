"""The carrier: the per-step loop's state between steps (docs/architecture.md, "The per-step loop").

    per env   observation, is_init     the env's staged tensors themselves: the env writes the
                                       next step's there (the reset observation where it finished)
              ("collector", "traj_ids") a view of the trajectory book's ids
              hidden state              a recurrent policy's (``make_tensordict_primer``): zeros,
                                       added once; the loop copies the policy's ("next", key) back
                                       into it, the book zeroes it where an env restarts

The carrier persists across batches, so a trajectory that crosses a batch boundary continues
with the right observation and the same trajectory id. Every write plan (write_plan.py) points
at its tensors: they are refilled, never replaced.
"""
from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.keys import CARRIER_KEYS, TRAJ_IDS


class Carrier:
    """The carrier of ``env``'s envs (``td``, batch size the env's), reset with every env.

    Args:
        env: the collector's env (a StagedEnv).
        book: the collector's trajectory book, which gives each env its trajectory id and
            zeroes its hidden state where it restarts.
        primers: a recurrent policy's hidden-state primers (``policy_primers``).
        device: where the hidden states live (the env's device).
    """

    def __init__(self, env, book: TrajectoryBook, primers, device: torch.device) -> None:
        self.env, self.book, self.primers, self.device = env, book, primers, device
        self.env_batch = tuple(env.batch_size)
        self.num_envs = env.num_envs or 1
        self.ids = None if book.ids is None else book.ids.view(self.env_batch)
        self.hidden: dict = {}  # hidden-state key -> its persistent tensor [*env_batch, L, H]
        self.reset()

    def reset(self) -> None:
        """Reset every env and start a trajectory in each (the carrier's initial state)."""
        self.env.reset()
        self.book.start_all()
        td = self.env.staged.select(*CARRIER_KEYS)
        # the env's leaves (an observation's entries, nested as its space, then is_init), which a policy may replace
        self.entries = list(td.items(True, True))
        self.observation_leaf, self.staged_observation = self.entries[0]  # checked each step
        if self.ids is not None:
            td.set(TRAJ_IDS, self.ids)
        self._prime(td)
        self.keys = list(td.keys(True, True))
        self.td = td
        self.views: dict = {}  # of(slice): (start, stop) -> (view of those rows, its entries)
        self.fresh = True  # no step taken since this reset

    def _prime(self, td: TensorDictBase) -> None:
        """Zero hidden states for a recurrent policy: added once (never twice), then the same
        tensors, never replaced (the write plan points at them), which the trajectory book
        zeroes (``start_all`` before each call here, ``start`` where an env is reset)."""
        if not self.hidden:
            for primer in self.primers:
                primer.apply(td, device=self.device)
            self.hidden = {key: td.get(key) for primer in self.primers for key in primer.keys}
            self.book.hidden = self.hidden
            return
        for key, state in self.hidden.items():
            td.set(key, state)

    def restore(self) -> None:
        """Point the env's entries back at its staged tensors (the policy replaced one)."""
        for key, staged in self.entries:
            self.td.set(key, staged)

    def of(self, envs: np.ndarray | slice) -> TensorDictBase:
        """The carrier of ``envs``: for a slice, a view of the carrier's rows built once per
        slice (its entries are pointed back at the carrier's where the policy replaced
        them); for env ids, a copy of their rows."""
        if not isinstance(envs, slice):
            return self.td[torch.from_numpy(np.asarray(envs))]
        found = self.views.get((envs.start, envs.stop))
        if found is None:
            view = self.td[envs]
            found = self.views[(envs.start, envs.stop)] = (view, list(view.items(True, True)))
        view, entries = found
        for key, tensor in entries:
            if view.get(key) is not tensor:
                view.set(key, tensor)
        return view

    def source(self, key) -> torch.Tensor:
        """The persistent tensor that holds ``key`` for the current step (the carrier's, or
        the env's staged ``("next", ...)``), flat over envs."""
        source = self.td.get(key) if key in self.td.keys(True, True) else self.env.staged.get(key)
        return source.reshape(self.num_envs, *source.shape[len(self.env_batch):])
