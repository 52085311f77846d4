"""Collectors: iterate to get batches of env steps produced by a policy."""
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.single import Collector
from rlcollect.collectors.trajectories import TrajectoryPool, split_trajectories

__all__ = ["Collector", "CollectorBase", "TrajectoryPool", "split_trajectories"]
