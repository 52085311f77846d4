"""Members that do not stack, trained in lockstep in one process (docs/sweeps.md, "Members
in lockstep").

A batched sweep of an algorithm or model with no stacked form (a user's learner or model
class, a layer that does not stack) still shares what
a process of its own would pay for: the start-up, one collector stepping every member's
envs as one batch, one evaluator. Each
member keeps its solo run's own policy and learner (built from its own config: the members
may differ in any ``algo.*`` setting), and each draws from its own torch RNG streams:

    MemberStreams     each member's torch RNG state, swapped in (torch.set_rng_state)
                      around everything of that member that draws, so that member m
                      draws exactly what its solo run draws, in the same order
    LockstepPolicy    the collector's policy over the sweep's ``[S * P]`` env rows: member
                      m's solo policy on its rows, under its streams; its random actions
                      (``init_random_frames``) drawn the same way
    LockstepLearner   every member's solo learner on its rows of the batch, under its
                      streams; a replay learner's rows go into its own replay buffer, as
                      its solo run's collector writes them

So every member is its solo run bit for bit, whatever the number of members
(tests/test_lockstep.py). The members' updates and policy calls run one after the other:
the sweep saves each member's process and start-up, not the per-member work; a member
that stops is called no more. The stacked DQN (member_dqn.py) reuses MemberStreams for
the draws its stacked computation cannot make (exploration, random actions, replay
sampling).
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rlcollect.algos.learners import Learner
from rlcollect.envs.spaces import random_actions
from rlcollect.modules.encoders import RunningNorm
from rlcollect.primers import HiddenStatePrimer, policy_primers


class MemberStreams:
    """Each member's own torch RNG streams: the state torch's global CPU generator (and on
    CUDA the device's) has in its solo run, captured right after its policy was built
    (``capture``), kept in a CPU generator (what its run's checkpoints save) and a CUDA
    state. ``member(m)`` swaps member m's states in for what runs inside it."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        device = torch.device(device)
        self.cuda = (device.index or 0) if device.type == "cuda" else None
        self.generators: list[torch.Generator] = []
        self.cuda_states: list[torch.Tensor] = []

    def capture(self) -> torch.Generator:
        """A new member whose streams start where torch's global ones stand now; returns its
        CPU generator."""
        generator = torch.Generator()
        generator.set_state(torch.get_rng_state())
        self.generators.append(generator)
        if self.cuda is not None:
            self.cuda_states.append(torch.cuda.get_rng_state(self.cuda))
        return generator

    def __len__(self) -> int:
        return len(self.generators)

    @contextlib.contextmanager
    def kept(self):
        """Whatever runs inside moves no RNG stream: neither torch's global ones nor any
        member's."""
        states = [generator.get_state() for generator in self.generators]
        cuda_states = list(self.cuda_states)
        try:
            with torch.random.fork_rng(devices=[] if self.cuda is None else [self.cuda]):
                yield
        finally:
            for generator, state in zip(self.generators, states):
                generator.set_state(state)
            self.cuda_states[:] = cuda_states

    def random_actions(self, env) -> torch.Tensor:
        """The random actions of ``env``'s rows (every member's P envs), member m's drawn from
        its streams as its solo run's env draws them for its P envs (``PolicyRunner`` asks a
        policy with a ``random_actions(env)`` method for them)."""
        rows = (env.num_envs or 1) // len(self)
        actions = []
        for member in range(len(self)):
            with self.member(member):
                actions.append(random_actions(env.action_space, (rows,), env.device))
        return torch.cat(actions)

    @contextlib.contextmanager
    def member(self, member: int):
        """Torch's global RNG streams are member ``member``'s inside; outside they are as
        they were, and the member's stream goes on from where its draws inside left it."""
        saved = torch.get_rng_state()
        torch.set_rng_state(self.generators[member].get_state())
        if self.cuda is not None:
            saved_cuda = torch.cuda.get_rng_state(self.cuda)
            torch.cuda.set_rng_state(self.cuda_states[member], self.cuda)
        try:
            yield
        finally:
            self.generators[member].set_state(torch.get_rng_state())
            torch.set_rng_state(saved)
            if self.cuda is not None:
                self.cuda_states[member] = torch.cuda.get_rng_state(self.cuda)
                torch.cuda.set_rng_state(saved_cuda, self.cuda)


class LockstepPolicy(TensorDictModuleBase):
    """The members' solo policies as one policy over the sweep's ``[S * P, ...]`` rows
    (member m's P envs in rows ``m * P ... m * P + P - 1``): member m's policy runs on its
    rows under its RNG streams, and what it writes (every entry it sets) is joined in row
    order. The solo policies are not submodules (each is its member's run's own module);
    ``policies[m]`` is member m's."""

    def __init__(self, policies: Sequence[torch.nn.Module], streams: MemberStreams) -> None:
        super().__init__()
        self.policies = list(policies)  # a list, not a ModuleList: each is its member's own module
        self.streams = streams
        self.stopped: set[int] = set()
        self.idle_rows: frozenset[int] = frozenset()  # rows an evaluation has paused (rows_idle)
        self.in_keys, self.out_keys = list(policies[0].in_keys), list(policies[0].out_keys)
        self.register_buffer("_device", torch.empty(0, device=next(policies[0].parameters()).device))

    @property
    def members(self) -> int:
        return len(self.policies)

    def hidden_state_primers(self) -> list[HiddenStatePrimer]:
        """The hidden-state entries every member's rows carry: those of one member's policy
        (``rlcollect.primers.policy_primers`` asks a policy for them)."""
        return policy_primers(self.policies[0])

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        rows = tensordict.shape[0] // self.members
        skipped = [member in self.stopped or (bool(self.idle_rows) and self.idle_rows.issuperset(
            range(member * rows, (member + 1) * rows))) for member in range(self.members)]
        if all(skipped):  # someone's outputs must fill the rows
            skipped[0] = False
        outputs: list[dict | None] = []  # each member's, None for a member not called
        for member, policy in enumerate(self.policies):
            if skipped[member]:
                outputs.append(None)
                continue
            part = tensordict[member * rows:(member + 1) * rows]
            given = {key: part.get(key) for key in part.keys(True, True)}
            with self.streams.member(member):
                written = policy(part)
            written = part if written is None else written
            # what the policy set: a new tensor, not its row view
            outputs.append({key: value for key, value in written.items(True, True) if given.get(key) is not value})
        running = next((written for written in outputs if written is not None), None)
        for key, stand_in in running.items():  # a member not called: a called member's outputs (valid actions,
            tensordict.set(key, torch.cat([stand_in if written is None else written[key]  # which no one reads)
                                           for written in outputs]))
        return tensordict

    def rows_idle(self, rows) -> None:
        """The env rows an evaluation has paused, its counted episodes on them done (the
        EvalCollector says so; empty at its end): a member whose rows are all idle is not
        called until they are not, as its solo run's evaluation would have ended there."""
        self.idle_rows = frozenset(rows)

    def stop_member(self, member: int) -> None:
        """Member ``member``'s policy runs no more (its envs are paused and it is not
        evaluated): its rows get a running member's outputs, which no one reads."""
        self.stopped.add(member)

    @torch.no_grad()
    def zero_member(self, member: int) -> None:
        """Member ``member``'s parameters zeroed and its observation statistics reset (a
        failed member: its actions stay finite)."""
        for parameter in self.policies[member].parameters():
            parameter.zero_()
        for module in self.policies[member].modules():
            if isinstance(module, RunningNorm):
                module.running_mean.zero_()
                module.running_var.fill_(1.0)

    def random_actions(self, env) -> torch.Tensor:
        """The env's random actions, member m's from its streams (``MemberStreams.random_actions``)."""
        return self.streams.random_actions(env)


class LockstepLearner(Learner):
    """Every member's solo learner, each on its rows of the sweep's batch and under its RNG
    streams; ``learn`` returns a list of each member's metrics (a frozen member's: empty).

    A replay learner (``learner.replay``) gets its rows written into its replay buffer
    (``replay_buffers[m]``, the one it was built on) as its solo run's collector writes them
    (``extend_batch``), then ``learn(None, frames)``; an on-policy learner gets its rows as
    its batch.
    """

    def __init__(self, learners: Sequence[Learner], streams: MemberStreams,
                 replay_buffers: Sequence | None = None) -> None:
        self.learners, self.streams = list(learners), streams
        self.replay_buffers = list(replay_buffers) if replay_buffers is not None else [None] * len(self.learners)
        self.members = len(self.learners)
        self.frozen: set[int] = set()

    def learn(self, batch: TensorDictBase | None, frames: int) -> list[dict[str, float]]:
        """``frames``: one member's frames so far."""
        rows = batch.shape[0] // self.members
        metrics: list[dict[str, float]] = []
        for member, learner in enumerate(self.learners):
            if member in self.frozen:
                metrics.append({})
                continue
            own = batch[member * rows:(member + 1) * rows]
            with self.streams.member(member):
                if learner.replay:
                    self.replay_buffers[member].extend_batch(own)
                    metrics.append(learner.learn(None, frames))
                else:
                    metrics.append(learner.learn(own, frames))
        return metrics

    def freeze(self, member: int) -> None:
        """Member ``member`` learns no more."""
        self.frozen.add(member)

    def member_state_dict(self, member: int, solo_policy=None) -> dict:
        """Member ``member``'s learner state: its solo learner's own."""
        return self.learners[member].state_dict()

    def load_member_state_dict(self, member: int, state: dict) -> None:
        """Member ``member``'s learner state: its solo learner loads its own."""
        self.learners[member].load_state_dict(state)

    def state_dict(self) -> dict:
        return {"members": [learner.state_dict() for learner in self.learners]}

    def load_state_dict(self, state: dict) -> None:
        for learner, member_state in zip(self.learners, state["members"]):
            learner.load_state_dict(member_state)
