"""The collector classes a sampler is given (``CollectorCls``), as rlpyt names them.

They are not collectors: each names where the agent runs and what happens to an env that
finishes mid-batch; the sampler builds the rlcollect collector that does it.

    class                   agent runs         an env that finishes
    CpuResetCollector       in each worker     resets at once (reset_policy="immediate")
    CpuWaitResetCollector   in each worker     waits for the next batch (reset_policy="wait")
    GpuResetCollector       in the main        resets at once
    GpuWaitResetCollector   in the main        waits for the next batch

The trade-off (docs/rlpyt.md): with "wait", an env's remaining steps in the batch are
padding (``("collector", "mask")`` False), so fewer real frames per batch, but its reset
happens between batches, off the stepping path (slow resets), and a batch row never holds
the start of a second episode after its first ends (recurrent training on whole rows).
"""
from __future__ import annotations

__all__ = ["CpuResetCollector", "CpuWaitResetCollector", "GpuResetCollector", "GpuWaitResetCollector",
           "SamplerCollector"]


class SamplerCollector:
    """Base of the collector classes: ``agent_in_workers`` and ``reset_policy``."""

    agent_in_workers: bool
    reset_policy: str


class CpuResetCollector(SamplerCollector):
    """The agent in each worker; a finished env resets at once."""

    agent_in_workers, reset_policy = True, "immediate"


class CpuWaitResetCollector(SamplerCollector):
    """The agent in each worker; a finished env waits, unstepped, for the next batch."""

    agent_in_workers, reset_policy = True, "wait"


class GpuResetCollector(SamplerCollector):
    """The agent in the main process (the action server); a finished env resets at once."""

    agent_in_workers, reset_policy = False, "immediate"


class GpuWaitResetCollector(SamplerCollector):
    """The agent in the main process; a finished env waits, unstepped, for the next batch."""

    agent_in_workers, reset_policy = False, "wait"
