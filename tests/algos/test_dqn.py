import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import set_interaction_type

from rlcollect.algos.dqn import DQN, dqn_targets
from rlcollect.modules.q_network import QValuePolicy, linear_epsilon

OBS = gym.spaces.Box(-1, 1, (2,), np.float32)


def test_targets_against_a_hand_computed_example():
    kwargs = dict(reward=torch.tensor([1.0, 2.0]), terminated=torch.tensor([False, True]),
                  next_q_online=torch.tensor([[3.0, 1.0], [5.0, 0.0]]),
                  next_q_target=torch.tensor([[2.0, 4.0], [7.0, 1.0]]), gamma=0.5)
    # double: a* = argmax online = [0, 0] -> target Q [2, 7]; step 2 terminated: no bootstrap
    assert dqn_targets(**kwargs, double_dqn=True).tolist() == [1.0 + 0.5 * 2.0, 2.0]
    # vanilla: max of the target network = [4, 7]
    assert dqn_targets(**kwargs, double_dqn=False).tolist() == [1.0 + 0.5 * 4.0, 2.0]


def linear_q_policy(weight, bias):
    policy = QValuePolicy(OBS, gym.spaces.Discrete(2), hidden_sizes=())
    with torch.no_grad():
        policy.q_net[0].weight.copy_(torch.tensor(weight))
        policy.q_net[0].bias.copy_(torch.tensor(bias))
    return policy


def test_loss_against_a_hand_computed_example():
    # Q(s) = W s + b with W = [[1, 0], [0, 1]], b = [0, 1]
    policy = linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 1.0])
    dqn = DQN(policy, gamma=0.5, double_dqn=False, loss="mse")
    batch = TensorDict({
        "observation": torch.tensor([[1.0, 2.0], [3.0, 0.0]]),
        "action": torch.tensor([1, 0]),
        "next": {"observation": torch.tensor([[0.0, 0.0], [1.0, 1.0]]), "reward": torch.tensor([1.0, -1.0]),
                 "terminated": torch.tensor([False, False])},
    }, [2])
    # taken Q: [2 + 1, 3] = [3, 3]; next max Q: [max(0, 1), max(1, 2)] = [1, 2]
    # targets: [1 + 0.5 * 1, -1 + 0.5 * 2] = [1.5, 0]; mse = ((3 - 1.5)^2 + 3^2) / 2
    loss, q_mean = dqn.loss(batch)
    assert loss.item() == pytest.approx((1.5 ** 2 + 3.0 ** 2) / 2)
    assert q_mean.item() == 3.0


def test_periodic_and_polyak_target_updates():
    batch = TensorDict({"observation": torch.ones(4, 2), "action": torch.zeros(4, dtype=torch.int64),
                        "next": {"observation": torch.ones(4, 2), "reward": torch.ones(4),
                                 "terminated": torch.zeros(4, dtype=torch.bool)}}, [4])
    periodic = DQN(linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0]), target_update="periodic",
                   target_update_period=2)
    periodic.update(batch)
    assert not torch.equal(periodic.target.q_net[0].weight, periodic.q_policy.q_net[0].weight)
    periodic.update(batch)
    assert torch.equal(periodic.target.q_net[0].weight, periodic.q_policy.q_net[0].weight)
    polyak = DQN(linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0]), target_update="polyak", tau=0.5)
    before = polyak.target.q_net[0].weight.clone()
    polyak.update(batch)
    expected = before + 0.5 * (polyak.q_policy.q_net[0].weight - before)
    assert torch.allclose(polyak.target.q_net[0].weight, expected)


def test_epsilon_greedy_follows_the_interaction_type_and_the_epsilon_buffer():
    policy = linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0])
    td = TensorDict({"observation": torch.tensor([[0.0, 1.0]]).expand(2000, 2)}, [2000])
    policy.epsilon.fill_(0.0)
    assert (policy(td.clone())["action"] == 1).all()
    policy.epsilon.fill_(1.0)
    random_actions = policy(td.clone())["action"]
    assert 0.4 < random_actions.float().mean() < 0.6
    with set_interaction_type("deterministic"):
        assert (policy(td.clone())["action"] == 1).all()
    assert "epsilon" in dict(policy.named_buffers())  # travels with the weights to workers


def test_linear_epsilon_schedule():
    assert [linear_epsilon(f, start=1.0, end=0.1, decay_frames=100) for f in (0, 50, 100, 500)] == \
        pytest.approx([1.0, 0.55, 0.1, 0.1])
