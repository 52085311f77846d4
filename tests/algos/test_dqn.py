import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import set_interaction_type

from rlcollect.acting import set_actions_only
from rlcollect.algos.dqn import DQN, DQNLearner, dqn_targets
from rlcollect.buffers import LazyTensorStorage, PrioritizedSampler, ReplayBuffer
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


def test_asked_for_actions_only_the_greedy_action_comes_without_the_q_values():
    policy = linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 1.0])
    observation = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    with set_interaction_type("deterministic"):
        full = policy(TensorDict({"observation": observation}, [2]))
        with set_actions_only():
            alone = policy(TensorDict({"observation": observation}, [2]))
    assert full["action"].tolist() == alone["action"].tolist() == [1, 0]  # Q = [1, 3] and [3, 1]
    assert "action_value" in full.keys() and sorted(alone.keys()) == ["action", "observation"]


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


def test_terminal_keys_end_the_bootstrap_as_terminated_does():
    policy = linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 1.0])
    batch = TensorDict({
        "observation": torch.tensor([[1.0, 2.0], [3.0, 0.0]]), "action": torch.tensor([1, 0]),
        "next": {"observation": torch.tensor([[0.0, 0.0], [1.0, 1.0]]), "reward": torch.tensor([1.0, -1.0]),
                 "terminated": torch.tensor([False, False]), "life_lost": torch.tensor([0.0, 1.0])},
    }, [2])
    terminated = batch.clone()
    terminated["next", "terminated"] = torch.tensor([False, True])
    plain = DQN(policy, gamma=0.5, double_dqn=False, loss="mse")
    episodic = DQN(policy, gamma=0.5, double_dqn=False, loss="mse", terminal_keys=["life_lost"])
    assert episodic.loss(batch)[0].item() == plain.loss(terminated)[0].item() != plain.loss(batch)[0].item()


def test_n_step_targets_discount_the_bootstrap_by_gamma_to_the_steps():
    kwargs = dict(reward=torch.tensor([1.0, 2.0, 3.0]), terminated=torch.tensor([False, False, True]),
                  next_q_online=torch.tensor([[3.0, 1.0], [5.0, 0.0], [1.0, 0.0]]),
                  next_q_target=torch.tensor([[2.0, 4.0], [7.0, 1.0], [9.0, 9.0]]), gamma=0.5)
    steps = torch.tensor([1, 3, 2])
    # vanilla: next values [4, 7, 9]; 0.5^1, 0.5^3, and no bootstrap for the terminated one
    assert dqn_targets(**kwargs, double_dqn=False, steps=steps).tolist() == [1.0 + 0.5 * 4.0, 2.0 + 0.125 * 7.0, 3.0]
    assert dqn_targets(**kwargs, double_dqn=True, steps=steps).tolist() == [1.0 + 0.5 * 2.0, 2.0 + 0.125 * 7.0, 3.0]


def hand_batch(extra=None):
    """The batch of test_loss_against_a_hand_computed_example, plus ``extra`` entries."""
    batch = TensorDict({
        "observation": torch.tensor([[1.0, 2.0], [3.0, 0.0]]),
        "action": torch.tensor([1, 0]),
        "next": {"observation": torch.tensor([[0.0, 0.0], [1.0, 1.0]]), "reward": torch.tensor([1.0, -1.0]),
                 "terminated": torch.tensor([False, False])},
    }, [2])
    for key, value in (extra or {}).items():
        batch.set(key, value)
    return batch


def hand_dqn():
    return DQN(linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 1.0]), gamma=0.5, double_dqn=False, loss="mse")


def test_loss_of_n_step_transitions():
    # taken Q [3, 3]; next max Q [1, 2]; steps [2, 1]: targets [1 + 0.25 * 1, -1 + 0.5 * 2] = [1.25, 0]
    batch = hand_batch({("next", "steps_to_next_obs"): torch.tensor([2, 1])})
    loss, q_mean, td_error = hand_dqn().loss(batch, return_td_error=True)
    assert loss.item() == pytest.approx((1.75 ** 2 + 3.0 ** 2) / 2)
    assert td_error.tolist() == [1.75, 3.0] and not td_error.requires_grad


def test_importance_weights_scale_each_sample_loss():
    # targets [1.5, 0]: squared errors [2.25, 9], weighted [0.5 * 2.25, 2 * 9], then the mean
    loss, _ = hand_dqn().loss(hand_batch({"_weight": torch.tensor([0.5, 2.0])}))
    assert loss.item() == pytest.approx((0.5 * 2.25 + 2.0 * 9.0) / 2)
    huber = DQN(linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 1.0]), gamma=0.5, double_dqn=False, loss="huber")
    loss, _ = huber.loss(hand_batch({"_weight": torch.tensor([0.5, 2.0])}))
    assert loss.item() == pytest.approx((0.5 * (1.5 - 0.5) + 2.0 * (3.0 - 0.5)) / 2)  # smooth L1: |x| - 0.5 past 1


def test_update_returns_the_per_sample_td_errors():
    metrics = hand_dqn().update(hand_batch())
    assert metrics["td_error"].tolist() == [1.5, 3.0]  # before the gradient step


def test_learner_gives_the_sampled_elements_their_td_errors_as_priorities():
    policy = linear_q_policy([[1.0, 0.0], [0.0, 1.0]], [0.0, 1.0])
    rb = ReplayBuffer(LazyTensorStorage(8), PrioritizedSampler(8, alpha=1.0, beta=1.0, eps=0.0), batch_size=4)
    rb.extend(torch.cat([hand_batch(), hand_batch()]))
    updates = []
    update_priority = rb.update_priority
    rb.update_priority = lambda index, priority: (updates.append((index, priority)), update_priority(index, priority))
    learner = DQNLearner(policy, rb, gradient_steps_per_batch=1, learning_starts=0, eps_start=0.0, eps_end=0.0,
                         eps_decay_frames=1, gamma=0.5, double_dqn=False, loss="mse")
    dqn = learner.dqn
    before = copy.deepcopy(dqn)
    metrics = learner.learn(None, frames=10)
    assert "td_error" not in metrics and metrics["loss_q"] > 0
    [(index, priority)] = updates
    _, _, expected = before.loss(rb.storage.get(index), return_td_error=True)
    assert torch.equal(priority, expected)  # |target - Q| of the sampled elements, before the step
    given = torch.ones(4, dtype=torch.float64)  # alpha 1, eps 0: P is proportional to the priorities
    given[index] = priority.double()
    torch.testing.assert_close(rb.sampler.probabilities(rb.storage), given / given.sum())


def test_the_learner_updates_the_observation_norm_that_online_and_target_networks_share():
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    policy = QValuePolicy(space, gym.spaces.Discrete(2), hidden_sizes=(4,), normalize_observation=True)
    learner = DQNLearner(policy, ReplayBuffer(LazyTensorStorage(8), batch_size=2), gradient_steps_per_batch=1,
                         learning_starts=0, eps_start=0.0, eps_end=0.0, eps_decay_frames=1)
    assert learner.dqn.target.obs_norm is policy.obs_norm
    observation = torch.tensor([[1.0, 10.0], [3.0, 20.0], [5.0, 60.0]])
    batch = TensorDict({"observation": observation, "action": torch.zeros(3, dtype=torch.int64),
                        ("next", "observation"): observation, ("next", "reward"): torch.zeros(3),
                        ("next", "terminated"): torch.zeros(3, dtype=torch.bool)}, [3])
    learner.learn(batch, frames=3)
    expected = observation.double().numpy()
    np.testing.assert_allclose(policy.obs_norm.running_mean.numpy(), expected.mean(0))
    np.testing.assert_allclose(policy.obs_norm.running_var.numpy(), expected.var(0))
    assert float(policy.obs_norm.count) == 3.0
    restored = DQN(QValuePolicy(space, gym.spaces.Discrete(2), hidden_sizes=(4,), normalize_observation=True))
    restored.q_policy.load_state_dict(policy.state_dict())
    restored.load_state_dict(learner.dqn.state_dict())  # the online statistics, after a reload too
    assert restored.target.obs_norm is restored.q_policy.obs_norm and float(restored.target.obs_norm.count) == 3.0


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
