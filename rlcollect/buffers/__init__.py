"""Storage for collected data: the on-policy RolloutBuffer and replay buffers."""
from rlcollect.buffers.in_place import saved_in_place
from rlcollect.buffers.replay import ReplayBuffer, ReplayBufferEnsemble
from rlcollect.buffers.rollout import RolloutBuffer, iterate_minibatches, transition_view
from rlcollect.buffers.samplers import (
    PrioritizedSampler,
    RandomSampler,
    Sampler,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from rlcollect.buffers.storage import LazyMemmapStorage, LazyTensorStorage, WritePosition
from rlcollect.buffers.transforms import MultiStep

__all__ = [
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "MultiStep",
    "PrioritizedSampler",
    "RandomSampler",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "RolloutBuffer",
    "Sampler",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "WritePosition",
    "iterate_minibatches",
    "saved_in_place",
    "transition_view",
]
