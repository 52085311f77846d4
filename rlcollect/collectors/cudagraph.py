"""``Collector(cudagraph_policy=True)``: the policy's forward captured once as a CUDA graph
and replayed at every step (tensordict's ``CudaGraphModule``).

A small policy on a GPU is bound by the host launching its kernels one by one, not by the
GPU; a replay launches them all at once. The collector hands the graph the policy's
``in_keys`` only (the graph copies them into the tensors it was captured with) and takes
back its ``out_keys`` (docs/collectors.md, "CUDA graphs").
"""
from __future__ import annotations

from typing import Sequence

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import CudaGraphModule

__all__ = ["GraphedPolicy", "graphed_policy"]


class GraphedPolicy:
    """``policy`` replayed as a CUDA graph after one eager call (the warm-up) and the capture.

    Called with a TensorDict holding (at least) the policy's ``in_keys``, it writes the
    policy's ``out_keys`` into it and returns it, as an in-place policy does.
    """

    def __init__(self, policy, in_keys: Sequence, out_keys: Sequence, device: torch.device) -> None:
        self.module = CudaGraphModule(policy, device=device)
        self.in_keys, self.out_keys = list(in_keys), list(out_keys)

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        output = self.module(tensordict.select(*self.in_keys))
        return tensordict.update(output.select(*self.out_keys, strict=False))  # strict=False: set_actions_only


def graphed_policy(policy, device: torch.device, written: Sequence) -> GraphedPolicy:
    """The policy as a :class:`GraphedPolicy`, after checking that it can be one: a module
    with ``in_keys`` and ``out_keys`` on a CUDA ``policy_device``, whose ``out_keys`` name
    every entry it writes (``written``, seen when the collector ran it once)."""
    if policy is None:
        raise ValueError("cudagraph_policy=True captures the policy's forward: this collector has no policy")
    in_keys, out_keys = getattr(policy, "in_keys", None), getattr(policy, "out_keys", None)
    if not in_keys or not out_keys:
        raise ValueError(f"cudagraph_policy=True needs a TensorDict module with in_keys and out_keys; "
                         f"{type(policy).__name__} has in_keys={in_keys}, out_keys={out_keys}")
    declared = {unravel_key(key) for key in out_keys}
    undeclared = [key for key in written if unravel_key(key) not in declared]
    if undeclared:
        raise ValueError(f"cudagraph_policy=True: the policy writes {undeclared} beyond its out_keys {list(out_keys)}; "
                         "a replay only returns its out_keys")
    if device.type != "cuda":
        raise ValueError(f"cudagraph_policy=True replays the policy as a CUDA graph: policy_device must be cuda, "
                         f"not {device}")
    return GraphedPolicy(policy, in_keys, out_keys, device)
