"""rlpyt's sampler interface (initialize, obtain_samples, evaluate_agent, shutdown) as a
thin front over rlcollect's collectors: docs/samplers.md."""
from rlcollect.samplers.base import BaseSampler
from rlcollect.samplers.collectors import (
    CpuResetCollector,
    CpuWaitResetCollector,
    GpuResetCollector,
    GpuWaitResetCollector,
    SamplerCollector,
)
from rlcollect.samplers.samplers import (
    AlternatingSampler,
    CpuSampler,
    GpuSampler,
    NoOverlapAlternatingSampler,
    SerialSampler,
)

__all__ = ["AlternatingSampler", "BaseSampler", "CpuResetCollector", "CpuSampler", "CpuWaitResetCollector",
           "GpuResetCollector", "GpuSampler", "GpuWaitResetCollector", "NoOverlapAlternatingSampler",
           "SamplerCollector", "SerialSampler"]
