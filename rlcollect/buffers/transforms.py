"""Transforms of collected batches: TensorDict -> TensorDict callables, e.g. a collector's
``postproc``, applied before the batch reaches a replay buffer.

``MultiStep`` turns one-step transitions into n-step ones, so that a TD learner bootstraps
``n`` steps ahead (``r_t + gamma r_{t+1} + ... + gamma^m Q(s_{t+m})``) from any sampler.
"""
from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rlcollect.keys import DONE, NEXT, REWARD, STEPS_TO_NEXT_OBS
from rlcollect.validation import check_positive_int


def or_next_flags(flags: torch.Tensor, data: TensorDictBase, keys) -> torch.Tensor:
    """``flags`` or'ed with each ``("next", key)`` entry of ``data``, read in ``flags``'
    shape (info flags are float32: nonzero is True). How ``terminal_keys`` (a lost life)
    join ``terminated`` / ``done``."""
    for key in keys:
        flags = flags | data.get((NEXT, key)).reshape(flags.shape).bool()
    return flags


class MultiStep:
    """n-step transitions from a collector batch ``[*B, T]`` (time last).

    For each step t, with ``m`` = the steps used = the smallest of ``n_steps``, the steps up
    to and including the first ``done`` at or after t, and the steps left in the batch:

    * ``("next", "reward")`` becomes ``sum_{k<m} gamma^k r_{t+k}`` (the discounted sum);
    * every other ``("next", ...)`` entry (observation, done, terminated, truncated, any
      other) becomes that of step ``t + m - 1``, the transition's last step;
    * ``("next", "steps_to_next_obs")`` (int64, shaped like ``("next", "done")``) holds ``m``:
      a TD target then discounts its bootstrap by ``gamma ** m`` (DQN does).

    A transition never crosses a trajectory end, and at the batch's end it uses the steps
    the batch has (its last step's next observation is then a bootstrap point, so no data
    is held back between batches). Entries outside ``"next"`` are untouched; the input batch
    is not modified.

    Args:
        gamma: the discount, in [0, 1] (the learner's own gamma).
        n_steps: the most steps a transition spans (1 leaves rewards and next entries as they are).
        end_keys: more ``("next", key)`` flags a transition never crosses, as ``done``
            (e.g. ``["life_lost"]``: the learner's terminal keys).
    """

    def __init__(self, gamma: float, n_steps: int, end_keys=()) -> None:
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.n_steps = check_positive_int("n_steps", n_steps)
        self._discounts = [self.gamma ** k for k in range(self.n_steps)]
        self.end_keys = list(end_keys)
        self._time = torch.arange(0)  # 0 .. T-1, kept for the next batch of the same length and device

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        if not isinstance(batch, TensorDictBase) or batch.batch_dims < 1:
            raise ValueError(f"MultiStep takes a TensorDict with a time dim last (batch [*B, T]), got "
                             f"{type(batch).__name__} {list(getattr(batch, 'batch_size', []))}")
        keys = batch.keys(include_nested=True, leaves_only=True)
        for key in (REWARD, DONE):
            if key not in keys:
                raise KeyError(f"MultiStep needs {key!r} in the batch; it holds {sorted(map(str, keys))}")
        ends = or_next_flags(batch.get(DONE), batch, self.end_keys)
        reward_sum, steps = self._reward_and_steps(batch.get(REWARD), ends, batch.batch_dims - 1)
        last = self._time_index(batch.batch_size[-1], steps.device) + steps - 1  # t + m - 1, [*B, T]
        time_dim = batch.batch_dims - 1
        next_td = batch.get(NEXT).apply(lambda value: _gather_time(value, last, time_dim))
        next_td.set(REWARD[1:], reward_sum)
        next_td.set(STEPS_TO_NEXT_OBS[1:], steps.reshape(batch.get(DONE).shape))
        out = batch.copy()  # shallow: the entries outside "next" are shared, the input untouched
        out.set(NEXT, next_td)
        return out

    def _reward_and_steps(self, reward: torch.Tensor, done: torch.Tensor,
                          time_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The discounted n-step reward sums (reward's shape) and ``m`` (int64, ``[*B, T]``).

        Step k adds ``gamma^k r_{t+k}`` for every t still ``alive``: t + k inside the batch
        (the slices below) and no done in t .. t+k-1. One pass per k, none per t.
        """
        horizon = reward.shape[time_dim]
        done = done.reshape(*done.shape[:time_dim + 1], -1).any(-1)  # [*B, T]
        features = (1,) * (reward.dim() - time_dim - 1)  # to broadcast [*B, T] flags over reward's feature dims
        reward_sum = torch.zeros_like(reward)
        steps = torch.zeros(done.shape, dtype=torch.int64, device=done.device)
        alive = torch.ones_like(done)
        for k, discount in enumerate(self._discounts[:horizon]):
            span = horizon - k  # the t with a step t + k in the batch
            included = alive.narrow(time_dim, 0, span)
            reward_sum.narrow(time_dim, 0, span).add_(
                reward.narrow(time_dim, k, span) * included.reshape(*included.shape, *features), alpha=discount)
            steps.narrow(time_dim, 0, span).add_(included)
            included &= ~done.narrow(time_dim, k, span)  # in place: alive for k + 1
        return reward_sum, steps

    def _time_index(self, horizon: int, device: torch.device) -> torch.Tensor:
        if self._time.shape[0] != horizon or self._time.device != device:
            self._time = torch.arange(horizon, device=device)
        return self._time

    def __repr__(self) -> str:
        return f"MultiStep(gamma={self.gamma}, n_steps={self.n_steps})"


def _gather_time(value: torch.Tensor, index: torch.Tensor, time_dim: int) -> torch.Tensor:
    """``value[..., index[..., t], ...]`` along the time dim, for ``value`` of shape
    ``[*B, T, *feature]`` and ``index`` ``[*B, T]``."""
    features = value.dim() - index.dim()
    expanded = index.reshape(*index.shape, *(1,) * features).expand_as(value)
    return torch.gather(value, time_dim, expanded)
