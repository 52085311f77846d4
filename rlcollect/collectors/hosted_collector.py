"""The base of the collectors whose hosts each run one of rlcollect's collectors: RayCollector
(Ray actors), DistributedCollector (torch.distributed workers) and RPCCollector
(torch.distributed.rpc workers).

What differs between them is the transport: how hosts start, where they run, how a call,
a batch and the weights travel. The rest is here once:

    plan          the hosts' env sources, seeds and collector options, the frames of a host's
                  batch and of a yielded one (collectors/host_plan.py ``plan_hosts``)
    shapes        each host's batch shape, and the yielded batch size (sync: stacked)
    calls         set_seed, reset, state_dict and load_state_dict answered by every host's
                  collector through the subclass's ``_call_all``

A subclass sets ``host``, ``count_name`` and ``state_key``, calls ``_plan`` first in its
constructor and ``_set_host_shapes`` once its hosts described their batches, and implements
``_call_all`` (and CollectorBase's ``_next_batch``, ``update_policy_weights_``, ``_close``).
"""
from __future__ import annotations

import dataclasses

import torch

from rlcollect.collectors.base import CollectionPlan, CollectorBase
from rlcollect.collectors.host_plan import TRAJ_ID_SHIFT, HostPlan, hosted_class, plan_hosts
from rlcollect.collectors.options import check_total_frames
from rlcollect.seeding import env_seed
from rlcollect.validation import check_positive_int


class HostedCollector(CollectorBase):
    """A driver of ``num_hosts`` hosts, each collecting with one of rlcollect's collectors
    (module docstring). ``sync=True`` stacks one batch per host (``[num_hosts, ...]``,
    ``frames_per_batch`` split across them); ``sync=False`` yields each host's batch as it
    comes."""

    host = "worker"  # what a host is called in messages
    count_name = "num_workers"  # the constructor argument that counts the hosts
    state_key = "workers"  # where state_dict keeps the hosts' states

    num_hosts: int
    _host_shapes: list[torch.Size]

    @classmethod
    def batch_envs(cls, plan: CollectionPlan) -> int:
        """Each host's collector rounds its share to its own envs (envs_per_worker per env
        source, collector_kwargs for its worker processes); a synchronous batch stacks one
        share per host."""
        options = plan.options
        envs = options.get("envs_per_worker")
        host = dataclasses.replace(plan, options={**(options.get("collector_kwargs") or {}), "envs_per_worker": envs},
                                   num_envs=envs)
        per_host = hosted_class(options.get("collector_class", "sync")).batch_envs(host)
        return per_host * ((options.get(cls.count_name) or 1) if options.get("sync", True) else 1)

    def _plan(self, create_env_fn, num_hosts: int, *, frames_per_batch: int, total_frames: int, sync: bool,
              collector_class: str, envs_per_worker, seed, env_kwargs: dict | None,
              collector_kwargs: dict | None) -> HostPlan:
        """Check the arguments every hosted collector shares and plan its hosts; sets
        ``num_hosts``, ``collector_class``, ``sync``, ``total_frames`` and ``frames_per_batch``."""
        self.num_hosts = check_positive_int(self.count_name, num_hosts)
        if num_hosts >= 1 << (63 - TRAJ_ID_SHIFT):
            raise ValueError(f"{self.count_name} must be below {1 << (63 - TRAJ_ID_SHIFT)} (traj id ranges)")
        self.collector_class, self.sync = collector_class, bool(sync)
        self.total_frames = check_total_frames(total_frames)
        plan = plan_hosts(create_env_fn, num_hosts, collector_class=collector_class, frames_per_batch=frames_per_batch,
                          sync=self.sync, envs_per_worker=envs_per_worker, seed=seed, env_kwargs=env_kwargs,
                          collector_kwargs=collector_kwargs, owner=type(self).__name__, host=self.host,
                          count_name=self.count_name)
        self.frames_per_batch = plan.frames_per_batch
        return plan

    def _set_host_shapes(self, shapes) -> None:
        """Each host's batch shape (``[..., T]``), as the hosts described them: the yielded
        batch size is their stack (sync: every host the same shape) or the largest."""
        self._host_shapes = [torch.Size(shape) for shape in shapes]
        if self.sync:
            if len(set(self._host_shapes)) > 1:
                raise ValueError(f"sync=True stacks one batch per {self.host}; their shapes differ: "
                                 f"{[list(shape) for shape in self._host_shapes]} (give every {self.host} the same "
                                 "envs)")
            self.batch_size = torch.Size([self.num_hosts, *self._host_shapes[0]])
        else:
            self.batch_size = max(self._host_shapes, key=lambda shape: shape.numel())

    def _call_all(self, method: str, args_per_host: list[tuple] | None = None) -> list:
        """``method(*args)`` on every host's collector; the answers in host order."""
        raise NotImplementedError

    # ------------------------------------------------------------------ seeds and state
    def set_seed(self, seed: int) -> int:
        """Seed every host by the seed rule (rlcollect/seeding.py: the envs of all hosts are
        numbered in host order, env i seeded ``seed + i``); returns ``seed``."""
        firsts = [sum(shape[:-1].numel() for shape in self._host_shapes[:index]) for index in range(self.num_hosts)]
        self._call_all("set_seed", [(env_seed(seed, first),) for first in firsts])
        return seed

    def reset(self) -> None:
        """Reset every env of every host; each starts a new trajectory."""
        self._call_all("reset")

    def state_dict(self) -> dict:
        """Frame count, policy version and each host's collector state (its trajectory-id pool)."""
        return {"frames": self._frames, "policy_version": self.policy_version,
                self.state_key: self._call_all("state_dict")}

    def load_state_dict(self, state: dict) -> None:
        hosts = state[self.state_key]
        if len(hosts) != self.num_hosts:
            raise ValueError(f"state holds {len(hosts)} {self.host}s, this collector has {self.num_hosts}")
        self._call_all("load_state_dict", [(host,) for host in hosts])
        self._frames = int(state["frames"])
        self._restore_policy_version(int(state.get("policy_version", 0)))

    def _restore_policy_version(self, version: int) -> None:
        self.policy_version = version
