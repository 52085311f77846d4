"""Reward scaling for on-policy training (docs/architecture.md, "Learners")."""
from __future__ import annotations

import torch

from rlcollect.modules.encoders import RunningNorm


class RewardScaler:
    """Divides rewards by the running standard deviation of the discounted return, as SB3's
    VecNormalize(norm_reward=True) and gymnasium's NormalizeReward (cleanrl) do: per env the
    return ``R <- gamma * R + r`` runs across batches (back to 0 after each episode's end),
    every step's ``R`` is folded into a running variance, and the learner trains on
    ``r / sqrt(var + eps)`` clipped to ``[-clip, clip]``. The statistics are updated with a
    whole batch before it is scaled. The rewards stored in batches and buffers and logged as
    returns are never changed: ``__call__`` returns a new tensor.
    """

    def __init__(self, gamma: float, eps: float = 1e-8, clip: float = 10.0) -> None:
        self.gamma, self.eps, self.clip = gamma, eps, clip
        self.returns: torch.Tensor | None = None  # [N] float64, the running discounted return of each env
        self.stats = RunningNorm(())

    @torch.no_grad()
    def __call__(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """``reward``, ``done``: ``[N, T]`` (env rows, time last); the scaled rewards."""
        returns = self.discounted_returns(reward, done)
        self.stats.update(returns)
        return self.scale(reward, self.stats)

    @torch.no_grad()
    def discounted_returns(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """Every step's running discounted return ``[N, T]`` (float64), carried on from the
        last batch's (the statistics are not updated)."""
        reward64 = reward.to(torch.float64)
        done = done.reshape(reward.shape)
        if self.returns is None or self.returns.shape != reward.shape[:1]:
            self.returns = torch.zeros(reward.shape[0], dtype=torch.float64, device=reward.device)
        returns = torch.empty_like(reward64)
        running = self.returns
        for t in range(reward.shape[1]):
            running = running * self.gamma + reward64[:, t]
            returns[:, t] = running
            running = torch.where(done[:, t], torch.zeros_like(running), running)
        self.returns = running
        return returns

    def scale(self, reward: torch.Tensor, stats: RunningNorm) -> torch.Tensor:
        """``reward`` divided by the running std of ``stats``, clipped."""
        scale = torch.sqrt(stats.running_var + self.eps)
        return (reward.to(torch.float64) / scale).clamp(-self.clip, self.clip).to(reward.dtype)

    @property
    def variance(self) -> float:
        """The running variance of the discounted returns seen so far."""
        return float(self.stats.running_var)

    def state_dict(self) -> dict:
        return {"stats": self.stats.state_dict(),
                "returns": torch.zeros(0, dtype=torch.float64) if self.returns is None else self.returns.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.stats.load_state_dict(state["stats"])
        self.returns = state["returns"].clone() if state["returns"].numel() else None
