"""MLP actor-critic for Discrete and Box action spaces, as a TensorDict module."""
from __future__ import annotations

import math
from typing import Sequence

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase, interaction_type
from torch import nn

from rlcollect.modules import distributions as D

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}
DETERMINISTIC = (InteractionType.DETERMINISTIC, InteractionType.MODE, InteractionType.MEAN, InteractionType.MEDIAN)


def mlp(in_features: int, hidden_sizes: Sequence[int], out_features: int, activation: str = "tanh",
        output_gain: float = 1.0) -> nn.Sequential:
    """Linear layers with orthogonal init (gain sqrt(2) hidden, ``output_gain`` last)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    layers: list[nn.Module] = []
    sizes = [in_features, *hidden_sizes]
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [_orthogonal(nn.Linear(fan_in, fan_out), math.sqrt(2)), ACTIVATIONS[activation]()]
    layers.append(_orthogonal(nn.Linear(sizes[-1], out_features), output_gain))
    return nn.Sequential(*layers)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(TensorDictModuleBase):
    """Separate actor and critic MLPs over a flat ``"observation"``.

    Writes ``"action"`` (sampled, or the mode under a deterministic interaction type),
    ``"action_log_prob"`` and ``"state_value"``. Discrete spaces get a categorical head
    (int64 actions); Box spaces a diagonal Gaussian with a state-independent log-std.
    """

    in_keys = ["observation"]
    out_keys = ["action", "action_log_prob", "state_value"]

    def __init__(self, observation_space: gym.spaces.Box, action_space: gym.Space, *,
                 hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
                 log_std_init: float = 0.0) -> None:
        super().__init__()
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
            raise TypeError(f"ActorCritic needs a flat Box observation space, got {observation_space!r}")
        obs_dim = observation_space.shape[0]
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            self.action_offset = int(action_space.start)
            self.actor = mlp(obs_dim, hidden_sizes, int(action_space.n), activation, output_gain=0.01)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            action_dim = action_space.shape[0]
            self.actor = mlp(obs_dim, hidden_sizes, action_dim, activation, output_gain=0.01)
            self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))
        else:
            raise TypeError(f"ActorCritic needs a Discrete or flat Box action space, got {action_space!r}")
        self.critic = mlp(obs_dim, hidden_sizes, 1, activation, output_gain=1.0)

    def value(self, observation: torch.Tensor) -> torch.Tensor:
        """V(observation), without a trailing singleton dim."""
        return self.critic(observation.float()).squeeze(-1)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        observation = tensordict.get("observation").float()
        head = self.actor(observation)
        deterministic = interaction_type() in DETERMINISTIC
        if self.discrete:
            index = head.argmax(-1) if deterministic else D.categorical_sample(head)
            log_prob = D.categorical_log_prob(head, index)
            action = index + self.action_offset if self.action_offset else index
        else:
            action = head if deterministic else D.normal_sample(head, self.log_std)
            log_prob = D.normal_log_prob(head, self.log_std, action)
        tensordict.set("action", action)
        tensordict.set("action_log_prob", log_prob)
        tensordict.set("state_value", self.critic(observation).squeeze(-1))
        return tensordict

    def evaluate_actions(self, observation: torch.Tensor, action: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value) of ``action`` under the current weights."""
        observation = observation.float()
        head = self.actor(observation)
        if self.discrete:
            index = action - self.action_offset if self.action_offset else action
            log_prob, entropy = D.categorical_log_prob(head, index), D.categorical_entropy(head)
        else:
            log_prob = D.normal_log_prob(head, self.log_std, action)
            entropy = D.normal_entropy(self.log_std, head.shape[:-1])
        return log_prob, entropy, self.critic(observation).squeeze(-1)
