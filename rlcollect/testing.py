"""Deterministic gymnasium envs for tests: assertions on exact values, not statistics."""
from __future__ import annotations

import functools
import os

import gymnasium as gym
import numpy as np
import torch
from torch import nn


class CountingEnv(gym.Env):
    """Observation = number of steps since the last reset (shape ``[1]``, float32).

    The episode ends after ``episode_length`` steps, as ``terminated`` or ``truncated``
    depending on ``end``. Reward is 1.0 every step, so an episode's return is its length.
    The action (Discrete(2)) is ignored.
    """

    metadata = {"render_modes": []}

    def __init__(self, episode_length: int = 5, end: str = "terminated") -> None:
        if end not in ("terminated", "truncated"):
            raise ValueError(f"end must be 'terminated' or 'truncated', got {end!r}")
        self.episode_length = episode_length
        self.end = end
        self.observation_space = gym.spaces.Box(0.0, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.count = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.count += 1
        finished = self.count >= self.episode_length
        terminated = finished and self.end == "terminated"
        truncated = finished and self.end == "truncated"
        return np.array([self.count], np.float32), 1.0, terminated, truncated, {}



class CountingImageEnv(CountingEnv):
    """A CountingEnv seeing its count, times ``scale``, as a uint8 image of ``shape`` (all
    pixels equal; zeros at reset): ``[C, H, W]`` or gymnasium's ``[H, W, C]``."""

    def __init__(self, shape: tuple[int, ...] = (3, 64, 64), episode_length: int = 5, scale: int = 1) -> None:
        super().__init__(episode_length=episode_length)
        self.shape, self.scale = tuple(shape), scale
        self.observation_space = gym.spaces.Box(0, 255, self.shape, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.shape, np.uint8), {}

    def step(self, action):
        _, *rest = super().step(action)
        return np.full(self.shape, self.scale * self.count, np.uint8), *rest

class ErrorAfterEnv(CountingEnv):
    """A CountingEnv that raises ``RuntimeError`` on its ``error_after + 1``-th step."""

    def __init__(self, error_after: int = 3, episode_length: int = 1000) -> None:
        super().__init__(episode_length=episode_length)
        self.error_after = error_after
        self.total_steps = 0

    def step(self, action):
        self.total_steps += 1
        if self.total_steps > self.error_after:
            raise RuntimeError(f"ErrorAfterEnv: step {self.total_steps} fails by design")
        return super().step(action)


class EchoEnv(CountingEnv):
    """Observation ``[env id, step count, last action]``: tells which env produced a step
    and which action reached it. The env id is the seed of its first seeded reset (GymEnv
    seeds sub-env i with ``seed + i``; -1 while unseeded). Actions are ``Box(-inf, inf,
    (1,))``, so a policy can write an action that names the env it is meant for. Episodes
    last ``episode_lengths[env id % len(episode_lengths)]`` steps (terminated). With
    ``error_env``, that env raises RuntimeError on its ``error_after + 1``-th step."""

    def __init__(self, episode_lengths=(4,), error_env: int | None = None, error_after: int = 0) -> None:
        super().__init__(episode_length=episode_lengths[0])
        self.episode_lengths = tuple(episode_lengths)
        self.error_env, self.error_after = error_env, error_after
        self.env_id, self.last_action, self.total_steps = -1, 0.0, 0
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.env_id = seed
            self.episode_length = self.episode_lengths[seed % len(self.episode_lengths)]
        super().reset(seed=seed)
        self.last_action = 0.0
        return self._observation(), {}

    def step(self, action):
        self.total_steps += 1
        if self.env_id == self.error_env and self.total_steps > self.error_after:
            raise RuntimeError(f"EchoEnv {self.env_id}: step {self.total_steps} fails by design")
        self.last_action = float(np.asarray(action).reshape(-1)[0])
        _, reward, terminated, truncated, info = super().step(action)
        return self._observation(), reward, terminated, truncated, info

    def _observation(self) -> np.ndarray:
        return np.array([self.env_id, self.count, self.last_action], np.float32)


def echo_policy(td):
    """The action that names its env and step, ``100 * env id + step count``, for
    EchoEnv observations: a step whose env received another env's action shows it."""
    observation = td.get("observation")
    td.set("action", 100 * observation[..., :1] + observation[..., 1:2])
    return td


def counting_env_factories(episode_lengths, end: str = "terminated"):
    """A zero-argument factory whose successive calls build CountingEnvs of the given
    lengths in turn: ``GymEnv(counting_env_factories([3, 4]), num_envs=2)`` gives
    sub-envs that finish at different steps."""
    lengths = iter(episode_lengths)
    return lambda: CountingEnv(next(lengths), end=end)



def counting_envs(episode_lengths, end: str = "terminated") -> list:
    """One picklable CountingEnv factory per sub-env: ``GymEnv(counting_envs([3, 4]),
    num_envs=2, backend=...)`` (every backend; "async" builds them in other processes)."""
    return [functools.partial(CountingEnv, length, end=end) for length in episode_lengths]


class CountingVectorEnv(gym.vector.VectorEnv):
    """``len(episode_lengths)`` CountingEnvs as one gymnasium VectorEnv (observation
    ``[P, 1]`` = each env's step count; env i ends after ``episode_lengths[i]`` steps).

    ``autoreset_mode``: "disabled" (partial resets with ``reset(options={"reset_mask"})``),
    "same_step" (a finished env resets within the step; its final observation is in
    ``info["final_obs"]``) or "next_step" (gymnasium's default). Its info reports ``cost``
    = 0.5 * step count for the envs at an even count only (``_cost`` says which).
    """

    def __init__(self, episode_lengths, autoreset_mode: str = "disabled", end: str = "terminated") -> None:
        self.num_envs = len(episode_lengths)
        self.lengths = np.asarray(episode_lengths)
        self.end = end
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode[autoreset_mode.upper()]}
        self.single_observation_space = gym.spaces.Box(0.0, np.inf, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.count = np.zeros(self.num_envs, np.int64)
        self.pending = np.zeros(self.num_envs, bool)  # next_step: reset at the next step
        self.resets = 0  # reset calls (full or partial)

    def _observation(self):
        return self.count.astype(np.float32)[:, None]

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        mask = (options or {}).get("reset_mask", np.ones(self.num_envs, bool))
        self.count[mask] = 0
        self.pending[mask] = False
        return self._observation(), {}

    def step(self, actions):
        mode = self.metadata["autoreset_mode"].name.lower()
        restart = self.pending.copy()
        self.count += 1
        self.count[restart] = 0
        finished = (self.count >= self.lengths) & ~restart
        terminated = finished if self.end == "terminated" else np.zeros_like(finished)
        truncated = finished if self.end == "truncated" else np.zeros_like(finished)
        reward = np.where(restart, 0.0, 1.0).astype(np.float32)
        even = self.count % 2 == 0
        info = {"cost": np.where(even, 0.5 * self.count, 0.0), "_cost": even}
        observation = self._observation()
        if mode == "same_step" and finished.any():
            info["final_obs"] = np.array([row if done else None for row, done in zip(observation, finished)],
                                         dtype=object)
            self.count[finished] = 0
            observation = self._observation()
        elif mode == "next_step":
            self.pending = finished
        return observation, reward, terminated, truncated, info

class WorkerIdEnv(CountingEnv):
    """Observation ``[worker_id, step count]``: tells which worker produced a step."""

    def __init__(self, worker_id: int, episode_length: int = 5) -> None:
        super().__init__(episode_length=episode_length)
        self.worker_id = worker_id
        self.observation_space = gym.spaces.Box(0.0, np.inf, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed, options=options)
        return np.array([self.worker_id, observation[0]], np.float32), info

    def step(self, action):
        observation, *rest = super().step(action)
        return (np.array([self.worker_id, observation[0]], np.float32), *rest)


class BusyEnv(CountingEnv):
    """A CountingEnv whose step burns ``step_cost_us`` microseconds of CPU (busy work, not
    sleep): stands for a costly simulator in benchmarks."""

    def __init__(self, step_cost_us: float = 200.0, episode_length: int = 200) -> None:
        super().__init__(episode_length=episode_length)
        self.step_cost_s = step_cost_us * 1e-6

    def step(self, action):
        import time

        deadline = time.perf_counter() + self.step_cost_s
        while time.perf_counter() < deadline:
            pass
        return super().step(action)


class SpacesEnv(CountingEnv):
    """A CountingEnv with the observation and action spaces of real envs, every observation
    entry a function of the step count c (exact values to assert):

        observation="dict":     {"position": Box [2] = (c, -c), "count": Discrete = c,
                                 "image": Box uint8 [3, 4, 4] = c, "nested": {"flag": MultiBinary [3] = c % 2}}
        observation="tuple":    (Discrete = c, Box [2] = (c, -c))
        observation="discrete": Discrete = c
        observation="image":    Box uint8 [3, 8, 8] = c  (too small for a CNN: flattened)
        observation="image_chw": Box uint8 [3, 36, 36] = c, observation="image_hwc": Box uint8 [36, 36, 3] = c
        observation="box":      Box [2] = (c, -c)
        action: "discrete" (Discrete 2), "multidiscrete" ([3, 4]), "multibinary" (3), "box" ([2] in [-1, 1])

    Every combination is registered as ``rlcollect-test/Spaces-<observation>-<action>-v0``.

    The last action received is kept in ``received`` (what reached the env).
    """

    def __init__(self, observation: str = "dict", action: str = "discrete", episode_length: int = 4) -> None:
        super().__init__(episode_length=episode_length)
        spaces = gym.spaces
        image = spaces.Box(0, 255, (3, 4, 4), np.uint8)
        self.kind = observation
        self.observation_space = {
            "dict": spaces.Dict({"position": spaces.Box(-np.inf, np.inf, (2,), np.float32),
                                 "count": spaces.Discrete(100), "image": image,
                                 "nested": spaces.Dict({"flag": spaces.MultiBinary(3)})}),
            "tuple": spaces.Tuple((spaces.Discrete(100), spaces.Box(-np.inf, np.inf, (2,), np.float32))),
            "discrete": spaces.Discrete(100),
            "image": spaces.Box(0, 255, (3, 8, 8), np.uint8),
            "image_chw": spaces.Box(0, 255, (3, 36, 36), np.uint8),
            "image_hwc": spaces.Box(0, 255, (36, 36, 3), np.uint8),
            "box": spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }[observation]
        self.action_space = {
            "discrete": spaces.Discrete(2), "multidiscrete": spaces.MultiDiscrete([3, 4]),
            "multibinary": spaces.MultiBinary(3), "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
        }[action]
        self.received = None

    def _observation(self):
        c = self.count
        position = np.array([c, -c], np.float32)
        if self.kind == "dict":
            return {"position": position, "count": c, "image": np.full((3, 4, 4), c, np.uint8),
                    "nested": {"flag": np.full(3, c % 2, np.int8)}}
        if self.kind == "tuple":
            return (c, position)
        if self.kind == "discrete":
            return c
        if self.kind == "box":
            return position
        return np.full(self.observation_space.shape, c, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._observation(), {}

    def step(self, action):
        self.received = np.asarray(action)
        _, reward, terminated, truncated, info = super().step(action)
        return self._observation(), reward, terminated, truncated, info


SPACES_OBSERVATIONS = ("box", "discrete", "dict", "tuple", "image", "image_chw", "image_hwc")
SPACES_ACTIONS = ("discrete", "box", "multidiscrete", "multibinary")
for _observation in SPACES_OBSERVATIONS:
    for _action in SPACES_ACTIONS:
        gym.register(f"rlcollect-test/Spaces-{_observation}-{_action}-v0", entry_point=SpacesEnv,
                     kwargs={"observation": _observation, "action": _action})


class InfoEnv(CountingEnv):
    """A CountingEnv whose info reports ``cost`` = 0.5 * step count on every step and
    ``is_success`` (True) only on the last step of an episode."""

    def step(self, action):
        observation, reward, terminated, truncated, _ = super().step(action)
        info = {"cost": 0.5 * self.count}
        if terminated or truncated:
            info["is_success"] = True
        return observation, reward, terminated, truncated, info


class LogNormalBusyEnv(CountingEnv):
    """A BusyEnv whose step cost is heavy-tailed: log-normal around ``median_us`` (sigma
    ``sigma``), drawn from the env's own seeded RNG: an env of uneven speed (a physics step
    that sometimes needs many substeps)."""

    def __init__(self, median_us: float = 100.0, sigma: float = 1.0, episode_length: int = 200) -> None:
        super().__init__(episode_length=episode_length)
        self.median_s, self.sigma = median_us * 1e-6, sigma

    def step(self, action):
        import time

        deadline = time.perf_counter() + self.median_s * float(np.exp(self.sigma * self.np_random.standard_normal()))
        while time.perf_counter() < deadline:
            pass
        return super().step(action)


def worker_id_envs(num_workers: int = 2, num_envs: int | None = None, episode_length: int = 5) -> list:
    """One picklable GymEnv factory per worker, worker i building WorkerIdEnv(i) sub-envs."""
    from rlcollect.envs.gym_env import GymEnv

    return [functools.partial(GymEnv, functools.partial(WorkerIdEnv, i, episode_length), num_envs)
            for i in range(num_workers)]


class WeightProbe(nn.Module):
    """A policy writing action 0 plus the values of its parameter (``"weight_seen"``) and
    buffer (``"offset_seen"``): shows which weights a worker ran with."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.register_buffer("offset", torch.zeros(()))

    def forward(self, td):
        td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        td.set("weight_seen", self.weight.detach().expand(td.batch_size).clone())
        td.set("offset_seen", self.offset.expand(td.batch_size).clone())
        return td


class FlakyWrapper(gym.Wrapper):
    """Raises ``RuntimeError`` on a step with probability ``error_rate`` (an env that crashes
    now and then: a simulator bug, a lost connection), from its own RNG (``seed``; None:
    fresh entropy, so every worker's envs fail at different moments). Never in process
    ``spare_pid`` (e.g. the trainer, whose evaluation envs nothing replaces)."""

    def __init__(self, env: gym.Env, error_rate: float = 1e-4, seed: int | None = None,
                 spare_pid: int | None = None) -> None:
        super().__init__(env)
        self.error_rate = 0.0 if spare_pid is not None and os.getpid() == spare_pid else float(error_rate)
        self._rng = np.random.default_rng(seed)

    def step(self, action):
        if self._rng.random() < self.error_rate:
            raise RuntimeError("FlakyWrapper: injected env failure")
        return self.env.step(action)
