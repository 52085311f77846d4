"""A ReplayBuffer held by a Ray actor, and the handle learners and collector actors use."""
from __future__ import annotations

from tensordict import TensorDict, TensorDictBase

from rlcollect.buffers.replay import ReplayBuffer
from rlcollect.collectors.ray.startup import import_ray, remote_class
from rlcollect.collectors.ray.wire import batch_from_wire, batch_to_wire


class ReplayBufferActor:
    """Holds an rlcollect ReplayBuffer; one task at a time, so no lock is needed."""

    def __init__(self, replay_buffer: ReplayBuffer) -> None:
        self.buffer = replay_buffer

    def extend(self, wire) -> int:
        self.buffer.extend(batch_from_wire(wire))
        return self.buffer.write_count

    def extend_batch(self, wire) -> int:
        self.buffer.extend_batch(batch_from_wire(wire))
        return self.buffer.write_count

    def sample(self, batch_size):
        return batch_to_wire(self.buffer.sample(batch_size))

    def read(self, index):
        return batch_to_wire(self.buffer[index])

    def length(self) -> int:
        return len(self.buffer)

    def update_priority(self, index, priority) -> None:
        self.buffer.update_priority(index, priority)

    def write_count(self) -> int:
        return self.buffer.write_count

    def state_dict(self, include_storage: bool) -> dict:
        return self.buffer.state_dict(include_storage=include_storage)

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state)


class RayReplayBuffer:
    """A ReplayBuffer held by a Ray actor on the driver's node; this object is its handle,
    with the ReplayBuffer methods a learner and a collector use (``extend``,
    ``extend_batch``, ``add``, ``sample``, ``len``, ``write_count``, indexing, ``state_dict``, and ``update_priority``
    when it samples with a PrioritizedSampler). Picklable: collector
    actors write through their copy. Each call is one round trip to the buffer actor.

    Args:
        replay_buffer: the rlcollect ReplayBuffer to hold (moved into the actor; the local
            object is not used afterwards).
        remote_config: Ray options of the buffer actor (default ``num_cpus=0``: it waits more
            than it works).
    """

    def __init__(self, replay_buffer: ReplayBuffer, *, remote_config: dict | None = None) -> None:
        if not isinstance(replay_buffer, ReplayBuffer):
            raise TypeError(f"replay_buffer must be an rlcollect ReplayBuffer, got {type(replay_buffer).__name__}")
        ray = import_ray()
        if not ray.is_initialized():
            raise RuntimeError("RayReplayBuffer needs a running Ray: build it after ray.init() or a RayCollector")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options = {"num_cpus": 0, "max_restarts": 0, **(remote_config or {})}
        options.setdefault("scheduling_strategy", NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=False))
        self._actor = remote_class(ReplayBufferActor).options(**options).remote(replay_buffer)
        self.ndim = replay_buffer.storage.ndim
        self.batch_size = replay_buffer.batch_size
        self.prioritized = replay_buffer.prioritized
        self._owner = True

    def _call(self, method: str, *args):
        if self._actor is None:
            raise RuntimeError("this RayReplayBuffer was closed (a RayCollector closes the buffer it made at shutdown)")
        return import_ray().get(getattr(self._actor, method).remote(*args))

    def extend(self, data: TensorDictBase) -> None:
        self._call("extend", batch_to_wire(data))

    def extend_batch(self, batch: TensorDictBase) -> None:
        """Write a collector batch (the held buffer's ``write_transform`` and layout apply)."""
        self._call("extend_batch", batch_to_wire(batch))

    def add(self, step: TensorDictBase) -> None:
        self.extend(step.unsqueeze(-1))

    def sample(self, batch_size: int | None = None) -> TensorDict:
        return batch_from_wire(self._call("sample", batch_size))

    def __getitem__(self, index) -> TensorDict:
        return batch_from_wire(self._call("read", index))

    def __len__(self) -> int:
        return self._call("length")

    @property
    def write_count(self) -> int:
        return self._call("write_count")

    def update_priority(self, index, priority) -> None:
        """New priorities for the elements at ``index`` (the buffer's PrioritizedSampler)."""
        self._call("update_priority", index.cpu(), priority.cpu())

    def state_dict(self, *, include_storage: bool = False) -> dict:
        return self._call("state_dict", include_storage)

    def load_state_dict(self, state: dict) -> None:
        self._call("load_state_dict", state)

    def close(self) -> None:
        """Kill the buffer actor (only from the handle that created it)."""
        if self._owner and self._actor is not None:
            ray = import_ray()
            if ray.is_initialized():
                ray.kill(self._actor, no_restart=True)
        self._actor = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_owner": False}  # copies write and sample, never kill

    def __repr__(self) -> str:
        return f"RayReplayBuffer(ndim={self.ndim}, batch_size={self.batch_size})"
