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
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(advantage, value_target)``, each ``[..., T]``.

    ``next_state_value[t]`` is V of the observation step t produced (the TRUE final
    observation at an episode end). A terminated step bootstraps 0; a truncated one
    bootstraps from ``next_state_value``. ``done`` (terminated or truncated) stops the
    advantage from flowing across the episode boundary.
    """
    not_terminated = (~terminated).to(reward.dtype)
    not_done = (~done).to(reward.dtype)
    delta = reward + gamma * next_state_value * not_terminated - state_value
    advantage = torch.empty_like(delta)
    running = torch.zeros_like(delta[..., 0])
    for t in range(delta.shape[-1] - 1, -1, -1):
        running = delta[..., t] + gamma * gae_lambda * not_done[..., t] * running
        advantage[..., t] = running
    return advantage, advantage + state_value
