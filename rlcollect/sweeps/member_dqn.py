"""DQN's members stacked into one model (docs/sweeps.md, "How members are stacked").

The members' QValuePolicies stack (``stack_modules``: one batched matrix product per
layer for all of them), and DQN's own loss (rlcollect.algos.dqn, its means over the sample
dim) computes one TD loss per member on a stacked batch ``[S, B]``:

    MemberQPolicy      the collector's policy: the stacked Q-values of every member's rows,
                       each member's epsilon-greedy draws from its own RNG streams
                       (lockstep.MemberStreams), as its solo policy draws them
    MemberReplay       each member's own replay buffer, written with its rows, sampled under
                       its streams (its solo run's indices) and stacked ``[S, B]``
    MemberDQN          DQN's update on the stacked model: the members' losses summed (each
                       parameter row gets its own member's gradient), each member's gradient
                       norm clipped alone, MemberAdam (an lr and a step count per member),
                       each member's target update
    MemberDQNLearner   DQNLearner's schedule (learning_starts, epsilon, gradient steps per
                       batch) for every member; per member metrics and solo-shaped state

The settings the members may differ in are MEMBER_DQN_OPTIONS; a model of one member is
its solo run bit for bit (tests/test_member_dqn.py).
"""
from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import interaction_type

from rlcollect.acting import actions_only
from rlcollect.algos.dqn import DQN
from rlcollect.algos.learners import Learner, replay_state, update_observation_norm
from rlcollect.algos.optim import Adam
from rlcollect.keys import INDEX, SAMPLE_MASK
from rlcollect.modules.actor_critic import DETERMINISTIC
from rlcollect.modules.q_network import QValuePolicy, linear_epsilon
from rlcollect.sweeps.lockstep import MemberStreams
from rlcollect.sweeps.members import clip_member_grad_norms
from rlcollect.sweeps.optim import (
    FrozenRows,
    MemberAdam,
    copy_member_optimizer_state,
    load_member_optimizer_state,
    member_optimizer_state,
    step_members,
)
from rlcollect.sweeps.stacking import load_member_state, member_state_dict, padded_rows
from rlcollect.sweeps.streamed import StreamedMembers

# DQN's settings (algo.<name>) the members of one stacked model may differ in, each applied per member
MEMBER_DQN_OPTIONS = ("lr", "gamma", "tau", "max_grad_norm", "target_update_period", "eps_start", "eps_end",
                      "eps_decay_frames", "batch_size")
INTEGER_DQN_OPTIONS = ("target_update_period", "eps_decay_frames", "batch_size")
SCHEDULE_OPTIONS = ("eps_start", "eps_end", "eps_decay_frames")  # the learner's, not DQN's


class MemberQPolicy(StreamedMembers):
    """The stacked QValuePolicy ``stacked`` of ``streams``' members as a policy over the
    sweep's ``[S * P, ...]`` rows: greedy on the stacked Q-values, and, outside a
    deterministic interaction type, member m's exploration drawn under its streams as its
    solo QValuePolicy draws it (``torch.rand``, then ``torch.randint``, over its P rows)."""

    in_keys = ["observation"]
    out_keys = ["action", "action_value"]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        q_values = self.stacked.q_values(self.split(tensordict.get("observation")))  # [S, P, A]
        action = q_values.argmax(-1)
        if interaction_type() not in DETERMINISTIC:
            epsilon, num_actions = self.stacked.epsilon, self.stacked.num_actions

            def explore(member: int, greedy: torch.Tensor) -> torch.Tensor:
                rows = greedy.shape[0]
                chosen = torch.rand((rows,), device=greedy.device) < epsilon[member]
                return torch.where(chosen, torch.randint(num_actions, (rows,), device=greedy.device), greedy)

            action = self.member_draws(action, explore)
        offset = self.stacked.action_offset
        tensordict.set("action", (action + offset if offset else action).flatten(0, 1))
        if not actions_only():
            tensordict.set("action_value", q_values.flatten(0, 1))
        return tensordict


class MemberReplay:
    """The members' own replay buffers: ``extend`` writes member m's rows of a sweep batch
    into buffer m (as its solo run's collector writes its batch), ``sample`` samples every
    buffer under its member's streams (its solo run's draws) and stacks them ``[S, B]``.

    Members may sample batches of their own sizes (their ``algo.batch_size``, each buffer's
    own): a member's sample of ``B_m < B`` transitions is padded to the largest ``B`` by
    repeating it, and ``SAMPLE_MASK`` marks each member's first ``B_m`` as its real ones,
    which are all its losses' means, its priorities and its observation statistics read."""

    def __init__(self, buffers: list, streams: MemberStreams) -> None:
        self.buffers, self.streams = buffers, streams
        self.batch_sizes = [buffer.batch_size for buffer in buffers]

    def extend(self, batch: TensorDictBase) -> None:
        rows = batch.shape[0] // len(self.buffers)
        for member, buffer in enumerate(self.buffers):
            buffer.extend_batch(batch[member * rows:(member + 1) * rows])

    def sample(self) -> TensorDictBase:
        samples = []
        for member, buffer in enumerate(self.buffers):
            with self.streams.member(member):
                samples.append(buffer.sample())
        stacked, sample_mask = padded_rows(samples)
        if sample_mask is not None:
            stacked.set(SAMPLE_MASK, sample_mask)
        return stacked

    def sizes(self) -> list[int]:
        return [len(buffer) for buffer in self.buffers]

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """ReplayBuffer.update_priority for a stacked sample ``[S, B]``: each member's real
        samples (a padded one's first ``batch_size``) in its own buffer."""
        for member, (buffer, size) in enumerate(zip(self.buffers, self.batch_sizes)):
            buffer.update_priority(index[member, :size], priority[member, :size])


class MemberDQN(DQN):
    """DQN (its arguments) on a MemberQPolicy: each member's update is its solo run's on its
    own samples. ``member_options``: the settings of MEMBER_DQN_OPTIONS the members differ
    in (one value per member; the learner's epsilon schedule keys are read there, not here).
    With one member: DQN's own optimizer and clipping (bit for bit its solo run); with more:
    MemberAdam, each member's gradient norm clipped alone."""

    def __init__(self, q_policy: MemberQPolicy, *, member_options: dict[str, list] | None = None,
                 **dqn_options) -> None:
        super().__init__(q_policy.stacked, **dqn_options)
        self.members, self.lr = q_policy.members, self.optimizer.param_groups[0]["lr"]
        self.member_options = {key: list(values) for key, values in (member_options or {}).items()}
        self.member_lrs = [float(value) for value in self.member_values("lr")]
        device = next(q_policy.stacked.parameters()).device
        if "gamma" in self.member_options:  # [S, 1]: against the members' [S, B] rewards
            self.gamma = torch.tensor(self.member_options["gamma"], dtype=torch.float32, device=device).unsqueeze(1)
        if "max_grad_norm" in self.member_options:
            self.max_grad_norm = torch.tensor(self.member_options["max_grad_norm"], dtype=torch.float32,
                                              device=device)
        self.taus = [float(value) for value in self.member_values("tau")]
        self.periods = [int(value) for value in self.member_values("target_update_period")]
        self.solo_param_groups = self.optimizer.state_dict()["param_groups"]
        parameters = list(q_policy.stacked.q_net.parameters())
        if self.members > 1 and "lr" in self.member_options:
            self.optimizer = MemberAdam(parameters, self.members, lr=self.member_lrs)
        elif self.members > 1:  # Adam's fused form: the same arithmetic per element (to an ulp), one kernel per step
            self.optimizer = Adam(parameters, lr=self.lr, fused=True)
        self.frozen_rows = FrozenRows(self.members)  # torch's Adam: the frozen members' rows, kept

    def member_values(self, key: str) -> list:
        """Each member's value of setting ``key`` (the shared one where they do not differ)."""
        return self.member_options.get(key) or [getattr(self, key)] * self.members

    @torch.no_grad()
    def set_member_setting(self, member: int, key: str, value: float) -> None:
        """Member ``member`` trains with ``value`` of setting ``key`` (one the members differ
        in, so kept per member) from its next gradient step."""
        self.member_options[key][member] = value
        if key == "lr":
            self.member_lrs[member] = float(value)
            self.optimizer.set_lrs(self.member_lrs)  # MemberAdam: the members differ in lr
        elif key == "tau":
            self.taus[member] = float(value)
        elif key == "target_update_period":
            self.periods[member] = int(value)
        elif key in ("gamma", "max_grad_norm"):  # per member tensors
            getattr(self, key)[member] = float(value)

    @torch.no_grad()
    def copy_member(self, target: int, source: int) -> None:
        """Member ``target`` takes member ``source``'s state (population-based training's
        exploit): its Q network and the stacked policy's buffers (observation statistics,
        epsilon), its target network, its Adam state. Its settings, replay buffer, envs and
        RNG streams stay its own."""
        for module in (self.q_policy, self.target):
            for value in module.state_dict(keep_vars=True).values():
                value[target].copy_(value[source])
        copy_member_optimizer_state(self.optimizer, target, source, self.members)

    def update(self, batch: TensorDictBase) -> dict[str, torch.Tensor]:
        """One gradient step of every member on its rows of ``batch`` ``[S, B]`` (then the
        target updates); metrics ``[S]`` per member and ``"td_error"`` ``[S, B]``."""
        loss, q_mean, td_error = self.loss(batch, return_td_error=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()  # each member's rows of every parameter get their own loss's gradient
        parameters = list(self.q_policy.q_net.parameters())
        clip_member_grad_norms(parameters, self.max_grad_norm, self.members)
        step_members(self.optimizer, parameters, self.frozen_rows)
        self.gradient_steps += 1
        self._update_target()
        return {"loss_q": loss.detach(), "q_mean": q_mean, "td_error": td_error}

    @torch.no_grad()
    def _update_target(self) -> None:
        if self.members == 1:
            return super()._update_target()  # the solo run's own arithmetic
        online, target = list(self.q_policy.q_net.parameters()), list(self.target.q_net.parameters())
        if self.target_update == "polyak":
            if len(set(self.taus)) == 1:
                for target_param, online_param in zip(target, online):
                    target_param.lerp_(online_param, self.taus[0])
            else:
                for member, tau in enumerate(self.taus):
                    for target_param, online_param in zip(target, online):
                        target_param[member].lerp_(online_param[member], tau)
            return
        due = [member for member, period in enumerate(self.periods) if self.gradient_steps % period == 0]
        for member in due if len(due) < self.members else [None]:
            for target_param, online_param in zip(target, online):
                (target_param if member is None else target_param[member]).copy_(
                    online_param if member is None else online_param[member])

    def load_member_state_dict(self, member: int, state: dict) -> None:
        """The inverse of ``member_state_dict`` (a resumed member's checkpoint): its Adam
        state and target network; the gradient steps are the model's, one count for all."""
        load_member_optimizer_state(self.optimizer, member, state["optimizer"])
        load_member_state(self.target, state["target"], member)
        self.gradient_steps = int(state["gradient_steps"])

    def member_state_dict(self, member: int, solo: QValuePolicy) -> dict:
        """Member ``member``'s DQN state as its solo run's ``DQN.state_dict()`` holds it."""
        optimizer = member_optimizer_state(self.optimizer, member, list(solo.q_net.parameters()),
                                           self.solo_param_groups)
        return {"optimizer": optimizer, "target": member_state_dict(self.target.state_dict(), solo, member),
                "gradient_steps": self.gradient_steps}


class MemberDQNLearner(Learner):
    """DQNLearner for the members of a stacked sweep: ``learn`` writes each member's rows
    into its replay buffer, sets each member's epsilon, then takes ``gradient_steps_per_batch``
    steps of every member on its own samples; returns a list of each member's metrics.

    Args:
        policy: the MemberQPolicy.
        replay: the MemberReplay.
        member_options: the settings of MEMBER_DQN_OPTIONS the members differ in.
        gradient_steps_per_batch, learning_starts, eps_start, eps_end, eps_decay_frames: as
            DQNLearner's (the last three per member where they differ).
        **dqn_options: DQN's own arguments.
    """

    replay = True

    def __init__(self, policy: MemberQPolicy, replay: MemberReplay, *, member_options: dict | None = None,
                 gradient_steps_per_batch: int = 1, learning_starts: int = 0, eps_start: float = 1.0,
                 eps_end: float = 0.05, eps_decay_frames: int = 0, **dqn_options) -> None:
        options = {key: list(values) for key, values in (member_options or {}).items()}
        self.differing = list(options)  # the settings the members differ in
        options.pop("batch_size", None)  # each member's replay buffer samples its own (MemberReplay)
        defaults = {"eps_start": eps_start, "eps_end": eps_end, "eps_decay_frames": eps_decay_frames}
        self.schedules = [options.pop(key, [defaults[key]] * policy.members) for key in SCHEDULE_OPTIONS]
        self.dqn = MemberDQN(policy, member_options=options, **dqn_options)
        self.policy, self.replay_buffer, self.members = policy, replay, policy.members
        self.gradient_steps, self.learning_starts = gradient_steps_per_batch, learning_starts
        self.prioritized = bool(getattr(replay.buffers[0], "prioritized", False))

    def learn(self, batch: TensorDictBase | None, frames: int) -> list[dict[str, float]]:
        """``frames``: one member's frames so far."""
        self.replay_buffer.extend(batch)
        epsilons = [linear_epsilon(frames, start=start, end=end, decay_frames=int(decay))
                    for start, end, decay in zip(*self.schedules)]
        with torch.no_grad():
            for member, epsilon in enumerate(epsilons):
                self.policy.stacked.epsilon[member].fill_(epsilon)
        sizes = self.replay_buffer.sizes()
        metrics = [{"epsilon": epsilon, "buffer_size": float(size)} for epsilon, size in zip(epsilons, sizes)]
        if frames < self.learning_starts or min(sizes) == 0:
            return metrics
        totals: dict[str, torch.Tensor] = {}
        for step in range(self.gradient_steps):
            sample = self.replay_buffer.sample()  # [S, B]
            if step == 0:  # as a solo run's, whose collector wrote the batch: the statistics of its first sample
                update_observation_norm(self.policy, sample.get("observation"), sample.get(SAMPLE_MASK, None))
            step_metrics = self.dqn.update(sample)
            td_error = step_metrics.pop("td_error")
            if self.prioritized:  # each member's in its own buffer (MemberReplay.update_priority)
                self.replay_buffer.update_priority(sample.get(INDEX), td_error)
            for key, value in step_metrics.items():
                totals[key] = totals[key] + value if key in totals else value
        values = {key: value.tolist() for key, value in totals.items()}  # one sync; then as a solo run divides
        for member, row in enumerate(metrics):
            row.update({key: value[member] / self.gradient_steps for key, value in values.items()})
        return metrics

    # population-based training (rlcollect.sweeps.pbt) reads and sets the members through these
    def member_setting(self, member: int, key: str) -> float | int:
        """Member ``member``'s value of setting ``key`` (MEMBER_DQN_OPTIONS) now."""
        if key in SCHEDULE_OPTIONS:
            return self.schedules[SCHEDULE_OPTIONS.index(key)][member]
        if key == "batch_size":
            return self.replay_buffer.batch_sizes[member]
        return self.dqn.member_values(key)[member]

    def set_member_settings(self, member: int, settings: dict[str, float]) -> None:
        """Member ``member`` trains with ``settings`` (float settings the members differ in)
        from its next batch on."""
        for key, value in settings.items():
            if key not in self.differing or key in INTEGER_DQN_OPTIONS:
                raise ValueError(f"set_member_settings: {key!r} is not a float setting the members differ in "
                                 f"({', '.join(k for k in self.differing if k not in INTEGER_DQN_OPTIONS)})")
            if key in SCHEDULE_OPTIONS:
                self.schedules[SCHEDULE_OPTIONS.index(key)][member] = float(value)
            else:
                self.dqn.set_member_setting(member, key, float(value))

    def copy_member(self, target: int, source: int) -> None:
        """Member ``target`` takes member ``source``'s state (``MemberDQN.copy_member``)."""
        self.dqn.copy_member(target, source)

    def freeze(self, member: int) -> None:
        """Member ``member`` learns no more (its rows still compute, its parameters stay)."""
        dqn = self.dqn
        dqn.frozen_rows.freeze(None if isinstance(dqn.optimizer, MemberAdam) else
                               list(dqn.q_policy.q_net.parameters()), member)

    def member_state_dict(self, member: int, solo_policy: QValuePolicy) -> dict:
        """Member ``member``'s learner state as its solo run's DQNLearner saves it."""
        return {"dqn": self.dqn.member_state_dict(member, solo_policy),
                "replay_buffer": replay_state(self.replay_buffer.buffers[member])}

    def load_member_state_dict(self, member: int, state: dict) -> None:
        """Member ``member``'s learner state from its solo run's DQNLearner state (a resumed
        member's checkpoint): its DQN state and its replay buffer."""
        self.dqn.load_member_state_dict(member, state["dqn"])
        self.replay_buffer.buffers[member].load_state_dict(state["replay_buffer"])

    def state_dict(self) -> dict:
        raise NotImplementedError("a stacked sweep saves each member's state (member_state_dict)")

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError("a stacked sweep loads each member's state (load_member_state_dict)")

