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


# ---------------------------------------------------------------------------- the seed's rollout API
def test_positional_constructor_as_the_seed_writes_it():
    discrete = RolloutBuffer(3, 4, 5, (), "cpu")  # num_envs, rollout_len, obs_dim, action_dim, device
    assert discrete.rollout["observation"].shape == (3, 5, 5) and discrete.rollout["action"].shape == (3, 5)
    assert discrete.rollout["action"].dtype == torch.int64
    continuous = RolloutBuffer(3, 4, (2, 2), 6)
    assert continuous.rollout["observation"].shape == (3, 5, 2, 2)
    assert continuous.rollout["action"].shape == (3, 5, 6) and continuous.rollout["action"].dtype == torch.float32


def test_transition_view_is_idempotent():
    buffer = RolloutBuffer(2, 4, 3)
    buffer.add(buffer.start_rollout())
    view = buffer.get(flatten=False)
    assert view.batch_size == (2, 4)
    assert transition_view(view).batch_size == (2, 4)  # not trimmed again
    assert transition_view(view, flatten=True).batch_size == (8,)
    assert transition_view(buffer.rollout).batch_size == (2, 4)


def collector_and_policy(num_envs):
    from rlcollect import ActorCritic, Collector, GymEnv

    env = GymEnv("CartPole-v1", num_envs, seed=0)
    torch.manual_seed(0)
    policy = ActorCritic(env.observation_space, env.action_space)
    return Collector(env, policy, frames_per_batch=8 * (num_envs or 1)), policy


@pytest.mark.parametrize("num_envs", [None, 3])
def test_collect_into_a_rollout_writes_what_a_batch_holds_without_a_copy(num_envs):
    """The seed's usage example, step for step; the rollout equals the batch a twin
    collector yields (same seeds), and the bootstrap slot holds the last next observation."""
    collector, _ = collector_and_policy(num_envs)
    twin, _ = collector_and_policy(num_envs)
    rows = num_envs or 1
    buffer = RolloutBuffer(rows, 8, 4, (), "cpu")
    rollout_storage = buffer.start_rollout()
    observation_before = rollout_storage["observation"].data_ptr()
    torch.manual_seed(1)
    rollout = collector.collect(num_steps=8, rollout=buffer.start_rollout())
    assert rollout is rollout_storage and rollout["observation"].data_ptr() == observation_before  # in place
    buffer.add(rollout)
    torch.manual_seed(1)
    expected = twin.collect().reshape(rows, 8)
    got = buffer.get(flatten=False)
    for key in expected.keys(True, True):
        assert torch.equal(got[key], expected[key]), key
    assert torch.equal(rollout["observation"][:, -1], expected["next", "observation"][:, -1])
    flat_rollout = transition_view(got, flatten=True)
    seen = torch.cat([batch["observation"] for batch in iterate_minibatches(flat_rollout, 5)])
    assert seen.shape == (rows * 8, 4)
    assert collector.frames == rows * 8
    # the next collect continues the trajectories (the carrier persists), as the twin's next batch does
    torch.manual_seed(2)
    second = transition_view(collector.collect(num_steps=8, rollout=buffer.start_rollout()))
    torch.manual_seed(2)
    expected_second = twin.collect().reshape(rows, 8)
    for key in expected_second.keys(True, True):
        assert torch.equal(second[key], expected_second[key]), key


def test_collect_rejects_a_rollout_of_another_shape():
    collector, _ = collector_and_policy(3)
    with pytest.raises(ValueError, match=r"rollout has batch size \[2, 9\]"):
        collector.collect(rollout=RolloutBuffer(2, 8, 4).start_rollout())
    with pytest.raises(ValueError, match="num_steps=4 but the rollout holds 8 steps"):
        collector.collect(num_steps=4, rollout=RolloutBuffer(3, 8, 4).start_rollout())
    with pytest.raises(ValueError, match="rollout entry 'action' is torch.float32"):
        collector.collect(rollout=RolloutBuffer(3, 8, 4, (), action_dtype=torch.float32).start_rollout())
