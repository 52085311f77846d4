"""The divergence check probes the updated policy without moving the run's random stream."""
import torch

from rlcollect import ActorCritic, Collector, GymEnv
from rlcollect.pipeline.loop import policy_outputs_finite


def test_probing_a_sampling_policy_leaves_the_rng_where_it_was():
    env = GymEnv("CartPole-v1", 2, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space)
    batch = next(iter(Collector(env, policy, frames_per_batch=16)))
    before = torch.random.get_rng_state()
    assert policy_outputs_finite(policy, batch)
    assert torch.equal(torch.random.get_rng_state(), before)  # else a run's trajectories depend on the check
    with torch.no_grad():
        policy.actor[0].weight.fill_(float("nan"))
    assert not policy_outputs_finite(policy, batch)
