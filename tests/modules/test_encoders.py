"""Observation encoders and the running normaliser."""
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import ActorCritic, Collector, GymEnv, MultiSyncCollector, QValuePolicy
from rlcollect.errors import ConfigError
from rlcollect.modules.encoders import NatureCNN, RunningNorm, image_layout, make_encoder, resolve_encoder
from rlcollect.testing import CountingEnv, CountingImageEnv, SpacesEnv


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


ImageEnv = functools.partial(CountingImageEnv, (3, 64, 64))  # a [3, 64, 64] uint8 image of its count


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
    with pytest.raises(ConfigError, match="model encoder 'mlp' needs a flat Box observation"):
        ActorCritic(env.observation_space, env.action_space, encoder="mlp")
    # the default, "auto", picks that encoder from the space
    assert type(ActorCritic(env.observation_space, env.action_space).encoder) is type(policy.encoder)


BOX = functools.partial(gym.spaces.Box, 0, 255, dtype=np.uint8)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape, layout", [
    ((3, 64, 64), "CHW"), ((4, 84, 84), "CHW"), ((64, 36, 36), "CHW"), ((1, 36, 40), "CHW"),
    ((96, 96, 3), "HWC"), ((84, 84, 4), "HWC"), ((36, 40, 1), "HWC"), ((64, 64, 2), "HWC"),
    ((84, 84, 5), None), ((35, 64, 3), None), ((3, 35, 64), None), ((64, 3, 64), None), ((3, 8, 8), None),
    ((84, 84), None), ((96, 96, 3, 1), None)])
def test_which_box_is_an_image_and_in_which_layout(shape, layout):
    space = BOX(shape=shape)
    assert image_layout(space) == layout
    assert resolve_encoder("auto", space) == ("cnn" if layout else "multi_input" if len(shape) != 1 else "mlp")


@pytest.mark.timeout(60)
def test_an_hwc_image_gets_the_cnn_of_its_chw_transpose():
    """Regression: a [96, 96, 3] uint8 Box was flattened (Linear(27648, 64)), and
    encoder='cnn' refused it."""
    hwc, chw = BOX(shape=(96, 96, 3)), BOX(shape=(3, 96, 96))
    policy = ActorCritic(hwc, gym.spaces.Discrete(2))
    assert type(policy.encoder) is NatureCNN and policy.encoder.channels_last
    assert policy.encoder.conv[0].in_channels == 3 and policy.actor[0].in_features == 512
    reference = NatureCNN(chw)
    reference.load_state_dict(policy.encoder.state_dict())  # the same parameter names and shapes
    images = torch.randint(0, 256, (2, 5, 96, 96, 3), dtype=torch.uint8)  # [*batch, H, W, C]
    features = policy.encoder(images)
    assert features.shape == (2, 5, 512)
    assert torch.equal(features, reference(images.permute(0, 1, 4, 2, 3)))
    assert torch.equal(policy.encoder(images[0, 0]), reference(images[0, 0].permute(2, 0, 1)))  # no batch dim


@pytest.mark.timeout(60)
def test_a_chw_image_is_encoded_as_before():
    # NatureCNN on [C, H, W]: the conv layers on the pixels / 255, then the head, unchanged
    cnn = NatureCNN(BOX(shape=(4, 84, 84)))
    assert not cnn.channels_last
    images = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    assert torch.equal(cnn(images), cnn.head(cnn.conv(images.float() * (1.0 / 255.0))))


HWCImageEnv = functools.partial(CountingImageEnv, (36, 40, 3))  # its count as an image in gymnasium's layout


@pytest.mark.timeout(60)
def test_hwc_observations_are_stored_in_the_envs_layout_and_train_the_cnn():
    env = GymEnv(HWCImageEnv, 2)
    policy = ActorCritic(env.observation_space, env.action_space, encoder="cnn", hidden_sizes=())
    batch = next(iter(Collector(env, policy, frames_per_batch=8)))
    assert batch["observation"].shape == (2, 4, 36, 40, 3) and batch["observation"].dtype == torch.uint8
    assert batch["next", "observation"][0, :, 0, 0, 0].tolist() == [1, 2, 3, 4]
    log_prob, _, value = policy.evaluate(batch.reshape(-1))
    assert torch.allclose(value, batch["state_value"].reshape(-1), atol=1e-6)
    log_prob.sum().backward()
    assert all(p.grad is not None for p in policy.encoder.parameters())


@pytest.mark.timeout(60)
def test_an_encoder_that_does_not_fit_is_a_config_error_naming_the_rule():
    with pytest.raises(ConfigError, match=r"model encoder 'cnn' needs an image Box \(\[C, H, W\] with H, W >= 36, or "
                                          r"\[H, W, C\] with 1 <= C <= 4 and H, W >= 36\), got Box"):
        ActorCritic(BOX(shape=(84, 84, 5)), gym.spaces.Discrete(2), encoder="cnn")
    with pytest.raises(ConfigError, match="model encoder must be one of"):
        make_encoder("resnet", BOX(shape=(84, 84, 3)))
