"""Storage for collected data: the on-policy RolloutBuffer and replay buffers."""
from rlcollect.buffers.replay import ReplayBuffer, ReplayBufferEnsemble
from rlcollect.buffers.rollout import RolloutBuffer, iterate_minibatches, transition_view
from rlcollect.buffers.samplers import RandomSampler, Sampler, SliceSampler
from rlcollect.buffers.storage import LazyMemmapStorage, LazyTensorStorage, WritePosition

__all__ = [
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "RandomSampler",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "RolloutBuffer",
    "Sampler",
    "SliceSampler",
    "WritePosition",
    "iterate_minibatches",
    "transition_view",
]
