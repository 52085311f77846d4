"""VmasEnv: a VMAS scenario (batched multi-agent torch simulation) as a collector env.

VMAS (the ``vmas`` extra) steps ``num_envs`` copies of a scenario as torch tensors on one
device. VmasEnv speaks the torch-env protocol of envs/staging.py (as TorchCartPole does),
with the agents of each env stacked along a dimension after the env's:

    key                           shape                         what
    observation                   [P, n_agents, obs_dim]        each agent's observation
    action                        [P, n_agents, act_dim]        continuous actions (Box)
                                  [P, n_agents]                 discrete actions (MultiDiscrete)
    ("next", "reward")            [P]                           the team's reward: the sum over agents
    ("next", "agent_reward")      [P, n_agents]                 each agent's reward
    ("next", "terminated"), ("next", "truncated"), ("next", "done")   [P]  the scenario's, shared

One reward per env step lets every consumer of rewards (trajectory infos, loggers, GAE)
work unchanged; the agents' own rewards stay beside it. Stacking needs agents with the same
observation and action shapes; a scenario whose agents differ is refused, naming them.
VMAS resets env by env (``reset_at``), so a step in which an env finished reads the done
mask on the host: the collection is not free of host synchronisation, unlike
TorchCartPole's. VMAS draws its resets from its own random state (``seed``).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.envs.torch_env import TorchEnv
from rlcollect.errors import MissingDependencyError
from rlcollect.validation import check_positive_int


def _import_vmas():
    try:
        import vmas
    except ImportError as error:
        raise MissingDependencyError("VmasEnv needs VMAS: pip install 'rlcollect[vmas]'") from error
    return vmas


def _stacked_space(spaces, n_agents: int, what: str, names: list[str]) -> gym.Space:
    """One gymnasium space for the stacked agents (their spaces are VMAS's, from ``gym``)."""
    shapes = {tuple(getattr(space, "shape", ()) or ()) for space in spaces}
    kinds = {type(space).__name__ for space in spaces}
    if len(kinds) != 1 or len(shapes) != 1:
        described = ", ".join(f"{name}: {space}" for name, space in zip(names, spaces))
        raise ValueError(f"VmasEnv stacks the agents' {what}s, which needs one shape for all; this scenario's differ "
                         f"({described})")
    first = spaces[0]
    if kinds == {"Discrete"}:
        if len({int(space.n) for space in spaces}) != 1:
            raise ValueError(f"VmasEnv stacks the agents' {what}s: their Discrete sizes differ")
        return gym.spaces.MultiDiscrete(np.full(n_agents, int(first.n), np.int64))
    if kinds != {"Box"}:
        raise ValueError(f"VmasEnv supports Box and Discrete {what} spaces, not {first}")
    low = np.stack([np.asarray(space.low, np.float32) for space in spaces])
    high = np.stack([np.asarray(space.high, np.float32) for space in spaces])
    return gym.spaces.Box(low, high, dtype=np.float32)


class VmasEnv(TorchEnv):
    """``num_envs`` copies of a VMAS scenario as one batched env of batch size ``[num_envs]``.

    Args:
        scenario: a VMAS scenario name ("balance", "transport", "navigation", ...) or a
            ``vmas.simulator.scenario.BaseScenario``.
        num_envs: P, the copies simulated together.
        device: where VMAS simulates and every tensor lives (fixed at construction).
        seed: VMAS's seed (its own random state), applied at the next reset of every env.
        max_steps: the horizon, a truncation (None: the scenario's own ends only).
        continuous_actions: Box actions (True) or Discrete ones per agent.
        **scenario_kwargs: passed to the scenario (e.g. ``n_agents=4``).
    """

    def __init__(self, scenario, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 max_steps: int | None = None, continuous_actions: bool = True, **scenario_kwargs) -> None:
        vmas = _import_vmas()
        self.num_envs = check_positive_int("num_envs", num_envs)
        check_positive_int("max_steps", max_steps, optional=True)
        self.device = torch.device(device)
        self.batch_size = torch.Size([num_envs])
        self.scenario = scenario
        self._env = vmas.make_env(scenario, num_envs=num_envs, device=self.device,
                                  continuous_actions=continuous_actions, max_steps=max_steps, seed=seed,
                                  terminated_truncated=True, **scenario_kwargs)
        self.n_agents = self._env.n_agents
        names = [agent.name for agent in self._env.agents]
        self.observation_space = _stacked_space(list(self._env.observation_space), self.n_agents, "observation",
                                                names)
        self.action_space = _stacked_space(list(self._env.action_space), self.n_agents, "action", names)
        self._continuous = continuous_actions
        self._seed = None  # make_env applied ``seed``; set_seed sets the next one
        P, A = num_envs, self.n_agents
        self._state = torch.zeros((P, *self.observation_space.shape), device=self.device)
        self._next = torch.zeros_like(self._state)
        self._agent_reward = torch.zeros(P, A, device=self.device)
        self._reward = torch.zeros(P, device=self.device)
        self._terminated, self._truncated, self._done, self._is_init = (
            torch.zeros(P, dtype=torch.bool, device=self.device) for _ in range(4))
        self.staged = TensorDict({
            "observation": self._state, "is_init": self._is_init,
            "next": {"observation": self._next, "reward": self._reward, "agent_reward": self._agent_reward,
                     "terminated": self._terminated, "truncated": self._truncated, "done": self._done},
        }, batch_size=[P], device=self.device)

    # ------------------------------------------------------------------ stepping
    def stage_step(self, actions, auto_reset: bool = True) -> torch.Tensor:
        """Step every env into ``staged``; returns the done mask (a tensor on the device,
        valid until the next step). Finished envs are reset at once with ``auto_reset``."""
        if isinstance(actions, np.ndarray):
            actions = torch.from_numpy(actions)
        actions = actions.to(self.device).reshape(self.num_envs, self.n_agents, -1)
        if not self._continuous:
            actions = actions.squeeze(-1)
        observations, rewards, terminated, truncated, _ = self._env.step(list(actions.unbind(1)))
        torch.stack(observations, 1, out=self._next)
        torch.stack(rewards, 1, out=self._agent_reward)
        torch.sum(self._agent_reward, 1, out=self._reward)
        self._terminated.copy_(terminated)
        if truncated is None:
            self._truncated.zero_()
        else:
            self._truncated.copy_(truncated)
        torch.logical_or(self._terminated, self._truncated, out=self._done)
        self._state.copy_(self._next)
        self._is_init.zero_()
        if auto_reset:
            self._reset_where(self._done)
        return self._done

    def _reset_where(self, mask: torch.Tensor) -> None:
        indices = torch.nonzero(mask).flatten().tolist()  # VMAS resets env by env: read on the host
        observations = None
        for index in indices:
            observations = self._env.reset_at(index)
        if observations is not None:
            self._state[mask] = torch.stack(observations, 1)[mask]
            self._is_init.logical_or_(mask)

    # ------------------------------------------------------------------ the collectors' protocol
    def reset(self) -> TensorDict:
        """Reset every env (with the pending seed, if any); returns the carrier."""
        observations = self._env.reset(seed=self._seed)
        self._seed = None
        self._state.copy_(torch.stack(observations, 1))
        self._is_init.fill_(True)
        return self.staged.select("observation", "is_init").clone()

    def reset_some(self, indices) -> None:
        """Reset the given envs (indices, or a boolean mask); their next step starts a trajectory."""
        self._reset_where(self._mask(indices))

    def to(self, device) -> "VmasEnv":
        if torch.device(device) != self.device:
            raise ValueError(f"VMAS simulates on the device it was built on ({self.device}); build "
                             f"VmasEnv(..., device={str(device)!r}) instead of moving it")
        return self

    def __repr__(self) -> str:
        return (f"VmasEnv(scenario={self.scenario!r}, num_envs={self.num_envs}, n_agents={self.n_agents}, "
                f"device={str(self.device)!r})")
