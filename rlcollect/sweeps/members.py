"""The S members of a batched sweep as one policy and one learner (docs/sweeps.md).

Layout: the env of a batched sweep has S x P rows, member ``m``'s P envs in rows
``m * P ... m * P + P - 1``, so every batch ``[S * P, T]`` splits into the members' own
``[P, T]`` batches along its first dim (``unflatten(0, (S, P))``), with no copy.

    MemberPolicy        the collector's policy: splits the rows, runs the stacked
                        ActorCritic (stacking.py), joins them again
    MemberPPO           PPO on stacked parameters: every member's own advantages (its
                        GAE lambda), advantage normalisation, minibatch permutations (its
                        epochs), loss, gradient clipping and Adam state (Adam is
                        elementwise: one Adam over the stack is S; MemberAdam where their
                        step counts or lrs differ); its losses are summed, which leaves
                        each member's gradient its own
    MemberPPOLearner    the Learner contract for the sweep's loop; per member metrics
    MemberRewardScaler  normalize_reward with each member's own return statistics
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rlcollect.algos.learners import Learner, sample_mean
from rlcollect.algos.optim import Adam
from rlcollect.algos.ppo import PPO
from rlcollect.algos.reward_scaling import RewardScaler
from rlcollect.buffers.rollout import RolloutBuffer, sequence_starts, sequence_steps, transition_view
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.encoders import RunningNorm
from rlcollect.primers import policy_primers
from rlcollect.sweeps.optim import (
    FrozenRows,
    MemberAdam,
    copy_member_optimizer_state,
    load_member_optimizer_state,
    member_optimizer_state,
    step_members,
)
from rlcollect.sweeps.stacking import SomeMembers, member_state_dict, padded_rows, zero_member


class MemberPolicy(TensorDictModuleBase):
    """The stacked ActorCritic ``stacked`` of ``members`` members as a policy over
    ``[S * P, ...]`` tensordicts (the sweep's env rows), and, for the learner,
    ``state_value`` on such rows and ``evaluate`` on ``[S, N]`` minibatches.
    ``generators``: one torch.Generator per member, the stream its actions and minibatch
    permutations are drawn from (as its solo run draws them from torch's global one);
    None: every draw from torch's global generator."""

    def __init__(self, stacked, members: int, generators: list[torch.Generator] | None = None) -> None:
        super().__init__()
        self.stacked, self.members = stacked, members
        if generators is not None and len(generators) != members:
            raise ValueError(f"MemberPolicy: one generator per member ({members}), got {len(generators)}")
        stacked.generators = generators  # where the stacked ActorCritic samples from
        self.in_keys, self.out_keys = list(stacked.in_keys), list(stacked.out_keys)
        # a feed-forward ActorCritic's key (its outputs are ``act`` of it alone); None: a recurrent model
        self.observation_key = stacked.observation_key if isinstance(stacked, ActorCritic) else None
        # what the model writes: its outputs, and a recurrent one's states after the step
        self.written_keys = [*self.out_keys, *(("next", *key) if isinstance(key, tuple) else ("next", key)
                                               for primer in policy_primers(stacked) for key in primer.keys)]

    def split(self, value: torch.Tensor) -> torch.Tensor:
        return value.unflatten(0, (self.members, -1))

    def member_rows(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The policy's inputs of ``tensordict`` ``[S * P, ...]`` (those it holds) as ``[S, P, ...]``."""
        inputs = {key: self.split(value) for key in self.in_keys
                  if (value := tensordict.get(key, None)) is not None}
        return TensorDict(inputs, batch_size=[self.members, tensordict.shape[0] // self.members,
                                              *tensordict.shape[1:]], device=tensordict.device)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.observation_key is not None:  # a feed-forward ActorCritic: its outputs from the observation alone
            for key, value in self.stacked.act(self.split(tensordict.get(self.observation_key))).items():
                tensordict.set(key, value.flatten(0, 1))
            return tensordict
        rows = self.member_rows(tensordict)
        self.stacked(rows)
        for key in self.written_keys:
            value = rows.get(key, None)  # absent: not asked for (set_actions_only)
            if value is not None:
                tensordict.set(key, value.flatten(0, 1))
        return tensordict

    def state_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        return self.stacked.state_value(self.member_rows(tensordict)).flatten(0, 1)

    def evaluate(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob, entropy, value), each ``[S, N]``, of a minibatch ``[S, N]``."""
        return self.stacked.evaluate(tensordict)

    def zero_member(self, member: int) -> None:
        """Member ``member``'s rows zeroed (``stacking.zero_member``)."""
        zero_member(self.stacked, member)

    @property
    def obs_norm(self):
        return getattr(self.stacked, "obs_norm", None)

    @property
    def generators(self) -> list[torch.Generator] | None:
        return self.stacked.generators

    @property
    def device(self) -> torch.device:
        return next(self.stacked.parameters()).device

    @contextlib.contextmanager
    def rng_kept(self):
        """Run the policy without moving any RNG stream (torch's global ones, the members')."""
        states = [generator.get_state() for generator in self.generators or []]
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                yield
        finally:
            for generator, state in zip(self.generators or [], states):
                generator.set_state(state)


class MemberRewardScaler(RewardScaler):
    """RewardScaler for the sweep's ``[S * P, T]`` rows: the discounted returns of every
    row as one (elementwise), the return statistics and the scale each member's own."""

    def __init__(self, gamma: float, members: int, eps: float = 1e-8, clip: float = 10.0) -> None:
        super().__init__(gamma, eps, clip)
        self.members = [RunningNorm(()) for _ in range(members)]

    @torch.no_grad()
    def __call__(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        returns = self.discounted_returns(reward, done).unflatten(0, (len(self.members), -1))
        rewards = reward.unflatten(0, (len(self.members), -1))
        scaled = []
        for stats, member_returns, member_rewards in zip(self.members, returns, rewards):
            stats.update(member_returns)
            scaled.append(self.scale(member_rewards, stats))
        return torch.cat(scaled)

    def member_state_dict(self, member: int) -> dict:
        """Member ``member``'s state as its solo run's RewardScaler holds it."""
        rows = None if self.returns is None else self.returns.unflatten(0, (len(self.members), -1))[member]
        return {"stats": self.members[member].state_dict(),
                "returns": torch.zeros(0, dtype=torch.float64) if rows is None else rows.clone()}

    def load_member_state_dict(self, member: int, state: dict, rows_per_member: int) -> None:
        """The inverse of ``member_state_dict``: member ``member``'s statistics and running
        returns (its ``rows_per_member`` rows; zeros for the others until they load theirs)."""
        self.members[member].load_state_dict(state["stats"])
        returns = state["returns"]
        if not returns.numel():
            return
        if self.returns is None:
            self.returns = torch.zeros(len(self.members) * rows_per_member, dtype=returns.dtype,
                                       device=returns.device)
        self.returns.unflatten(0, (len(self.members), -1))[member].copy_(returns)


# PPO's settings the members of one batched model may differ in (algo.<name>), each applied per
# member: its lr (MemberAdam's per member), clip range, loss weights, gradient-norm cap, GAE lambda
# (its rows' trace decay), epochs (a member with fewer sits out the later epochs) and minibatch size
# (its minibatches padded to the widest, masked; a member with fewer per epoch sits out the later steps)
MEMBER_OPTIONS = ("lr", "entropy_coef", "clip_epsilon", "value_coef", "max_grad_norm", "gae_lambda", "epochs",
                  "minibatch_size")
INTEGER_MEMBER_OPTIONS = ("epochs", "minibatch_size")  # the others are floats
STEP_COUNT_OPTIONS = ("lr", "epochs", "minibatch_size")  # members differing in one: an Adam step count / lr each
PER_MEMBER_TENSORS = ("entropy_coef", "clip_epsilon", "value_coef", "max_grad_norm")  # [S] float32 in the losses


class MemberPPO(PPO):
    """PPO (rlcollect.PPO, its arguments) for a MemberPolicy: each member updated exactly
    as its solo run's PPO would update it, the members side by side. ``member_options``
    gives the settings of MEMBER_OPTIONS in which the members differ, one value per member
    (the others are PPO's arguments, shared). ``active[m]`` False (``freeze``) keeps member
    m's parameters as they are from then on.

    The optimizer: with one member, PPO's own Adam (a model of one member is its solo run
    bit for bit); members that share their lr, epochs and minibatch size step together,
    through torch's fused Adam (one kernel for all); members that differ in one of them
    (STEP_COUNT_OPTIONS) step through MemberAdam (rlcollect.sweeps.optim: a step count and
    an lr per member, only the members that step moving)."""

    def __init__(self, actor_critic: MemberPolicy, *, member_options: dict[str, list[float]] | None = None,
                 **ppo_options) -> None:
        normalize_reward = ppo_options.pop("normalize_reward", False)
        super().__init__(actor_critic, **ppo_options)
        self.members = actor_critic.members
        self.recurrent = isinstance(actor_critic.stacked, RecurrentActorCritic)  # it trains on sequences
        self.generators = actor_critic.generators or [None] * self.members
        device = next(actor_critic.parameters()).device
        # each member's own value of a setting (MEMBER_OPTIONS), where the members differ in it
        self.member_options = {key: list(values) for key, values in (member_options or {}).items()}
        unknown = sorted(set(self.member_options) - set(MEMBER_OPTIONS))
        if unknown or any(len(values) != self.members for values in self.member_options.values()):
            raise ValueError(f"member_options: one value per member of {', '.join(MEMBER_OPTIONS)}; got "
                             f"{ {key: len(values) for key, values in self.member_options.items()} }")
        self.member_epochs = [int(epochs) for epochs in self._member_values("epochs")]
        if min(self.member_epochs) < 1:
            raise ValueError(f"member_options: every member trains at least 1 epoch, got {self.member_epochs}")
        self.epochs = max(self.member_epochs)  # the update's epochs: a member with fewer sits out the later ones
        self.member_minibatch_sizes = [int(size) for size in self._member_values("minibatch_size")]
        self.member_lrs = [float(lr) for lr in self._member_values("lr")]
        self.lrs_now = list(self.member_lrs)  # each member's lr at its last update (its solo Adam's param group's)
        for key in PER_MEMBER_TENSORS:
            if key in self.member_options:
                setattr(self, key, torch.tensor(self.member_options[key], dtype=torch.float32, device=device))
        # a solo run's Adam param groups (PPO's own optimizer over as many parameters): what a member's checkpoint holds
        self.solo_param_groups = self.optimizer.state_dict()["param_groups"]
        if self.members > 1:
            parameters = list(actor_critic.parameters())
            if any(key in self.member_options for key in STEP_COUNT_OPTIONS):
                self.optimizer = MemberAdam(parameters, self.members, lr=self.member_lrs, eps=1e-5)
            else:  # Adam's fused form: the same arithmetic per element (to an ulp), one kernel per step
                self.optimizer = Adam(parameters, lr=self.lr, eps=1e-5, fused=True)
        if normalize_reward:
            self.reward_scaler = MemberRewardScaler(self.gamma, self.members)
        self.active = torch.ones(self.members, device=device)
        self.some_members: SomeMembers | None = None  # the model computing for some members (made when first asked)
        self.frozen_rows = FrozenRows(self.members)  # torch's Adam: the frozen members' rows, kept

    @property
    def frozen(self) -> list[int]:
        return self.frozen_rows.frozen

    def _member_values(self, key: str) -> list:
        """Each member's value of setting ``key``, as given (not rounded to float32)."""
        return self.member_options.get(key) or [getattr(self, key)] * self.members

    def gae_settings(self, reward: torch.Tensor) -> dict:
        """PPO's, with each member's own lambda on its rows where the members differ in it
        (float64: each row's decay is its solo run's ``gamma * gae_lambda``, rounded once)."""
        lambdas = self.member_options.get("gae_lambda")
        if lambdas is None:
            return super().gae_settings(reward)
        per_row = torch.tensor(lambdas, dtype=torch.float64, device=reward.device)
        return {"gamma": self.gamma, "gae_lambda": per_row.repeat_interleave(reward.shape[0] // self.members)}

    def member_setting(self, member: int, key: str) -> float | int:
        """Member ``member``'s value of setting ``key`` (MEMBER_OPTIONS) now."""
        return self._member_values(key)[member]

    @torch.no_grad()
    def set_member_settings(self, member: int, settings: dict[str, float]) -> None:
        """Member ``member`` trains from its next update with ``settings`` (float settings of
        MEMBER_OPTIONS in which the members differ: those that are per member here)."""
        for key, value in settings.items():
            if key not in self.member_options or key in INTEGER_MEMBER_OPTIONS:
                raise ValueError(f"set_member_settings: {key!r} is not a float setting the members differ in "
                                 f"({', '.join(k for k in self.member_options if k not in INTEGER_MEMBER_OPTIONS)})")
            self.member_options[key][member] = float(value)
            if key == "lr":
                self.member_lrs[member] = float(value)
            if key in PER_MEMBER_TENSORS:
                getattr(self, key)[member] = float(value)

    @torch.no_grad()
    def copy_member(self, target: int, source: int) -> None:
        """Member ``target`` takes member ``source``'s state (population-based training's
        exploit): its parameters and the stacked policy's buffers (the observation
        normaliser's statistics), its Adam moments and step count, its reward scaler's
        return statistics. Its settings, its envs (and their running returns) and its RNG
        stream stay its own."""
        for value in self.actor_critic.stacked.state_dict(keep_vars=True).values():
            value[target].copy_(value[source])
        copy_member_optimizer_state(self.optimizer, target, source, self.members)
        if isinstance(self.reward_scaler, MemberRewardScaler):
            for name, value in self.reward_scaler.members[source].state_dict().items():
                getattr(self.reward_scaler.members[target], name).copy_(value)

    @torch.no_grad()
    def freeze(self, member: int) -> None:
        """Member ``member`` stops learning: its parameters stay as they are now."""
        self.active[member] = 0.0
        # MemberAdam moves only the members that step; torch's Adam moves them all
        self.frozen_rows.freeze(None if isinstance(self.optimizer, MemberAdam) else
                                list(self.actor_critic.parameters()), member)

    def update(self, buffer: RolloutBuffer, frames: int) -> list[dict[str, float]]:
        """PPO.update for every member: a list of each member's mean losses (over its own
        minibatch steps)."""
        progress = min(frames / self.total_frames, 1.0) if self.total_frames > 0 else 0.0
        remaining = 1.0 - progress
        self.lrs_now = [lr * remaining if self.anneal_lr else lr for lr in self.member_lrs]  # as each solo run's
        if isinstance(self.optimizer, MemberAdam):
            self.optimizer.set_lrs(self.lrs_now)
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = self.lrs_now[0]
        clip = self.clip_epsilon * remaining if self.anneal_clip else self.clip_epsilon
        if torch.is_tensor(clip):
            clip = clip.unsqueeze(1)  # [S, 1]: against the members' [S, N] ratios
        self.compute_advantages(buffer)
        transitions = buffer.get(flatten=False)  # [S * P, T]: member m's flat steps are row m of [S, P * T]
        flat = transitions.reshape(-1)
        steps_per_member = flat.shape[0] // self.members
        device = flat.device
        # what a member's permutation orders: its steps one by one, or (recurrent) its sequences, as its solo PPO's
        sequences = self.member_sequences(transitions.shape[0] // self.members, transitions.shape[1], device)
        draws = steps_per_member if sequences is None else sequences[0].numel()
        # what one minibatch of each member takes of its permutation: steps, or (recurrent) whole sequences
        length = self.sequence_length or transitions.shape[1]
        per_minibatch = [size if sequences is None else max(1, size // length) for size in self.member_minibatch_sizes]
        within = torch.arange(length, device=device) if transitions.shape[1] % length == 0 else None  # one length
        # where each sequence starts: the steps whose is_init a minibatch sets (each restarts from its stored state)
        starts = None if sequences is None else sequences[0]
        totals: dict[str, torch.Tensor] = {}
        steps = [0] * self.members
        for epoch in range(self.epochs):
            # each member's own permutation, from its own generator (as its solo run draws it), for as many epochs as
            # it trains, the frozen members' too: no member's draws depend on which others still learn
            drawing = [member for member in range(self.members) if self.member_epochs[member] > epoch]
            orders = {member: torch.randperm(draws, device=device, generator=self.generators[member])
                      for member in drawing}
            stepping = [member for member in drawing if member not in self.frozen]  # the others cost no update
            for learners, chosen in member_minibatches(orders, stepping, per_minibatch, draws):
                every = len(learners) == self.members
                learning = None if every else torch.tensor(learners, device=device)
                if sequences is not None and within is not None and torch.is_tensor(chosen):
                    # sequences of one length, as many for every member: all their steps at once, end to end
                    chosen = (starts[chosen].unsqueeze(-1) + within).flatten(1)
                elif sequences is not None:  # each member's chosen sequences' steps, end to end
                    chosen = [sequence_steps(row, *sequences)[0] for row in chosen]
                index, sample_mask = padded_rows(chosen)
                offsets = (torch.arange(self.members, device=device) if every else learning).unsqueeze(1)
                minibatch = flat[(index + offsets * steps_per_member).reshape(-1)].reshape(len(learners), -1)
                if starts is not None:  # each sequence restarts from its stored hidden state
                    minibatch.set("is_init", minibatch.get("is_init") | torch.isin(index, starts))
                values = self._minibatch_step(minibatch, clip, learning, None if every else learners, sample_mask)
                for key, value in values.items():
                    if key not in totals:
                        totals[key] = torch.zeros(self.members, dtype=value.dtype, device=device)
                    if every:
                        totals[key] += value
                    else:  # the members that sat out (or are frozen): no term
                        totals[key].index_add_(0, learning, value)
                for member in learners:
                    steps[member] += 1
        values = {key: value.tolist() for key, value in totals.items()}  # one sync per update
        return [{**{key: value[member] / steps[member] if steps[member] else 0.0 for key, value in values.items()},
                 "lr": self.lrs_now[member]} for member in range(self.members)]

    def member_sequences(self, rows: int, time: int, device) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A recurrent model's sequences of one member's ``[rows, time]`` rollout: where each
        starts and its length (``sequence_starts``: ``algo.sequence_length`` steps, a row's
        last one shorter where that length does not divide ``time``); None for a
        feed-forward model."""
        if not self.recurrent:
            return None
        return sequence_starts(rows, time, self.sequence_length or time, device)

    def _minibatch_step(self, minibatch, clip, learning: torch.Tensor | None = None,
                        stepping: list[int] | None = None,
                        sample_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One minibatch step of every member (``learning`` None), or of the members
        ``learning`` only (``stepping``, the same as a list; the minibatch holds their
        rows; the others' weights get no gradient, their share of the work is not done and
        the optimizer leaves them as they are). ``sample_mask`` ``[S, N]``: where members'
        minibatches of other sizes were padded, the real samples, the only ones their means
        (advantage normalisation included) read."""
        if learning is None:
            log_prob, entropy, value = self.actor_critic.evaluate(minibatch)
            value_coef, entropy_coef, weight = self.value_coef, self.entropy_coef, self.active
        else:
            log_prob, entropy, value = self._evaluate_some(minibatch, learning)
            value_coef, entropy_coef = (coef[learning] if torch.is_tensor(coef) else coef
                                        for coef in (self.value_coef, self.entropy_coef))
            clip, weight = clip[learning] if torch.is_tensor(clip) else clip, 1.0
        advantage = minibatch.get("advantage")
        if self.normalize_advantage:
            advantage = normalized_advantage(advantage, sample_mask)
        log_ratio = log_prob - minibatch.get("action_log_prob")
        ratio = log_ratio.exp()
        clipped = torch.clamp(ratio, 1 - clip, 1 + clip) if torch.is_tensor(clip) else ratio.clamp(1 - clip, 1 + clip)
        loss_policy = -sample_mean(torch.min(ratio * advantage, clipped * advantage), sample_mask)
        loss_value = 0.5 * sample_mean((value - minibatch.get("value_target")).pow(2), sample_mask)
        entropy_mean = sample_mean(entropy, sample_mask)
        loss = loss_policy + value_coef * loss_value - entropy_coef * entropy_mean
        self.optimizer.zero_grad(set_to_none=True)
        (loss * weight).sum().backward()  # each member's parameters get their own loss's gradient
        parameters = list(self.actor_critic.parameters())
        clip_member_grad_norms(parameters, self.max_grad_norm, self.members)
        step_members(self.optimizer, parameters, self.frozen_rows, stepping)
        with torch.no_grad():
            return {"loss_policy": loss_policy.detach(), "loss_value": loss_value.detach(),
                    "entropy": entropy_mean.detach(), "approx_kl": sample_mean((ratio - 1) - log_ratio, sample_mask),
                    "clip_fraction": sample_mean(((ratio - 1).abs() > clip).to(ratio.dtype), sample_mask)}

    def _evaluate_some(self, minibatch, learning: torch.Tensor):
        """``evaluate`` with the weights of the members ``learning`` alone (their rows of
        every parameter and buffer), on their minibatch ``[len(learning), N]``."""
        if self.some_members is None:
            self.some_members = SomeMembers(self.actor_critic.stacked)
        return self.some_members(learning, "evaluate", minibatch)

    def load_member_state_dict(self, member: int, state: dict, rows_per_member: int) -> None:
        """The inverse of ``member_state_dict`` (a resumed member's checkpoint): its Adam
        state and its reward scaler's (``rows_per_member``: its env rows)."""
        load_member_optimizer_state(self.optimizer, member, state["optimizer"])
        if isinstance(self.reward_scaler, MemberRewardScaler) and "reward_scaler" in state:
            self.reward_scaler.load_member_state_dict(member, state["reward_scaler"], rows_per_member)
        elif self.reward_scaler is not None and "reward_scaler" in state:  # one member: the solo run's scaler
            self.reward_scaler.load_state_dict(state["reward_scaler"])

    def member_state_dict(self, member: int, solo_parameters: list[torch.Tensor]) -> dict:
        """Member ``member``'s PPO state as its solo run's PPO.state_dict() holds it: the
        Adam state of its slice of each parameter (its step count, its moments in the solo
        parameters' shapes) and a solo Adam's param group with its lr."""
        optimizer = member_optimizer_state(self.optimizer, member, solo_parameters, self.solo_param_groups,
                                           lr=self.lrs_now[member])
        ppo = {"optimizer": optimizer}
        if self.reward_scaler is not None:
            ppo["reward_scaler"] = self.reward_scaler.member_state_dict(member)
        return ppo


def member_minibatches(orders: dict[int, torch.Tensor], stepping: list[int], per_minibatch: list[int], draws: int
                       ) -> Iterator[tuple[list[int], torch.Tensor | list[torch.Tensor]]]:
    """One epoch's minibatch steps: the members that step and what each draws, ``[len, W]``
    where they draw as many, else a list. Member m's k-th minibatch is draws ``k * p_m`` to
    ``(k + 1) * p_m`` of its permutation ``orders[m]`` (``p_m``: ``per_minibatch[m]``), as
    its solo PPO takes them; where the members of ``stepping`` differ in ``p_m``, the update
    runs the most steps of any of them, and a member whose epoch has ended sits out the
    later steps."""
    if not stepping:
        return
    sizes = {per_minibatch[member] for member in stepping}
    if len(sizes) == 1:  # one size: the members' permutations sliced side by side
        size = sizes.pop()
        order = torch.stack([orders[member] for member in stepping])
        for start in range(0, draws, size):
            yield stepping, order[:, start:start + size]
        return
    for step in range(max(-(-draws // per_minibatch[member]) for member in stepping)):
        learners = [member for member in stepping if step * per_minibatch[member] < draws]
        yield learners, [orders[member][step * per_minibatch[member]:(step + 1) * per_minibatch[member]]
                         for member in learners]


def normalized_advantage(advantage: torch.Tensor, sample_mask: torch.Tensor | None) -> torch.Tensor:
    """Each member's advantages ``[S, N]`` less their mean over their (``sample_mask``'s
    real) samples, over their standard deviation (Bessel-corrected, as torch.std), as its
    solo PPO normalises a minibatch; a member of one sample keeps its advantage."""
    if sample_mask is None:
        if advantage.shape[1] < 2:
            return advantage
        return (advantage - advantage.mean(1, keepdim=True)) / (advantage.std(1, keepdim=True) + 1e-8)
    weight = sample_mask.to(advantage.dtype)
    count = weight.sum(1, keepdim=True)
    centred = advantage - (advantage * weight).sum(1, keepdim=True) / count
    std = ((centred.pow(2) * weight).sum(1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    return torch.where(count > 1, centred / (std + 1e-8), advantage)


@torch.no_grad()
def clip_member_grad_norms(parameters: list[torch.Tensor], max_norm: float | torch.Tensor,
                           members: int) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for each member alone: member m's gradients
    (row m of every parameter's) scaled by ``min(1, max_norm / (their total norm + 1e-6))``
    (``max_norm``: one for all, or ``[S]``, one per member). Returns the members' total
    norms ``[S]``."""
    if members == 1 and not torch.is_tensor(max_norm):  # the solo run's own call, on every device: bit-equal
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm).reshape(1)
    grads = [parameter.grad for parameter in parameters if parameter.grad is not None]
    # as clip_grad_norm_ computes it: each gradient's norm, then the norm of those norms (per member)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grad.reshape(members, -1), 2.0, dim=1)
                                                  for grad in grads]), 2.0, dim=0)
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, [coefficient.reshape(members, *([1] * (grad.dim() - 1))) for grad in grads])
    return total


class MemberPPOLearner(Learner):
    """PPOLearner for the members of a batched sweep: ``learn`` updates them all and
    returns a list of each member's metrics (the sweep's loop hands member m its own).

    Args:
        policy: the MemberPolicy.
        buffer: the RolloutBuffer ``[S * P, T + 1]`` of the sweep's batches.
        total_frames: one member's frames (what the annealing runs over).
        **ppo_options: PPO's own arguments.
    """

    def __init__(self, policy: MemberPolicy, buffer: RolloutBuffer, *, total_frames: int = -1,
                 **ppo_options) -> None:
        self.ppo, self.buffer = MemberPPO(policy, total_frames=total_frames, **ppo_options), buffer
        self.members = policy.members

    def learn(self, batch: TensorDictBase | None, frames: int) -> list[dict[str, float]]:
        """``frames``: one member's frames so far."""
        self.buffer.add(batch if batch is self.buffer.rollout else
                        batch.reshape(self.buffer.num_envs, self.buffer.rollout_len))
        metrics = self.ppo.update(self.buffer, frames)
        norm = self.ppo.actor_critic.obs_norm
        if norm is not None:  # after the update, as PPOLearner: each member folds in its own rows
            norm.update(self.ppo.actor_critic.split(transition_view(self.buffer.rollout).get("observation")))
        return metrics

    def freeze(self, member: int) -> None:
        """Member ``member`` learns no more (MemberPPO.freeze)."""
        self.ppo.freeze(member)

    # population-based training (rlcollect.sweeps.pbt) reads and sets the members through these
    def member_setting(self, member: int, key: str) -> float | int:
        return self.ppo.member_setting(member, key)

    def set_member_settings(self, member: int, settings: dict[str, float]) -> None:
        self.ppo.set_member_settings(member, settings)

    def copy_member(self, target: int, source: int) -> None:
        self.ppo.copy_member(target, source)

    def member_state_dict(self, member: int, solo_policy: torch.nn.Module) -> dict:
        """Member ``member``'s learner state as its solo run's PPOLearner saves it."""
        return {"ppo": self.ppo.member_state_dict(member, list(solo_policy.parameters()))}

    def load_member_state_dict(self, member: int, state: dict) -> None:
        """Member ``member``'s learner state from its solo run's PPOLearner state (a resumed
        member's checkpoint)."""
        self.ppo.load_member_state_dict(member, state["ppo"], self.buffer.num_envs // self.members)

    def state_dict(self) -> dict:
        return {"ppo": self.ppo.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.ppo.load_state_dict(state["ppo"])


def member_policy_state(policy: MemberPolicy, solo: torch.nn.Module, member: int) -> dict:
    """Member ``member``'s policy state dict in the solo policy's shapes."""
    return member_state_dict(policy.stacked.state_dict(), solo, member)
