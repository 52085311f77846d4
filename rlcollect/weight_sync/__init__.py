"""Weight synchronisation from the trainer to the policy copies in worker processes."""
from rlcollect.lazy_exports import lazy_getattr
from rlcollect.weight_sync.backends import scheme_from_backend
from rlcollect.weight_sync.pipes import MultiProcessWeightSyncScheme
from rlcollect.weight_sync.schemes import NoWeightSyncScheme, WeightReceiver, WeightSender, WeightSyncScheme
from rlcollect.weight_sync.shared_mem import SharedMemWeightSyncScheme

__all__ = ["MultiProcessWeightSyncScheme", "NoWeightSyncScheme", "RayWeightSyncScheme", "SharedMemWeightSyncScheme",
           "WeightReceiver", "WeightSender", "WeightSyncScheme", "scheme_from_backend"]


# weight_sync/ray.py loads on first use: a plain ``import rlcollect`` never needs Ray.
__getattr__ = lazy_getattr("rlcollect.weight_sync", {"RayWeightSyncScheme": "rlcollect.weight_sync.ray"}, globals())
