import pytest
import torch

from rlcollect.buffers.rollout import RolloutBuffer, iterate_minibatches, transition_view
from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.modules import ActorCritic


def collected(num_envs=3, frames=12):
    env = GymEnv("CartPole-v1", num_envs, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space)
    return next(iter(Collector(env, policy, frames_per_batch=frames)))


def test_layout_is_preallocated_n_by_t_plus_one():
    buffer = RolloutBuffer(3, 4, (4,))
    rollout = buffer.start_rollout()
    assert rollout.batch_size == (3, 5)
    assert rollout["observation"].shape == (3, 5, 4)
    assert rollout["action"].shape == (3, 5) and rollout["action"].dtype == torch.int64
    assert rollout["next", "done"].dtype == torch.bool
    assert buffer.start_rollout() is rollout  # shared, allocated once


def test_add_collector_batch_then_get_transitions():
    batch = collected()
    buffer = RolloutBuffer(3, 4, (4,))
    buffer.add(batch)
    rollout = buffer.rollout
    assert torch.equal(rollout["observation"][:, :4], batch["observation"])
    assert torch.equal(rollout["observation"][:, 4], batch["next", "observation"][:, -1])  # last observation
    assert torch.equal(rollout["next", "reward"][:, :4], batch["next", "reward"])
    flat = buffer.get(flatten=True)
    assert flat.batch_size == (12,)
    assert torch.equal(flat["action"], batch["action"].reshape(-1))
    with pytest.raises(RuntimeError, match="before add"):
        buffer.get()


def test_add_rejects_a_batch_of_the_wrong_shape():
    buffer = RolloutBuffer(2, 4, (4,))
    with pytest.raises(ValueError, match=r"\[2, 4\].*\[3, 4\]"):
        buffer.add(collected())


def test_transition_view_drops_the_padded_slot():
    buffer = RolloutBuffer(2, 3, (4,))
    view = transition_view(buffer.start_rollout())
    assert view.batch_size == (2, 3)
    view["next", "reward"].fill_(1.0)
    assert buffer.rollout["next", "reward"].sum() == 6  # a view, not a copy
    assert transition_view(buffer.rollout, flatten=True).batch_size == (6,)


def test_minibatches_cover_every_transition_exactly_once_per_pass():
    buffer = RolloutBuffer(3, 5, (4,))
    rollout = buffer.start_rollout()
    rollout["action"] = torch.arange(18).reshape(3, 6)
    flat = transition_view(rollout, flatten=True)
    batches = list(iterate_minibatches(flat, 4))
    assert [b.batch_size[0] for b in batches] == [4, 4, 4, 3]
    seen = torch.cat([b["action"] for b in batches])
    assert sorted(seen.tolist()) == sorted(flat["action"].tolist())
    assert seen.tolist() != flat["action"].tolist()  # shuffled
