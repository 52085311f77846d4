"""The policy of a stacked model whose members draw from their own RNG streams
(lockstep.MemberStreams): the stacked DQN's and SAC's (docs/sweeps.md, "How members are
stacked"). What they share is here; each kind's own draws are in its module."""
from __future__ import annotations

import contextlib

import torch
from tensordict.nn import TensorDictModuleBase

from rlcollect.sweeps.lockstep import MemberStreams
from rlcollect.sweeps.stacking import zero_member


class StreamedMembers(TensorDictModuleBase):
    """``stacked`` (a module of ``stack_modules``, reading ``[S, N, ...]``) as a policy over
    the sweep's ``[S * P, ...]`` rows, each member drawing what it draws from its streams
    in ``streams``, as its solo policy draws it from torch's global ones."""

    def __init__(self, stacked: torch.nn.Module, streams: MemberStreams) -> None:
        super().__init__()
        self.stacked, self.streams = stacked, streams
        self.members = len(streams)
        self.drawn_rows: list[int] | None = None  # each member's real rows of a padded sample (``drawing_rows``)

    @contextlib.contextmanager
    def drawing_rows(self, rows: list[int]):
        """Inside, member m draws for the first ``rows[m]`` rows of what it draws for (its
        real samples of a sample padded to one size, MemberReplay), as its solo run draws for
        its batch; the padding rows get zeros."""
        self.drawn_rows = list(rows)
        try:
            yield
        finally:
            self.drawn_rows = None

    @property
    def generators(self) -> list[torch.Generator]:
        return self.streams.generators

    @property
    def obs_norm(self):
        return self.stacked.obs_norm

    def split(self, value: torch.Tensor) -> torch.Tensor:
        """``[S * P, ...]`` rows -> ``[S, P, ...]``."""
        return value.unflatten(0, (self.members, -1))

    def member_draws(self, like: torch.Tensor, draw) -> torch.Tensor:
        """``draw(m, like[m])`` for each member m under its streams, stacked ``[S, ...]``
        (one member: its draw, so a model of one member draws as its solo run)."""
        draws = []
        for member in range(self.members):
            own = like[member] if self.drawn_rows is None else like[member, :self.drawn_rows[member]]
            with self.streams.member(member):
                drawn = draw(member, own)
            if drawn.shape[0] < like.shape[1]:  # a padded sample's rows past the member's own
                drawn = torch.cat([drawn, drawn.new_zeros(like.shape[1] - drawn.shape[0], *drawn.shape[1:])])
            draws.append(drawn)
        return torch.stack(draws)

    def random_actions(self, env) -> torch.Tensor:
        """The env's random actions, member m's from its streams (``MemberStreams.random_actions``)."""
        return self.streams.random_actions(env)

    def zero_member(self, member: int) -> None:
        """Member ``member``'s rows zeroed (``stacking.zero_member``)."""
        zero_member(self.stacked, member)

    def rng_kept(self):
        """Run the policy without moving any RNG stream (``MemberStreams.kept``)."""
        return self.streams.kept()
