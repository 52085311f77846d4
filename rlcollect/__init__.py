"""rlcollect: reinforcement-learning data collection, and a Hydra-driven experiment runner.

The library, usable without the CLI:

- ``GymEnv``: gymnasium envs (single or batched) speaking TensorDicts.
- ``Collector``: iterate to get ``[T]`` / ``[P, T]`` batches of env steps.
- ``ActionServerCollector`` / ``AlternatingCollector``: envs step in worker processes, one
  batched policy forward for all of them in the main process (rlpyt's GPU samplers);
  the alternating one overlaps one group's env steps with the other group's forward.
- ``split_trajectories``: the legacy padded ``[N_traj, T_max]`` layout.
- ``RolloutBuffer``: the on-policy ``[N, T + 1]`` rollout storage.
- ``ActorCritic``: MLP actor-critic policy (Discrete and Box actions).
- ``GRUModule`` / ``LSTMModule``: recurrent blocks that restart at ``is_init``; step mode by
  default, ``set_recurrent_mode("recurrent")`` for flat batches of trajectories (``recurrent_mode()``).
- ``PPO`` and ``generalized_advantage_estimate``.
- ``RunLogger`` / ``WandbLogger``: metrics.jsonl and W&B, usable as a post-collect hook.

The command line: ``rlcollect train [overrides]`` (see README.md).
"""
from typing import TYPE_CHECKING

from rlcollect._lazy import lazy_getattr

__version__ = "0.1.0"

# Public name -> defining module. Loaded on first access, so `rlcollect --help` and config
# errors answer without importing torch.
_EXPORTS = {
    "ActionServerCollector": "rlcollect.collectors.action_server",
    "ActorCritic": "rlcollect.modules.actor_critic",
    "AlternatingCollector": "rlcollect.collectors.action_server",
    "Collector": "rlcollect.collectors.single",
    "CollectorBase": "rlcollect.collectors.base",
    "EvalResult": "rlcollect.collectors.evaluation",
    "GRUModule": "rlcollect.modules.recurrent",
    "GymEnv": "rlcollect.envs.gym_env",
    "LSTMModule": "rlcollect.modules.recurrent",
    "PPO": "rlcollect.algos.ppo",
    "RolloutBuffer": "rlcollect.buffers.rollout",
    "RunLogger": "rlcollect.logging.run_logger",
    "TrajectoryPool": "rlcollect.trajectories",
    "WandbLogger": "rlcollect.logging.run_logger",
    "evaluate_episodes": "rlcollect.collectors.evaluation",
    "generalized_advantage_estimate": "rlcollect.algos.gae",
    "iterate_minibatches": "rlcollect.buffers.rollout",
    "recurrent_mode": "rlcollect.modules.recurrent",
    "set_recurrent_mode": "rlcollect.modules.recurrent",
    "split_trajectories": "rlcollect.trajectories",
    "transition_view": "rlcollect.buffers.rollout",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr("rlcollect", _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from rlcollect.algos.gae import generalized_advantage_estimate
    from rlcollect.algos.ppo import PPO
    from rlcollect.buffers.rollout import RolloutBuffer, iterate_minibatches, transition_view
    from rlcollect.collectors.action_server import ActionServerCollector, AlternatingCollector
    from rlcollect.collectors.base import CollectorBase
    from rlcollect.collectors.evaluation import EvalResult, evaluate_episodes
    from rlcollect.collectors.single import Collector
    from rlcollect.trajectories import TrajectoryPool, split_trajectories
    from rlcollect.envs.gym_env import GymEnv
    from rlcollect.logging.run_logger import RunLogger, WandbLogger
    from rlcollect.modules.actor_critic import ActorCritic
    from rlcollect.modules.recurrent import GRUModule, LSTMModule, recurrent_mode, set_recurrent_mode
