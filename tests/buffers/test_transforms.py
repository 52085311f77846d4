import pytest
import torch
from tensordict import TensorDict

from rlcollect.buffers import MultiStep
from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv

STEPS = ("next", "steps_to_next_obs")


def batch_of(reward, terminated, truncated):
    """A hand-built [T] collector batch: rewards as given, next observation = 10 + t,
    and one more entry under "next" (info = 100 + t)."""
    horizon = len(reward)
    terminated, truncated = torch.tensor(terminated), torch.tensor(truncated)
    return TensorDict({
        "observation": torch.arange(horizon).float().unsqueeze(-1),
        "action": torch.arange(horizon),
        "next": {"observation": (10 + torch.arange(horizon)).float().unsqueeze(-1),
                 "reward": torch.tensor(reward), "terminated": terminated, "truncated": truncated,
                 "done": terminated | truncated, "info": 100 + torch.arange(horizon)},
    }, [horizon])


F, T = False, True
# row A: done in the middle (t=2, terminated) and at the end (t=5, truncated)
ROW_A = batch_of([1.0, 2, 3, 4, 5, 6], terminated=[F, F, T, F, F, F], truncated=[F, F, F, F, F, T])
# row B: done at t=1 only: the batch ends mid-trajectory
ROW_B = batch_of([1.0, 2, 3, 4, 5, 6], terminated=[F, T, F, F, F, F], truncated=[F] * 6)
# gamma 0.5, n_steps 3: (m, last step t + m - 1, discounted reward sum) for each t, by hand
#   A: t=0 steps 0,1,2: 1 + 1 + 0.75; t=1 steps 1,2: 2 + 1.5; t=2: 3; t=3 steps 3,4,5: 4 + 2.5 + 1.5; ...
EXPECTED_A = dict(steps=[3, 2, 1, 3, 2, 1], last=[2, 2, 2, 5, 5, 5], reward=[2.75, 3.5, 3.0, 8.0, 8.0, 6.0])
#   B: t=0 steps 0,1: 1 + 1; t=2 steps 2,3,4: 3 + 2 + 1.25; t=4 steps 4,5 (the batch ends): 5 + 3
EXPECTED_B = dict(steps=[2, 1, 3, 3, 2, 1], last=[1, 1, 4, 5, 5, 5], reward=[2.0, 2.0, 6.25, 8.0, 8.0, 6.0])


def assert_n_step(out, row, expected):
    last = torch.tensor(expected["last"])
    assert out[STEPS].dtype == torch.int64 and out[STEPS].tolist() == expected["steps"]
    assert out["next", "reward"].tolist() == expected["reward"]
    for key in ("observation", "terminated", "truncated", "done", "info"):  # those of step t + m - 1
        assert torch.equal(out["next", key], row["next", key][last]), key
    assert torch.equal(out["observation"], row["observation"])  # outside "next": untouched
    assert torch.equal(out["action"], row["action"])


def test_n_step_transitions_of_a_t_batch():
    original = ROW_A.clone()
    out = MultiStep(gamma=0.5, n_steps=3)(ROW_A)
    assert_n_step(out, ROW_A, EXPECTED_A)
    assert out["next", "observation"].squeeze(-1).tolist() == [12, 12, 12, 15, 15, 15]
    assert out["next", "terminated"].tolist() == [T, T, T, F, F, F]
    assert out["next", "truncated"].tolist() == [F, F, F, T, T, T]
    assert (ROW_A == original).all() and STEPS not in ROW_A.keys(True)  # the input is not modified


def test_end_keys_cut_transitions_as_done_does():
    # ROW_B's termination at t=1 given as a lost life instead: the same cuts, no episode end
    lives = ROW_B.clone()
    lives["next", "life_lost"] = lives["next", "terminated"].float()  # info keys are float32
    lives["next", "terminated"] = lives["next", "done"] = torch.zeros(6, dtype=torch.bool)
    out = MultiStep(gamma=0.5, n_steps=3, end_keys=["life_lost"])(lives)
    assert out[STEPS].tolist() == EXPECTED_B["steps"] and out["next", "reward"].tolist() == EXPECTED_B["reward"]
    assert out["next", "life_lost"].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0] and not out["next", "done"].any()
    assert MultiStep(gamma=0.5, n_steps=3)(lives)[STEPS].tolist() == [3, 3, 3, 3, 2, 1]  # without: crossed


def test_n_step_transitions_of_a_p_t_batch_row_by_row():
    batch = torch.stack([ROW_A, ROW_B])  # [P=2, T=6]
    out = MultiStep(gamma=0.5, n_steps=3)(batch)
    assert out.batch_size == (2, 6) and out[STEPS].shape == (2, 6)
    assert_n_step(out[0], ROW_A, EXPECTED_A)
    assert_n_step(out[1], ROW_B, EXPECTED_B)
    assert out[1]["next", "done"].tolist() == [T, T, F, F, F, F]  # t=2 ends at step 4: no done there


def test_n_steps_beyond_the_batch_use_the_steps_it_has():
    out = MultiStep(gamma=1.0, n_steps=10)(ROW_B)
    assert out[STEPS].tolist() == [2, 1, 4, 3, 2, 1]
    assert out["next", "reward"].tolist() == [3.0, 2.0, 18.0, 15.0, 11.0, 6.0]


def test_one_step_leaves_the_transitions_as_they_are():
    out = MultiStep(gamma=0.9, n_steps=1)(ROW_A)
    assert out[STEPS].tolist() == [1] * 6
    assert (out.exclude(STEPS) == ROW_A).all()


def test_per_step_feature_dims_are_kept():
    batch = ROW_A.clone()
    for key in ("reward", "done", "terminated", "truncated"):
        batch.set(("next", key), batch["next", key].unsqueeze(-1))
    out = MultiStep(gamma=0.5, n_steps=3)(batch)
    assert out["next", "reward"].shape == (6, 1) and out[STEPS].shape == (6, 1)
    assert out["next", "reward"].squeeze(-1).tolist() == EXPECTED_A["reward"]
    assert out[STEPS].squeeze(-1).tolist() == EXPECTED_A["steps"]


def test_as_a_collector_postproc():
    # CountingEnv(4): reward 1 each step, observation = steps since reset, episodes of 4 steps
    collector = Collector(GymEnv(lambda: CountingEnv(4)), frames_per_batch=8, postproc=MultiStep(0.5, 3))
    batch = next(iter(collector))
    assert batch[STEPS].tolist() == [3, 3, 2, 1, 3, 3, 2, 1]
    assert batch["next", "reward"].tolist() == [1.75, 1.75, 1.5, 1.0] * 2
    assert batch["next", "observation"].squeeze(-1).tolist() == [3.0, 4.0, 4.0, 4.0] * 2
    assert batch["next", "done"].tolist() == [False, True, True, True] * 2


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(gamma=1.5, n_steps=3), ValueError, r"gamma must be a number in \[0, 1\], got 1.5"),
    (dict(gamma=-0.1, n_steps=3), ValueError, "gamma must be a number in"),
    (dict(gamma=True, n_steps=3), ValueError, "gamma must be a number in"),
    (dict(gamma=0.9, n_steps=0), ValueError, "n_steps must be a positive int, got 0"),
    (dict(gamma=0.9, n_steps=2.0), ValueError, "n_steps must be a positive int"),
])
def test_multi_step_validates_its_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        MultiStep(**kwargs)


def test_multi_step_needs_reward_and_done():
    with pytest.raises(KeyError, match="MultiStep needs.*next.*done.*in the batch"):
        MultiStep(0.9, 2)(ROW_A.exclude(("next", "done")))


def reference_n_step(reward, done, gamma, n_steps):
    """MultiStep by its definition, one t at a time ([T] rows)."""
    horizon, sums, steps = len(reward), [], []
    for t in range(horizon):
        total, m = 0.0, 0
        while m < n_steps and t + m < horizon:
            total += gamma ** m * reward[t + m]
            m += 1
            if done[t + m - 1]:
                break
        sums.append(total)
        steps.append(m)
    return sums, steps


def test_a_w_p_t_batch_matches_the_definition_step_by_step():
    generator = torch.Generator().manual_seed(0)
    shape = (3, 2, 9)
    done = torch.rand(shape, generator=generator) < 0.25
    batch = TensorDict({"next": {"reward": torch.randint(0, 5, shape, generator=generator).double(), "done": done,
                                 "observation": torch.arange(54).reshape(*shape, 1)}}, shape)
    out = MultiStep(gamma=0.5, n_steps=4)(batch)
    for w in range(3):
        for p in range(2):
            sums, steps = reference_n_step(batch["next", "reward"][w, p].tolist(), done[w, p].tolist(), 0.5, 4)
            assert out["next", "reward"][w, p].tolist() == sums and out[STEPS][w, p].tolist() == steps
            last = torch.arange(9) + torch.tensor(steps) - 1
            assert torch.equal(out["next", "observation"][w, p], batch["next", "observation"][w, p][last])
