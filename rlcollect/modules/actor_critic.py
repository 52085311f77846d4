"""MLP actor-critic for Discrete and Box action spaces, as a TensorDict module (and its recurrent
version: an encoder, a GRU or LSTM, then the same heads)."""
from __future__ import annotations

import math
from typing import Sequence

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase, interaction_type
from torch import nn

from rlcollect.acting import actions_only
from rlcollect.choices import RNN_TYPES
from rlcollect.errors import ConfigError
from rlcollect.modules import distributions as D
from rlcollect.modules.encoders import RunningNorm, make_encoder, resolve_encoder

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}  # choices.ACTIVATIONS' torch classes (a test pins them)
ENCODED_KEY = "encoded_observation"  # RecurrentActorCritic: the rnn's input (the encoder's features)
DETERMINISTIC = (InteractionType.DETERMINISTIC, InteractionType.MODE, InteractionType.MEAN, InteractionType.MEDIAN)


def mlp(in_features: int, hidden_sizes: Sequence[int], out_features: int, activation: str = "tanh",
        output_gain: float = 1.0) -> nn.Sequential:
    """Linear layers with orthogonal init (gain sqrt(2) hidden, ``output_gain`` last)."""
    if activation not in ACTIVATIONS:
        raise ConfigError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    layers: list[nn.Module] = []
    sizes = [in_features, *hidden_sizes]
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [_orthogonal(nn.Linear(fan_in, fan_out), math.sqrt(2)), ACTIVATIONS[activation]()]
    layers.append(_orthogonal(nn.Linear(sizes[-1], out_features), output_gain))
    return nn.Sequential(*layers)


def observation_norm(space: gym.Space, normalize: bool, encoder: str) -> RunningNorm | None:
    """A RunningNorm for a flat Box observation, when asked for (None otherwise)."""
    if not normalize:
        return None
    if encoder != "mlp" or not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ConfigError(f"normalize_observation applies to flat Box observations (encoder 'mlp'), got {space!r} "
                          f"with encoder {encoder!r}")
    return RunningNorm(tuple(space.shape))


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(TensorDictModuleBase):
    """Separate actor and critic MLPs over the features of ``"observation"``
    (``observation_key``).

    Writes ``"action"`` (sampled, or the mode under a deterministic interaction type),
    ``"action_log_prob"`` and ``"state_value"``; under ``set_actions_only`` (an
    evaluation) the action alone, the same action. Discrete spaces get a categorical head
    (int64 actions); Box spaces a diagonal Gaussian with a state-independent log-std.

    Args:
        encoder: "auto" (the default: cnn for images, mlp for a flat Box, multi_input
            otherwise), "mlp" (a flat Box, as is), "cnn" (an image: the Nature-DQN encoder, shared
            by the actor and the critic; use hidden_sizes=() for linear heads, as cleanrl's
            Atari PPO) or "multi_input" (Dict / Tuple / Discrete observations:
            modules/encoders.py).
        normalize_observation: a RunningNorm (``obs_norm``) in front of a flat Box encoder;
            the trainer updates it from each batch (``obs_norm.update``), its statistics
            travel with the weights.
    """

    out_keys = ["action", "action_log_prob", "state_value"]
    # where actions are sampled from: torch's global generator (None), or, for the stacked
    # policy of a batched sweep (rlcollect.sweeps), one torch.Generator per member
    generators = None

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
                 log_std_init: float = 0.0, observation_key: str = "observation", encoder: str = "auto",
                 normalize_observation: bool = False) -> None:
        super().__init__()
        self.observation_key = observation_key
        self.in_keys = [observation_key]
        encoder = resolve_encoder(encoder, observation_space)
        self.obs_norm = observation_norm(observation_space, normalize_observation, encoder)
        self.encoder = make_encoder(encoder, observation_space)  # no parameters for "mlp": the MLPs are the model
        obs_dim = self.encoder.out_features
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            self.action_offset = int(action_space.start)
            self.actor = mlp(obs_dim, hidden_sizes, int(action_space.n), activation, output_gain=0.01)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            action_dim = action_space.shape[0]
            self.actor = mlp(obs_dim, hidden_sizes, action_dim, activation, output_gain=0.01)
            self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))
        else:
            raise ConfigError(f"PPO's ActorCritic needs a Discrete or flat Box action space, got {action_space!r}")
        self.critic = mlp(obs_dim, hidden_sizes, 1, activation, output_gain=1.0)

    def features(self, observation) -> torch.Tensor:
        """The float features the heads read (normalised, encoded)."""
        if self.obs_norm is not None:
            observation = self.obs_norm(observation)
        return self.encoder(observation)

    def value(self, observation) -> torch.Tensor:
        """V(observation), without a trailing singleton dim."""
        return self.critic(self.features(observation)).squeeze(-1)

    def state_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        """V of each step of ``tensordict``."""
        return self.value(tensordict.get(self.observation_key))

    def evaluate(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value) of the steps' ``"action"`` under the current weights."""
        return self.evaluate_actions(tensordict.get(self.observation_key), tensordict.get("action"))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key, value in self.act(tensordict.get(self.observation_key)).items():
            tensordict.set(key, value)
        return tensordict

    def act(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        """What ``forward`` writes for ``observation`` (a tensor), by key: the action, and
        unless ``actions_only()`` its log-prob and the state value."""
        observation = self.features(observation)
        head = self.actor(observation)
        deterministic = interaction_type() in DETERMINISTIC
        if self.discrete:
            index = head.argmax(-1) if deterministic else D.categorical_sample(head, self.generators)
            action = index + self.action_offset if self.action_offset else index
        else:
            action = head if deterministic else D.normal_sample(head, self.log_std, self.generators)
        if actions_only():  # an evaluation: neither the log-prob nor the critic is read
            return {"action": action}
        if self.discrete:
            log_prob = D.categorical_log_prob(head, index)
        else:
            log_prob = D.normal_log_prob(head, self.log_std, action)
        return {"action": action, "action_log_prob": log_prob, "state_value": self.critic(observation).squeeze(-1)}

    def evaluate_actions(self, observation: torch.Tensor, action: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value) of ``action`` under the current weights."""
        observation = self.features(observation)
        head = self.actor(observation)
        if self.discrete:
            index = action - self.action_offset if self.action_offset else action
            log_prob, entropy = D.categorical_log_prob(head, index), D.categorical_entropy(head)
        else:
            log_prob = D.normal_log_prob(head, self.log_std, action)
            entropy = D.normal_entropy(self.log_std, head.shape[:-1])
        return log_prob, entropy, self.critic(observation).squeeze(-1)


class RecurrentActorCritic(TensorDictModuleBase):
    """An observation encoder, then a GRU or LSTM over its features, feeding an ActorCritic's
    actor and critic heads.

    Collection runs step mode: the hidden state comes in as ``"recurrent_state"`` (LSTM:
    ``"recurrent_state_h"``, ``"recurrent_state_c"``), which the collector adds (zeros) and
    carries from step to step (it finds ``self.rnn.make_tensordict_primer()``). Training evaluates whole
    sequences in recurrent mode from the stored states (``evaluate``), so gradients flow
    through time within each sequence.

    The encoder runs step by step in both modes (it has no memory); its features reach the
    rnn as ``ENCODED_KEY`` of a tensordict of the rnn's own, so they are not written into
    the caller's tensordict (nor stored in batches). The rnn writes ``"features"`` and the
    next hidden states into it, as before.

    Args:
        encoder: as ActorCritic's: "auto" (the default: cnn for images, mlp for a flat Box,
            multi_input otherwise), "mlp" (a flat Box: the GRU reads the observation as
            floats, with no parameters in front: the same parameters and outputs as before
            the encoder argument), "cnn" or "multi_input" (modules/encoders.py).
    """

    out_keys = ["features", "action", "action_log_prob", "state_value"]

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, rnn: str = "gru",
                 hidden_size: int = 64, num_layers: int = 1, hidden_sizes: Sequence[int] = (64,),
                 activation: str = "tanh", log_std_init: float = 0.0, encoder: str = "auto") -> None:
        from rlcollect.modules.recurrent import GRUModule, LSTMModule

        super().__init__()
        if rnn not in RNN_TYPES:
            raise ConfigError(f"rnn must be {' or '.join(map(repr, RNN_TYPES))}, got {rnn!r}")
        self.encoder = make_encoder(encoder, observation_space)  # Flatten (no parameters) for a flat Box
        states = ("recurrent_state",) if rnn == "gru" else ("recurrent_state_h", "recurrent_state_c")
        self.rnn = (GRUModule if rnn == "gru" else LSTMModule)(
            self.encoder.out_features, hidden_size, num_layers, in_keys=(ENCODED_KEY, *states, "is_init"),
            out_keys=("features", *(("next", key) for key in states)))
        features = gym.spaces.Box(-1.0, 1.0, (hidden_size,))
        self.heads = ActorCritic(features, action_space, hidden_sizes=hidden_sizes, activation=activation,
                                 log_std_init=log_std_init, observation_key="features")
        self.in_keys = ["observation", *self.rnn.in_keys[1:]]

    @property
    def generators(self):
        """Where the heads sample actions from (ActorCritic.generators)."""
        return self.heads.generators

    @generators.setter
    def generators(self, value) -> None:
        self.heads.generators = value

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        features = self._features(tensordict, strict=False)
        for key in self.rnn.out_keys:
            tensordict.set(key, features.get(key))
        return self.heads(tensordict)

    def _features(self, tensordict: TensorDictBase, strict: bool) -> TensorDictBase:
        """The rnn run (in the current mode) on ``tensordict``'s encoded observation, hidden
        states and is_init: a new tensordict holding its ``out_keys``."""
        inputs = tensordict.select(*self.rnn.in_keys[1:], strict=strict)
        inputs.set(ENCODED_KEY, self.encoder(tensordict["observation"]))
        return self.rnn(inputs)

    def _features_in(self, tensordict: TensorDictBase, mode: str) -> TensorDictBase:
        from rlcollect.modules.recurrent import set_recurrent_mode

        with set_recurrent_mode(mode):
            return self._features(tensordict, strict=mode == "recurrent")

    def state_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        """V of each step, from its observation and stored hidden state (one step each)."""
        return self.heads.state_value(self._features_in(tensordict, "step"))

    def evaluate(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value) of a flat batch of sequences (the 1-D layout: each
        restarts from its stored hidden state where ``is_init``), in recurrent mode."""
        features = self._features_in(tensordict, "recurrent")
        features.set("action", tensordict.get("action"))
        return self.heads.evaluate(features)
