import torch

from rlcollect.algos.gae import generalized_advantage_estimate


def test_gae_against_a_hand_computed_example():
    # step 1 is truncated (bootstrap from V(final obs) = 10), step 3 terminated (bootstrap 0)
    advantage, target = generalized_advantage_estimate(
        reward=torch.tensor([1.0, 1.0, 1.0, 1.0]),
        state_value=torch.tensor([1.0, 2.0, 3.0, 4.0]),
        next_state_value=torch.tensor([2.0, 10.0, 4.0, 6.0]),
        terminated=torch.tensor([False, False, False, True]),
        done=torch.tensor([False, True, False, True]),
        gamma=0.5, gae_lambda=0.5,
    )
    # deltas: 1+1-1=1, 1+5-2=4, 1+2-3=0, 1+0-4=-3; A: 1+.25*4=2, 4 (done stops), 0+.25*-3, -3
    assert advantage.tolist() == [2.0, 4.0, -0.75, -3.0]
    assert target.tolist() == [3.0, 6.0, 2.25, 1.0]


def test_gae_is_independent_per_env_row():
    kwargs = dict(gamma=0.9, gae_lambda=0.95)
    reward, value = torch.rand(3, 7), torch.rand(3, 7)
    next_value, terminated = torch.rand(3, 7), torch.rand(3, 7) > 0.7
    done = terminated | (torch.rand(3, 7) > 0.8)
    batched, _ = generalized_advantage_estimate(reward, value, next_value, terminated, done, **kwargs)
    for row in range(3):
        single, _ = generalized_advantage_estimate(reward[row], value[row], next_value[row],
                                                   terminated[row], done[row], **kwargs)
        assert torch.allclose(batched[row], single)
