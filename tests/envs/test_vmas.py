"""VmasEnv: a VMAS scenario under rlcollect's collectors, agents stacked after the env dim,
checked step by step against VMAS stepped directly."""
import pytest
import torch

vmas = pytest.importorskip("vmas")

from rlcollect import Collector  # noqa: E402
from rlcollect.envs.vmas import VmasEnv  # noqa: E402

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_batches_have_the_stacked_layout_and_the_team_reward():
    env = VmasEnv("balance", 4, seed=0, max_steps=5)
    assert (env.n_agents, env.observation_space.shape, env.action_space.shape) == (3, (3, 16), (3, 2))
    batch = next(iter(Collector(env, None, frames_per_batch=32)))
    assert batch.batch_size == (4, 8)
    assert batch["observation"].shape == (4, 8, 3, 16) and batch["action"].shape == (4, 8, 3, 2)
    assert batch["next", "agent_reward"].shape == (4, 8, 3) and batch["next", "reward"].shape == (4, 8)
    assert torch.equal(batch["next", "reward"], batch["next", "agent_reward"].sum(-1))
    # the horizon of 5 steps is a truncation; the next step starts a trajectory
    assert batch["next", "truncated"][:, 4].all() and not batch["next", "terminated"].any()
    assert batch["is_init"][:, [0, 5]].all() and batch["is_init"].sum() == 8
    assert (batch["collector", "traj_ids"][:, 5] != batch["collector", "traj_ids"][:, 4]).all()


def test_steps_and_resets_match_vmas_stepped_directly():
    batch = next(iter(Collector(VmasEnv("balance", 4, seed=0, max_steps=5), None, frames_per_batch=32)))
    direct = vmas.make_env("balance", num_envs=4, seed=0, max_steps=5, terminated_truncated=True)
    observation = torch.stack(direct.reset(), 1)
    for t in range(8):
        assert torch.equal(batch["observation"][:, t], observation), t
        observations, rewards, terminated, truncated, _ = direct.step(list(batch["action"][:, t].unbind(1)))
        final = torch.stack(observations, 1)
        assert torch.equal(batch["next", "observation"][:, t], final), t  # the true final one at t=4
        assert torch.equal(batch["next", "agent_reward"][:, t], torch.stack(rewards, 1)), t
        observation = final
        if truncated.any():
            for index in torch.nonzero(truncated).flatten().tolist():
                observation = torch.stack(direct.reset_at(index), 1)


def test_discrete_actions_are_one_index_per_agent():
    env = VmasEnv("balance", 2, seed=0, continuous_actions=False)
    assert env.action_space.nvec.tolist() == [9, 9, 9]
    batch = next(iter(Collector(env, None, frames_per_batch=6)))
    assert batch["action"].shape == (2, 3, 3) and batch["action"].dtype == torch.int64


def test_agents_of_different_shapes_are_refused_by_name():
    with pytest.raises(ValueError, match="VmasEnv stacks the agents' observations, which needs one shape for all"):
        VmasEnv("simple_adversary", 2)


def test_the_device_is_fixed_at_construction():
    with pytest.raises(ValueError, match="VMAS simulates on the device it was built on"):
        VmasEnv("balance", 2).to("meta")


def test_worker_processes_step_vmas_envs_of_their_own(no_leftovers):
    import functools

    from rlcollect import MultiSyncCollector

    collector = MultiSyncCollector(functools.partial(VmasEnv, "balance", 2, seed=0, max_steps=3), None,
                                   num_workers=2, frames_per_batch=16, start_method="fork")
    no_leftovers(collector)
    batch = next(iter(collector))
    assert batch.batch_size == (2, 2, 4) and batch["observation"].shape == (2, 2, 4, 3, 16)
    ids = batch["collector", "traj_ids"]
    assert sorted(ids[:, :, 0].flatten().tolist()) == [0, 1, 2, 3] and batch["next", "truncated"][..., 2].all()
    assert len(set(ids[:, :, 3].flatten().tolist()) & set(ids[:, :, 0].flatten().tolist())) == 0
