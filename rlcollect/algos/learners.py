"""Learners: an algorithm bound to the buffer it learns from, one ``learn`` call per batch.

The contract every learner honours (docs/configuration.md, "Algorithms"), so the pipeline
builds any of them, a user's own included, from ``algo._target_`` alone:

    class attributes  replay          True: the collector writes into the learner's replay
                                      buffer (off-policy); False: each batch is handed to
                                      ``learn`` and kept in a rollout buffer (on-policy)
                      policy_classes  the policy modules it can train (empty: any)
    constructor       (policy, buffer, *, <the algo node's keys>, [total_frames],
                      [observation_space], [action_space]): the pipeline passes the
                      runtime arguments the constructor names
    learn(batch, frames) -> metrics;  state_dict() / load_state_dict(state)

The buffer is the one the learner asks for: a ReplayBuffer (``buffer`` group, sampling
``algo.batch_size``, n-step with ``algo.n_step``) for a replay learner, written by the
collector; else a RolloutBuffer sized ``[envs, T + 1]`` for the collector's batches.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from tensordict import TensorDictBase

from rlcollect.moved import moved_getattr


class Learner(ABC):
    """What the training loop drives: ``learn`` once per collected batch (see the module
    docstring for the contract a learner class honours)."""

    replay: ClassVar[bool] = False
    policy_classes: ClassVar[tuple[type, ...]] = ()

    @abstractmethod
    def learn(self, batch: TensorDictBase | None, frames: int) -> dict[str, float]:
        """Take in a collected batch (None: the collector wrote it into the buffer itself)
        after ``frames`` frames in total; update the policy; return metrics."""

    @abstractmethod
    def state_dict(self) -> dict:
        """What a checkpoint needs to continue learning (optimizer, target net, buffer)."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state_dict()``'s output."""


def update_observation_norm(policy, observation: torch.Tensor, sample_mask: torch.Tensor | None = None) -> None:
    """Fold a batch's observations into the policy's RunningNorm, if it has one (the
    statistics then reach the workers with the next weight update); ``sample_mask`` (a
    stacked sample's SAMPLE_MASK): each member's real samples alone."""
    norm = getattr(policy, "obs_norm", None)
    if norm is None:
        return
    if sample_mask is None:
        norm.update(observation)
    else:
        norm.update(observation, sample_mask)


def sample_mean(values: torch.Tensor, sample_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean over the last (sample) dim; with ``sample_mask`` (SAMPLE_MASK of a stacked
    sample padded to one size), each member's mean over its real samples."""
    if sample_mask is None:
        return values.mean(-1)
    weight = sample_mask.to(values.dtype)
    return (values * weight).sum(-1) / weight.sum(-1)


def replay_state(replay_buffer) -> dict:
    """A replay buffer's state for a checkpoint: its position, and its contents unless they
    live in memory-mapped files that outlast the process (a RayReplayBuffer keeps its
    storage in its actor: its contents are always included)."""
    from rlcollect.buffers import LazyMemmapStorage

    in_files = isinstance(getattr(replay_buffer, "storage", None), LazyMemmapStorage)
    return replay_buffer.state_dict(include_storage=not in_files)


__getattr__ = moved_getattr(__name__)  # PPOLearner and DQNLearner moved beside their algorithms
