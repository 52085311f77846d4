"""Atari conventions the env presets use (docs/configuration.md, "Env presets")."""
from __future__ import annotations

import gymnasium as gym


class FireReset(gym.Wrapper):
    """Press FIRE after every reset, and after every lost life (``info["lives"]`` drops),
    for games that wait for it to (re)start the play (Breakout): a policy that has not learnt
    to fire yet would otherwise stand still until truncation. The step after a lost life
    then includes the FIRE step (its reward added). Games without a FIRE action are left as
    they are."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings() if hasattr(env.unwrapped, "get_action_meanings") else []
        self.fire_action = meanings.index("FIRE") if "FIRE" in meanings else None
        self.lives = 0

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        if self.fire_action is not None:
            observation, _, terminated, truncated, info = self.env.step(self.fire_action)
            if terminated or truncated:  # the game ended on its first step: start again
                observation, info = self.env.reset(**kwargs)
        self.lives = info.get("lives", 0)
        return observation, info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        lives = info.get("lives", 0)
        if self.fire_action is not None and lives < self.lives and not (terminated or truncated):
            observation, fire_reward, terminated, truncated, info = self.env.step(self.fire_action)
            reward += fire_reward
        self.lives = info.get("lives", lives)
        return observation, reward, terminated, truncated, info


class LifeLoss(gym.Wrapper):
    """``info["life_lost"]``: True on a step where the game's lives (``info["lives"]``)
    dropped. With ``env.info_keys: [life_lost]`` it is stored as ``("next", "life_lost")``,
    and ``algo.terminal_keys: [life_lost]`` makes PPO treat it as an episode end for its value
    targets (Atari's "episodic life"), while episodes, their logged returns and evaluation
    stay whole games."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self.lives = info.get("lives", 0)
        return observation, {**info, "life_lost": False}

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        lives = info.get("lives", self.lives)
        lost, self.lives = lives < self.lives, lives
        return observation, reward, terminated, truncated, {**info, "life_lost": lost}
