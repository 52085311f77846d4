"""The env pool's bookkeeping, per env, in the main process: what PoolCollector records.

Envs are served in groups (the workers that finished first), so one env's consecutive
steps land in different rows, and an env's step is recorded in two halves:

    act(envs)      the carrier of those envs (observation, is_init), read from the step
                   buffer's staging rows, and the policy's output for it are kept as the
                   envs' pending step, with the policy version; the env then steps
    record(envs)   once it stepped: pending step + what it produced (("next", ...) from
                   the staging rows) + traj id + env id -> the rows given; an env that
                   finished (or reached max_frames_per_traj) gets a fresh traj id

The carrier needs no copy of its own: each env's current observation is its staging row
(the worker wrote the reset observation there where the env finished), which persists
across calls and batches. Everything is numpy on the CPU, written by index into arrays
preallocated once: pending ``[P, ...]`` and the batch's flat views ``[rows, ...]``.
"""
from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.keys import CARRIER_KEYS, ENV_ID, POLICY_VERSION, TIME_DIM, TRAJ_IDS, TRUNCATED
from rlcollect.trajectories import TrajectoryPool


def _nested(pairs, batch_size) -> TensorDict:
    """A TensorDict of ``(key, tensor)`` pairs (tuple keys nest)."""
    tensordict = TensorDict({}, batch_size=batch_size)
    for key, value in pairs:
        tensordict.set(key, value)
    return tensordict


class PoolBatch:
    """Per-env bookkeeping of P envs and the preallocated batch it records into.

    Args:
        staged: the step buffer's staging TensorDict ``[P]`` (tensors aliasing shared
            memory): ``observation``, ``is_init`` and ``next``.
        policy_output: what the policy wrote for a carrier of P envs (a dry run): the keys,
            trailing shapes and dtypes of its entries.
        batch_shape: ``[F]`` (flat layout) or ``[P, T]`` (per-env layout).
        traj_pool: where fresh trajectory ids come from.
        max_frames_per_traj: cut trajectories after this many steps (None: never).
        track_traj_ids: write ``("collector", "traj_ids")``.
    """

    def __init__(self, staged: TensorDictBase, policy_output: TensorDictBase, batch_shape, *,
                 traj_pool: TrajectoryPool, max_frames_per_traj: int | None, track_traj_ids: bool) -> None:
        self.num_envs = staged.batch_size[0]
        self.track_traj_ids = track_traj_ids
        # each env's trajectory: its id and step count (collectors/trajectory_book.py)
        self.book = TrajectoryBook(self.num_envs, traj_pool, max_frames_per_traj=max_frames_per_traj,
                                   track_ids=track_traj_ids)
        carrier = staged.select(*CARRIER_KEYS)
        self.carrier_keys = list(carrier.keys(True, True))
        self._carrier = [(key, staged.get(key).numpy()) for key in self.carrier_keys]
        self.policy_keys = [key for key in policy_output.keys(True, True)
                            if key not in self.carrier_keys and key != TRAJ_IDS]
        next_keys = [("next", *(key if isinstance(key, tuple) else (key,)))
                     for key in staged.get("next").keys(True, True)]
        self._next = [(key, staged.get(key).numpy()) for key in next_keys]
        self._done = staged.get(("next", "done")).numpy()
        # pending: the carrier and the policy's output of each env's step under way
        pending_entries = [(key, staged.get(key)) for key in self.carrier_keys] + \
                          [(key, policy_output.get(key)) for key in self.policy_keys]
        self._pending = {key: np.zeros_like(value.numpy()) for key, value in pending_entries}
        self._pending_version = np.zeros(self.num_envs, np.int64)
        self._env_range = np.arange(self.num_envs)  # env_ids: indexed as the envs are
        self._block_carriers: dict = {}  # (start, stop) -> (carrier over those staging rows, its tensors)
        self._allocate(pending_entries, batch_shape)

    def _allocate(self, pending_entries, batch_shape) -> None:
        batch_shape = tuple(batch_shape)
        rows = int(np.prod(batch_shape))
        entries = [(key, value.shape[1:], value.dtype) for key, value in pending_entries]
        entries += [(key, array.shape[1:], torch.from_numpy(array[:0]).dtype) for key, array in self._next]
        entries += [(ENV_ID, (), torch.int64), (POLICY_VERSION, (), torch.int64)]
        if self.track_traj_ids:
            entries.append((TRAJ_IDS, (), torch.int64))
        self.batch = _nested([(key, torch.zeros((*batch_shape, *shape), dtype=dtype)) for key, shape, dtype in entries],
                             batch_shape)
        if len(batch_shape) == 2:
            self.batch.names = [None, TIME_DIM]
        flat = {key: self.batch.get(key).numpy().reshape(rows, *shape) for key, shape, _ in entries}
        self._rows_from_pending = [(flat[key], self._pending[key]) for key in self._pending]
        self._rows_from_staging = [(flat[key], array) for key, array in self._next]
        self._env_ids = flat[ENV_ID]
        self._versions = flat[POLICY_VERSION]
        self._traj_rows = flat.get(TRAJ_IDS)
        self._truncated_rows, self._done_rows = flat[TRUNCATED], flat[("next", "done")]

    # ------------------------------------------------------------------ trajectories
    def start(self) -> None:
        """Every env starts a trajectory (after a reset of all envs)."""
        self.book.start_all()

    def env_ids(self, envs: np.ndarray | slice) -> np.ndarray:
        """The env ids an index of envs (ids, or a slice of them) selects: a view for a slice."""
        return self._env_range[envs]

    # ------------------------------------------------------------------ the two halves of a step
    def carrier(self, envs: np.ndarray | slice) -> TensorDict:
        """The policy's input for ``envs``: their observation and is_init, kept as their
        pending step. ``envs``: env ids, or a slice (a block of consecutive envs, such as
        one worker's), whose carrier is built once over their staging rows (they change
        only when the envs step, after the policy ran): its rows are then copied to the
        pending step and nothing else is allocated."""
        if isinstance(envs, slice):
            return self._block_carrier(envs)
        pairs = []
        for key, staged in self._carrier:
            values = staged[envs]
            self._pending[key][envs] = values
            pairs.append((key, torch.from_numpy(values)))
        return _nested(pairs, [len(envs)])

    def _block_carrier(self, envs: slice) -> TensorDict:
        found = self._block_carriers.get((envs.start, envs.stop))
        if found is None:
            tensors = [(key, torch.from_numpy(staged[envs])) for key, staged in self._carrier]
            found = self._block_carriers[(envs.start, envs.stop)] = (_nested(tensors, [envs.stop - envs.start]),
                                                                      tensors)
        carrier, tensors = found
        for key, staged in self._carrier:
            self._pending[key][envs] = staged[envs]
        for key, tensor in tensors:
            if carrier.get(key) is not tensor:  # the policy replaced it: back to the staging rows
                carrier.set(key, tensor)
        return carrier

    def keep_output(self, envs: np.ndarray, output: TensorDictBase | None, policy_version: int) -> None:
        """The policy's output for ``envs`` (None: random actions, kept by ``keep_action``;
        the other entries zero) joins their pending step."""
        for key in self.policy_keys:
            if output is not None:
                self._pending[key][envs] = output.get(key).numpy()
            elif key != "action":
                self._pending[key][envs] = 0
        self._pending_version[envs] = policy_version

    def keep_action(self, envs: np.ndarray, action: np.ndarray) -> None:
        self._pending["action"][envs] = action

    def record(self, envs: np.ndarray | slice, rows: np.ndarray | slice) -> np.ndarray | None:
        """Write the step ``envs`` (env ids, or a slice of them) just took into ``rows``
        of the batch (indices, or a slice); returns the env ids cut by max_frames_per_traj
        (marked truncated and done: the caller resets them), or None. Envs that finished or
        were cut start a trajectory (fresh traj id)."""
        for destination, pending in self._rows_from_pending:
            destination[rows] = pending[envs]
        for destination, staged in self._rows_from_staging:
            destination[rows] = staged[envs]
        ids = self.env_ids(envs)
        self._env_ids[rows] = ids
        self._versions[rows] = self._pending_version[envs]
        if self._traj_rows is not None:
            self._traj_rows[rows] = self.book.host_ids[envs]
        restarted = self._done[envs]
        cut = None
        reached = self.book.count_step(envs, restarted)
        if reached is not None and reached.any():
            cut_rows = np.arange(len(self._env_ids))[rows][reached]
            self._truncated_rows[cut_rows] = True
            self._done_rows[cut_rows] = True
            cut = ids[reached]
            restarted = restarted | reached
        if restarted.any():
            self.book.start(ids[restarted])
        return cut
