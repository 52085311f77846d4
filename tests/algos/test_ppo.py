import copy

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.algos.ppo import PPO
from rlcollect.buffers.rollout import RolloutBuffer, transition_view
from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.modules import ActorCritic


def test_update_changes_the_policy_and_reports_finite_losses():
    env = GymEnv("CartPole-v1", 4, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space)
    collector = Collector(env, policy, frames_per_batch=64)
    buffer = RolloutBuffer(4, 16, (4,))
    ppo = PPO(policy, lr=1e-3, epochs=2, minibatch_size=32, total_frames=1000)
    before = copy.deepcopy(policy.state_dict())
    buffer.add(next(iter(collector)))
    metrics = ppo.update(buffer, frames=64)
    assert set(metrics) == {"loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction", "lr"}
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert metrics["lr"] == 1e-3 * (1 - 64 / 1000)
    changed = [k for k in before if not torch.equal(before[k], policy.state_dict()[k])]
    assert changed and any(k.startswith("actor") for k in changed) and any(k.startswith("critic") for k in changed)
    advantage = buffer.rollout["advantage"]
    assert advantage.shape == (4, 17) and (advantage[:, -1] == 0).all()


def test_box_actions_train_too():
    env = GymEnv("Pendulum-v1", 2, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space)
    buffer = RolloutBuffer(2, 8, (3,), (1,), action_dtype=torch.float32)
    buffer.add(next(iter(Collector(env, policy, frames_per_batch=16))))
    log_std = policy.log_std.detach().clone()
    PPO(policy, epochs=1, minibatch_size=8, anneal_lr=False, entropy_coef=0.1).update(buffer, frames=16)
    assert not torch.equal(log_std, policy.log_std)


def test_ppo_updates_the_observation_norm_after_each_update():
    from rlcollect.algos.ppo import PPOLearner
    from rlcollect.collectors import Collector
    from rlcollect.envs import GymEnv
    from rlcollect.modules import ActorCritic

    env = GymEnv("CartPole-v1", 2, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space, normalize_observation=True)
    learner = PPOLearner(policy, RolloutBuffer(2, 8, 4), epochs=1, minibatch_size=8, total_frames=16)
    batch = next(iter(Collector(env, policy, frames_per_batch=16)))
    learner.learn(batch, 16)
    assert int(policy.obs_norm.count) == 16
    torch.testing.assert_close(policy.obs_norm.running_mean.float(), batch["observation"].reshape(-1, 4).mean(0))


def test_normalize_reward_trains_on_scaled_rewards_and_stores_them_as_collected():
    from rlcollect.algos.ppo import PPOLearner

    env = GymEnv("CartPole-v1", 2, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space)
    learner = PPOLearner(policy, RolloutBuffer(2, 8, 4), epochs=1, minibatch_size=8, total_frames=32,
                         normalize_reward=True)
    ppo = learner.ppo
    for frames, batch in zip((16, 32), Collector(env, policy, frames_per_batch=16)):
        learner.learn(batch, frames)
        stored = transition_view(learner.buffer.rollout)["next", "reward"]
        assert stored.shape == (2, 8) and (stored == 1.0).all()  # CartPole's rewards, as collected
    assert ppo.reward_scaler.variance > 0 and int(ppo.reward_scaler.stats.count) == 32
    restored = PPO(copy.deepcopy(policy), total_frames=32, normalize_reward=True)
    restored.load_state_dict(ppo.state_dict())  # a checkpoint carries the statistics
    assert restored.reward_scaler.variance == ppo.reward_scaler.variance


def test_terminal_keys_end_the_value_targets_as_terminated_does_and_the_rollout_keeps_them():
    """A lost life (("next", "life_lost") with terminal_keys=["life_lost"]) gives the same
    advantages as a termination there would, while the stored episode flags stay as collected."""
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2))
    batch = TensorDict({
        "observation": torch.randn(2, 6, 3), "action": torch.zeros(2, 6, dtype=torch.int64),
        "action_log_prob": torch.zeros(2, 6), "state_value": torch.zeros(2, 6),
        "is_init": torch.zeros(2, 6, dtype=torch.bool),
        "next": {"observation": torch.randn(2, 6, 3), "reward": torch.ones(2, 6),
                 "terminated": torch.zeros(2, 6, dtype=torch.bool), "truncated": torch.zeros(2, 6, dtype=torch.bool),
                 "done": torch.zeros(2, 6, dtype=torch.bool), "life_lost": torch.zeros(2, 6)},  # info keys: float32
    }, [2, 6])
    batch["next", "life_lost"][0, 2] = 1.0
    episodic = RolloutBuffer(2, 6, 3, extra_keys=[("next", "life_lost")])
    episodic.add(batch)
    PPO(policy, anneal_lr=False, terminal_keys=["life_lost"]).compute_advantages(episodic)
    terminated = batch.clone()
    terminated["next", "terminated"][0, 2] = terminated["next", "done"][0, 2] = True
    reference = RolloutBuffer(2, 6, 3)
    reference.add(terminated)
    PPO(policy, anneal_lr=False).compute_advantages(reference)
    assert torch.equal(episodic.rollout["advantage"], reference.rollout["advantage"])
    assert not torch.equal(reference.rollout["advantage"], plain_advantages(policy, batch))  # the flag mattered
    assert not episodic.rollout["next", "terminated"].any()  # the episode went on
    assert torch.equal(episodic.rollout["next", "life_lost"][:, :-1], batch["next", "life_lost"])


def plain_advantages(policy, batch):
    buffer = RolloutBuffer(2, 6, 3)
    buffer.add(batch)
    PPO(policy, anneal_lr=False).compute_advantages(buffer)
    return buffer.rollout["advantage"]
