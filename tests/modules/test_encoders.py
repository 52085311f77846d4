"""Observation encoders and the running normaliser."""
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import ActorCritic, Collector, GymEnv, MultiSyncCollector, QValuePolicy
from rlcollect.modules.encoders import RunningNorm
from rlcollect.testing import CountingEnv, SpacesEnv


def test_running_norm_statistics_equal_numpys_on_a_fixed_stream():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (5, 1, 17, 40)]
    norm = RunningNorm((4,))
    for chunk in chunks:
        norm.update(torch.from_numpy(chunk))
    everything = np.concatenate(chunks)
    np.testing.assert_allclose(norm.running_mean.numpy(), everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.running_var.numpy(), everything.var(0), rtol=1e-12)
    assert int(norm.count) == everything.shape[0]
    x = torch.from_numpy(everything[:3]).float()
    expected = (everything[:3] - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-8)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-5)
    before = norm.running_mean.clone()
    norm(x)  # the forward pass never updates the statistics (evaluation, workers)
    assert torch.equal(norm.running_mean, before)


def test_the_normaliser_reaches_a_worker_with_the_weights(no_leftovers):
    env = GymEnv(CountingEnv)
    policy = ActorCritic(env.observation_space, env.action_space, normalize_observation=True)
    policy.obs_norm.update(torch.full((10, 1), 7.0))  # the trainer's statistics: mean 7
    collector = MultiSyncCollector([functools.partial(GymEnv, CountingEnv)], policy, frames_per_batch=4,
                                   start_method="fork")
    no_leftovers(collector)
    policy.obs_norm.update(torch.full((10, 1), 9.0))  # mean 8 now
    collector.update_policy_weights_()
    state = collector.state_dict()["worker0"]["policy"]
    assert float(state["obs_norm.running_mean"][0]) == 8.0 and float(state["obs_norm.count"]) == 20.0
    with pytest.raises(ValueError, match="normalize_observation applies to flat Box observations"):
        ActorCritic(gym.spaces.Discrete(3), env.action_space, encoder="multi_input", normalize_observation=True)


class ImageEnv(CountingEnv):
    """A CountingEnv seeing a [3, 64, 64] uint8 image of its count."""

    def __init__(self):
        super().__init__(episode_length=5)
        self.observation_space = gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((3, 64, 64), np.uint8), {}

    def step(self, action):
        _, *rest = super().step(action)
        return np.full((3, 64, 64), self.count, np.uint8), *rest


@pytest.mark.parametrize("source, encoder", [(ImageEnv, "cnn"), (functools.partial(SpacesEnv, "dict"), "multi_input"),
                                             (functools.partial(SpacesEnv, "tuple"), "multi_input"),
                                             (functools.partial(SpacesEnv, "discrete"), "multi_input")])
def test_cnn_and_multi_input_models_act_and_learn_shapes(source, encoder):
    env = GymEnv(source, 2)
    policy = ActorCritic(env.observation_space, env.action_space, encoder=encoder, hidden_sizes=(16,))
    batch = next(iter(Collector(env, policy, frames_per_batch=8)))
    assert batch["action"].shape == (2, 4) and batch["state_value"].shape == (2, 4)
    log_prob, entropy, value = policy.evaluate(batch.reshape(-1))
    assert log_prob.shape == entropy.shape == value.shape == (8,)
    log_prob.sum().backward()
    if encoder == "cnn":  # the CNN is trained with the heads (the other encoders have no parameters here)
        assert all(p.grad is not None for p in policy.encoder.parameters())
    q_policy = QValuePolicy(env.observation_space, env.action_space, encoder=encoder, hidden_sizes=(16,))
    q_batch = next(iter(Collector(env, q_policy, frames_per_batch=8)))
    assert q_batch["action_value"].shape == (2, 4, 2)
    with pytest.raises(TypeError, match="model encoder 'mlp' needs a flat Box observation"):
        ActorCritic(env.observation_space, env.action_space, encoder="mlp")
    # the default, "auto", picks that encoder from the space
    assert type(ActorCritic(env.observation_space, env.action_space).encoder) is type(policy.encoder)
