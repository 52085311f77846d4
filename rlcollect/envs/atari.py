"""Atari conventions the env presets use (docs/configuration.md, "Env presets")."""
from __future__ import annotations

import gymnasium as gym


class FireReset(gym.Wrapper):
    """Press FIRE after every reset, for games that wait for it to start (Breakout): a
    policy that has not learnt to fire yet would otherwise stand still until truncation.
    Games without a FIRE action are left as they are."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings() if hasattr(env.unwrapped, "get_action_meanings") else []
        self.fire_action = meanings.index("FIRE") if "FIRE" in meanings else None

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        if self.fire_action is None:
            return observation, info
        observation, _, terminated, truncated, info = self.env.step(self.fire_action)
        if terminated or truncated:  # the game ended on its first step: start again
            observation, info = self.env.reset(**kwargs)
        return observation, info
