"""On-policy rollout storage: a preallocated ``[N, T + 1]`` TensorDict.

Row n holds env n's T transitions; slot T holds the observation after the last step
(``observation[:, -1]``) and its value (``state_value[:, -1]``, the bootstrap value).
For transition-only fields the slot T is padding. Keys are the collector's.
"""
from __future__ import annotations

from typing import Iterator, Mapping, Sequence

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.keys import TIME_DIM

ROLLOUT_DIM = "rollout"  # the [N, T + 1] rollout's last dim: T transitions + the bootstrap slot

TRANSITION_KEYS = (
    "observation", "action", "action_log_prob", "state_value", "is_init",
    ("next", "observation"), ("next", "reward"), ("next", "terminated"),
    ("next", "truncated"), ("next", "done"),
)


def feature_shape(dim: int | Sequence[int]) -> tuple[int, ...]:
    """An int ``d`` is a feature dim of ``d`` (``(d,)``); a sequence is the shape itself
    (``()`` for a scalar, e.g. a Discrete action)."""
    if isinstance(dim, bool):
        raise TypeError(f"a feature dim must be an int or a shape, got {dim!r}")
    return (dim,) if isinstance(dim, int) else tuple(dim)


class RolloutBuffer:
    """One rollout of ``num_envs`` x ``rollout_len`` transitions, allocated once on ``device``.

    The rollout is ``[num_envs, rollout_len + 1]``: row n holds env n's transitions, slot
    ``rollout_len`` the observation that follows the last step (the bootstrap slot).

    Args:
        num_envs, rollout_len: the rollout's shape.
        obs_dim: an int (a flat observation of that many features) or the observation's shape;
            a mapping ``{name: shape}`` (nested as the observation is) for a Dict / Tuple
            observation, whose ``observation_dtype`` is then a mapping of the same names.
        action_dim: an int (a vector action) or the action's shape (``()``, the default: one
            discrete action per step).
        device: where the rollout lives.
        observation_dtype: default float32.
        action_dtype: default int64 for a scalar action (shape ``()``), float32 otherwise.
        state_shapes: per-step entries the policy carries (a recurrent policy's hidden
            states, ``{key: (num_layers, hidden_size)}``), stored as ``key`` and ``("next", key)``.
        extra_keys: more entries of a collector batch to keep (e.g. ``("next", "life_lost")``,
            an info key an algorithm reads); allocated like the batch's at the first ``add``.

    ``start_rollout()`` gives the shared TensorDict (``Collector.collect(num_steps,
    rollout=...)`` writes straight into it); ``add(rollout)`` marks it ready, or copies a
    collector batch ``[num_envs, rollout_len]`` into it; ``get()`` hands out the transition
    view. Algorithms add fields (advantage, ...) to the shared TensorDict.
    """

    def __init__(self, num_envs: int, rollout_len: int, obs_dim: int | Sequence[int] | Mapping,
                 action_dim: int | Sequence[int] = (), device: str | torch.device = "cpu", *,
                 observation_dtype: torch.dtype | Mapping = torch.float32, action_dtype: torch.dtype | None = None,
                 state_shapes: dict[str, Sequence[int]] | None = None, extra_keys: Sequence = ()) -> None:
        self.num_envs, self.rollout_len = num_envs, rollout_len
        self.device = torch.device(device)
        action_shape = feature_shape(action_dim)
        if action_dtype is None:
            action_dtype = torch.int64 if action_shape == () else torch.float32
        shape = (num_envs, rollout_len + 1)

        def zeros(*feature_shape, dtype=torch.float32):
            return torch.zeros(*shape, *feature_shape, dtype=dtype, device=self.device)

        def observation(dims, dtype):  # one tensor, or a dict of them for a Dict / Tuple observation
            if isinstance(dims, Mapping):
                return {name: observation(child, dtype[name] if isinstance(dtype, Mapping) else dtype)
                        for name, child in dims.items()}
            return zeros(*feature_shape(dims), dtype=dtype)

        self._rollout = TensorDict(
            {
                "observation": observation(obs_dim, observation_dtype),
                "action": zeros(*action_shape, dtype=action_dtype),
                "action_log_prob": zeros(),
                "state_value": zeros(),
                "is_init": zeros(dtype=torch.bool),
                "next": {
                    "observation": observation(obs_dim, observation_dtype),
                    "reward": zeros(),
                    "terminated": zeros(dtype=torch.bool),
                    "truncated": zeros(dtype=torch.bool),
                    "done": zeros(dtype=torch.bool),
                },
            },
            batch_size=shape,
            device=self.device,
            names=[None, ROLLOUT_DIM],
        )
        self.state_keys = list(state_shapes or {})
        self.extra_keys = [key if isinstance(key, str) else tuple(key) for key in extra_keys]
        for key, state_shape in (state_shapes or {}).items():
            self._rollout.set(key, zeros(*state_shape))
            self._rollout.set(("next", key), zeros(*state_shape))
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
        keys = [*TRANSITION_KEYS, *self.state_keys, *(("next", key) for key in self.state_keys), *self.extra_keys]
        missing = [key for key in keys if key not in batch.keys(include_nested=True)]
        if missing:
            raise KeyError(f"collector batch lacks {missing}: the policy must write action, "
                           "action_log_prob and state_value (and a recurrent one its hidden states); extra_keys "
                           "must be entries of the batch (an env.info_keys entry is ('next', key))")
        for key in self.extra_keys:
            if key not in self._rollout.keys(include_nested=True):
                value = batch.get(key)
                self._rollout.set(key, torch.zeros((*self._rollout.batch_size, *value.shape[2:]), dtype=value.dtype,
                                                   device=self.device))
        transitions = self._rollout[:, :-1]
        for key in keys:
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
    """The transitions of a rollout: ``[N, T + 1]`` -> ``[N, T]`` (a view, the bootstrap
    slot dropped), or ``[N * T]`` with ``flatten``. Idempotent: a transition view (its
    last dim named ``"time"``, as ``get()``'s and every collector batch's is) is not
    trimmed again."""
    if rollout.names[-1] == TIME_DIM:
        view = rollout
    else:
        view = rollout[..., :-1]
        view.names = [*view.names[:-1], TIME_DIM]
    return view.reshape(-1) if flatten else view


def iterate_sequences(rollout: TensorDictBase, sequence_length: int, batch_size: int,
                      generator: torch.Generator | None = None) -> Iterator[TensorDictBase]:
    """Shuffled minibatches of whole sequences for recurrent training, in the flat 1-D layout.

    ``rollout`` is ``[N, T]``: each row is cut into sequences of ``sequence_length`` steps
    (the last one of a row shorter when T is not a multiple); a minibatch concatenates
    ``batch_size // sequence_length`` of them (at least one), with ``is_init`` set at each
    sequence start (OR-ed with the env's own resets), so a recurrent module in recurrent
    mode restarts from the stored hidden state there. Every step once per pass.
    """
    if rollout.batch_dims != 2:
        raise ValueError(f"iterate_sequences needs a [N, T] rollout, got batch_size {list(rollout.batch_size)}")
    if sequence_length < 1:
        raise ValueError(f"sequence_length must be >= 1, got {sequence_length}")
    flat = rollout.reshape(-1)
    starts, lengths = sequence_starts(*rollout.shape, sequence_length, rollout.device)
    order = torch.randperm(starts.numel(), generator=generator, device=rollout.device)
    per_batch = max(1, batch_size // sequence_length)
    for first in range(0, order.numel(), per_batch):
        steps, position = sequence_steps(order[first:first + per_batch], starts, lengths)
        minibatch = flat[steps]
        minibatch.set("is_init", minibatch.get("is_init") | (position == 0))
        yield minibatch


def sequence_steps(chosen: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat steps of the sequences ``chosen`` (indices into ``sequence_starts``'
    ``starts`` and ``lengths``), end to end, and each step's position in its sequence."""
    chosen_lengths = lengths[chosen]
    # step j: the start of its sequence plus its position in it
    sequence = torch.repeat_interleave(torch.arange(chosen.numel(), device=chosen.device), chosen_lengths)
    position = torch.arange(sequence.numel(), device=chosen.device) - (
        torch.cumsum(chosen_lengths, 0) - chosen_lengths)[sequence]
    return starts[chosen][sequence] + position, position


def sequence_starts(num_rows: int, time: int, sequence_length: int, device=None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each sequence of a ``[num_rows, time]`` rollout starts (a flat index) and its
    length: each row cut into sequences of ``sequence_length`` steps, the last one of a row
    shorter when ``time`` is not a multiple (``iterate_sequences``)."""
    offsets = torch.arange(0, time, sequence_length, device=device)
    starts = (torch.arange(num_rows, device=device).unsqueeze(1) * time + offsets).reshape(-1)
    return starts, (time - offsets).clamp(max=sequence_length).repeat(num_rows)


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
