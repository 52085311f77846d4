"""Q-value policy with epsilon-greedy exploration, for Discrete action spaces."""
from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, interaction_type
from torch import nn

from rlcollect.acting import actions_only
from rlcollect.errors import ConfigError
from rlcollect.modules.actor_critic import DETERMINISTIC, mlp, observation_norm
from rlcollect.modules.encoders import make_encoder, resolve_encoder


class QValuePolicy(TensorDictModuleBase):
    """An MLP of Q-values over the features of ``"observation"``; writes ``"action"`` and
    ``"action_value"`` (the Q-values of every action; under ``set_actions_only``, an
    evaluation, the action alone). ``encoder`` and
    ``normalize_observation`` as in ActorCritic (the encoder is part of ``q_net``).

    Under a deterministic interaction type the action is greedy; otherwise it is
    epsilon-greedy with ``epsilon``, a registered buffer: it travels with the weights, so
    ``update_policy_weights_()`` also brings the current epsilon to worker processes.
    """

    in_keys = ["observation"]
    out_keys = ["action", "action_value"]

    def __init__(self, observation_space: gym.Space, action_space: gym.spaces.Discrete, *,
                 hidden_sizes: Sequence[int] = (256, 256), activation: str = "relu", epsilon: float = 1.0,
                 encoder: str = "auto", normalize_observation: bool = False) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f"DQN needs a Discrete action space, got {action_space!r}")
        self.num_actions = int(action_space.n)
        self.action_offset = int(action_space.start)
        encoder = resolve_encoder(encoder, observation_space)
        self.obs_norm = observation_norm(observation_space, normalize_observation, encoder)
        features = make_encoder(encoder, observation_space)
        head = mlp(features.out_features, hidden_sizes, self.num_actions, activation)
        self.q_net = head if encoder == "mlp" else nn.Sequential(features, head)  # trained with the head
        self._float_input = encoder == "mlp"  # the other encoders convert (and scale images) themselves
        self.register_buffer("epsilon", torch.tensor(float(epsilon)))

    def q_values(self, observation) -> torch.Tensor:
        if self.obs_norm is not None:
            observation = self.obs_norm(observation)
        return self.q_net(observation.float() if self._float_input else observation)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        q_values = self.q_values(tensordict.get("observation"))
        action = q_values.argmax(-1)
        if interaction_type() not in DETERMINISTIC:
            explore = torch.rand(action.shape, device=action.device) < self.epsilon
            random_action = torch.randint(self.num_actions, action.shape, device=action.device)
            action = torch.where(explore, random_action, action)
        tensordict.set("action", action + self.action_offset if self.action_offset else action)
        if not actions_only():  # an evaluation reads the action alone
            tensordict.set("action_value", q_values)
        return tensordict


def linear_epsilon(frames: int, *, start: float, end: float, decay_frames: int) -> float:
    """Epsilon decaying linearly from ``start`` to ``end`` over ``decay_frames`` frames."""
    if decay_frames <= 0:
        return end
    return end + (start - end) * max(0.0, 1.0 - frames / decay_frames)
