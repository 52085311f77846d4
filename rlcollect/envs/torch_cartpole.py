"""TorchCartPole: P CartPoles stepped as torch tensors on any device (the reference torch env).

A torch env keeps its state, and writes every step, in tensors on its own device, and its
``stage_step`` returns the done mask as a tensor there (always, never None): the collector
then does its per-step bookkeeping (new trajectory ids, time limits, hidden-state resets)
with tensor operations, so that a batch is collected on a GPU without the host waiting on
the device once per step (docs/envs.md, "Torch envs"). Finished envs are reset in
the same step, by ``torch.where``: nothing reads the mask on the host.

The dynamics are gymnasium's CartPole-v1 (Euler integration, the same constants and
thresholds, reward 1 on every step, a 500-step time limit as a truncation), computed in
float32: from the same state and actions the trajectory is gymnasium's to float32
precision. Resets draw from one torch.Generator on the env's device (``seed``), so the
initial states differ from gymnasium's own numpy RNG; with a list of G seeds, from G
generators, one per group of ``num_envs / G`` consecutive envs, each group drawing as a
TorchCartPole of that size seeded with its seed would (a batched sweep's members). Each
generator draws the fresh states of several steps at once (``draws_ahead``): a sweep of
G members then launches G draws every few steps, not every step.
"""
from __future__ import annotations

import math
from typing import Sequence

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.envs.torch_env import TorchEnv
from rlcollect.validation import check_positive_int

GRAVITY, MASS_CART, MASS_POLE, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASS_CART + MASS_POLE
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_BOUND = 0.05  # initial state: uniform in [-0.05, 0.05]^4
DRAW_AHEAD_FLOATS = 2 ** 16  # a generator draws the fresh states of up to 32 steps, at most this many floats


def draws_ahead(envs: int) -> int:
    """How many steps' fresh states a generator of ``envs`` envs draws at once: a function of
    the group's size alone, so that a group draws as a TorchCartPole of that size would."""
    return max(1, min(32, DRAW_AHEAD_FLOATS // (4 * envs)))


class TorchCartPole(TorchEnv):
    """``num_envs`` CartPoles as one batched env of batch size ``[num_envs]``, on ``device``.

    Speaks the collectors' env protocol (envs/staging.py) with the keys of a GymEnv, so
    every collector takes it (``Collector(TorchCartPole(4096, device="cuda"), policy,
    ...)``); ``step(action)`` is the plain functional form, for loops written by hand.

    Args:
        num_envs: P, the number of CartPoles.
        device: where the state, the actions and every output live.
        seed: seeds the reset generator (at the next reset of every env); a list of G seeds
            (G dividing num_envs) gives each group of num_envs / G consecutive envs a
            generator of its own: group g resets as ``TorchCartPole(num_envs // G,
            seed=seed[g])`` would.
        max_episode_steps: the time limit (a truncation), gymnasium's 500 by default.
    """

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 max_episode_steps: int = 500) -> None:
        self.num_envs = check_positive_int("num_envs", num_envs)
        self.max_episode_steps = check_positive_int("max_episode_steps", max_episode_steps)
        self.batch_size = torch.Size([num_envs])
        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._groups = 1  # reset generators, one per group of num_envs / _groups consecutive envs
        self.device = torch.device(device)
        self.set_seed(seed)
        self._allocate()

    def _allocate(self, arrays: dict | None = None) -> None:
        """The state and the staged tensors on ``self.device`` (aliasing ``arrays``, numpy
        staging arrays, when given: ``stage_into``)."""
        P, device = self.num_envs, self.device
        self._steps = torch.zeros(P, dtype=torch.int64, device=device)
        self._make_generators()
        if arrays is None:
            zeros = {"observation": torch.zeros(P, 4), "is_init": torch.zeros(P, dtype=torch.bool),
                     "next_observation": torch.zeros(P, 4), "reward": torch.zeros(P),
                     "terminated": torch.zeros(P, dtype=torch.bool), "truncated": torch.zeros(P, dtype=torch.bool),
                     "done": torch.zeros(P, dtype=torch.bool)}
            tensors = {key: value.to(device) for key, value in zeros.items()}
        else:
            tensors = {key: torch.from_numpy(arrays[key]) for key in
                       ("observation", "is_init", "next_observation", "reward", "terminated", "truncated", "done")}
        self._state = tensors["observation"]  # the carrier observation is the state itself
        self._next = tensors["next_observation"]
        self._reward, self._terminated = tensors["reward"], tensors["terminated"]
        self._truncated, self._done, self._is_init = tensors["truncated"], tensors["done"], tensors["is_init"]
        self._reward.fill_(1.0)  # CartPole pays 1 on every step, the last one included
        self.staged = TensorDict({
            "observation": self._state, "is_init": self._is_init,
            "next": {"observation": self._next, "reward": self._reward, "terminated": self._terminated,
                     "truncated": self._truncated, "done": self._done},
        }, batch_size=[P], device=device)

    # ------------------------------------------------------------------ dynamics
    def _advance(self, state: torch.Tensor, action: torch.Tensor, out: torch.Tensor) -> None:
        """One Euler step of every env from ``state`` [P, 4] with ``action`` [P] into ``out``."""
        x, x_dot, theta, theta_dot = state.unbind(-1)
        force = torch.where(action.bool(), FORCE, -FORCE)
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + POLE_MASS_LENGTH * theta_dot * theta_dot * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos * cos / TOTAL_MASS))
        x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
        torch.stack((x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc),
                    dim=-1, out=out)

    def _as_action(self, actions) -> torch.Tensor:
        if isinstance(actions, np.ndarray):
            actions = torch.from_numpy(actions)
        return actions.reshape(self.num_envs).to(self.device, non_blocking=True)

    def stage_step(self, actions, auto_reset: bool = True) -> torch.Tensor:
        """Step every env into ``staged``; returns the done mask (a tensor on the device,
        valid until the next step). Finished envs are reset at once with ``auto_reset``."""
        self._advance(self._state, self._as_action(actions), self._next)
        x, theta = self._next[:, 0], self._next[:, 2]
        torch.logical_or(x.abs() > X_THRESHOLD, theta.abs() > THETA_THRESHOLD, out=self._terminated)
        self._steps += 1
        torch.ge(self._steps, self.max_episode_steps, out=self._truncated)
        torch.logical_or(self._terminated, self._truncated, out=self._done)
        self._state.copy_(self._next)
        if auto_reset:
            self._reset_state(self._done)
            self._is_init.copy_(self._done)
        else:
            self._is_init.zero_()
        return self._done

    def set_seed(self, seed: int | Sequence[int] | None) -> int | list[int] | None:
        """Seed the envs' resets at the next reset of every env: one seed, or one per group
        of consecutive envs (the class docstring); None keeps the generators as they are."""
        groups = self._groups if seed is None else 1
        if isinstance(seed, Sequence) and not isinstance(seed, str):
            seed = [int(value) for value in seed]
            if not seed or self.num_envs % len(seed):
                raise ValueError(f"seed: {len(seed)} seeds, one per group of envs, must divide num_envs="
                                 f"{self.num_envs}")
            groups = len(seed)
        self._seed = seed
        if groups != self._groups:
            self._groups = groups
            if hasattr(self, "_generators"):  # built: new generators (seeded at the next reset)
                self._make_generators()
        return seed

    def _make_generators(self) -> None:
        """One reset generator per group of envs, and each group's block of fresh states:
        ``[groups, steps ahead, envs per group, 4]``, drawn when the last one is used."""
        # "meta" (shapes only, no data: a test that the loop never reads a value back) has no generator
        self._generators = [None] if self.device.type == "meta" else \
            [torch.Generator(device=self.device) for _ in range(self._groups)]
        envs = self.num_envs // self._groups
        self._fresh = torch.empty(self._groups, draws_ahead(envs), envs, 4, device=self.device)
        self._fresh_used = self._fresh.shape[1]  # none drawn yet
        self._reseed()

    def _reseed(self) -> None:
        if self._seed is None or self._generators[0] is None:
            return
        for generator, seed in zip(self._generators, self._seed if isinstance(self._seed, list) else [self._seed]):
            generator.manual_seed(seed)
        self._fresh_used = self._fresh.shape[1]  # the states drawn before the seed are dropped

    def _next_fresh(self) -> torch.Tensor:
        """The next step's fresh state of every env, ``[groups, envs per group, 4]``."""
        if self._fresh_used == self._fresh.shape[1]:
            for block, generator in zip(self._fresh.unbind(0), self._generators):
                block.uniform_(-RESET_BOUND, RESET_BOUND, generator=generator)
            self._fresh_used = 0
        self._fresh_used += 1
        return self._fresh[:, self._fresh_used - 1]

    def _reset_state(self, mask: torch.Tensor) -> None:
        """Fresh states for the envs where ``mask`` is True, with no host synchronisation:
        every env draws one, the others keep their own."""
        state = self._state.view(self._groups, -1, 4)
        torch.where(mask.view(self._groups, -1, 1), self._next_fresh(), state, out=state)
        self._steps.masked_fill_(mask, 0)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The functional form: ``(observation, reward, terminated, truncated)`` after
        ``action`` [P], finished envs reset (the observation returned is then the reset
        one; the final one is ``staged["next", "observation"]``)."""
        self.stage_step(action)
        return self._state, self._reward, self._terminated, self._truncated

    # ------------------------------------------------------------------ the collectors' protocol
    def reset(self) -> TensorDict:
        """Reset every env (a pending seed reseeds the generator first); returns the carrier."""
        self._reseed()
        self._seed = None
        self.reset_some(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.staged.select("observation", "is_init").clone()

    def reset_some(self, indices) -> None:
        """Reset the given envs (indices, or a boolean mask: numpy or a tensor); their next
        step starts a trajectory."""
        mask = self._mask(indices)
        self._reset_state(mask)
        self._is_init.logical_or_(mask)

    def random_steps(self, steps) -> None:
        """Take ``steps[i]`` random actions in env i (resetting it when it finishes); the
        next step of every env starts a trajectory."""
        steps = torch.as_tensor(np.asarray(steps), device=self.device)
        for k in range(int(steps.max()) if len(steps) else 0):
            active = steps > k
            moved = torch.empty_like(self._state)
            self._advance(self._state, self.random_action(), moved)
            self._state.copy_(torch.where(active.unsqueeze(-1), moved, self._state))
            self._steps += active
            x, theta = self._state[:, 0], self._state[:, 2]
            finished = active & ((x.abs() > X_THRESHOLD) | (theta.abs() > THETA_THRESHOLD)
                                 | (self._steps >= self.max_episode_steps))
            self._reset_state(finished)
        self._is_init.fill_(True)

    def stage_into(self, arrays: dict) -> None:
        """Write every step into ``arrays`` (numpy staging arrays: a worker's rows of the
        action server's shared step buffer); CPU only."""
        if self.device.type != "cpu":
            raise ValueError(f"stage_into writes numpy arrays: TorchCartPole must be on the CPU, not {self.device}")
        state = self._state.clone()
        self._allocate(arrays)
        self._state.copy_(state)

    def to(self, device) -> "TorchCartPole":
        device = torch.device(device)
        if device != self.device:
            state, steps = self._state.to(device), self._steps.to(device)
            self.device = device
            self._allocate()
            self._state.copy_(state)
            self._steps.copy_(steps)
        return self

    def __repr__(self) -> str:
        return f"TorchCartPole(num_envs={self.num_envs}, device={str(self.device)!r})"
