"""The env presets of the envs extra, and the Atari conventions they use."""
import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from rlcollect import Collector, pipeline
from rlcollect.config import register_configs
from rlcollect.envs.atari import FireReset, LifeLoss
from rlcollect.modules.encoders import resolve_encoder


class Game(gym.Env):
    """Counts the steps taken and which action each was."""

    observation_space = gym.spaces.Box(0, 255, (4,), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, meanings):
        self.meanings, self.actions = meanings, []

    def get_action_meanings(self):
        return self.meanings

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.uint8), {}

    def step(self, action):
        self.actions.append(int(action))
        return np.full(4, len(self.actions), np.uint8), 0.0, False, False, {}


def test_fire_reset_presses_fire_after_each_reset_where_the_game_has_it():
    env = FireReset(Game(["NOOP", "FIRE"]))
    observation, _ = env.reset()
    assert env.unwrapped.actions == [1] and observation.tolist() == [1, 1, 1, 1]
    env.step(0)
    env.reset()
    assert env.unwrapped.actions == [1, 0, 1]
    plain = FireReset(Game(["NOOP", "RIGHT"]))
    plain.reset()
    assert plain.unwrapped.actions == []


class Lives(Game):
    """A Game with 3 lives: one is lost on steps 3 and 6, the last (game over) on step 9."""

    def reset(self, *, seed=None, options=None):
        observation, _ = super().reset(seed=seed)
        self.steps = 0
        return observation, {"lives": 3}

    def step(self, action):
        observation, reward, _, truncated, _ = super().step(action)
        self.steps += 1
        lives = 3 - self.steps // 3
        return observation, 1.0, lives == 0, truncated, {"lives": lives}


def test_fire_reset_also_presses_fire_after_a_lost_life_and_life_loss_flags_it():
    env = LifeLoss(FireReset(Lives(["NOOP", "FIRE"])))
    _, info = env.reset()  # FIRE: step 1
    assert env.unwrapped.actions == [1] and info["life_lost"] is False
    flags, rewards = [], []
    for _ in range(4):
        _, reward, terminated, _, info = env.step(0)
        flags.append(info["life_lost"])
        rewards.append(reward)
    # steps 2, 3 (a life lost: FIRE is step 4, its reward added), 5, 6 (lost: FIRE is step 7)
    assert env.unwrapped.actions == [1, 0, 0, 1, 0, 0, 1]
    assert flags == [False, True, False, True] and rewards == [1.0, 2.0, 1.0, 2.0] and not terminated
    _, _, _, _, info = env.step(0)  # step 8
    _, _, terminated, _, info = env.step(0)  # step 9: the last life: game over, no FIRE after it
    assert terminated and info["life_lost"] and env.unwrapped.actions == [1, 0, 0, 1, 0, 0, 1, 0, 0]


def test_the_auto_encoder_follows_the_observation_space():
    assert resolve_encoder("auto", gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)) == "cnn"
    assert resolve_encoder("auto", gym.spaces.Box(-1, 1, (17,), np.float64)) == "mlp"
    assert resolve_encoder("auto", gym.spaces.Dict({"a": gym.spaces.Discrete(3)})) == "multi_input"
    assert resolve_encoder("auto", gym.spaces.Discrete(16)) == "multi_input"
    assert resolve_encoder("mlp", gym.spaces.Discrete(16)) == "mlp"  # an explicit choice is kept


def compose_train(overrides):
    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        return compose("train", overrides=overrides)


@pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="needs ale-py (envs extra)")
@pytest.mark.timeout(120)
def test_the_breakout_preset_gives_stacked_uint8_frames_to_a_cnn():
    cfg = compose_train(["env=breakout", "env.num_envs=2"])
    env = pipeline.make_env(cfg, num_envs=2, seed=0)
    policy = pipeline.make_policy(cfg, env.observation_space, env.action_space)
    batch = next(iter(Collector(env, policy, frames_per_batch=8)))
    assert env.observation_space.shape == (4, 84, 84) and type(policy.encoder).__name__ == "NatureCNN"
    assert batch["observation"].shape == (2, 4, 4, 84, 84) and batch["observation"].dtype == torch.uint8
    assert batch["next", "observation"].dtype == batch["observation"].dtype  # no float copy in the batch
    assert (cfg.eval.every_frames, cfg.eval.episodes) == (100_000, 5)
    assert batch["next", "life_lost"].shape == (2, 4) and batch["next", "life_lost"].dtype == torch.bool  # as reported
    assert list(compose_train(["experiment=atari_ppo"]).algo.terminal_keys) == ["life_lost"]


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs mujoco (envs extra)")
def test_the_mujoco_experiment_normalises_observations_and_evaluates_rarely():
    cfg = compose_train(["experiment=mujoco_ppo", "env=hopper"])
    assert (cfg.env.id, cfg.env.solved_return, cfg.model.normalize_observation) == ("Hopper-v5", None, True)
    assert (cfg.eval.every_frames, cfg.collector.frames_per_batch, cfg.total_frames) == (20480, 2048, 1_000_000)


def test_the_backends_reach_the_env_from_the_config():
    torch_env = pipeline.make_env(compose_train(["env=cartpole_torch"]), num_envs=3, seed=0)
    assert repr(torch_env) == "TorchCartPole(num_envs=3, device='cpu')"
    vector_env = pipeline.make_env(compose_train(["env.backend=vector"]), num_envs=3, seed=0)
    assert repr(vector_env) == "GymEnv('CartPole-v1', num_envs=3, backend='vector', device='cpu')"
    single = pipeline.make_env(compose_train(["env=cartpole_torch"]), num_envs=None, seed=0)  # the spaces probe
    assert repr(single) == "GymEnv('CartPole-v1', num_envs=None, device='cpu')"
    # the worker collectors build each worker's env from the same kwargs
    cfg = compose_train(["env=cartpole_torch", "collector=multisync"])
    assert pipeline.env_kwargs(cfg)["backend"] == "torch"
