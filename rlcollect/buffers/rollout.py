"""On-policy rollout storage: a preallocated ``[N, T + 1]`` TensorDict.

Row n holds env n's T transitions; slot T holds the observation after the last step
(``observation[:, -1]``) and its value (``state_value[:, -1]``, the bootstrap value).
For transition-only fields the slot T is padding. Keys are the collector's.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import torch
from tensordict import TensorDict, TensorDictBase

TRANSITION_KEYS = (
    "observation", "action", "action_log_prob", "state_value", "is_init",
    ("next", "observation"), ("next", "reward"), ("next", "terminated"),
    ("next", "truncated"), ("next", "done"),
)


class RolloutBuffer:
    """One rollout of ``num_envs`` x ``rollout_len`` transitions, allocated once on ``device``.

    ``start_rollout()`` gives the shared TensorDict; ``add(batch)`` fills it from a
    collector batch ``[num_envs, rollout_len]`` (or marks the shared one ready);
    ``get()`` hands out the transition view. Algorithms add fields (advantage, ...)
    to the shared TensorDict.
    """

    def __init__(self, num_envs: int, rollout_len: int, observation_shape: Sequence[int],
                 action_shape: Sequence[int] = (), *, observation_dtype: torch.dtype = torch.float32,
                 action_dtype: torch.dtype = torch.int64, device: str | torch.device = "cpu") -> None:
        self.num_envs, self.rollout_len = num_envs, rollout_len
        self.device = torch.device(device)
        shape = (num_envs, rollout_len + 1)

        def zeros(*feature_shape, dtype=torch.float32):
            return torch.zeros(*shape, *feature_shape, dtype=dtype, device=self.device)

        self._rollout = TensorDict(
            {
                "observation": zeros(*observation_shape, dtype=observation_dtype),
                "action": zeros(*action_shape, dtype=action_dtype),
                "action_log_prob": zeros(),
                "state_value": zeros(),
                "is_init": zeros(dtype=torch.bool),
                "next": {
                    "observation": zeros(*observation_shape, dtype=observation_dtype),
                    "reward": zeros(),
                    "terminated": zeros(dtype=torch.bool),
                    "truncated": zeros(dtype=torch.bool),
                    "done": zeros(dtype=torch.bool),
                },
            },
            batch_size=shape,
            device=self.device,
        )
        self._ready = False

    def start_rollout(self) -> TensorDict:
        """The shared ``[N, T + 1]`` rollout TensorDict, for a collector to write into."""
        self._ready = False
        return self._rollout

    def add(self, rollout: TensorDictBase) -> None:
        """Mark the shared rollout ready, or copy a collector batch ``[N, T]`` into it
        (slot T gets the observation that follows the last step)."""
        if rollout is not self._rollout:
            self._copy_batch(rollout)
        self._ready = True

    def _copy_batch(self, batch: TensorDictBase) -> None:
        expected = (self.num_envs, self.rollout_len)
        if batch.batch_dims == 1 and self.num_envs == 1:
            batch = batch.unsqueeze(0)
        if tuple(batch.batch_size) != expected:
            raise ValueError(f"RolloutBuffer holds batches of shape {list(expected)} (envs, time); "
                             f"got {list(batch.batch_size)}")
        missing = [key for key in TRANSITION_KEYS if key not in batch.keys(include_nested=True)]
        if missing:
            raise KeyError(f"collector batch lacks {missing}: the policy must write action, "
                           "action_log_prob and state_value")
        transitions = self._rollout[:, :-1]
        for key in TRANSITION_KEYS:
            transitions.get(key).copy_(batch.get(key), non_blocking=True)
        self._rollout.get("observation")[:, -1].copy_(batch.get(("next", "observation"))[:, -1], non_blocking=True)

    def get(self, flatten: bool = True) -> TensorDictBase:
        """The stored rollout's transition view (``[N * T]`` flat, or ``[N, T]``)."""
        if not self._ready:
            raise RuntimeError("RolloutBuffer.get() before add(): no rollout is ready")
        self._ready = False
        return transition_view(self._rollout, flatten=flatten)

    @property
    def rollout(self) -> TensorDict:
        """The full ``[N, T + 1]`` TensorDict (bootstrap slot included)."""
        return self._rollout


def transition_view(rollout: TensorDictBase, flatten: bool = False) -> TensorDictBase:
    """Drop the padded final slot: ``[N, T + 1]`` -> ``[N, T]`` (a view), or ``[N * T]``."""
    view = rollout[:, :-1]
    return view.reshape(-1) if flatten else view


def iterate_minibatches(rollout: TensorDictBase, batch_size: int, device: str | torch.device | None = None,
                        generator: torch.Generator | None = None) -> Iterator[TensorDictBase]:
    """Shuffled minibatches of a flat transition TensorDict: every transition exactly once
    per pass (the last minibatch may be smaller)."""
    if rollout.batch_dims != 1:
        rollout = rollout.reshape(-1)
    order = torch.randperm(rollout.shape[0], generator=generator, device=rollout.device)
    for start in range(0, rollout.shape[0], batch_size):
        minibatch = rollout[order[start:start + batch_size]]
        yield minibatch if device is None else minibatch.to(device)
