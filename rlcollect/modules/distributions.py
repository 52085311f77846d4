"""Action distributions written out in a few tensor ops.

torch.distributions.Categorical costs ~100 us per sample on a small CPU batch (argument
processing, multinomial); Gumbel-max sampling plus an explicit log-softmax is ~10x cheaper
and draws from the same distribution.
"""
from __future__ import annotations

import math

import torch

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def noise(like: torch.Tensor, normal: bool, generators=None) -> torch.Tensor:
    """Standard normal (``normal``) or uniform noise shaped as ``like``: from torch's global
    generator (``generators`` None), or row m of ``like``'s first dim from
    ``generators[m]``, each row drawn exactly as it would be alone (the members of a
    batched sweep: each samples from its own stream, docs/sweeps.md)."""
    if generators is None:
        return torch.randn_like(like) if normal else torch.rand_like(like)
    out = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    for row, generator in zip(out.unbind(0), generators):  # the very draws of torch.randn / torch.rand, in place
        row.normal_(generator=generator) if normal else row.uniform_(generator=generator)
    return out


def categorical_sample(logits: torch.Tensor, generators=None) -> torch.Tensor:
    """argmax(logits + Gumbel noise): an exact sample of Categorical(logits) (``generators``:
    see ``noise``)."""
    uniform = noise(logits, False, generators).clamp_(min=torch.finfo(logits.dtype).tiny)
    return (logits - torch.log(-torch.log(uniform))).argmax(-1)


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1).gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_probs = torch.log_softmax(logits, -1)
    return -(log_probs.exp() * log_probs).sum(-1)


def normal_sample(mean: torch.Tensor, log_std: torch.Tensor, generators=None) -> torch.Tensor:
    return mean + log_std.exp() * noise(mean, True, generators)


def normal_log_prob(mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Log density of a diagonal Gaussian, summed over the action dims."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - LOG_SQRT_2PI).sum(-1)


def normal_entropy(log_std: torch.Tensor, batch_shape: torch.Size) -> torch.Tensor:
    return (log_std + 0.5 + LOG_SQRT_2PI).sum(-1).expand(batch_shape)
