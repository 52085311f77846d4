import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import set_interaction_type

from rlcollect.acting import actions_only, set_actions_only
from rlcollect.errors import ConfigError
from rlcollect.modules import ActorCritic
from rlcollect.modules.distributions import categorical_log_prob, categorical_sample
from rlcollect.modules.recurrent import recurrent_mode, set_recurrent_mode

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


def test_discrete_head_shapes_and_deterministic_mode():
    policy = ActorCritic(OBS, gym.spaces.Discrete(4))
    td = TensorDict({"observation": torch.randn(5, 3)}, [5])
    out = policy(td)
    assert out["action"].shape == (5,) and out["action"].dtype == torch.int64
    assert out["action_log_prob"].shape == (5,) and out["state_value"].shape == (5,)
    with set_interaction_type("deterministic"):
        greedy = policy(td.clone())["action"]
    assert torch.equal(greedy, policy.actor(td["observation"]).argmax(-1))


def test_box_head_and_log_prob_consistency():
    policy = ActorCritic(OBS, gym.spaces.Box(-2, 2, (2,), np.float32))
    out = policy(TensorDict({"observation": torch.randn(6, 3)}, [6]))
    assert out["action"].shape == (6, 2) and out["action"].dtype == torch.float32
    log_prob, entropy, value = policy.evaluate_actions(out["observation"], out["action"])
    assert torch.allclose(log_prob, out["action_log_prob"]) and torch.allclose(value, out["state_value"])
    expected = torch.distributions.Normal(policy.actor(out["observation"]), policy.log_std.exp())
    assert torch.allclose(log_prob, expected.log_prob(out["action"]).sum(-1), atol=1e-5)
    assert torch.allclose(entropy, expected.entropy().sum(-1), atol=1e-5)


def test_gumbel_sampling_matches_the_categorical_distribution():
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([0.1, 0.2, 0.7])).expand(100_000, 3)
    counts = torch.bincount(categorical_sample(logits), minlength=3).float() / 100_000
    assert torch.allclose(counts, torch.tensor([0.1, 0.2, 0.7]), atol=0.01)
    assert torch.allclose(categorical_log_prob(logits[:1], torch.tensor([2])), torch.log(torch.tensor([0.7])))


def test_unsupported_spaces_raise():
    with pytest.raises(ConfigError, match="action space"):  # a user's choice of env and algorithm: one line
        ActorCritic(OBS, gym.spaces.MultiBinary(3))


@pytest.mark.parametrize("space, mode", [(gym.spaces.Discrete(4), "deterministic"), (gym.spaces.Discrete(4), "random"),
                                         (gym.spaces.Box(-2, 2, (2,), np.float32), "deterministic"),
                                         (gym.spaces.Box(-2, 2, (2,), np.float32), "random")])
def test_asked_for_actions_only_it_writes_the_same_action_and_nothing_else(space, mode):
    torch.manual_seed(0)
    policy = ActorCritic(OBS, space)
    observation = torch.randn(5, 3)
    with set_interaction_type(mode):
        torch.manual_seed(1)
        full = policy(TensorDict({"observation": observation}, [5]))
        after_full = torch.get_rng_state()
        torch.manual_seed(1)
        with set_actions_only():
            alone = policy(TensorDict({"observation": observation}, [5]))
        assert torch.equal(torch.get_rng_state(), after_full)  # the same draws
    assert sorted(alone.keys()) == ["action", "observation"]
    assert sorted(full.keys()) == ["action", "action_log_prob", "observation", "state_value"]
    assert torch.equal(alone["action"], full["action"])


def test_actions_only_is_per_thread_and_each_exit_restores_what_it_found():
    seen = {}
    with set_actions_only():
        worker = threading.Thread(target=lambda: seen.update(other_thread=actions_only()))
        worker.start()
        worker.join()
        with set_actions_only(False):
            seen["inner"] = actions_only()
        seen["outer"] = actions_only()
    assert seen == {"other_thread": False, "inner": False, "outer": True}
    assert actions_only() is False


def test_actions_only_and_the_recurrent_mode_are_separate_settings_and_an_error_restores_both():
    with set_recurrent_mode("recurrent"):
        assert actions_only() is False
        with pytest.raises(RuntimeError):
            with set_actions_only():
                assert recurrent_mode() == "recurrent" and actions_only() is True
                raise RuntimeError
        assert actions_only() is False and recurrent_mode() == "recurrent"
    assert recurrent_mode() == "step"
