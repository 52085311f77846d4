"""SAC's members stacked into one model (docs/sweeps.md, "How members are stacked").

Each member's solo SACLearner is built first, under its RNG streams, as its solo run builds
it (its critics initialised from its own stream); then their actors, critics and target
critics stack (``stack_modules``: one batched matrix product per layer for every member),
and SAC's own update (rlcollect.algos.sac, whose losses take their means over the sample
dim) runs on stacked batches ``[S, B]``:

    MemberSACActor     the collector's policy and the learner's actor: the stacked
                       SACActor, each member's Gaussian noise drawn from its own streams
                       (lockstep.MemberStreams), as its solo actor draws it
    MemberSACLearner   SACLearner on the stacked model: the members' losses summed (each
                       parameter row gets its own member's gradient), Adam per member
                       (MemberAdam where their learning rates differ), each member's
                       discount, Polyak step and entropy weight; each member's replay
                       buffer (member_dqn.MemberReplay), with prioritized replay its
                       priorities its own TD errors; per member metrics and solo-shaped
                       state; population-based training's member interface

The settings the members may differ in are MEMBER_SAC_OPTIONS; a model of one member is
its solo run bit for bit (tests/test_member_sac.py).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from tensordict import TensorDictBase

from rlcollect.algos.learners import replay_state
from rlcollect.algos.optim import Adam
from rlcollect.algos.sac import SACLearner
from rlcollect.sweeps.member_dqn import MemberReplay
from rlcollect.sweeps.optim import (
    FrozenRows,
    MemberAdam,
    copy_member_optimizer_state,
    load_member_optimizer_state,
    member_optimizer_state,
    step_members,
)
from rlcollect.sweeps.stacking import load_member_state, member_state_dict, stack_modules
from rlcollect.sweeps.streamed import StreamedMembers

# SAC's settings (algo.<name>) the members of one stacked model may differ in, each applied per member
# (``autotune`` a 0/1 setting: a member without it keeps its alpha)
MEMBER_SAC_OPTIONS = ("gamma", "tau", "actor_lr", "critic_lr", "alpha", "autotune", "batch_size")
INTEGER_SAC_OPTIONS = ("autotune", "batch_size")
OPTIMIZERS = {"actor_optimizer": "actor_lr", "critic_optimizer": "critic_lr", "alpha_optimizer": "actor_lr"}


class MemberSACActor(StreamedMembers):
    """The stacked SACActor ``stacked`` of ``streams``' members: as the collector's policy over
    the sweep's ``[S * P, ...]`` rows, and as the learner's actor on ``[S, B, ...]``
    observations (``sample``); member m's noise drawn under its streams, as its solo actor
    draws it (``torch.randn_like`` of its mean)."""

    in_keys = ["observation"]
    out_keys = ["action"]

    @property
    def action_dim(self) -> int:
        return self.stacked.action_dim

    def noise(self, mean: torch.Tensor) -> torch.Tensor:
        """Standard normal noise shaped as ``mean`` ``[S, ...]``, member m's from its streams."""
        return self.member_draws(mean, lambda member, like: torch.randn_like(like))

    def sample(self, observation) -> tuple[torch.Tensor, torch.Tensor]:
        """``SACActor.sample`` of every member on its observations ``[S, B, ...]``."""
        return self.stacked.sample(observation, self.noise)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self.stacked.act(self.split(tensordict.get("observation")), self.noise)
        tensordict.set("action", action.flatten(0, 1))
        return tensordict


def solo_setting(learner: SACLearner, key: str) -> float:
    """A solo SACLearner's value of setting ``key`` (MEMBER_SAC_OPTIONS)."""
    if key == "autotune":
        return int(learner.autotune)
    if key == "batch_size":  # its replay buffer's (MemberReplay pads a smaller one's samples)
        return int(learner.replay_buffer.batch_size)
    if key.endswith("_lr"):
        return float(getattr(learner, key.replace("_lr", "_optimizer")).param_groups[0]["lr"])
    return learner.alpha if key == "alpha" else float(getattr(learner, key))


class MemberSACLearner(SACLearner):
    """SACLearner over the members of a stacked sweep, made from their solo learners
    (``learners``, each built on its member's solo actor and replay buffer, under its
    streams): ``learn`` writes each member's rows into its replay buffer, then takes
    ``gradient_steps_per_batch`` steps of every member on its own samples; returns a list
    of each member's metrics. With one member: SAC's own optimizers and arithmetic (bit for
    bit its solo run); with more: fused Adam where the members share a learning rate,
    MemberAdam where they differ.

    Args:
        learners: the members' solo SACLearners (their settings are read from them).
        policy: the MemberSACActor stacking their actors.
        replay: the MemberReplay of their replay buffers.
    """

    def __init__(self, learners: Sequence[SACLearner], policy: MemberSACActor, replay: MemberReplay) -> None:
        first = learners[0]
        self.solos, self.actor, self.replay_buffer = list(learners), policy, replay
        self.members = members = policy.members
        self.critics = stack_modules([learner.critics for learner in learners])
        self.targets = stack_modules([learner.targets for learner in learners]).requires_grad_(False)
        for key in ("policy_frequency", "target_network_frequency", "gradient_steps", "learning_starts",
                    "terminal_keys", "target_entropy", "updates", "prioritized"):
            setattr(self, key, getattr(first, key))
        self.settings = {key: [solo_setting(learner, key) for learner in learners] for key in MEMBER_SAC_OPTIONS}
        self.differing = [key for key, values in self.settings.items() if len(set(values)) > 1]
        self.tuned = [bool(value) for value in self.settings["autotune"]]  # the members whose alpha is tuned
        self.autotune = any(self.tuned)  # SAC's update computes alpha's loss (kept for the tuned members)
        device = policy.stacked.action_scale.device
        # shared: the solo run's float; differing: one value per member, [S, 1] against the members' [S, B] rows
        self.gamma, self.tau = (torch.tensor(self.settings[key], device=device).unsqueeze(1)
                                if key in self.differing else getattr(first, key) for key in ("gamma", "tau"))
        self.log_alpha = torch.stack([learner.log_alpha.detach() for learner in learners]).reshape(members, 1).clone()
        self.log_alpha.requires_grad_(self.autotune)
        self.solo_param_groups = {name: [None if getattr(learner, name) is None else
                                         getattr(learner, name).state_dict()["param_groups"] for learner in learners]
                                  for name in OPTIMIZERS}
        parameters = {"actor_optimizer": list(policy.stacked.parameters()),
                      "critic_optimizer": list(self.critics.parameters()), "alpha_optimizer": [self.log_alpha]}
        self.frozen: dict = {}  # optimizer -> (its parameters, FrozenRows)
        for name, lr_key in OPTIMIZERS.items():
            some = name == "alpha_optimizer" and not all(self.tuned)  # MemberAdam: it steps the tuned members alone
            optimizer = None if name == "alpha_optimizer" and not self.autotune else \
                self.member_optimizer(parameters[name], lr_key, some)
            setattr(self, name, optimizer)
            if optimizer is not None:
                self.frozen[optimizer] = (parameters[name], FrozenRows(members))
        self.learning = list(range(members))  # the members that still learn

    def member_optimizer(self, parameters: list[torch.Tensor], lr_key: str, some: bool = False):
        """Adam over stacked ``parameters`` with each member's ``lr_key``: the solo run's Adam
        for one member, fused Adam for members that share it, else (or for ``some`` of the
        members) MemberAdam."""
        lrs = self.settings[lr_key]
        if self.members == 1:
            return Adam(parameters, lr=lrs[0])
        if lr_key in self.differing or some:
            return MemberAdam(parameters, self.members, lr=lrs)
        return Adam(parameters, lr=lrs[0], fused=True)  # the same arithmetic per element (to an ulp), one kernel

    def alphas(self) -> list[float]:
        return self.log_alpha.detach().exp().reshape(-1).tolist()

    def step_optimizer(self, optimizer) -> None:
        """A step of the members that learn (``step_members``); of alpha's, those that tune it."""
        parameters, frozen = self.frozen[optimizer]
        step_members(optimizer, parameters, frozen, self.learning if optimizer is not self.alpha_optimizer else
                     [member for member in self.learning if self.tuned[member]])

    def update(self, batch: TensorDictBase) -> dict[str, torch.Tensor]:
        """SAC's update, each member's Gaussian noise drawn for its own samples alone (on a
        sample padded to one size, members of other batch sizes: its real ones)."""
        with self.actor.drawing_rows(self.replay_buffer.batch_sizes):
            return super().update(batch)

    @torch.no_grad()
    def update_targets(self) -> None:
        if not torch.is_tensor(self.tau):  # one tau for every member (the solo run's arithmetic for one)
            return super().update_targets()
        for target, online in zip(self.targets.parameters(), self.critics.parameters()):
            target.lerp_(online, self.tau.reshape(self.members, *([1] * (target.dim() - 1))))

    def learn(self, batch: TensorDictBase | None, frames: int) -> list[dict[str, float]]:
        """``frames``: one member's frames so far."""
        self.replay_buffer.extend(batch)
        sizes = self.replay_buffer.sizes()
        metrics = [{"buffer_size": float(size), "alpha": alpha} for size, alpha in zip(sizes, self.alphas())]
        if frames < self.learning_starts or min(sizes) == 0:
            return metrics
        # on samples [S, B]; as in a solo run, whose collector wrote the batch: the first sample's statistics
        totals, counts = self.gradient_steps_taken(learn_stats=True)
        values = {key: value.tolist() for key, value in totals.items()}  # one sync; then as a solo run divides
        for member, (row, alpha) in enumerate(zip(metrics, self.alphas())):
            row.update({key: value[member] / counts[key] for key, value in values.items()
                        if key != "loss_alpha" or self.tuned[member]})
            row["alpha"] = alpha
        return metrics

    # population-based training (rlcollect.sweeps.pbt) reads and sets the members through these
    def member_setting(self, member: int, key: str) -> float:
        """Member ``member``'s value of setting ``key`` (MEMBER_SAC_OPTIONS) now; ``alpha``:
        its entropy weight now (tuned, with ``autotune``)."""
        return self.alphas()[member] if key == "alpha" else self.settings[key][member]

    @torch.no_grad()
    def set_member_settings(self, member: int, settings: dict[str, float]) -> None:
        """Member ``member`` trains with ``settings`` (float settings the members differ in) from its
        next gradient step; ``alpha`` sets its entropy weight now."""
        for key, value in settings.items():
            if key not in self.differing or key in INTEGER_SAC_OPTIONS:
                floats = [name for name in self.differing if name not in INTEGER_SAC_OPTIONS]
                raise ValueError(f"set_member_settings: {key!r} is not a float setting the members differ in "
                                 f"({', '.join(floats)})")
            self.settings[key][member] = float(value)
            if key == "alpha":
                self.log_alpha[member] = math.log(value)
            elif key in ("gamma", "tau"):
                getattr(self, key)[member] = float(value)
            else:  # a learning rate the members differ in: MemberAdam's
                for name, lr_key in OPTIMIZERS.items():
                    if lr_key == key and getattr(self, name) is not None:
                        getattr(self, name).set_lrs(self.settings[key])

    @torch.no_grad()
    def copy_member(self, target: int, source: int) -> None:
        """Member ``target`` takes member ``source``'s state (population-based training's
        exploit): its actor (observation statistics included), critics, target critics,
        entropy weight and Adam state. Its settings, replay buffer, envs and RNG streams stay
        its own."""
        for module in (self.actor.stacked, self.critics, self.targets):
            for value in module.state_dict(keep_vars=True).values():
                value[target].copy_(value[source])
        self.log_alpha[target] = self.log_alpha[source]
        for optimizer in self.frozen:
            copy_member_optimizer_state(optimizer, target, source, self.members)

    def freeze(self, member: int) -> None:
        """Member ``member`` learns no more (its rows still compute, its parameters stay)."""
        self.learning.remove(member)
        for optimizer, (parameters, frozen) in self.frozen.items():
            frozen.freeze(None if isinstance(optimizer, MemberAdam) else parameters, member)

    def member_state_dict(self, member: int, solo_policy=None) -> dict:
        """Member ``member``'s learner state as its solo run's SACLearner saves it."""
        solo = self.solos[member]
        optimizers = {}
        for name, lr_key in OPTIMIZERS.items():
            optimizer = getattr(self, name)
            optimizers[name] = {} if getattr(solo, name) is None else member_optimizer_state(
                optimizer, member, [parameter for group in getattr(solo, name).param_groups
                                    for parameter in group["params"]],
                self.solo_param_groups[name][member], lr=self.settings[lr_key][member])
        return {"critics": member_state_dict(self.critics.state_dict(), solo.critics, member),
                "targets": member_state_dict(self.targets.state_dict(), solo.targets, member), **optimizers,
                "log_alpha": self.log_alpha.detach()[member].reshape(()).clone(), "updates": self.updates,
                "replay_buffer": replay_state(self.replay_buffer.buffers[member])}

    @torch.no_grad()
    def load_member_state_dict(self, member: int, state: dict) -> None:
        """The inverse of ``member_state_dict`` (a resumed member's checkpoint): its critics,
        target critics, Adam states, entropy weight and replay buffer; the update count is
        the model's, one for all."""
        load_member_state(self.critics, state["critics"], member)
        load_member_state(self.targets, state["targets"], member)
        for name in OPTIMIZERS:
            optimizer = getattr(self, name)
            if optimizer is not None and state.get(name):
                load_member_optimizer_state(optimizer, member, state[name])
        self.log_alpha[member] = state["log_alpha"].reshape(())
        self.updates = int(state["updates"])
        self.replay_buffer.buffers[member].load_state_dict(state["replay_buffer"])

    def state_dict(self) -> dict:
        raise NotImplementedError("a stacked sweep saves each member's state (member_state_dict)")

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError("a stacked sweep loads each member's state (load_member_state_dict)")
