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

from rlcollect.algos.dqn import DQN
from rlcollect.algos.ppo import PPO
from rlcollect.buffers.rollout import RolloutBuffer, transition_view
from rlcollect.keys import INDEX
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.q_network import QValuePolicy, linear_epsilon


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


def update_observation_norm(policy, observation: torch.Tensor) -> None:
    """Fold a batch's observations into the policy's RunningNorm, if it has one (the
    statistics then reach the workers with the next weight update)."""
    norm = getattr(policy, "obs_norm", None)
    if norm is not None:
        norm.update(observation)


def replay_state(replay_buffer) -> dict:
    """A replay buffer's state for a checkpoint: its position, and its contents unless they
    live in memory-mapped files that outlast the process (a RayReplayBuffer keeps its
    storage in its actor: its contents are always included)."""
    from rlcollect.buffers import LazyMemmapStorage

    in_files = isinstance(getattr(replay_buffer, "storage", None), LazyMemmapStorage)
    return replay_buffer.state_dict(include_storage=not in_files)


class PPOLearner(Learner):
    """On-policy: every batch fills the rollout buffer once and is trained on, then dropped.

    Args:
        policy: an ActorCritic or RecurrentActorCritic.
        buffer: the RolloutBuffer ``[envs, T + 1]`` of the collector's batches.
        total_frames: the run's frames (what anneal_lr / anneal_clip anneal over).
        **ppo_options: PPO's own arguments (lr, gamma, gae_lambda, clip_epsilon, epochs,
            minibatch_size, ...: rlcollect.PPO).
    """

    policy_classes = (ActorCritic, RecurrentActorCritic)

    def __init__(self, policy: ActorCritic | RecurrentActorCritic, buffer: RolloutBuffer, *, total_frames: int = -1,
                 **ppo_options) -> None:
        self.ppo, self.buffer = PPO(policy, total_frames=total_frames, **ppo_options), buffer

    def learn(self, batch: TensorDictBase | None, frames: int) -> dict[str, float]:
        """``batch``: a collector batch (copied into the rollout buffer), or the buffer's own
        rollout, already written in place (``Collector.collect(rollout=...)``)."""
        self.buffer.add(batch if batch is self.buffer.rollout else
                        batch.reshape(self.buffer.num_envs, self.buffer.rollout_len))
        metrics = self.ppo.update(self.buffer, frames)
        # after the update, which must see the statistics the rollout was collected with (ratio 1 at its start)
        update_observation_norm(self.ppo.actor_critic, transition_view(self.buffer.rollout).get("observation"))
        return metrics

    def state_dict(self) -> dict:
        return {"ppo": self.ppo.state_dict()}  # the rollout buffer is refilled every batch

    def load_state_dict(self, state: dict) -> None:
        self.ppo.load_state_dict(state["ppo"])


class DQNLearner(Learner):
    """Off-policy: the collector writes into the replay buffer (or batches are written
    there); ``gradient_steps_per_batch`` updates on sampled transitions per batch once
    ``learning_starts`` frames were collected. Epsilon follows a linear schedule over frames
    and is written into the policy (a buffer, synced to workers with the weights). With a
    PrioritizedSampler, every gradient step gives the sampled elements their absolute TD
    errors as new priorities. A RunningNorm in the Q policy (normalize_observation) takes in
    each batch's observations, or, when the collector writes into the buffer itself, those
    of the call's first sample.

    Args:
        policy: a QValuePolicy.
        buffer: the ReplayBuffer.
        **dqn_options: DQN's own arguments (lr, gamma, target_update, ...: rlcollect.DQN).
    """

    replay = True
    policy_classes = (QValuePolicy,)

    def __init__(self, policy: QValuePolicy, buffer, *, gradient_steps_per_batch: int = 1, learning_starts: int = 0,
                 eps_start: float = 1.0, eps_end: float = 0.05, eps_decay_frames: int = 0, **dqn_options) -> None:
        self.dqn, self.replay_buffer = DQN(policy, **dqn_options), buffer
        self.gradient_steps, self.learning_starts = gradient_steps_per_batch, learning_starts
        self.eps_start, self.eps_end, self.eps_decay_frames = eps_start, eps_end, eps_decay_frames
        self.prioritized = bool(getattr(buffer, "prioritized", False))

    def state_dict(self) -> dict:
        """The DQN state and the replay buffer (``replay_state``)."""
        return {"dqn": self.dqn.state_dict(), "replay_buffer": replay_state(self.replay_buffer)}

    def load_state_dict(self, state: dict) -> None:
        self.dqn.load_state_dict(state["dqn"])
        self.replay_buffer.load_state_dict(state["replay_buffer"])

    def learn(self, batch: TensorDictBase | None, frames: int) -> dict[str, float]:
        if batch is not None:
            self.replay_buffer.extend_batch(batch)
            update_observation_norm(self.dqn.q_policy, batch.get("observation"))
        epsilon = linear_epsilon(frames, start=self.eps_start, end=self.eps_end, decay_frames=self.eps_decay_frames)
        self.dqn.q_policy.epsilon.fill_(epsilon)
        metrics: dict[str, float] = {"epsilon": epsilon, "buffer_size": float(len(self.replay_buffer))}
        if frames < self.learning_starts or len(self.replay_buffer) == 0:
            return metrics
        totals: dict[str, torch.Tensor] = {}
        for step in range(self.gradient_steps):
            sample = self.replay_buffer.sample()
            if batch is None and step == 0:  # the new data went straight to the buffer: learn the stats from it
                update_observation_norm(self.dqn.q_policy, sample.get("observation"))
            step_metrics = self.dqn.update(sample)
            td_error = step_metrics.pop("td_error", None)  # per sample: no metric to average
            if self.prioritized:
                self.replay_buffer.update_priority(sample.get(INDEX), td_error)
            for key, value in step_metrics.items():
                totals[key] = totals[key] + value if key in totals else value
        metrics.update({key: value.item() / self.gradient_steps for key, value in totals.items()})
        return metrics
