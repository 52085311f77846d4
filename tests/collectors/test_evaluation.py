"""EvalCollector: completed episodes only, the step budget over all envs, trajectory info."""
import gymnasium as gym
import numpy as np
import pytest

from rlcollect.collectors.evaluation import EvalCollector, evaluate_episodes
from rlcollect.envs import GymEnv
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.testing import counting_env_factories

GAMMA = 0.9


def discounted(length: int) -> float:
    return sum(GAMMA ** k for k in range(length))  # CountingEnv: reward 1 every step


def test_one_episode_per_env_with_its_trajectory_info():
    evaluator = EvalCollector(GymEnv(counting_env_factories([3, 7]), num_envs=2), None, gamma=GAMMA)
    result = evaluator.evaluate()
    assert (result.returns, result.lengths, result.cut) == ([3.0, 7.0], [3, 7], 0)  # env 0's 2nd episode not counted
    assert [info.discounted_return for info in result.trajectories] == pytest.approx([discounted(3), discounted(7)])
    assert evaluator.evaluate().returns == [3.0, 7.0]  # every call starts from a reset


def test_an_episode_cut_by_the_step_budget_is_not_counted():
    # 2 envs x 5 steps: the 7-step episode is still running when the budget is spent
    result = EvalCollector(GymEnv(counting_env_factories([3, 7]), num_envs=2), None,
                           eval_max_steps=10).evaluate()
    assert (result.returns, result.cut) == ([3.0], 1)


def test_max_trajectories_runs_episodes_back_to_back_and_keeps_the_first_to_finish():
    result = EvalCollector(GymEnv(counting_env_factories([2, 5]), num_envs=2), None,
                           eval_max_trajectories=3).evaluate()
    # env 0 finishes at steps 2, 4, 6 ..., env 1 at 5: the first three to finish are 2, 4 (env 0) and 5 (env 1)
    assert sorted(result.lengths) == [2, 2, 5]
    # a budget with max_trajectories: whatever completed within it
    budget = EvalCollector(GymEnv(counting_env_factories([2, 5]), num_envs=2), None, eval_max_steps=8,
                           eval_max_trajectories=100).evaluate()
    assert budget.lengths == [2, 2] and budget.cut == 1  # env 1's first is still running after 4 steps


def test_bad_budgets_are_rejected():
    with pytest.raises(ValueError, match="less than one step of each"):
        EvalCollector(GymEnv(counting_env_factories([2, 5]), num_envs=2), None, eval_max_steps=1)
    with pytest.raises(ValueError, match="eval_max_trajectories"):
        EvalCollector(GymEnv(counting_env_factories([2, 5]), num_envs=2), None, eval_max_trajectories=0)


def test_evaluate_episodes_keeps_its_per_env_step_limit():
    env = GymEnv(counting_env_factories([3, 7]), num_envs=2)
    assert evaluate_episodes(env, None, max_steps=5).returns == [3.0]
    assert evaluate_episodes(env, None).returns == [3.0, 7.0]



def test_a_recurrent_policy_is_evaluated_with_its_hidden_state_carried():
    env = GymEnv("CartPole-v1", 2, seed=0)
    policy = RecurrentActorCritic(env.observation_space, env.action_space, hidden_size=8)
    result = EvalCollector(env, policy, eval_max_steps=1000).evaluate()
    assert len(result.returns) + result.cut == 2 and all(r >= 1 for r in result.returns)


def test_an_evaluation_asks_its_policy_for_the_action_alone():
    policy = ActorCritic(gym.spaces.Box(0.0, np.inf, (1,), np.float32), gym.spaces.Discrete(2))
    evaluator = EvalCollector(GymEnv(counting_env_factories([3, 7]), num_envs=2), policy, gamma=GAMMA)
    assert evaluator.evaluate().returns == [3.0, 7.0]
    stored = set(evaluator.collector.batch.exclude("next").keys())
    assert "action" in stored and not stored & {"action_log_prob", "state_value"}
