import numpy as np
import torch

from rlcollect.algos.reward_scaling import RewardScaler


def test_scales_by_the_running_std_of_the_discounted_return_across_batches():
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(2, 10))
    done = np.zeros((2, 10), bool)
    done[0, 3] = done[1, 7] = True
    scaler = RewardScaler(gamma=0.9)
    scaled = [scaler(torch.tensor(reward[:, :5], dtype=torch.float32), torch.tensor(done[:, :5])),
              scaler(torch.tensor(reward[:, 5:], dtype=torch.float32), torch.tensor(done[:, 5:]))]
    # by hand: each env's discounted return, back to 0 after its episode's end, over both batches
    returns = np.zeros((2, 10))
    for env in range(2):
        running = 0.0
        for t in range(10):
            running = 0.9 * running + reward[env, t]
            returns[env, t] = running
            running = 0.0 if done[env, t] else running
    np.testing.assert_allclose(scaler.variance, returns.var(), rtol=1e-6)
    # the second batch is scaled with the statistics of both batches
    np.testing.assert_allclose(scaled[1].numpy(), reward[:, 5:] / np.sqrt(returns.var() + 1e-8), rtol=1e-5)
    np.testing.assert_allclose(scaled[0].numpy(), reward[:, :5] / np.sqrt(returns[:, :5].var() + 1e-8), rtol=1e-5)


def test_clips_and_keeps_the_input_and_its_state_round_trips():
    scaler = RewardScaler(gamma=0.99, clip=1.0)
    reward = torch.tensor([[0.0, 0.0, 100.0]])
    out = scaler(reward, torch.zeros(1, 3, dtype=torch.bool))
    assert out.abs().max() == 1.0 and reward.tolist() == [[0.0, 0.0, 100.0]]  # a new tensor, the input untouched
    copy = RewardScaler(gamma=0.99, clip=1.0)
    copy.load_state_dict(scaler.state_dict())
    assert copy.variance == scaler.variance and torch.equal(copy.returns, scaler.returns)
