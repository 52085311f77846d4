"""The policy as the per-step loop runs it (collectors/single.py).

    carrier ──(cast to policy_device where the env's differs, then a CUDA sync)──▶ policy ──▶ output
                                                     or its CUDA graph's replay (cudagraph.py)
    output: the carrier's entries and what the policy wrote (an out-of-place policy's too)
    random steps: the env's random action, no policy call

The policy is used as it is, or as a copy on policy_device when its weights live elsewhere;
``load_weights`` refreshes the copy (into the captured parameters, with a CUDA graph).
"""
from __future__ import annotations

from typing import Sequence

from tensordict import TensorDictBase

from rlcollect.collectors.cudagraph import GraphedPolicy, graphed_policy
from rlcollect.collectors.devices import CollectorDevices, load_policy_weights, policy_on_device, sync_function


class PolicyRunner:
    """Runs ``policy`` (None: random actions only) on the carriers of ``env``, placed on
    ``devices.policy`` (``no_cuda_sync``: skip the sync after the carrier's copy there)."""

    def __init__(self, policy, env, devices: CollectorDevices, no_cuda_sync: bool) -> None:
        self.policy, self.source = policy_on_device(policy, devices.policy)
        self.env, self.device = env, devices.policy
        self.cast = devices.policy != devices.env
        self.sync = sync_function(devices.policy, no_cuda_sync)
        self.graphed: GraphedPolicy | None = None  # cudagraph_policy: the forward replayed as a CUDA graph

    def run(self, carrier: TensorDictBase, random: bool) -> TensorDictBase:
        """The policy's output on ``carrier`` (``random``: the env's random action instead)."""
        if random:  # a policy with random_actions(env) draws them itself (the members of a lockstep sweep)
            own = getattr(self.policy, "random_actions", None)
            carrier.set("action", own(self.env) if callable(own) else self.env.random_action())
            return carrier
        if self.cast:
            policy_input = carrier.to(self.device, non_blocking=True)
            self.sync()
        else:
            policy_input = carrier
        output = self.policy(policy_input) if self.graphed is None else self.graphed(policy_input)
        if output is None or output is policy_input:
            return policy_input
        # An out-of-place policy returned a new TensorDict: its entries join the input's, so the
        # step keeps its observation, is_init and trajectory ids (as with an in-place policy).
        return policy_input.update(output)

    def capture(self, written: Sequence) -> None:
        """cudagraph_policy: replay the forward as a CUDA graph from now on (``written``:
        every entry the policy wrote in its dry run; a ValueError if it cannot be one)."""
        self.graphed = graphed_policy(self.policy, self.device, written)

    def load_weights(self, weights=None) -> None:
        """Refresh the policy (see ``devices.load_policy_weights``); a captured graph reads
        the parameters where they are: copy into them, never swap them."""
        load_policy_weights(self.policy, self.source, weights, inplace=self.graphed is not None)
