"""Generalised advantage estimation over time-last ``[..., T]`` tensors."""
from __future__ import annotations

import torch


def generalized_advantage_estimate(
    reward: torch.Tensor,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    *,
    gamma: float,
    gae_lambda: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(advantage, value_target)``, each ``[..., T]``.

    ``next_state_value[t]`` is V of the observation step t produced (the TRUE final
    observation at an episode end). A terminated step bootstraps 0; a truncated one
    bootstraps from ``next_state_value``. ``done`` (terminated or truncated) stops the
    advantage from flowing across the episode boundary.

    ``gae_lambda``: one for every row, or a tensor of one per row (``[...]``, the leading
    dims of ``reward``). The trace decays by ``gamma * gae_lambda`` per step, computed in
    double precision and rounded once to ``reward``'s dtype, so a row's advantages do not
    depend on whether its lambda came as a float or in a float64 tensor.
    """
    not_terminated = (~terminated).to(reward.dtype)
    not_done = (~done).to(reward.dtype)
    delta = reward + gamma * next_state_value * not_terminated - state_value
    decay = gamma * gae_lambda  # a float: multiplies the rows as it is; per row (float64): rounded once, the same
    if torch.is_tensor(decay):
        decay = decay.to(reward.dtype)
    advantage = torch.empty_like(delta)
    running = torch.zeros_like(delta[..., 0])
    for t in range(delta.shape[-1] - 1, -1, -1):
        running = delta[..., t] + decay * not_done[..., t] * running
        advantage[..., t] = running
    return advantage, advantage + state_value
