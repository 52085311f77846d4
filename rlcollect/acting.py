"""Whether the caller of a policy reads its action alone (an evaluation), so that the policy
may skip what only training reads (docs/collectors.md, EvalCollector).

    with set_actions_only():          # what EvalCollector's collector runs its policy in
        policy(tensordict)            # ActorCritic writes "action" and nothing else
    actions_only()                    # True inside, False outside

The action is the same either way (the same draws from the same generators): only the
outputs nobody reads (ActorCritic's log-prob and state value) are left out. The setting is
per thread, as ``set_recurrent_mode``'s: an evaluation thread does not change what a
training collector's policy writes.
"""
from __future__ import annotations

from rlcollect.thread_settings import ThreadSetting


def actions_only() -> bool:
    """Whether policies called on this thread are asked for their action alone."""
    return set_actions_only.current()


class set_actions_only(ThreadSetting):
    """Ask the policies called inside it for their action alone (``on``), or for all their
    outputs (``on=False``). A context manager or a decorator; contexts nest, and each exit
    restores the setting it found."""

    default = False

    def __init__(self, on: bool = True) -> None:
        super().__init__(bool(on))
