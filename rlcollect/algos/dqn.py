"""DQN: TD targets from a target network, periodic or Polyak target updates, double DQN;
n-step transitions (``MultiStep``) and prioritized replay (``PrioritizedSampler``) supported."""
from __future__ import annotations

import copy

import torch
from tensordict import TensorDictBase
from torch import nn

from rlcollect.algos.learners import Learner, replay_state, sample_mean, update_observation_norm
from rlcollect.algos.optim import Adam
from rlcollect.buffers.transforms import or_next_flags
from rlcollect.choices import DQN_LOSSES as LOSSES
from rlcollect.choices import DQN_TARGET_UPDATES as TARGET_UPDATES
from rlcollect.keys import INDEX, SAMPLE_MASK, STEPS_TO_NEXT_OBS, WEIGHT
from rlcollect.modules.q_network import QValuePolicy, linear_epsilon


def dqn_targets(reward: torch.Tensor, terminated: torch.Tensor, next_q_online: torch.Tensor,
                next_q_target: torch.Tensor, *, gamma: float, double_dqn: bool,
                steps: torch.Tensor | None = None) -> torch.Tensor:
    """``r + gamma * Q_target(s', a*)``, with no bootstrap where the MDP terminated (a
    truncated step still bootstraps). ``a* = argmax Q_online(s')`` for double DQN, else the
    target network's own argmax. ``steps``: the steps each transition spans (n-step
    transitions, ``r`` their discounted reward sum): the bootstrap is discounted by
    ``gamma ** steps`` instead."""
    if double_dqn:
        best = next_q_online.argmax(-1, keepdim=True)
        next_value = next_q_target.gather(-1, best).squeeze(-1)
    else:
        next_value = next_q_target.max(-1).values
    discount = gamma if steps is None else gamma ** steps.reshape(reward.shape).to(reward.dtype)
    return reward + discount * (~terminated).to(reward.dtype) * next_value


class DQN:
    """Trains a QValuePolicy from transitions (``observation``, ``action``,
    ``("next", "reward"|"terminated"|"observation")``), e.g. replay-buffer samples.

    Optional entries: ``("next", "steps_to_next_obs")`` (n-step transitions from MultiStep:
    the bootstrap is discounted by ``gamma ** steps``) and ``"_weight"`` (importance weights
    from a PrioritizedSampler: the loss is the weighted mean of the per-sample losses).

    Args:
        target_update: "periodic" (copy every ``target_update_period`` gradient steps) or
            "polyak" (``target <- tau * online + (1 - tau) * target`` every step).
        double_dqn: pick the bootstrap action with the online network.
        loss: "huber" (smooth L1) or "mse".
        terminal_keys: flags ``("next", key)`` of the transitions that end the bootstrap as
            ``terminated`` does (e.g. ``["life_lost"]``: Atari's episodic life).
    """

    def __init__(self, q_policy: QValuePolicy, *, lr: float = 1e-3, gamma: float = 0.99,
                 target_update: str = "periodic", target_update_period: int = 10, tau: float = 0.005,
                 double_dqn: bool = True, loss: str = "huber", max_grad_norm: float = 10.0,
                 terminal_keys=()) -> None:
        if target_update not in TARGET_UPDATES:
            raise ValueError(f"target_update must be one of {TARGET_UPDATES}, got {target_update!r}")
        if loss not in LOSSES:
            raise ValueError(f"loss must be {' or '.join(map(repr, LOSSES))}, got {loss!r}")
        self.q_policy = q_policy
        self.terminal_keys = list(terminal_keys)
        self.target = copy.deepcopy(q_policy).requires_grad_(False)
        if q_policy.obs_norm is not None:  # one set of statistics: the target network reads the online one's
            self.target.obs_norm = q_policy.obs_norm
        self.gamma, self.double_dqn, self.max_grad_norm = gamma, double_dqn, max_grad_norm
        self.target_update, self.target_update_period, self.tau = target_update, target_update_period, tau
        self._loss_fn = nn.SmoothL1Loss(reduction="none") if loss == "huber" else nn.MSELoss(reduction="none")
        self.optimizer = Adam(q_policy.q_net.parameters(), lr=lr)
        self.gradient_steps = 0

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "target": self.target.state_dict(),
                "gradient_steps": self.gradient_steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.target.load_state_dict(state["target"])
        self.gradient_steps = int(state["gradient_steps"])

    def loss(self, batch: TensorDictBase, *, return_td_error: bool = False):
        """(TD loss, mean Q of the taken actions) for a batch of transitions; with
        ``return_td_error``, also the per-sample ``|target - Q(s, a)|`` (detached, ``[N]``),
        the priorities of prioritized replay. Every mean is over the last (sample) dim, so a
        batch ``[S, N]`` of S stacked members (rlcollect.sweeps.member_dqn) gets one loss per
        member, ``[S]``."""
        q_values = self.q_policy.q_values(batch.get("observation"))
        action = batch.get("action") - self.q_policy.action_offset
        taken = q_values.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_observation = batch.get(("next", "observation"))
            next_q_target = self.target.q_values(next_observation)
            next_q_online = self.q_policy.q_values(next_observation) if self.double_dqn else next_q_target
            # e.g. a lost life: no bootstrap past it
            terminated = or_next_flags(batch.get(("next", "terminated")), batch, self.terminal_keys)
            target = dqn_targets(batch.get(("next", "reward")), terminated,
                                 next_q_online, next_q_target, gamma=self.gamma, double_dqn=self.double_dqn,
                                 steps=batch.get(STEPS_TO_NEXT_OBS, None))
        per_sample = self._loss_fn(taken, target)
        weight = batch.get(WEIGHT, None)
        if weight is not None:
            per_sample = per_sample * weight.reshape(per_sample.shape).to(per_sample.dtype)
        sample_mask = batch.get(SAMPLE_MASK, None)  # a stacked sample of members of other batch sizes
        loss, q_mean = sample_mean(per_sample, sample_mask), sample_mean(taken.detach(), sample_mask)
        if return_td_error:
            return loss, q_mean, (target - taken.detach()).abs()
        return loss, q_mean

    def update(self, batch: TensorDictBase) -> dict[str, torch.Tensor]:
        """One gradient step (then the target update); returns detached metrics: scalars,
        and ``"td_error"``, the per-sample absolute TD errors (``[N]``, before the step)."""
        loss, q_mean, td_error = self.loss(batch, return_td_error=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.q_policy.q_net.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.gradient_steps += 1
        self._update_target()
        return {"loss_q": loss.detach(), "q_mean": q_mean, "td_error": td_error}

    @torch.no_grad()
    def _update_target(self) -> None:
        online, target = self.q_policy.q_net.parameters(), self.target.q_net.parameters()
        if self.target_update == "polyak":
            for target_param, online_param in zip(target, online):
                target_param.lerp_(online_param, self.tau)
        elif self.gradient_steps % self.target_update_period == 0:
            for target_param, online_param in zip(target, online):
                target_param.copy_(online_param)


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
