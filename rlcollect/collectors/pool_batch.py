"""The env pool's batch: where its envs' steps land, a group of envs at a time.

The pool's Collector keeps each env's step under way in a one-step batch ``[P, 1]``
(``Collector.act`` and ``record`` with ``envs``): the carrier and the policy's output when
the env acts, what it staged once it stepped, its trajectory id, truncation by
max_frames_per_traj. Envs are served in groups (the workers that finished first), so one
env's consecutive steps land in different rows of the batch:

    keep_version(envs)   the policy version that chose the envs' actions (at act time)
    record(envs, rows)   the envs' finished steps -> the rows given, with their env ids
                         and policy versions

Everything is numpy on the CPU, written by index into arrays preallocated once: each
entry's rows as single elements (collectors/rows.py), so a row is one element's copy.
"""
from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.collectors.rows import row_elements
from rlcollect.keys import ENV_ID, POLICY_VERSION, TIME_DIM


def _nested(pairs, batch_size) -> TensorDict:
    """A TensorDict of ``(key, tensor)`` pairs (tuple keys nest)."""
    tensordict = TensorDict({}, batch_size=batch_size)
    for key, value in pairs:
        tensordict.set(key, value)
    return tensordict


class PoolBatch:
    """The preallocated batch of a pool's P envs, filled from its Collector's one-step batch.

    Args:
        step: the Collector's one-step batch ``[P, 1]``: every env's step under way.
        batch_shape: ``[F]`` (flat layout) or ``[P, T]`` (per-env layout).
    """

    def __init__(self, step: TensorDictBase, batch_shape) -> None:
        self.num_envs = step.batch_size[0]
        batch_shape = tuple(batch_shape)
        rows = int(np.prod(batch_shape))
        entries = [(key, value.shape[2:], value.dtype) for key, value in step.items(True, True)]
        entries += [(ENV_ID, (), torch.int64), (POLICY_VERSION, (), torch.int64)]
        self.batch = _nested([(key, torch.zeros((*batch_shape, *shape), dtype=dtype)) for key, shape, dtype in entries],
                             batch_shape)
        if len(batch_shape) == 2:
            self.batch.names = [None, TIME_DIM]
        flat = {key: self.batch.get(key).numpy().reshape(rows, *shape) for key, shape, _ in entries}
        self._copies = [(row_elements(flat[key]), row_elements(step.get(key).numpy().reshape(self.num_envs, *shape)))
                        for key, shape, _ in entries[:-2]]
        self._env_ids, self._versions = flat[ENV_ID], flat[POLICY_VERSION]
        self._pending_version = np.zeros(self.num_envs, np.int64)
        self._env_range = np.arange(self.num_envs)  # env_ids: indexed as the envs are

    def env_ids(self, envs: np.ndarray | slice) -> np.ndarray:
        """The env ids an index of envs (ids, or a slice of them) selects: a view for a slice."""
        return self._env_range[envs]

    def keep_version(self, envs: np.ndarray | slice, policy_version: int) -> None:
        """The policy version that chose the actions ``envs`` are taking."""
        self._pending_version[envs] = policy_version

    def record(self, envs: np.ndarray | slice, rows: np.ndarray | slice) -> None:
        """Copy the steps ``envs`` (env ids, or a slice of them) finished into ``rows`` of the
        batch (indices, or a slice)."""
        for destination, step in self._copies:
            destination[rows] = step[envs]
        self._env_ids[rows] = self._env_range[envs]
        self._versions[rows] = self._pending_version[envs]
