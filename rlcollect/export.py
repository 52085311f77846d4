"""Standalone policy files: the deterministic policy as TorchScript (``torch.jit.load`` alone
runs it) or ONNX (onnxruntime alone runs it). docs/deploy.md describes the files.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import warnings
from pathlib import Path
from typing import Dict, List, Mapping, Tuple

import torch
from torch import Tensor, nn

from rlcollect.errors import ConfigError, MissingDependencyError
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.encoders import Flatten, MultiInputEncoder, NatureCNN, OneHot
from rlcollect.modules.q_network import QValuePolicy
from rlcollect.modules.recurrent import GRUModule
from rlcollect.modules.sac import SACActor

__all__ = ["DeployedDictPolicy", "DeployedGRUPolicy", "DeployedLSTMPolicy", "DeployedPolicy", "FORMATS", "deployable",
           "export_onnx", "export_policy", "export_torchscript"]

FORMATS = ("torchscript", "onnx")
Observation = Tensor | Mapping[str, Tensor]


def deployable(policy: nn.Module) -> DeployedPolicy:
    """A plain torch module computing ``policy``'s deterministic action (what the policy
    writes under a deterministic interaction type), normalisation and encoder inside:
    ``forward(observation, *states) -> (action, head, *next_states)``, see DeployedPolicy
    and its subclasses. It shares ``policy``'s parameters and buffers. Raises ConfigError
    for a policy it cannot express (other than ActorCritic, RecurrentActorCritic,
    QValuePolicy and SACActor)."""
    if isinstance(policy, RecurrentActorCritic):
        if isinstance(policy.encoder, MultiInputEncoder):
            raise ConfigError("export of a recurrent policy takes one observation tensor: a Dict / Tuple observation "
                              "is not supported (export a feed-forward policy, or flatten the observation)")
        deployed_class = DeployedGRUPolicy if isinstance(policy.rnn, GRUModule) else DeployedLSTMPolicy
        return deployed_class(policy.rnn, _encoder(policy.encoder), *_actor_parts(policy.heads))
    if isinstance(policy, ActorCritic):
        parts = _actor_parts(policy)
    elif isinstance(policy, QValuePolicy):
        has_encoder = not isinstance(policy.q_net[0], nn.Linear)  # encoder "mlp": q_net is the head alone
        encoder = _encoder(policy.q_net[0]) if has_encoder else _FloatFeatures()
        head = policy.q_net[1] if has_encoder else policy.q_net
        parts = (_with_norm(policy.obs_norm, encoder), head, True, policy.action_offset)
    elif isinstance(policy, SACActor):  # head: the Gaussian mean; action: its tanh scaled to the bounds
        parts = (_with_norm(policy.obs_norm, _encoder(policy.encoder)), _SACMean(policy.trunk), False, 0,
                 _TanhSquash(policy.action_scale, policy.action_bias))
    else:
        raise ConfigError(f"export supports ActorCritic, RecurrentActorCritic, QValuePolicy and SACActor policies, "
                          f"got {type(policy).__name__}")
    deployed_class = DeployedDictPolicy if isinstance(parts[0], _DictFeatures) else DeployedPolicy
    return deployed_class(*parts)


def export_torchscript(policy: nn.Module, path: str | Path, example_observation: Observation) -> Path:
    """Write ``deployable(policy)`` to ``path`` as TorchScript: scripted, or traced where
    scripting fails, and checked against the module on other batch sizes.
    ``example_observation``: a batch (batch dim first; a dict of entries for a Dict / Tuple
    observation)."""
    module = _snapshot(policy)
    inputs = _example_inputs(module, example_observation)
    try:
        exported = torch.jit.script(module)
    except Exception:  # TorchScript rejects what it cannot compile with many exception types
        with torch.no_grad():
            exported = torch.jit.trace(module, inputs, check_trace=False)
    _check_batch_sizes(module, exported, inputs)
    path = Path(path)
    torch.jit.save(exported, str(path))
    return path


def export_onnx(policy: nn.Module, path: str | Path, example_observation: Observation) -> Path:
    """Write ``deployable(policy)`` to ``path`` as one ONNX file with a dynamic batch dim
    (torch.export-based exporter); a Dict / Tuple observation is one input per entry.
    ``example_observation`` as in export_torchscript."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise MissingDependencyError("ONNX export needs onnx and onnxscript: pip install 'rlcollect[export]'") from None
    module = _snapshot(policy)
    clash = set(module.input_names) & set(module.output_names)
    if clash:
        raise ConfigError(f"ONNX export: observation entries may not be named as outputs, got {sorted(clash)}")
    inputs = _example_inputs(module, example_observation)
    if _flat(inputs)[0].shape[0] < 2:  # torch.export fixes a dim of size 1: export on a batch of 2
        inputs = tuple(_rows(x, 2) for x in inputs)
    # keyword inputs: torch.onnx.export reads a dict last in a positional tuple as keyword arguments
    kwargs = dict(zip(inspect.signature(module.forward).parameters, inputs))
    batch = torch.export.Dim("batch")
    dynamic_shapes = {key: {name: {0: batch} for name in x} if isinstance(x, dict) else {0: batch}
                      for key, x in kwargs.items()}
    path = Path(path)
    with torch.no_grad(), warnings.catch_warnings(), quiet_logger("torch.onnx"):
        # torch.export's notices about its own internals (and torchvision's operators, which a
        # policy never uses): nothing the caller can act on
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(module, (), str(path), kwargs=kwargs, input_names=module.input_names,
                          output_names=module.output_names, dynamic_shapes=dynamic_shapes, dynamo=True,
                          external_data=False, verbose=False)
    return path


@contextlib.contextmanager
def quiet_logger(name: str, level: int = logging.ERROR):
    """The logger ``name`` (and those under it) at ``level`` inside the block."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def export_policy(policy: nn.Module, path: str | Path, format: str, example_observation: Observation) -> Path:
    """``export_torchscript`` or ``export_onnx``, by ``format`` (FORMATS)."""
    if format not in FORMATS:
        raise ConfigError(f"export format must be one of {FORMATS}, got {format!r}")
    export = export_torchscript if format == "torchscript" else export_onnx
    return export(policy, path, example_observation)


class DeployedPolicy(nn.Module):
    """``forward(observation [batch, ...]) -> (action, head)``: the deterministic action
    (int64 ``[batch]`` for Discrete, space.start added; the mean for Box; for SACActor
    ``tanh(mean) * action_scale + action_bias``) and the output it is read from (logits,
    Gaussian mean or Q-values; for SACActor the Gaussian mean before the tanh squash).

    ``squash``: None, or the module mapping a Box head to the action (SACActor's tanh
    scaled to the action bounds)."""

    def __init__(self, features: nn.Module, actor: nn.Module, discrete: bool, action_offset: int,
                 squash: nn.Module | None = None) -> None:
        super().__init__()
        self.features, self.actor = features, actor
        self.discrete, self.action_offset = discrete, action_offset
        self.squash = squash
        self.input_names = ["observation"]
        self.output_names = ["action", "head"]

    def forward(self, observation: Tensor) -> Tuple[Tensor, Tensor]:
        return self.act(self.features(observation))

    def act(self, features: Tensor) -> Tuple[Tensor, Tensor]:
        """(action, head) from the encoded features."""
        head = self.actor(features)
        if not self.discrete:
            return (head if self.squash is None else self.squash(head)), head
        index = head.argmax(-1)
        return (index + self.action_offset if self.action_offset != 0 else index), head


class DeployedDictPolicy(DeployedPolicy):
    """``forward(observation: Dict[str, Tensor]) -> (action, head)`` for a Dict / Tuple
    observation: one ``[batch, ...]`` tensor per entry (Tuple entries named "0", "1", ...)."""

    def __init__(self, features: _DictFeatures, actor: nn.Module, discrete: bool, action_offset: int,
                 squash: nn.Module | None = None) -> None:
        super().__init__(features, actor, discrete, action_offset, squash)
        self.input_names = list(features.names)

    def forward(self, observation: Dict[str, Tensor]) -> Tuple[Tensor, Tensor]:
        return self.act(self.features(observation))


class DeployedGRUPolicy(DeployedPolicy):
    """``forward(observation [batch, in], recurrent_state [batch, L, H]) -> (action, head,
    next_recurrent_state)``: one step of a GRU policy (zeros for the state at an episode start)."""

    def __init__(self, rnn: nn.Module, encoder: nn.Module, features: nn.Module, actor: nn.Module, discrete: bool,
                 action_offset: int) -> None:
        super().__init__(features, actor, discrete, action_offset)
        self.encoder, self.layers = encoder, rnn.layers
        self.num_layers, self.hidden_size = rnn.num_layers, rnn.hidden_size
        self.input_names = ["observation", "recurrent_state"]
        self.output_names = ["action", "head", "next_recurrent_state"]

    def forward(self, observation: Tensor, recurrent_state: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        inputs = self.encoder(observation).to(recurrent_state.dtype).unsqueeze(1)
        states: List[Tensor] = []
        for index, layer in enumerate(self.layers):
            inputs, hidden = layer(inputs, recurrent_state[:, index].unsqueeze(0).contiguous())
            states.append(hidden.squeeze(0))
        action, head = self.act(self.features(inputs.squeeze(1)))
        return action, head, torch.stack(states, -2)


class DeployedLSTMPolicy(DeployedPolicy):
    """``forward(observation [batch, in], recurrent_state_h, recurrent_state_c [batch, L, H])
    -> (action, head, next_recurrent_state_h, next_recurrent_state_c)``: one step of an LSTM
    policy (zeros for both states at an episode start)."""

    def __init__(self, rnn: nn.Module, encoder: nn.Module, features: nn.Module, actor: nn.Module, discrete: bool,
                 action_offset: int) -> None:
        super().__init__(features, actor, discrete, action_offset)
        self.encoder, self.layers = encoder, rnn.layers
        self.num_layers, self.hidden_size = rnn.num_layers, rnn.hidden_size
        self.input_names = ["observation", "recurrent_state_h", "recurrent_state_c"]
        self.output_names = ["action", "head", "next_recurrent_state_h", "next_recurrent_state_c"]

    def forward(self, observation: Tensor, recurrent_state_h: Tensor, recurrent_state_c: Tensor
                ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        inputs = self.encoder(observation).to(recurrent_state_h.dtype).unsqueeze(1)
        hs: List[Tensor] = []
        cs: List[Tensor] = []
        for index, layer in enumerate(self.layers):
            h0 = recurrent_state_h[:, index].unsqueeze(0).contiguous()
            c0 = recurrent_state_c[:, index].unsqueeze(0).contiguous()
            inputs, (hidden, cell) = layer(inputs, (h0, c0))
            hs.append(hidden.squeeze(0))
            cs.append(cell.squeeze(0))
        action, head = self.act(self.features(inputs.squeeze(1)))
        return action, head, torch.stack(hs, -2), torch.stack(cs, -2)


# The encoders' computations on a batch, written so that TorchScript compiles them.

class _ImageFeatures(nn.Module):
    """NatureCNN on ``[batch, C, H, W]`` (or ``[batch, H, W, C]``, as the env gives it)."""

    def __init__(self, cnn: NatureCNN) -> None:
        super().__init__()
        self.conv, self.head, self.scale = cnn.conv, cnn.head, float(cnn.scale)
        self.channels_last = bool(cnn.channels_last)  # an [H, W, C] image: channels moved first

    def forward(self, image: Tensor) -> Tensor:
        if self.channels_last:
            image = image.movedim(-1, -3)
        return self.head(self.conv(image.float() * self.scale))


class _OneHotFeatures(nn.Module):
    """OneHot on a Discrete ``[batch]`` or MultiDiscrete ``[batch, n]`` entry."""

    def __init__(self, encoder: OneHot) -> None:
        super().__init__()
        self.scalar, self.sizes, self.starts = encoder.scalar, list(encoder.sizes), list(encoder.starts)

    def forward(self, x: Tensor) -> Tensor:
        values = x.unsqueeze(-1) if self.scalar else x
        parts = [nn.functional.one_hot(values[..., i].long() - self.starts[i], self.sizes[i]).float()
                 for i in range(len(self.sizes))]
        return torch.cat(parts, -1)


class _BinaryFeatures(nn.Module):
    """OneHot on a MultiBinary entry: its values as floats, flattened."""

    def __init__(self, encoder: OneHot) -> None:
        super().__init__()
        self.dims = encoder.binary_dims

    def forward(self, x: Tensor) -> Tensor:
        return x.float().flatten(-self.dims)


class _DictFeatures(nn.Module):
    """MultiInputEncoder on a ``Dict[str, Tensor]`` (one level)."""

    def __init__(self, encoders: Dict[str, nn.Module]) -> None:
        super().__init__()
        self.encoders = nn.ModuleDict(encoders)
        self.names = list(encoders)

    def forward(self, observation: Dict[str, Tensor]) -> Tensor:
        parts: List[Tensor] = []
        for name, encoder in self.encoders.items():
            parts.append(encoder(observation[name]))
        return torch.cat(parts, -1)


class _FloatFeatures(nn.Module):
    """QValuePolicy's input with encoder "mlp": the observation as float32."""

    def forward(self, x: Tensor) -> Tensor:
        return x.float()


class _SACMean(nn.Module):
    """SACActor's Gaussian mean (before the squash) from the features: the first half of
    its trunk's output, as ``SACActor.distribution`` reads it."""

    def __init__(self, trunk: nn.Module) -> None:
        super().__init__()
        self.trunk = trunk

    def forward(self, features: Tensor) -> Tensor:
        return self.trunk(features).chunk(2, -1)[0]


class _TanhSquash(nn.Module):
    """SACActor's deterministic action from its mean: ``tanh(mean) * action_scale +
    action_bias`` (the policy's buffers, shared)."""

    def __init__(self, action_scale: Tensor, action_bias: Tensor) -> None:
        super().__init__()
        self.register_buffer("action_scale", action_scale)
        self.register_buffer("action_bias", action_bias)

    def forward(self, mean: Tensor) -> Tensor:
        return torch.tanh(mean) * self.action_scale + self.action_bias


def _actor_parts(policy: ActorCritic) -> tuple[nn.Module, nn.Module, bool, int]:
    features = _with_norm(policy.obs_norm, _encoder(policy.encoder))
    return features, policy.actor, policy.discrete, policy.action_offset if policy.discrete else 0


def _with_norm(obs_norm: nn.Module | None, encoder: nn.Module) -> nn.Module:
    return encoder if obs_norm is None else nn.Sequential(obs_norm, encoder)


def _encoder(encoder: nn.Module, nested: bool = False) -> nn.Module:
    if isinstance(encoder, MultiInputEncoder):
        if nested:
            raise ConfigError("export does not support a Dict / Tuple observation nested in another: flatten the "
                              "inner one (e.g. with gymnasium.wrappers.FlattenObservation)")
        return _DictFeatures({name: _encoder(child, nested=True) for name, child in encoder.encoders.items()})
    if isinstance(encoder, NatureCNN):
        return _ImageFeatures(encoder)
    if isinstance(encoder, OneHot):
        return _BinaryFeatures(encoder) if encoder.binary_dims else _OneHotFeatures(encoder)
    if isinstance(encoder, Flatten):
        return encoder
    raise ConfigError(f"export does not support the observation encoder {type(encoder).__name__}")


def _snapshot(policy: nn.Module) -> DeployedPolicy:
    """A CPU copy of ``deployable(policy)`` in eval mode (``policy`` itself is left as it is)."""
    return copy.deepcopy(deployable(policy)).cpu().eval()


def _example_inputs(module: DeployedPolicy, observation: Observation) -> tuple:
    """``module``'s inputs for the batch ``observation``: the observation (a dict for a
    DeployedDictPolicy) and, for a recurrent policy, zero states."""
    if isinstance(module, DeployedDictPolicy):
        if not isinstance(observation, Mapping) or set(observation) != set(module.input_names):
            raise ConfigError(f"export: the example observation must be a dict of the entries {module.input_names}, "
                              f"got {type(observation).__name__}")
        # copies: torch.export would take one tensor given for two entries for one input
        inputs: tuple = ({name: torch.as_tensor(observation[name]).cpu().clone() for name in module.input_names},)
    elif isinstance(observation, Mapping):
        raise ConfigError("export: the policy takes one observation tensor, the example observation is a dict")
    else:
        inputs = (torch.as_tensor(observation).cpu(),)
    batch = _flat(inputs)[0].shape[:1]
    if isinstance(module, (DeployedGRUPolicy, DeployedLSTMPolicy)):
        shape, dtype = (*batch, module.num_layers, module.hidden_size), module.layers[0].weight_ih_l0.dtype
        # one tensor per state: torch.export would take a tensor passed twice for one input
        inputs += tuple(torch.zeros(shape, dtype=dtype) for _ in module.input_names[1:])
    with torch.no_grad():
        action = module(*inputs)[0]
    if action.shape[:1] != batch:
        raise ConfigError("export: the example observation needs a batch dim first (a batch of 1 for one observation)")
    return inputs


def _flat(inputs: tuple) -> tuple[Tensor, ...]:
    """``inputs`` with a dict observation spread into its entries."""
    first, *rest = inputs
    return (*(first.values() if isinstance(first, dict) else (first,)), *rest)


def _check_batch_sizes(module: nn.Module, exported: nn.Module, inputs: tuple) -> None:
    """Raise if ``exported`` computes other outputs than ``module`` on a batch of 1 and one of
    twice the example's size."""
    for size in (1, 2 * _flat(inputs)[0].shape[0]):
        resized = tuple(_rows(x, size) for x in inputs)
        with torch.no_grad():
            expected, actual = module(*resized), exported(*resized)
        if not all(torch.equal(a, b) for a, b in zip(expected, actual)):
            raise RuntimeError(f"the TorchScript policy differs from the policy on a batch of {size}")


def _rows(x: Tensor | dict, size: int) -> Tensor | dict:
    """A batch of ``size`` rows of ``x`` (its rows cycled)."""
    if isinstance(x, dict):
        return {name: _rows(value, size) for name, value in x.items()}
    return x[torch.arange(size) % x.shape[0]]
