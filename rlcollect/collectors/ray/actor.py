"""The collector actor: one of rlcollect's collectors inside a Ray actor (see RayCollector)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcollect.collectors.delivery import Delivery
from rlcollect.collectors.host_plan import MAX_LIVES, TRAJ_ID_SHIFT, build_hosted_collector, traj_start
from rlcollect.collectors.options import DeliveryOptions
from rlcollect.collectors.processes import seed_rngs
from rlcollect.collectors.ray.replay_buffer import RayReplayBuffer
from rlcollect.collectors.ray.wire import batch_to_wire
from rlcollect.collectors.worker import resolve_model, stamp_worker_keys
from rlcollect.keys import WORKER_ID


@dataclass
class ActorSpec:
    """What one collector actor is built from (pickled once, at its creation)."""

    actor_index: int
    collector_class: str
    create_env_fn: Any  # sync: an env source; multi*: one source for the workers, or a list of them
    frames_per_batch: int
    collector_kwargs: dict  # the inner collector's options (with a single source: envs_per_worker, seed, ...)
    weight_endpoints: dict = field(default_factory=dict)
    replay_buffer: RayReplayBuffer | None = None
    trajs_per_batch: int | None = None
    post_collect_hook: Any = None
    seed: int | None = None  # the actor's RNGs (rlcollect/seeding.py: its first env's seed); None: unseeded
    life: int = 0  # how many actors of this index were replaced before this one (its traj-id sub-range)


__all__ = ["MAX_LIVES", "TRAJ_ID_SHIFT", "ActorSpec", "CollectorActor", "traj_start"]


class CollectorActor:
    """One of rlcollect's collectors inside a Ray actor; see RayCollector."""

    def __init__(self, spec: ActorSpec, policy) -> None:
        self.index = spec.actor_index
        if spec.seed is not None:  # random actions and sampling reproducible, as in worker processes
            seed_rngs(spec.seed)
        self.collector = build_hosted_collector(spec.collector_class, spec.create_env_fn, policy,
                                                spec.frames_per_batch, spec.collector_kwargs,
                                                traj_start(spec.actor_index, spec.life))
        self._multi = spec.collector_class != "sync"
        self._batches = iter(self.collector)
        self._receivers = {model_id: endpoint.make_receiver(resolve_model(self.collector, model_id))
                           for model_id, endpoint in spec.weight_endpoints.items()}
        self._weights_error: BaseException | None = None
        self.policy_version = 0
        self._trajs_per_batch = spec.trajs_per_batch
        self._delivery = Delivery(DeliveryOptions(post_collect_hook=spec.post_collect_hook,
                                                  replay_buffer=spec.replay_buffer,
                                                  trajs_per_batch=spec.trajs_per_batch))

    def describe(self) -> tuple[list[int], int]:
        """The batch shape and frames this actor yields per ``collect``."""
        return list(self.collector.batch_size), self.collector.frames_per_batch

    def receive_weights(self, model_id: str, version: int, payload: dict) -> None:
        """Apply an update now (no batch runs meanwhile); a failure is raised by the next collect."""
        try:
            receiver = self._receivers[model_id]
            receiver.receive(version, payload)
            receiver.poll()
            if self._multi:
                self.collector.update_policy_weights_()  # on to the actor's worker processes
            if model_id == "policy":
                self.policy_version = version
        except BaseException as error:
            self._weights_error = error

    def collect(self) -> tuple[Any, Any]:
        """``(payload, hook result)``: payload is one batch on the wire, or (replay_buffer)
        the number of frames written."""
        if self._weights_error is not None:
            raise RuntimeError("applying the policy weights failed") from self._weights_error
        frames_before = self.collector.frames
        batch = next(self._batches)
        # the inner worker (before restamping): rows of one worker are the same envs from batch to batch
        source = int(batch.get(WORKER_ID).reshape(-1)[0]) if self._multi and self._trajs_per_batch else 0
        stamp_worker_keys(batch, self.index, self.policy_version)
        delivered = self._delivery(batch, source)  # the hook, then the write into the Ray-held buffer
        hook_result = self._delivery.last_hook_result
        if delivered is not None:
            return batch_to_wire(delivered), hook_result
        return self.collector.frames - frames_before, hook_result

    def set_seed(self, seed: int) -> int:
        return self.collector.set_seed(seed)

    def reset(self) -> None:
        self.collector.reset()

    def state_dict(self) -> dict:
        return self.collector.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.collector.load_state_dict(state)

    def get_policy_version(self) -> int:
        return self.policy_version

    def close(self) -> None:
        self.collector.shutdown()
