"""SAC's networks: the actor the collectors run (a tanh-squashed diagonal Gaussian over Box
actions, scaled to the action bounds) and the Q critics its learner trains
(rlcollect/algos/sac.py)."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, interaction_type
from torch import nn

from rlcollect.errors import ConfigError
from rlcollect.modules.actor_critic import DETERMINISTIC, mlp, observation_norm
from rlcollect.modules.encoders import make_encoder, resolve_encoder

LOG_STD_RANGE = (-5.0, 2.0)  # the actor's log-std, squashed into this interval


def check_box_actions(action_space: gym.Space, what: str) -> gym.spaces.Box:
    """A flat, bounded Box action space, else a ConfigError naming ``what`` needs it."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ConfigError(f"{what} needs continuous actions (a flat Box action space), got {action_space}")
    if not (torch.isfinite(torch.as_tensor(action_space.low)).all() and
            torch.isfinite(torch.as_tensor(action_space.high)).all()):
        raise ConfigError(f"{what} squashes its actions into the action space's bounds: they must be finite, got "
                          f"{action_space}")
    return action_space



class SACActor(TensorDictModuleBase):
    """A tanh-squashed diagonal Gaussian over Box actions, scaled to the action bounds;
    writes ``"action"`` (sampled; ``tanh(mean)`` scaled under a deterministic interaction
    type). ``encoder`` and ``normalize_observation`` as in ActorCritic.

    Args:
        hidden_sizes: the MLP from the features to the mean and log-std.
        activation: of the MLP ("relu" as in the SAC paper).
    """

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, observation_space: gym.Space, action_space: gym.spaces.Box, *,
                 hidden_sizes: Sequence[int] = (256, 256), activation: str = "relu", encoder: str = "auto",
                 normalize_observation: bool = False) -> None:
        super().__init__()
        action_space = check_box_actions(action_space, "SAC")
        self.observation_space, self.action_space = observation_space, action_space
        self.encoder_kind = resolve_encoder(encoder, observation_space)  # the critics encode as the actor does
        self.obs_norm = observation_norm(observation_space, normalize_observation, self.encoder_kind)
        self.encoder = make_encoder(self.encoder_kind, observation_space)
        self.action_dim = action_space.shape[0]
        self.trunk = mlp(self.encoder.out_features, hidden_sizes, 2 * self.action_dim, activation)
        low, high = (torch.as_tensor(bound, dtype=torch.float32) for bound in (action_space.low, action_space.high))
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)

    def features(self, observation) -> torch.Tensor:
        if self.obs_norm is not None:
            observation = self.obs_norm(observation)
        return self.encoder(observation)

    def distribution(self, observation) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of the Gaussian before the squashing."""
        mean, log_std = self.trunk(self.features(observation)).chunk(2, -1)
        low, high = LOG_STD_RANGE
        return mean, low + 0.5 * (high - low) * (torch.tanh(log_std) + 1)

    def sample(self, observation, draw: Callable[[torch.Tensor], torch.Tensor] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action and its log-probability (the squashing's Jacobian
        included), differentiable with respect to the actor's parameters. ``draw(mean)``:
        the standard normal noise, shaped as ``mean`` (None: ``torch.randn_like``; a
        batched sweep draws each member's from its own RNG stream)."""
        mean, log_std = self.distribution(observation)
        noise = torch.randn_like(mean) if draw is None else draw(mean)
        pre_squash = mean + log_std.exp() * noise
        squashed = torch.tanh(pre_squash)
        log_prob = (-0.5 * ((pre_squash - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi))
        log_prob = log_prob - torch.log(self.action_scale * (1 - squashed.pow(2)) + 1e-6)
        return squashed * self.action_scale + self.action_bias, log_prob.sum(-1)

    def act(self, observation, draw: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """The action the collectors take: sampled (``draw`` as in ``sample``), or
        ``tanh(mean)`` scaled under a deterministic interaction type (nothing drawn)."""
        if interaction_type() in DETERMINISTIC:
            mean, _ = self.distribution(observation)
            return torch.tanh(mean) * self.action_scale + self.action_bias
        return self.sample(observation, draw)[0]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set("action", self.act(tensordict.get("observation")))
        return tensordict



class QCritic(nn.Module):
    """Q(observation, action): the observation's features (an encoder of its own) and the
    action, through an MLP."""

    def __init__(self, observation_space: gym.Space, action_dim: int, hidden_sizes: Sequence[int],
                 encoder: str) -> None:
        super().__init__()
        self.encoder = make_encoder(resolve_encoder(encoder, observation_space), observation_space)
        self.q = mlp(self.encoder.out_features + action_dim, hidden_sizes, 1, "relu")

    def forward(self, observation, action: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([self.encoder(observation), action], -1)).squeeze(-1)
