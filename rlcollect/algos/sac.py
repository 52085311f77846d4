"""Soft actor-critic (Haarnoja et al. 2018, with the automatic entropy tuning of their
follow-up) for continuous (Box) actions, learning from a replay buffer.

    SACLearner   twin Q critics with Polyak-averaged targets, the actor, and alpha (the
                 entropy weight) tuned towards a target entropy of -action_dim; the networks,
                 the actor the collectors run (SACActor) and the critics, are in
                 rlcollect/modules/sac.py

Per gradient step: one critic update on a sampled batch; every ``policy_frequency`` steps,
``policy_frequency`` actor (and alpha) updates, so that actor and critic take as many steps
(the delayed update of cleanrl's sac_continuous_action); the targets move every
``target_network_frequency`` steps. With prioritized replay (a buffer with a
PrioritizedSampler: ``algo.prioritized=true`` or ``buffer/sampler=prioritized``) each
sampled transition's priority becomes its TD error, the mean over the twin critics of
``|Q_i(s, a) - target|`` (before the step), as DQN's. ``algo=sac`` (conf/algo/sac.yaml) and
``experiment=mujoco_sac`` configure it; docs/configuration.md, "Algorithms".
"""
from __future__ import annotations

import copy
import math
from typing import Sequence

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from torch import nn

from rlcollect.algos.learners import Learner, replay_state, sample_mean, update_observation_norm
from rlcollect.algos.optim import Adam
from rlcollect.buffers.transforms import or_next_flags
from rlcollect.keys import INDEX, SAMPLE_MASK, STEPS_TO_NEXT_OBS, WEIGHT
from rlcollect.modules import sac as networks
from rlcollect.moved import moved_getattr


class SACLearner(Learner):
    """SAC from a replay buffer the collector writes into (see the module docstring).

    Args:
        policy: the SACActor the collectors run.
        buffer: the ReplayBuffer (sampling ``algo.batch_size`` transitions); with a
            PrioritizedSampler, every sampled transition's priority becomes its absolute TD
            error (``critic_loss``), as DQN's.
        observation_space, action_space: the env's (the critics are built for them).
        gamma: discount. tau: Polyak step of the target critics.
        actor_lr, critic_lr: Adam learning rates (alpha's is actor_lr).
        alpha: the entropy weight (its start, with ``autotune``).
        autotune: tune alpha towards ``target_entropy`` (None: -action_dim).
        policy_frequency: critic steps per round of actor updates (that many actor updates).
        target_network_frequency: critic steps between target updates.
        gradient_steps_per_batch: gradient steps per collected batch (one per frame keeps
            one update per env step, as the paper).
        learning_starts: no update before this many frames (the collector's first frames
            are random actions).
        critic_hidden_sizes: the critics' MLPs.
        terminal_keys: flags ``("next", key)`` that end the bootstrap as ``terminated`` does.
    """

    replay = True
    policy_classes = (networks.SACActor,)

    def __init__(self, policy: networks.SACActor, buffer, *, observation_space: gym.Space, action_space: gym.spaces.Box,
                 gamma: float = 0.99, tau: float = 0.005, actor_lr: float = 3e-4, critic_lr: float = 1e-3,
                 alpha: float = 0.2, autotune: bool = True, target_entropy: float | None = None,
                 policy_frequency: int = 2, target_network_frequency: int = 1, gradient_steps_per_batch: int = 1,
                 learning_starts: int = 5000, critic_hidden_sizes: Sequence[int] = (256, 256),
                 terminal_keys: Sequence[str] = ()) -> None:
        networks.check_box_actions(action_space, "SAC")
        self.actor, self.replay_buffer = policy, buffer
        self.critics = nn.ModuleList(networks.QCritic(observation_space, policy.action_dim, critic_hidden_sizes,
                                             policy.encoder_kind) for _ in range(2)).to(policy.action_scale.device)
        self.targets = copy.deepcopy(self.critics).requires_grad_(False)
        self.gamma, self.tau = gamma, tau
        self.policy_frequency, self.target_network_frequency = policy_frequency, target_network_frequency
        self.gradient_steps, self.learning_starts = gradient_steps_per_batch, learning_starts
        self.terminal_keys = list(terminal_keys)
        self.actor_optimizer = Adam(policy.parameters(), lr=actor_lr)
        self.critic_optimizer = Adam(self.critics.parameters(), lr=critic_lr)
        self.autotune = autotune
        self.target_entropy = -float(policy.action_dim) if target_entropy is None else float(target_entropy)
        self.log_alpha = torch.tensor(math.log(alpha), device=policy.action_scale.device, requires_grad=autotune)
        self.alpha_optimizer = Adam([self.log_alpha], lr=actor_lr) if autotune else None
        self.updates = 0  # critic steps so far
        self.prioritized = bool(getattr(buffer, "prioritized", False))  # feed the TD errors back as priorities

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def normalized(self, observation):
        """Observations as the critics read them: through the actor's RunningNorm, if any."""
        norm = self.actor.obs_norm
        return observation if norm is None else norm(observation)

    def critic_loss(self, batch: TensorDictBase, *, return_td_error: bool = False):
        """(the twin critics' TD loss, the mean Q of the taken actions); means over the
        sample dim, so a stacked batch ``[S, B]`` (rlcollect.sweeps.member_sac) gives one
        of each per member. With ``return_td_error``, also the per-sample absolute TD error,
        the priorities of prioritized replay: the mean over the twin critics of
        ``|Q_i(s, a) - target|``, from the same Q values and target as the loss, detached
        (``[B]``, or ``[S, B]``)."""
        observation = self.normalized(batch.get("observation"))
        action = batch.get("action")
        with torch.no_grad():
            next_observation = batch.get(("next", "observation"))
            next_action, next_log_prob = self.actor.sample(next_observation)
            next_normalized = self.normalized(next_observation)
            next_q = torch.min(*(target(next_normalized, next_action) for target in self.targets))
            next_value = next_q - self.log_alpha.exp() * next_log_prob
            reward = batch.get(("next", "reward")).reshape(next_value.shape).to(next_value.dtype)
            terminated = or_next_flags(batch.get(("next", "terminated")), batch, self.terminal_keys)
            steps = batch.get(STEPS_TO_NEXT_OBS, None)  # n-step transitions: gamma ** steps ahead
            discount = self.gamma if steps is None else self.gamma ** steps.reshape(reward.shape).to(reward.dtype)
            target = reward + discount * (~terminated.reshape(reward.shape)).to(reward.dtype) * next_value
        q_values = [critic(observation, action) for critic in self.critics]
        per_sample = sum((q - target).pow(2) for q in q_values)
        weight = batch.get(WEIGHT, None)
        if weight is not None:
            per_sample = per_sample * weight.reshape(per_sample.shape).to(per_sample.dtype)
        sample_mask = batch.get(SAMPLE_MASK, None)  # a stacked sample of members of other batch sizes
        loss, q_mean = 0.5 * sample_mean(per_sample, sample_mask), sample_mean(q_values[0].detach(), sample_mask)
        if return_td_error:
            return loss, q_mean, sum((q.detach() - target).abs() for q in q_values) / len(q_values)
        return loss, q_mean

    def actor_step(self, observation, sample_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One actor update (and one of alpha with autotune) on the batch's observations
        (``sample_mask``: a stacked sample's real samples, SAMPLE_MASK)."""
        action, log_prob = self.actor.sample(observation)
        normalized = self.normalized(observation)
        self.critics.requires_grad_(False)  # the gradient flows through the critics to the action only
        try:
            q = torch.min(*(critic(normalized, action) for critic in self.critics))
        finally:
            self.critics.requires_grad_(True)
        loss = sample_mean(self.log_alpha.exp().detach() * log_prob - q, sample_mask)
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()  # a stacked learner's members' losses: each its own rows' gradient
        self.step_optimizer(self.actor_optimizer)
        metrics = {"loss_actor": loss.detach(), "entropy": -sample_mean(log_prob.detach(), sample_mask)}
        if self.autotune:
            alpha_loss = -sample_mean(self.log_alpha * (log_prob.detach() + self.target_entropy), sample_mask)
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.sum().backward()
            self.step_optimizer(self.alpha_optimizer)
            metrics["loss_alpha"] = alpha_loss.detach()
        return metrics

    def step_optimizer(self, optimizer) -> None:
        """One step of ``optimizer`` (a stacked learner steps its learning members alone)."""
        optimizer.step()

    @torch.no_grad()
    def update_targets(self) -> None:
        """The target critics one Polyak step ``tau`` towards the critics."""
        for target, online in zip(self.targets.parameters(), self.critics.parameters()):
            target.lerp_(online, self.tau)

    def update(self, batch: TensorDictBase) -> dict[str, torch.Tensor]:
        """One critic step on ``batch``; the actor rounds and target updates when due.
        Returns detached metrics, and with prioritized replay ``"td_error"``, the
        per-sample absolute TD errors (``critic_loss``'s, before the step)."""
        loss, q_mean, *td_error = self.critic_loss(batch, return_td_error=self.prioritized)
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        self.step_optimizer(self.critic_optimizer)
        self.updates += 1
        metrics = {"loss_q": loss.detach(), "q_mean": q_mean}
        if td_error:
            metrics["td_error"] = td_error[0]
        if self.updates % self.policy_frequency == 0:
            for _ in range(self.policy_frequency):
                metrics.update(self.actor_step(batch.get("observation"), batch.get(SAMPLE_MASK, None)))
        if self.updates % self.target_network_frequency == 0:
            self.update_targets()
        return metrics

    def learn(self, batch: TensorDictBase | None, frames: int) -> dict[str, float]:
        if batch is not None:
            self.replay_buffer.extend_batch(batch)
            update_observation_norm(self.actor, batch.get("observation"))
        metrics: dict[str, float] = {"buffer_size": float(len(self.replay_buffer)), "alpha": self.alpha}
        if frames < self.learning_starts or len(self.replay_buffer) == 0:
            return metrics
        totals, counts = self.gradient_steps_taken(learn_stats=batch is None)
        metrics.update({key: value.item() / counts[key] for key, value in totals.items()})
        metrics["alpha"] = self.alpha
        return metrics

    def gradient_steps_taken(self, learn_stats: bool) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
        """``gradient_steps_per_batch`` updates, each on a sample of the replay buffer: each
        metric's sum over them and its count. ``learn_stats``: the first sample's
        observations go into the observation normaliser (the collector wrote the new data
        straight into the buffer). With prioritized replay, each sample's transitions get
        their TD errors as priorities before the next sample, as DQNLearner's."""
        totals: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        for step in range(self.gradient_steps):
            sample = self.replay_buffer.sample()
            if learn_stats and step == 0:
                update_observation_norm(self.actor, sample.get("observation"), sample.get(SAMPLE_MASK, None))
            step_metrics = self.update(sample)
            if self.prioritized:  # per sample, no metric to average (a batched model's: MemberReplay's, per member)
                self.replay_buffer.update_priority(sample.get(INDEX), step_metrics.pop("td_error"))
            for key, value in step_metrics.items():
                totals[key] = totals[key] + value if key in totals else value
                counts[key] = counts.get(key, 0) + 1
        return totals, counts

    def state_dict(self) -> dict:
        return {"critics": self.critics.state_dict(), "targets": self.targets.state_dict(),
                "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                "alpha_optimizer": self.alpha_optimizer.state_dict() if self.alpha_optimizer else {},
                "updates": self.updates, "replay_buffer": replay_state(self.replay_buffer)}

    def load_state_dict(self, state: dict) -> None:
        self.critics.load_state_dict(state["critics"])
        self.targets.load_state_dict(state["targets"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if self.alpha_optimizer is not None:
            self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.updates = int(state["updates"])
        self.replay_buffer.load_state_dict(state["replay_buffer"])


__getattr__ = moved_getattr(__name__)  # SACActor moved to rlcollect.modules.sac, with SAC's other networks
