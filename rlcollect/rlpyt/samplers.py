"""The samplers rlpyt names, each over the rlcollect collector that does its job
(docs/rlpyt.md has the map and measured guidance on which to choose)."""
from __future__ import annotations

from rlcollect.collectors.action_server import ActionServerCollector, AlternatingCollector
from rlcollect.collectors.multi import MultiSyncCollector
from rlcollect.collectors.single import Collector
from rlcollect.envs.sources import make_env
from rlcollect.keys import POLICY_VERSION, WORKER_ID
from rlcollect.rlpyt.base_sampler import BaseSampler, EnvFactory
from rlcollect.rlpyt.sampler_collectors import CpuResetCollector, GpuResetCollector

__all__ = ["AlternatingSampler", "CpuSampler", "GpuSampler", "NoOverlapAlternatingSampler", "SerialSampler"]


class SerialSampler(BaseSampler):
    """Everything in this process: a ``Collector`` on a GymEnv of batch_B envs (easy to
    debug: ``breakpoint()`` works anywhere). CollectorCls: CpuResetCollector (default) or
    CpuWaitResetCollector. ``affinity["cuda_idx"]`` puts the agent's forward on that GPU."""

    default_collector, agent_in_workers = CpuResetCollector, True

    def _build_collector(self, agent, factory: EnvFactory, seed, affinity: dict, options: dict):
        env = make_env(factory, self.batch_B, seed=seed, **self._env_options())
        return Collector(env, agent, frames_per_batch=self.batch_B * self.batch_T,
                         **{**self._agent_device(affinity), **options})


class CpuSampler(BaseSampler):
    """Worker processes, each stepping batch_B / W envs with its own copy of the agent:
    ``MultiSyncCollector`` (the weights are pushed to the workers before every batch).
    CollectorCls: CpuResetCollector (default) or CpuWaitResetCollector."""

    default_collector, agent_in_workers = CpuResetCollector, True
    extra_example_keys = (WORKER_ID, POLICY_VERSION)  # MultiSync's batches name the worker and the weights

    def _build_collector(self, agent, factory: EnvFactory, seed, affinity: dict, options: dict):
        workers = self._num_workers(affinity)
        return MultiSyncCollector(factory, agent, num_workers=workers, envs_per_worker=self.batch_B // workers,
                                  frames_per_batch=self.batch_B * self.batch_T, seed=seed, update_at_each_batch=True,
                                  env_kwargs=self._env_options(), **{**self._worker_options(affinity), **options})


class GpuSampler(BaseSampler):
    """Envs in worker processes, one batched forward of the agent in this process per step
    (on ``affinity["cuda_idx"]``'s GPU when given): ``ActionServerCollector``.
    CollectorCls: GpuResetCollector (default) or GpuWaitResetCollector."""

    default_collector, agent_in_workers = GpuResetCollector, False
    collector_class = ActionServerCollector
    collector_options: dict = {}
    even_workers = False

    def _build_collector(self, agent, factory: EnvFactory, seed, affinity: dict, options: dict):
        workers = self._num_workers(affinity, even=self.even_workers)
        return self.collector_class(factory, agent, num_workers=workers, envs_per_worker=self.batch_B // workers,
                                    frames_per_batch=self.batch_B * self.batch_T, seed=seed,
                                    env_kwargs=self._env_options(),
                                    **{**self.collector_options, **self._agent_device(affinity),
                                       **self._worker_options(affinity), **options})


class AlternatingSampler(GpuSampler):
    """GpuSampler with its workers in two groups whose steps alternate, so the agent's
    forward for one group runs while the other steps: ``AlternatingCollector``
    (overlap=True: a group steps as soon as its actions are ready). W is even; with
    ``affinity["workers_cpus"]`` list the workers' CPUs (pairs may share)."""

    collector_class = AlternatingCollector
    collector_options = {"overlap": True}
    even_workers = True


class NoOverlapAlternatingSampler(AlternatingSampler):
    """AlternatingSampler whose groups never step at the same time (overlap=False)."""

    collector_options = {"overlap": False}
