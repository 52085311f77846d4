"""Storage for collected data."""
from rlcollect.buffers.rollout import RolloutBuffer, iterate_minibatches, transition_view

__all__ = ["RolloutBuffer", "iterate_minibatches", "transition_view"]
