"""rlpyt's sampler interface (initialize, obtain_samples, evaluate_agent, shutdown) as a
thin front over rlcollect's collectors: docs/rlpyt.md.

    base_sampler.py        BaseSampler: the interface, the envs (EnvFactory), the samples (Samples)
    samplers.py            SerialSampler, CpuSampler, GpuSampler, the alternating samplers: which
                           rlcollect collector each builds
    sampler_collectors.py  rlpyt's "collector" classes a sampler is given (CpuResetCollector, ...):
                           where the agent runs and what a finished env does; no collectors
                           themselves (those are rlcollect.collectors')

It was ``rlcollect.samplers`` (a name it shared with the replay samplers of
rlcollect.buffers.samplers); that name still works for a release, with a DeprecationWarning
(rlcollect/moved.py).
"""
from rlcollect.rlpyt.base_sampler import BaseSampler
from rlcollect.rlpyt.sampler_collectors import (
    CpuResetCollector,
    CpuWaitResetCollector,
    GpuResetCollector,
    GpuWaitResetCollector,
    SamplerCollector,
)
from rlcollect.rlpyt.samplers import (
    AlternatingSampler,
    CpuSampler,
    GpuSampler,
    NoOverlapAlternatingSampler,
    SerialSampler,
)

__all__ = ["AlternatingSampler", "BaseSampler", "CpuResetCollector", "CpuSampler", "CpuWaitResetCollector",
           "GpuResetCollector", "GpuSampler", "GpuWaitResetCollector", "NoOverlapAlternatingSampler",
           "SamplerCollector", "SerialSampler"]
