"""RecurrentActorCritic over every encoder: flat Box (as before the encoder argument), Dict
and image observations, in step mode and recurrent mode."""
import functools

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.errors import ConfigError
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.encoders import MultiInputEncoder, NatureCNN
from rlcollect.modules.recurrent import GRUModule, LSTMModule, set_recurrent_mode
from rlcollect.testing import CountingImageEnv, SpacesEnv

FLAT = gym.spaces.Box(-1.0, 1.0, (3,))
# the parameter names of a flat-Box RecurrentActorCritic (2 layers, hidden_sizes=(64,)) before the
# encoder argument: its checkpoints must still load
OLD_KEYS = [*(f"rnn.layers.{layer}.{name}_l0" for layer in (0, 1)
              for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")),
            "heads.actor.0.weight", "heads.actor.0.bias", "heads.actor.2.weight", "heads.actor.2.bias",
            "heads.critic.0.weight", "heads.critic.0.bias", "heads.critic.2.weight", "heads.critic.2.bias"]


def states(rnn):
    return ("recurrent_state",) if rnn == "gru" else ("recurrent_state_h", "recurrent_state_c")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_a_flat_box_policy_is_the_rnn_over_the_observation_feeding_the_heads_as_before(rnn):
    """Same parameter names, same initial weights from the same seed, same outputs in both
    modes as the composition it was: a GRU / LSTM reading "observation", ActorCritic heads."""
    torch.manual_seed(0)
    old_rnn = (GRUModule if rnn == "gru" else LSTMModule)(3, 8, 2, out_keys=("features", *(("next", key)
                                                                                        for key in states(rnn))))
    old_heads = ActorCritic(gym.spaces.Box(-1.0, 1.0, (8,)), gym.spaces.Discrete(2), hidden_sizes=(64,),
                            observation_key="features")
    torch.manual_seed(0)
    policy = RecurrentActorCritic(FLAT, gym.spaces.Discrete(2), rnn=rnn, hidden_size=8, num_layers=2)
    assert list(policy.state_dict()) == OLD_KEYS
    old_state = {**{f"rnn.{k}": v for k, v in old_rnn.state_dict().items()},
                 **{f"heads.{k}": v for k, v in old_heads.state_dict().items()}}
    assert all(torch.equal(old_state[key], value) for key, value in policy.state_dict().items())
    policy.load_state_dict(old_state)  # strict: an old checkpoint loads
    td = TensorDict({"observation": torch.randn(6, 3), "is_init": torch.tensor([1, 0, 0, 1, 0, 0]).bool(),
                     "action": torch.tensor([0, 1, 1, 0, 1, 0])}, [6])
    policy.rnn.make_tensordict_primer().apply(td)
    td.set(states(rnn)[0], torch.randn(6, 2, 8))
    torch.manual_seed(1)
    got = policy(td.clone())
    torch.manual_seed(1)
    expected = old_heads(old_rnn(td.clone()))
    assert set(got.keys(True, True)) == set(expected.keys(True, True))  # nothing more is written
    assert (got == expected).all()
    with set_recurrent_mode("recurrent"):
        features = old_rnn(td.clone())
    features.set("action", td["action"])
    for a, b in zip(policy.evaluate(td), old_heads.evaluate(features)):
        assert torch.equal(a, b)


# episodes of 3 steps seeing the count as a [36, 36, 3] uint8 image
HWCImageEnv = functools.partial(CountingImageEnv, (36, 36, 3), episode_length=3, scale=40)


DICT_ENV = functools.partial(SpacesEnv, "dict", episode_length=3)  # Box, Discrete, image [3, 4, 4], MultiBinary


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("source, encoder, encoder_class", [(DICT_ENV, "auto", MultiInputEncoder),
                                                            (HWCImageEnv, "cnn", NatureCNN)],
                         ids=["dict", "image"])
def test_recurrent_mode_over_collected_sequences_equals_the_steps_carried_one_by_one(rnn, source, encoder,
                                                                                   encoder_class):
    """Regression: RecurrentActorCritic refused anything but a flat Box observation."""
    env = GymEnv(source, 2)
    torch.manual_seed(0)
    policy = RecurrentActorCritic(env.observation_space, env.action_space, rnn=rnn, hidden_size=8, num_layers=2,
                                  hidden_sizes=(16,), encoder=encoder)
    assert type(policy.encoder) is encoder_class
    batch = next(iter(Collector(env, policy, frames_per_batch=16)))  # step mode, the states carried
    assert "encoded_observation" not in batch.keys(True, True)  # the encoder's features are not stored
    assert batch["is_init"][:, 3].all() and batch[states(rnn)[0]][:, 3].abs().sum() == 0  # a reset, zero state
    flat = batch.reshape(-1)  # [16]: the two envs' rows end to end, the 1-D layout
    with torch.no_grad():
        log_prob, _, value = policy.evaluate(flat)  # recurrent mode, from each row's stored first state
        step_value = policy.state_value(flat)  # step mode, from each step's stored state
    torch.testing.assert_close(log_prob, flat["action_log_prob"], rtol=0, atol=1e-6)
    torch.testing.assert_close(value, flat["state_value"], rtol=0, atol=1e-6)
    torch.testing.assert_close(step_value, flat["state_value"], rtol=0, atol=1e-6)
    # by hand: one env's steps in step mode, carrying ("next", state) and zeroing it at is_init
    row = batch[0]
    carried = {key: torch.zeros(2, 8) for key in states(rnn)}
    with torch.no_grad():
        for t in range(8):
            step = row[t].exclude(*states(rnn), ("next", *states(rnn)))
            if step["is_init"]:
                carried = {key: torch.zeros(2, 8) for key in carried}
            step.update(carried)
            out = policy(step)
            assert torch.allclose(out["features"], row["features"][t], rtol=0, atol=1e-6)
            carried = {key: out["next", key] for key in carried}
        with set_recurrent_mode("recurrent"):
            sequence = policy(row.exclude("action", "action_log_prob", "state_value", "features").clone())
    torch.testing.assert_close(sequence["features"], row["features"], rtol=0, atol=1e-6)
    torch.testing.assert_close(sequence["state_value"], row["state_value"], rtol=0, atol=1e-6)
    policy.evaluate(flat)[0].sum().backward()
    if encoder_class is NatureCNN:  # the CNN trains through the rnn
        assert all(p.grad is not None for p in policy.encoder.parameters())


@pytest.mark.timeout(60)
def test_an_encoder_that_does_not_fit_is_a_config_error():
    with pytest.raises(ConfigError, match="model encoder 'mlp' needs a flat Box observation"):
        RecurrentActorCritic(gym.spaces.Dict({"a": gym.spaces.Discrete(3)}), gym.spaces.Discrete(2), encoder="mlp")
    with pytest.raises(ConfigError, match="rnn must be 'gru' or 'lstm', got 'rnn'"):
        RecurrentActorCritic(FLAT, gym.spaces.Discrete(2), rnn="rnn")
