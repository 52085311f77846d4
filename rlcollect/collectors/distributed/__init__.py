"""Collection over torch.distributed: workers in local processes, SLURM jobs or Ray tasks
joined with the trainer in a gloo process group bound to one address (127.0.0.1 by
default), or driven over torch.distributed.rpc (RPCCollector, one machine, loopback)."""
from rlcollect.collectors.distributed.collector import DistributedCollector, DistributedSyncCollector
from rlcollect.collectors.distributed.group import Rendezvous
from rlcollect.collectors.distributed.rpc import RPCCollector
from rlcollect.collectors.distributed.starters import STARTERS
from rlcollect.moved import moved_getattr

__all__ = ["STARTERS", "DistributedCollector", "DistributedSyncCollector", "RPCCollector", "Rendezvous"]

__getattr__ = moved_getattr(__name__)  # LAUNCHERS: STARTERS's old name (rlcollect/moved.py)
