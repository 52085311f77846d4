"""Whether the caller of a policy reads its action alone (an evaluation), so that the policy
may skip what only training reads (docs/collectors.md, EvalCollector).

    with set_actions_only():          # what EvalCollector's collector runs its policy in
        policy(tensordict)            # ActorCritic writes "action" and nothing else
    actions_only()                    # True inside, False outside

The action is the same either way (the same draws from the same generators): only the
outputs nobody reads (ActorCritic's log-prob and state value) are left out. The setting is
per thread, as ``set_recurrent_mode``'s: an evaluation thread does not change what a
training collector's policy writes.

``act_deterministically(policy)`` makes a policy module write its deterministic action in
every call, whoever calls it (``rlcollect.load_policy``'s default).
"""
from __future__ import annotations

import torch
from tensordict.nn import InteractionType, set_interaction_type

from rlcollect.thread_settings import ThreadSetting, ThreadValues


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


# ---------------------------------------------------------------------------- a deterministic module
ENTERED = ThreadValues()  # per thread: the interaction-type contexts the pre-hooks below entered, innermost last


def act_deterministically(module: torch.nn.Module) -> torch.nn.Module:
    """Make ``module`` act deterministically in its forward, whatever interaction type its
    caller set: each call runs under ``tensordict.nn.set_interaction_type(DETERMINISTIC)``
    (the policy's mode, or its greedy action), set by forward hooks and undone after the
    call, even one that raises. In place (its class, parameters and state_dict unchanged);
    returns ``module``. What ``rlcollect.load_policy`` gives by default."""
    module.register_forward_pre_hook(enter_deterministic)
    module.register_forward_hook(exit_deterministic, always_call=True)
    return module


def enter_deterministic(module: torch.nn.Module, args) -> None:
    """Forward pre-hook of ``act_deterministically``."""
    context = set_interaction_type(InteractionType.DETERMINISTIC)
    context.__enter__()
    ENTERED.stack.append(context)


def exit_deterministic(module: torch.nn.Module, args, output) -> None:
    """Forward hook of ``act_deterministically`` (called after a forward that raised too)."""
    ENTERED.stack.pop().__exit__(None, None, None)
