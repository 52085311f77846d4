"""The batch and its write plan: where every step of the loop copies to (collectors/single.py).

    the policy's dry run ──allocate_batch──▶ batch [*env_batch, T] on storing_device, zeros, once

    WritePlan(target)        for each entry, its views target[..., t] and what is copied there:
      carrier                carrier (observation, is_init, traj ids, state) ──▶ views[t]   act, before the policy
      action, other_policy   the policy's output                             ──▶ views[t]   act, after it
      next_hidden            its ("next", state) ──▶ views[t], and back into the carried state
      next                   staged ("next", ...), what the env step produced ──▶ views[t]   record
      truncated, done        views[t] the cuts mark; mask: reset_policy="wait"'s real steps

With the env and the storage on the CPU the views are numpy arrays and the copies
``np.copyto`` (a third of ``Tensor.copy_`` for these small slices), each env's entry one
element of its row's bytes (rows.py), so the loop allocates nothing it can avoid. A plan is
built for the collector's batch and for each rollout ``collect(rollout=...)`` writes in place
(rollout_plan.py); the loop reads whichever is current.
"""
from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDictBase

from rlcollect.collectors.carrier import Carrier
from rlcollect.collectors.devices import CollectorDevices
from rlcollect.collectors.rows import row_elements
from rlcollect.keys import MASK, TIME_DIM


def allocate_batch(probe: TensorDictBase, carrier: Carrier, staged: TensorDictBase, *, time_steps: int,
                   device: torch.device, padded: bool) -> tuple[TensorDictBase, list]:
    """``(batch, policy_keys)``: the batch ``[*env_batch, time_steps]`` on ``device``, zeros,
    holding what one step of the loop records (``probe``: the carrier after one dry run of
    the policy; ``staged``: the env's staging, whose ``("next", ...)`` a step records;
    ``padded``: reset_policy="wait"'s ``("collector", "mask")``), and the keys the policy
    writes besides the carrier's."""
    if "action" not in probe.keys():
        raise ValueError(f"the policy must write 'action' into the TensorDict it receives; it wrote "
                         f"{sorted(map(str, probe.keys(True, True)))}")
    step = probe.exclude("next")
    policy_keys = [key for key in step.keys(True, True) if key not in carrier.keys]
    step.set("next", staged.get("next").clone())
    if padded:
        step.set(MASK, torch.ones((), dtype=torch.bool).expand(step.batch_size).clone())
    for key in carrier.hidden:
        if ("next", key) not in probe.keys(True, True):
            raise ValueError(f"the recurrent policy must write the hidden state it read, {key!r}, to "
                             f"('next', {key!r}); it wrote {sorted(map(str, probe.keys(True, True)))}")
        step.set(("next", key), probe.get(("next", key)))
    env_batch = carrier.env_batch
    time_dim = len(env_batch)
    batch = step.apply(
        lambda x: torch.zeros((*env_batch, time_steps, *x.shape[time_dim:]), dtype=x.dtype, device=device),
        batch_size=[*env_batch, time_steps],
        device=device,
    )
    batch.names = [None] * time_dim + [TIME_DIM]  # as TorchRL's batches: time is named
    return batch, policy_keys


def _as_tuple(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


class WritePlan:
    """The per-step destinations in ``target`` ``[*env_batch, T]`` (the batch, or a
    rollout's transitions) and their sources: what the loop reads at every step.

    Args:
        target: what the loop writes into; every entry of the batch, laid out as it.
        carrier: the collector's carrier (its tensors are the sources of ``carrier``).
        staged: the env's staging (the sources of ``next``).
        policy_keys: what the policy writes besides the carrier's entries.
        devices: the collector's devices (numpy copies when the env and ``target`` are on
            the CPU; a numpy action when the policy is too).
        padded: reset_policy="wait": ``mask`` is target's ``("collector", "mask")``.
    """

    __slots__ = ("target", "time_steps", "copy", "carrier", "next", "action", "action_numpy", "send_stored_action",
                 "other_policy", "next_hidden", "truncated", "done", "mask")

    def __init__(self, target: TensorDictBase, carrier: Carrier, staged: TensorDictBase, policy_keys: list,
                 devices: CollectorDevices, padded: bool) -> None:
        time_dim = len(carrier.env_batch)
        time_steps = target.batch_size[-1]

        def views(key):
            return target.get(key).unbind(time_dim)

        def numpy_views(key, rows: bool = False) -> list:
            stored = target.get(key)
            flat = stored.numpy().reshape(carrier.num_envs, time_steps, *stored.shape[time_dim + 1:])
            return [row_elements(flat[:, t]) if rows else flat[:, t] for t in range(time_steps)]

        self.target, self.time_steps = target, time_steps
        self.action = views("action")
        self.other_policy = [(key, views(key)) for key in policy_keys if key != "action"]
        self.next_hidden = [(key, state, views(("next", key))) for key, state in carrier.hidden.items()]
        self.truncated, self.done = views(("next", "truncated")), views(("next", "done"))
        self.mask = target.get(MASK) if padded else None  # reset_policy="wait": which steps are real
        env_keys = [*carrier.keys, *(("next", *_as_tuple(key)) for key in staged.get("next").keys(True, True))]
        storing_on_cpu = target.device is not None and target.device.type == "cpu"
        if devices.env.type == "cpu" and storing_on_cpu:
            # numpy writes cost a third of Tensor.copy_ for these tiny per-step slices
            self.copy = np.copyto
            # each env's entry as one element: a strided copy of P rows, not of P x feature values
            sources = [(row_elements(carrier.source(key).numpy()), numpy_views(key, rows=True)) for key in env_keys]
            self.action_numpy = numpy_views("action") if devices.policy.type == "cpu" else None
        else:
            self.action_numpy = None
            self.copy = torch.Tensor.copy_
            sources = [(carrier.source(key), views(key)) for key in env_keys]
        self.carrier, self.next = sources[:len(carrier.keys)], sources[len(carrier.keys):]
        # A policy off the CPU with a batch on it: step the env with the stored copy, not a second device copy.
        self.send_stored_action = self.action_numpy is None and storing_on_cpu
