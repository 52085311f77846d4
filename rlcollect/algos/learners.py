"""Learners: an algorithm bound to the buffer it learns from, one ``learn`` call per batch."""
from __future__ import annotations

from typing import Protocol

import torch
from tensordict import TensorDictBase

from rlcollect.algos.dqn import DQN
from rlcollect.algos.ppo import PPO
from rlcollect.buffers.rollout import RolloutBuffer, transition_view
from rlcollect.keys import INDEX
from rlcollect.modules.q_network import linear_epsilon


class Learner(Protocol):
    def learn(self, batch: TensorDictBase | None, frames: int) -> dict[str, float]:
        """Take in a collected batch (None: the collector wrote it into the buffer itself)
        after ``frames`` frames in total; update the policy; return metrics."""

    def state_dict(self) -> dict:
        """What a checkpoint needs to continue learning (optimizer, target net, buffer)."""

    def load_state_dict(self, state: dict) -> None: ...


def update_observation_norm(policy, observation: torch.Tensor) -> None:
    """Fold a batch's observations into the policy's RunningNorm, if it has one (the
    statistics then reach the workers with the next weight update)."""
    norm = getattr(policy, "obs_norm", None)
    if norm is not None:
        norm.update(observation)


class PPOLearner:
    """On-policy: every batch fills the rollout buffer once and is trained on, then dropped."""

    def __init__(self, ppo: PPO, buffer: RolloutBuffer) -> None:
        self.ppo, self.buffer = ppo, buffer

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


class DQNLearner:
    """Off-policy: batches go to the replay buffer; ``gradient_steps`` updates on sampled
    transitions per batch once ``learning_starts`` frames were collected. Epsilon follows a
    linear schedule over frames and is written into the policy (a buffer, synced to workers
    with the weights). With a PrioritizedSampler, every gradient step gives the sampled
    elements their absolute TD errors as new priorities. A RunningNorm in the Q policy
    (normalize_observation) takes in each batch's observations, or, when the collector
    writes into the buffer itself, those of the call's first sample."""

    def __init__(self, dqn: DQN, replay_buffer, *, gradient_steps: int, learning_starts: int,
                 eps_start: float, eps_end: float, eps_decay_frames: int) -> None:
        self.dqn, self.replay_buffer = dqn, replay_buffer
        self.gradient_steps, self.learning_starts = gradient_steps, learning_starts
        self.eps_start, self.eps_end, self.eps_decay_frames = eps_start, eps_end, eps_decay_frames
        self.prioritized = bool(getattr(replay_buffer, "prioritized", False))

    def state_dict(self) -> dict:
        """The DQN state and the replay buffer: its position, and its contents unless they
        live in memory-mapped files that outlast the process."""
        from rlcollect.buffers import LazyMemmapStorage

        # a RayReplayBuffer keeps its storage in its actor: its contents are always included
        in_files = isinstance(getattr(self.replay_buffer, "storage", None), LazyMemmapStorage)
        return {"dqn": self.dqn.state_dict(),
                "replay_buffer": self.replay_buffer.state_dict(include_storage=not in_files)}

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
