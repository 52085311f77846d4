"""The recurrent-state primer: the hidden-state entries a recurrent policy reads, which a
collector's carrier holds per env. A small protocol between the policies (modules/recurrent.py
builds primers) and the collectors (which prime, carry and zero the states), so that neither
imports the other: a policy module exposing ``make_tensordict_primer()`` is recurrent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn


@dataclass(frozen=True)
class HiddenStatePrimer:
    """The hidden-state entries a recurrent module reads, which the carrier must hold.

    ``shapes`` maps each key to its per-step shape ``(num_layers, hidden_size)``.
    """

    shapes: Mapping[NestedKey, tuple[int, ...]]
    dtype: torch.dtype = torch.float32

    @property
    def keys(self) -> list[NestedKey]:
        return list(self.shapes)

    def apply(self, tensordict: TensorDictBase, device: torch.device | str | None = None) -> TensorDictBase:
        """Add a zero entry ``[*batch, *shape]`` for each key ``tensordict`` lacks, in place;
        existing entries are left as they are, so applying twice changes nothing. ``device``
        defaults to the tensordict's, else that of one of its entries, else CPU."""
        if device is None:
            device = tensordict.device
        if device is None:
            device = next((value.device for value in tensordict.values(True, True)), "cpu")
        for key, shape in self.shapes.items():
            if tensordict.get(key, None) is None:
                tensordict.set(key, torch.zeros((*tensordict.batch_size, *shape), dtype=self.dtype, device=device))
        return tensordict

    def zero_(self, tensordict: TensorDictBase, where: torch.Tensor) -> TensorDictBase:
        """Zero, in place, the hidden states at the positions where ``where`` ``[*batch]``
        (bool) is True: the envs that were just reset."""
        where = where.reshape(*where.shape, 1, 1)
        for key in self.shapes:
            tensordict.get(key).masked_fill_(where, 0)
        return tensordict


def policy_primers(policy) -> list[HiddenStatePrimer]:
    """The primers of every submodule of ``policy`` with a ``make_tensordict_primer`` method
    (each module once); ``[]`` for a policy that is not an nn.Module or has none. A policy
    with a ``hidden_state_primers()`` method (one wrapping other policies) names them itself."""
    if not isinstance(policy, nn.Module):
        return []
    own = getattr(policy, "hidden_state_primers", None)
    if callable(own):
        return own()
    primers, owners = [], {}
    for name, module in policy.named_modules():
        if not callable(getattr(module, "make_tensordict_primer", None)):
            continue
        primer = module.make_tensordict_primer()
        for key in primer.keys:
            if key in owners:
                raise ValueError(f"the recurrent submodules {owners[key]!r} and {name!r} of the policy both "
                                 f"read the hidden state {key!r}: give each its own in_keys/out_keys")
            owners[key] = name
        primers.append(primer)
    return primers
