"""Clipped PPO on a RolloutBuffer."""
from __future__ import annotations

from typing import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from rlcollect.algos.gae import generalized_advantage_estimate
from rlcollect.algos.learners import Learner, update_observation_norm
from rlcollect.algos.optim import Adam
from rlcollect.algos.reward_scaling import RewardScaler
from rlcollect.buffers.rollout import RolloutBuffer, iterate_minibatches, iterate_sequences, transition_view
from rlcollect.buffers.transforms import or_next_flags
from rlcollect.keys import MASK
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic


class PPO:
    """Clipped-surrogate PPO with GAE, advantage normalisation, value and entropy terms.

    Args:
        actor_critic: the module trained (also the collector's policy).
        lr: Adam learning rate at the start; with ``anneal_lr`` it decays linearly to 0
            over ``total_frames``.
        epochs, minibatch_size: passes over each rollout and transitions per step.
        clip_epsilon: policy-ratio clip; annealed with the lr when ``anneal_clip``.
        normalize_reward: train on rewards scaled by the running std of the discounted
            return (RewardScaler; the stored and logged rewards are unchanged).
        terminal_keys: flags ``("next", key)`` of the rollout that end the value targets as
            ``terminated`` does (no bootstrap, no advantage carried across), e.g.
            ``["life_lost"]`` for Atari's episodic life; the episodes themselves go on.
        sequence_length: a RecurrentActorCritic trains on contiguous sequences of this many
            steps of one env (None: the env's whole rollout), each restarting from its stored
            hidden state; a minibatch holds ``minibatch_size // sequence_length`` of them
            (at least one). Transitions are shuffled one by one otherwise.
    """

    def __init__(self, actor_critic: ActorCritic | RecurrentActorCritic, *, lr: float = 3e-4, gamma: float = 0.99,
                 gae_lambda: float = 0.95, clip_epsilon: float = 0.2, epochs: int = 10,
                 minibatch_size: int = 64, value_coef: float = 0.5, entropy_coef: float = 0.0,
                 max_grad_norm: float = 0.5, normalize_advantage: bool = True,
                 anneal_lr: bool = True, anneal_clip: bool = False, total_frames: int = -1,
                 sequence_length: int | None = None, normalize_reward: bool = False,
                 terminal_keys: Sequence[str] = ()) -> None:
        self.actor_critic = actor_critic
        self.terminal_keys = list(terminal_keys)
        self.recurrent = isinstance(actor_critic, RecurrentActorCritic)
        self.sequence_length = sequence_length
        self.lr, self.gamma, self.gae_lambda = lr, gamma, gae_lambda
        self.clip_epsilon, self.epochs, self.minibatch_size = clip_epsilon, epochs, minibatch_size
        self.value_coef, self.entropy_coef, self.max_grad_norm = value_coef, entropy_coef, max_grad_norm
        self.normalize_advantage = normalize_advantage
        self.anneal_lr, self.anneal_clip, self.total_frames = anneal_lr, anneal_clip, total_frames
        if (anneal_lr or anneal_clip) and total_frames <= 0:
            raise ValueError("anneal_lr / anneal_clip need a finite total_frames")
        self.optimizer = Adam(actor_critic.parameters(), lr=lr, eps=1e-5)
        self.reward_scaler = RewardScaler(gamma) if normalize_reward else None

    def state_dict(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict()}
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.reward_scaler is not None and "reward_scaler" in state:
            self.reward_scaler.load_state_dict(state["reward_scaler"])

    @torch.no_grad()
    def compute_advantages(self, buffer: RolloutBuffer) -> None:
        """Fill ``state_value`` (all T + 1 slots), ``advantage`` and ``value_target``."""
        rollout = buffer.rollout
        transitions = transition_view(rollout)
        next_state_value = self.actor_critic.state_value(transitions.get("next"))
        state_value = self.actor_critic.state_value(transitions)
        rollout.set("state_value", torch.cat([state_value, next_state_value[:, -1:]], 1))
        transitions = transition_view(rollout)
        reward = transitions.get(("next", "reward"))
        if self.reward_scaler is not None:  # the stored rewards stay as collected
            reward = self.reward_scaler(reward, transitions.get(("next", "done")))
        # e.g. a lost life: the value target ends there, the episode goes on
        terminated = or_next_flags(transitions.get(("next", "terminated")), transitions, self.terminal_keys)
        done = or_next_flags(transitions.get(("next", "done")), transitions, self.terminal_keys)
        advantage, value_target = generalized_advantage_estimate(
            reward, transitions.get("state_value"), next_state_value, terminated, done, **self.gae_settings(reward))
        padding = torch.zeros_like(advantage[:, :1])
        rollout.set("advantage", torch.cat([advantage, padding], 1))
        rollout.set("value_target", torch.cat([value_target, padding], 1))

    def gae_settings(self, reward: torch.Tensor) -> dict:
        """The ``gamma`` and ``gae_lambda`` that generalized_advantage_estimate runs with on
        the rollout's ``reward`` ``[rows, T]``: this PPO's own. A subclass may give
        ``gae_lambda`` per row (a float64 tensor ``[rows]``), as a batched sweep does for
        members with lambdas of their own."""
        return {"gamma": self.gamma, "gae_lambda": self.gae_lambda}

    def update(self, buffer: RolloutBuffer, frames: int) -> dict[str, float]:
        """Several epochs of minibatch updates on the buffer's rollout; returns mean losses."""
        progress = min(frames / self.total_frames, 1.0) if self.total_frames > 0 else 0.0
        remaining = 1.0 - progress
        lr = self.lr * remaining if self.anneal_lr else self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        clip = self.clip_epsilon * remaining if self.anneal_clip else self.clip_epsilon
        self.compute_advantages(buffer)
        transitions = buffer.get(flatten=not self.recurrent)
        if not self.recurrent and MASK in transitions.keys(True):  # reset_policy="wait": drop the padding
            transitions = transitions[transitions.get(MASK)]
        totals: dict[str, torch.Tensor] = {}
        steps = 0
        for _ in range(self.epochs):
            if self.recurrent:
                minibatches = iterate_sequences(transitions, self.sequence_length or transitions.shape[1],
                                                self.minibatch_size)
            else:
                minibatches = iterate_minibatches(transitions, self.minibatch_size)
            for minibatch in minibatches:
                for key, value in self._minibatch_step(minibatch, clip).items():
                    totals[key] = totals[key] + value if key in totals else value
                steps += 1
        metrics = {key: value.item() / steps for key, value in totals.items()}  # one sync per update
        metrics["lr"] = lr
        return metrics

    def _minibatch_step(self, minibatch, clip: float) -> dict[str, torch.Tensor]:
        log_prob, entropy, value = self.actor_critic.evaluate(minibatch)
        # recurrent sequences keep their padding (reset_policy="wait"): it weighs nothing
        valid = minibatch.get(MASK).to(value.dtype) if MASK in minibatch.keys(True) else None

        def mean(values: torch.Tensor) -> torch.Tensor:
            return values.mean() if valid is None else (values * valid).sum() / valid.sum().clamp(min=1)

        advantage = minibatch.get("advantage")
        if self.normalize_advantage and advantage.numel() > 1:
            if valid is None:
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            else:
                centred = advantage - mean(advantage)
                advantage = centred / (mean(centred.pow(2)).sqrt() + 1e-8)
        log_ratio = log_prob - minibatch.get("action_log_prob")
        ratio = log_ratio.exp()
        loss_policy = -mean(torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage))
        loss_value = 0.5 * mean((value - minibatch.get("value_target")).pow(2))
        entropy_mean = mean(entropy)
        loss = loss_policy + self.value_coef * loss_value - self.entropy_coef * entropy_mean
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.actor_critic.parameters(), self.max_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            return {"loss_policy": loss_policy.detach(), "loss_value": loss_value.detach(),
                    "entropy": entropy_mean.detach(), "approx_kl": mean((ratio - 1) - log_ratio),
                    "clip_fraction": mean(((ratio - 1).abs() > clip).to(ratio.dtype))}


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
