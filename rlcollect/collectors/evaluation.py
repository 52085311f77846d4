"""Deterministic evaluation episodes."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict.nn import set_interaction_type

from rlcollect.envs.gym_env import GymEnv


@dataclass(frozen=True)
class EvalResult:
    returns: list[float]
    lengths: list[int]

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns)


def evaluate_episodes(env: GymEnv, policy, *, max_steps: int | None = None,
                      exploration_type: str = "deterministic") -> EvalResult:
    """Run one episode in each sub-env of ``env`` (batched: one episode per sub-env) with
    ``policy`` under ``exploration_type``; returns each episode's return and length.

    Episodes still running after ``max_steps`` are not counted as completed: cutting them
    would bias the estimate towards short episodes.
    """
    carrier = env.reset()
    num_envs = env.num_envs or 1
    returns = torch.zeros(num_envs, dtype=torch.float64)
    lengths = torch.zeros(num_envs, dtype=torch.int64)
    finished = torch.zeros(num_envs, dtype=torch.bool)
    step = 0
    with torch.no_grad(), set_interaction_type(exploration_type):
        while not finished.all() and (max_steps is None or step < max_steps):
            action = policy(carrier).get("action")
            done = env._step(action)  # finished envs restart; their later steps are ignored
            running = ~finished
            returns += env.staged.get(("next", "reward")).reshape(-1).cpu().double() * running
            lengths += running
            if done is not None:
                finished |= torch.from_numpy(done)
            carrier = env.staged.select("observation", "is_init")
            step += 1
    return EvalResult(returns=returns[finished].tolist(), lengths=lengths[finished].tolist())
