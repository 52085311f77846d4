"""Collection over torch.distributed: workers in local processes or SLURM jobs joined with
the trainer in a gloo process group bound to one address (127.0.0.1 by default)."""
from rlcollect.collectors.distributed.collector import DistributedCollector, DistributedSyncCollector
from rlcollect.collectors.distributed.group import Rendezvous
from rlcollect.collectors.distributed.launchers import LAUNCHERS

__all__ = ["LAUNCHERS", "DistributedCollector", "DistributedSyncCollector", "Rendezvous"]
