"""Collectors: iterate to get batches of env steps produced by a policy."""
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.single import Collector
from rlcollect.lazy_exports import lazy_getattr

__all__ = ["ActionServerCollector", "AlternatingCollector", "Collector", "CollectorBase", "PoolCollector",
           "RayCollector", "RayReplayBuffer", "loopback_ray_env", "start_local_ray"]

# collectors/ray/ loads on first use (and imports Ray itself only when a RayCollector is built);
# so do the action-server collectors (collectors/action_server.py) and the env pool (collectors/pool.py).
__getattr__ = lazy_getattr("rlcollect.collectors", {
    **{name: "rlcollect.collectors.ray" for name in ("RayCollector", "RayReplayBuffer", "loopback_ray_env",
                                                     "start_local_ray")},
    **{name: "rlcollect.collectors.action_server" for name in ("ActionServerCollector", "AlternatingCollector")},
    "PoolCollector": "rlcollect.collectors.pool",
}, globals())
