"""Observation encoders: what turns an observation (a tensor, or a nested TensorDict for a
Dict / Tuple space) into a flat float feature vector for the policy's heads.

    mlp          a flat Box: the observation itself (the heads are MLPs)
    cnn          an image Box, [C, H, W] or [H, W, C] (uint8 scaled to [0, 1] inside): the
                 Nature-DQN encoder (3 conv layers, then 512 features)
    multi_input  a Dict / Tuple space: one encoder per entry (cnn for images, flatten for
                 other Boxes, one-hot for Discrete, MultiDiscrete and MultiBinary), concatenated

Which 3-d Box is an image (``image_layout``; smaller arrays are flattened):

    [C, H, W]   H >= 36 and W >= 36 (the Nature CNN's smallest input), any C: as before
    [H, W, C]   1 <= C <= 4 (gray, gray + alpha, RGB, RGBA or 4 stacked gray frames) and
                H >= 36 and W >= 36: gymnasium's usual layout (a 96 x 96 x 3 uint8 Box)

No shape is both: [C, H, W] needs a last dim >= 36, [H, W, C] one <= 4. So every shape has
one reading, e.g. [64, 64, 3] is [H, W, C] and [4, 84, 84] is [C, H, W]. The CNN permutes
an [H, W, C] image to [C, H, W] inside (``NatureCNN.channels_last``): stored observations
keep the env's layout.

``RunningNorm`` normalises observations inside the policy: its statistics are buffers, so
they travel with the weights to every worker and into every checkpoint.
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase
from torch import nn

from rlcollect.choices import ENCODERS
from rlcollect.envs.spaces import subspaces
from rlcollect.errors import ConfigError


class RunningNorm(nn.Module):
    """``(x - running_mean) / sqrt(running_var + eps)``, clipped to ``[-clip, clip]``.

    ``running_mean``, ``running_var`` and ``count`` are registered buffers updated by
    ``update(x)`` (the trainer calls it with each batch; the parallel algorithm of Chan et
    al., as SB3's VecNormalize): the forward pass never changes them, so evaluation and the
    workers use the statistics as last synced.
    """

    def __init__(self, shape: tuple[int, ...], eps: float = 1e-8, clip: float = 10.0) -> None:
        super().__init__()
        self.eps, self.clip = eps, clip
        self.register_buffer("running_mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("running_var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold the samples ``x`` (``[..., *shape]``) into the statistics."""
        x = x.reshape(-1, *self.running_mean.shape).to(torch.float64)
        batch_mean, batch_var, batch_count = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        total = self.count + batch_count
        delta = batch_mean - self.running_mean
        self.running_mean += delta * batch_count / total
        m2 = self.running_var * self.count + batch_var * batch_count + delta.pow(2) * self.count * batch_count / total
        self.running_var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normalized = (x - self.running_mean) / torch.sqrt(self.running_var + self.eps)
        return normalized.clamp(-self.clip, self.clip).to(torch.float32)


MIN_IMAGE_SIZE = 36  # the Nature CNN's smallest input (8x8/4, 4x4/2, 3x3/1 convolutions)
MAX_CHANNELS_LAST = 4  # the most channels of an [H, W, C] image
IMAGE_RULE = (f"[C, H, W] with H, W >= {MIN_IMAGE_SIZE}, or [H, W, C] with 1 <= C <= {MAX_CHANNELS_LAST} and "
              f"H, W >= {MIN_IMAGE_SIZE}")


def image_layout(space: gym.Space) -> str | None:
    """"CHW" or "HWC" for an image Box (module docstring: the rule), None otherwise."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
        return None
    first, second, last = space.shape
    if min(second, last) >= MIN_IMAGE_SIZE:
        return "CHW"
    if 1 <= last <= MAX_CHANNELS_LAST and min(first, second) >= MIN_IMAGE_SIZE:
        return "HWC"
    return None


def is_image(space: gym.Space) -> bool:
    """A Box the CNN encodes: [C, H, W] or [H, W, C] (uint8 or float), ``image_layout``."""
    return image_layout(space) is not None


class NatureCNN(nn.Module):
    """Mnih et al. 2015's encoder: [C, H, W] -> 512 features (uint8 pixels / 255 inside).

    An [H, W, C] space (``image_layout``) sets ``channels_last``: the forward pass moves the
    channels first, so the layers are those of the [C, H, W] image.
    """

    def __init__(self, space: gym.spaces.Box, features: int = 512) -> None:
        super().__init__()
        self.channels_last = image_layout(space) == "HWC"
        channels, height, width = (space.shape[2], *space.shape[:2]) if self.channels_last else space.shape
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0  # pixels in [0, 255]: scaled here
        self.conv = nn.Sequential(
            _orthogonal(nn.Conv2d(channels, 32, 8, stride=4)), nn.ReLU(),
            _orthogonal(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            _orthogonal(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.conv(torch.zeros(1, channels, height, width)).shape[-1]
        self.head = nn.Sequential(_orthogonal(nn.Linear(flat, features)), nn.ReLU())
        self.out_features = features

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if self.channels_last:  # [..., H, W, C] -> [..., C, H, W]
            image = image.movedim(-1, -3)
        batch_shape = image.shape[:-3]
        x = image.reshape(-1, *image.shape[-3:]).float() * self.scale
        return self.head(self.conv(x)).reshape(*batch_shape, self.out_features)


class Flatten(nn.Module):
    """A Box entry as float features (its trailing dims flattened)."""

    def __init__(self, space: gym.spaces.Box) -> None:
        super().__init__()
        self.dims = len(space.shape)
        self.out_features = math.prod(space.shape) if space.shape else 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        return x.unsqueeze(-1) if self.dims == 0 else x.flatten(-self.dims)


class OneHot(nn.Module):
    """Discrete -> one-hot; MultiDiscrete -> concatenated one-hots; MultiBinary -> floats."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__()
        self.scalar = isinstance(space, gym.spaces.Discrete)
        self.binary_dims = len(space.shape) if isinstance(space, gym.spaces.MultiBinary) else 0
        if self.scalar:
            self.sizes, self.starts = [int(space.n)], [int(space.start)]
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.sizes = [int(n) for n in space.nvec.reshape(-1)]
            self.starts = [int(start) for start in space.start.reshape(-1)]
        else:
            self.sizes, self.starts = [], []
        self.out_features = math.prod(space.shape) if self.binary_dims else sum(self.sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.binary_dims:
            return x.float().flatten(-self.binary_dims)
        values = x.unsqueeze(-1) if self.scalar else x.flatten(-1) if x.dim() else x
        parts = [nn.functional.one_hot(values[..., i].long() - start, size).float()
                 for i, (size, start) in enumerate(zip(self.sizes, self.starts))]
        return torch.cat(parts, -1)


class MultiInputEncoder(nn.Module):
    """One encoder per entry of a Dict / Tuple observation (nested entries recursively),
    their features concatenated in the space's order."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__()
        self.encoders = nn.ModuleDict({name: leaf_encoder(child) for name, child in subspaces(space).items()})
        self.out_features = sum(encoder.out_features for encoder in self.encoders.values())

    def forward(self, observation: TensorDictBase) -> torch.Tensor:
        return torch.cat([encoder(observation.get(name)) for name, encoder in self.encoders.items()], -1)


def leaf_encoder(space: gym.Space) -> nn.Module:
    """The encoder of one observation entry."""
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return MultiInputEncoder(space)
    if is_image(space):
        return NatureCNN(space)
    if isinstance(space, gym.spaces.Box):
        return Flatten(space)
    return OneHot(space)


def resolve_encoder(kind: str, space: gym.Space) -> str:
    """``kind``, with "auto" resolved from the space: "cnn" for an image Box, "mlp" for a
    flat Box, "multi_input" otherwise (Dict, Tuple, Discrete, other Box shapes)."""
    if kind != "auto":
        return kind
    if is_image(space):
        return "cnn"
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return "mlp"
    return "multi_input"


def make_encoder(kind: str, space: gym.Space) -> nn.Module:
    """The encoder ``kind`` (ENCODERS) for observations of ``space``; a ConfigError when they
    do not fit."""
    kind = resolve_encoder(kind, space)
    if kind == "mlp":
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"model encoder 'mlp' needs a flat Box observation, got {space!r}: use encoder='cnn' "
                              "for images or 'multi_input' for Dict / Tuple / Discrete observations")
        return Flatten(space)
    if kind == "cnn":
        if not is_image(space):
            raise ConfigError(f"model encoder 'cnn' needs an image Box ({IMAGE_RULE}), got {space!r}")
        return NatureCNN(space)
    if kind == "multi_input":
        return MultiInputEncoder(space) if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) else \
            leaf_encoder(space)
    raise ConfigError(f"model encoder must be one of {ENCODERS}, got {kind!r}")


def _orthogonal(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
