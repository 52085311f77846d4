"""RayCollector: rlcollect's collectors as Ray actors, on one machine or across many.

    startup.py        start a local Ray on loopback, or join a cluster
    wire.py           batches as numpy arrays on Ray's wire
    replay_buffer.py  RayReplayBuffer: a ReplayBuffer held by an actor
    actor.py          the collector actor (one of rlcollect's collectors inside it)
    collector.py      RayCollector, the driver side

Importing this package does not import Ray; building a RayCollector does.
"""
from rlcollect.collectors.ray.actor import TRAJ_ID_SHIFT
from rlcollect.collectors.ray.collector import RayCollector
from rlcollect.collectors.ray.replay_buffer import RayReplayBuffer
from rlcollect.collectors.ray.startup import loopback_ray_env, start_local_ray

__all__ = ["TRAJ_ID_SHIFT", "RayCollector", "RayReplayBuffer", "loopback_ray_env", "start_local_ray"]
