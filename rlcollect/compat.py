"""TorchRL's names, for users who migrate: change the import, keep the code.

    from rlcollect.compat import SyncDataCollector, MultiSyncDataCollector   # was: from torchrl.collectors import ...

Each alias IS the rlcollect class (``SyncDataCollector is Collector``), with rlcollect's
arguments and semantics (docs/collectors.md); ``aSyncDataCollector`` is a
MultiAsyncCollector with one worker process, and ``MultiCollector`` (the seed's front
door) builds a MultiSyncCollector or a MultiAsyncCollector. This module is their home;
``rlcollect`` re-exports each of them (``from rlcollect import SyncDataCollector``).
"""
from __future__ import annotations

from rlcollect.buffers.replay import ReplayBuffer
from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
from rlcollect.collectors.single import Collector

SyncDataCollector = Collector
MultiSyncDataCollector = MultiSyncCollector
MultiaSyncDataCollector = MultiAsyncCollector
TensorDictReplayBuffer = ReplayBuffer

# alias -> the rlcollect name it stands for
ALIASES = {"SyncDataCollector": "Collector", "MultiSyncDataCollector": "MultiSyncCollector",
           "MultiaSyncDataCollector": "MultiAsyncCollector", "TensorDictReplayBuffer": "ReplayBuffer"}


class aSyncDataCollector(MultiAsyncCollector):  # noqa: N801 (TorchRL's spelling)
    """TorchRL's aSyncDataCollector: one env source collected in one background worker
    process, batches yielded as they come (a MultiAsyncCollector of one worker); takes
    MultiAsyncCollector's arguments."""

    def __init__(self, create_env_fn, policy=None, **kwargs) -> None:
        super().__init__([create_env_fn], policy, **kwargs)


def MultiCollector(create_env_fn, policy=None, *, sync: bool = True, **kwargs):  # noqa: N802 (the seed's name)
    """The seed's multi-process front door: a MultiSyncCollector (``sync=True``: one batch
    from every worker per iteration) or a MultiAsyncCollector (``sync=False``: each
    worker's batch as it comes), with their arguments."""
    if not isinstance(sync, bool):
        raise TypeError(f"sync must be a bool, got {sync!r}")
    cls = MultiSyncCollector if sync else MultiAsyncCollector
    return cls(create_env_fn, policy, **kwargs)


__all__ = ["MultiCollector", "MultiSyncDataCollector", "MultiaSyncDataCollector", "SyncDataCollector",
           "TensorDictReplayBuffer", "aSyncDataCollector"]
