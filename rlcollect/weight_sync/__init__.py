"""Weight synchronisation from the trainer to the policy copies in worker processes."""
from rlcollect.weight_sync.pipes import MultiProcessWeightSyncScheme
from rlcollect.weight_sync.schemes import NoWeightSyncScheme, WeightReceiver, WeightSender, WeightSyncScheme
from rlcollect.weight_sync.shared_mem import SharedMemWeightSyncScheme

__all__ = ["MultiProcessWeightSyncScheme", "NoWeightSyncScheme", "SharedMemWeightSyncScheme",
           "WeightReceiver", "WeightSender", "WeightSyncScheme"]
