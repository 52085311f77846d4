"""rlcollect: reinforcement-learning data collection, and a Hydra-driven experiment runner.

The library, usable without the CLI (docs/README.md is the map):

- Envs: ``GymEnv`` (gymnasium envs, single or batched, speaking TensorDicts; stepped as a
  list, by gymnasium's vector envs or by an id's vector entry point), ``TorchCartPole``
  (a batched torch env on any device, stepped with no host synchronisation), ``VmasEnv``
  (VMAS's multi-agent scenarios, agents stacked), ``make_env``
  (any env source: a gymnasium id, a GymEnv, or a callable returning either).
- Collectors (iterate to get ``[T]`` / ``[P, T]`` batches): ``Collector`` (in process),
  ``MultiSyncCollector`` / ``MultiAsyncCollector`` (worker processes),
  ``ActionServerCollector`` / ``AlternatingCollector`` (envs in workers, one batched
  policy forward here), ``PoolCollector`` (an asynchronous env pool: the policy here
  serves the first envs ready), ``RayCollector`` (Ray actors), ``DistributedCollector`` / ``DistributedSyncCollector``
  (worker processes or SLURM jobs in a torch.distributed gloo group), ``RPCCollector``
  (workers driven over torch.distributed.rpc), ``EvalCollector`` (evaluation),
  with their option groups (``StepOptions``, ``DeviceOptions``, ``DeliveryOptions``,
  ``WorkerOptions``, ``BatchSpec``), ``WorkerError`` and ``WorkerRestart`` (a worker
  replaced under ``max_worker_restarts``).
- Weight sync: ``SharedMemWeightSyncScheme``, ``MultiProcessWeightSyncScheme``,
  ``NoWeightSyncScheme``, ``RayWeightSyncScheme``.
- Buffers: ``RolloutBuffer`` (on-policy ``[N, T + 1]``), ``ReplayBuffer`` over a
  ``LazyTensorStorage`` / ``LazyMemmapStorage`` read by a ``RandomSampler``,
  ``SliceSampler``, ``SliceSamplerWithoutReplacement`` or ``PrioritizedSampler``;
  ``MultiStep`` (n-step transitions); ``split_trajectories`` for the legacy padded layout.
- Trajectories: ``TrajectoryPool``, ``TrajectoryInfo``, ``EpisodeTracker``.
- Models and algorithms: ``ActorCritic``, ``RecurrentActorCritic``, ``QValuePolicy``,
  ``GRUModule`` / ``LSTMModule``, ``PPO``, ``DQN``, ``generalized_advantage_estimate``; the
  learners the runner trains with (``Learner``, the contract; ``PPOLearner``,
  ``DQNLearner``, ``SACLearner`` with its policy ``SACActor``); ``set_actions_only`` /
  ``actions_only`` (a policy's caller that reads the action alone, as an evaluation).
- Batched sweeps (``hydra/launcher=batched``): ``build_sweep`` (S runs differing in seed as
  one ``Sweep``), ``stack_modules`` / ``StackedLinear`` (S policies as one module with a
  leading member dim), ``MemberPolicy`` and ``MemberPPOLearner`` (PPO for each member).
- Logging: ``RunLogger`` / ``WandbLogger`` (metrics.jsonl and W&B, usable as a post-collect hook).
- Trained runs: ``load_policy`` (a run's policy from its folder and checkpoint, acting deterministically unless
  ``deterministic=False``); errors:
  ``ConfigError`` (a user's mistake, one line) and ``MissingDependencyError``.
- rlpyt's sampler interface over these collectors (docs/samplers.md), at home in
  ``rlcollect.samplers`` and re-exported here: ``SerialSampler``, ``CpuSampler``,
  ``GpuSampler``, ``AlternatingSampler``, ``NoOverlapAlternatingSampler``, with the
  collector classes ``CpuResetCollector`` / ``CpuWaitResetCollector`` /
  ``GpuResetCollector`` / ``GpuWaitResetCollector``; and the ``RandomStart`` env wrapper.
- Names for users who migrate, at home in ``rlcollect.compat`` and re-exported here (each is
  the rlcollect class, or builds one): TorchRL's ``SyncDataCollector``,
  ``MultiSyncDataCollector``, ``MultiaSyncDataCollector``, ``aSyncDataCollector``,
  ``TensorDictReplayBuffer``, and the seed's ``MultiCollector``.

The command line: ``rlcollect train [overrides]`` (README.md). Names load on first access,
so ``rlcollect --help`` and config errors answer without importing torch, and importing
rlcollect never imports Ray. ``_EXPORTS`` below is the one list of these names: ``__all__``
is made from it, and the TYPE_CHECKING block (for type checkers) imports exactly its names
from its modules (tests/test_public_api.py checks).
"""
from typing import TYPE_CHECKING

from rlcollect import compile_hints
from rlcollect.lazy_exports import lazy_getattr

compile_hints.install()  # tensordict's compile hints wait for torch's compiler: 1.5 s off every start-up

__version__ = "0.1.0"

# Public name -> the module it loads from (where it is defined, or the package that presents it:
# rlcollect.samplers, rlcollect.compat, rlcollect.collectors.ray), one name per thing.
_EXPORTS = {
    # envs
    "GymEnv": "rlcollect.envs.gym_env",
    "RandomStart": "rlcollect.envs.random_start",
    "StagedEnv": "rlcollect.envs.staging",
    "TorchCartPole": "rlcollect.envs.torch_cartpole",
    "VmasEnv": "rlcollect.envs.vmas",
    "make_env": "rlcollect.envs.sources",
    # collectors and their options
    "ActionServerCollector": "rlcollect.collectors.action_server",
    "AlternatingCollector": "rlcollect.collectors.action_server",
    "BatchSpec": "rlcollect.collectors.options",
    "Collector": "rlcollect.collectors.single",
    "CollectorBase": "rlcollect.collectors.base",
    "Delivery": "rlcollect.collectors.delivery",
    "DeliveryOptions": "rlcollect.collectors.options",
    "DeviceOptions": "rlcollect.collectors.options",
    "DistributedCollector": "rlcollect.collectors.distributed.collector",
    "DistributedSyncCollector": "rlcollect.collectors.distributed.collector",
    "RPCCollector": "rlcollect.collectors.distributed.rpc",
    "EvalCollector": "rlcollect.collectors.evaluation",
    "EvalResult": "rlcollect.collectors.evaluation",
    "MultiAsyncCollector": "rlcollect.collectors.multi",
    "MultiSyncCollector": "rlcollect.collectors.multi",
    "PoolCollector": "rlcollect.collectors.pool",
    "RayCollector": "rlcollect.collectors.ray",
    "RayReplayBuffer": "rlcollect.collectors.ray",
    "StepOptions": "rlcollect.collectors.options",
    "WorkerError": "rlcollect.collectors.processes",
    "WorkerOptions": "rlcollect.collectors.options",
    "WorkerRestart": "rlcollect.collectors.restarts",
    "evaluate_episodes": "rlcollect.collectors.evaluation",
    # weight sync
    "MultiProcessWeightSyncScheme": "rlcollect.weight_sync.pipes",
    "NoWeightSyncScheme": "rlcollect.weight_sync.schemes",
    "RayWeightSyncScheme": "rlcollect.weight_sync.ray",
    "SharedMemWeightSyncScheme": "rlcollect.weight_sync.shared_mem",
    "WeightSyncScheme": "rlcollect.weight_sync.schemes",
    # buffers
    "LazyMemmapStorage": "rlcollect.buffers.storage",
    "LazyTensorStorage": "rlcollect.buffers.storage",
    "RandomSampler": "rlcollect.buffers.samplers",
    "ReplayBuffer": "rlcollect.buffers.replay",
    "ReplayBufferEnsemble": "rlcollect.buffers.replay",
    "RolloutBuffer": "rlcollect.buffers.rollout",
    "SliceSampler": "rlcollect.buffers.samplers",
    "SliceSamplerWithoutReplacement": "rlcollect.buffers.samplers",
    "PrioritizedSampler": "rlcollect.buffers.samplers",
    "MultiStep": "rlcollect.buffers.transforms",
    "iterate_minibatches": "rlcollect.buffers.rollout",
    "transition_view": "rlcollect.buffers.rollout",
    # trajectories
    "EpisodeTracker": "rlcollect.trajectories",
    "TrajectoryInfo": "rlcollect.trajectories",
    "TrajectoryPool": "rlcollect.trajectories",
    "split_trajectories": "rlcollect.trajectories",
    # models and algorithms
    "ActorCritic": "rlcollect.modules.actor_critic",
    "DQN": "rlcollect.algos.dqn",
    "GRUModule": "rlcollect.modules.recurrent",
    "LSTMModule": "rlcollect.modules.recurrent",
    "PPO": "rlcollect.algos.ppo",
    "QValuePolicy": "rlcollect.modules.q_network",
    "RecurrentActorCritic": "rlcollect.modules.actor_critic",
    "generalized_advantage_estimate": "rlcollect.algos.gae",
    "DQNLearner": "rlcollect.algos.learners",
    "Learner": "rlcollect.algos.learners",
    "PPOLearner": "rlcollect.algos.learners",
    "SACActor": "rlcollect.algos.sac",
    "SACLearner": "rlcollect.algos.sac",
    "recurrent_mode": "rlcollect.modules.recurrent",
    "set_recurrent_mode": "rlcollect.modules.recurrent",
    "actions_only": "rlcollect.acting",
    "set_actions_only": "rlcollect.acting",
    # rlpyt's sampler interface (rlcollect/samplers)
    "AlternatingSampler": "rlcollect.samplers",
    "CpuResetCollector": "rlcollect.samplers",
    "CpuSampler": "rlcollect.samplers",
    "CpuWaitResetCollector": "rlcollect.samplers",
    "GpuResetCollector": "rlcollect.samplers",
    "GpuSampler": "rlcollect.samplers",
    "GpuWaitResetCollector": "rlcollect.samplers",
    "NoOverlapAlternatingSampler": "rlcollect.samplers",
    "SerialSampler": "rlcollect.samplers",
    # batched sweeps (docs/sweeps.md)
    "MemberPPOLearner": "rlcollect.sweeps.members",
    "MemberPolicy": "rlcollect.sweeps.members",
    "StackedLinear": "rlcollect.sweeps.stacking",
    "Sweep": "rlcollect.sweeps.run",
    "build_sweep": "rlcollect.sweeps.run",
    "stack_modules": "rlcollect.sweeps.stacking",
    # logging
    "RunLogger": "rlcollect.logging.run_logger",
    "WandbLogger": "rlcollect.logging.run_logger",
    # trained runs and errors
    "ConfigError": "rlcollect.errors",
    "MissingDependencyError": "rlcollect.errors",
    "load_policy": "rlcollect.pipeline.saved",
    # the seed's and TorchRL's names, for users who migrate (rlcollect/compat.py)
    "MultiCollector": "rlcollect.compat",
    "MultiSyncDataCollector": "rlcollect.compat",
    "MultiaSyncDataCollector": "rlcollect.compat",
    "SyncDataCollector": "rlcollect.compat",
    "TensorDictReplayBuffer": "rlcollect.compat",
    "aSyncDataCollector": "rlcollect.compat",
}
__all__ = sorted(_EXPORTS)  # the public names: _EXPORTS is their one list

__getattr__ = lazy_getattr("rlcollect", _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # for type checkers and IDEs only; at run time the names load lazily
    from rlcollect.acting import actions_only, set_actions_only  # noqa: F401
    from rlcollect.algos.dqn import DQN  # noqa: F401
    from rlcollect.algos.gae import generalized_advantage_estimate  # noqa: F401
    from rlcollect.algos.learners import DQNLearner, Learner, PPOLearner  # noqa: F401
    from rlcollect.algos.ppo import PPO  # noqa: F401
    from rlcollect.algos.sac import SACActor, SACLearner  # noqa: F401
    from rlcollect.buffers.replay import ReplayBuffer, ReplayBufferEnsemble  # noqa: F401
    from rlcollect.buffers.rollout import RolloutBuffer, iterate_minibatches, transition_view  # noqa: F401
    from rlcollect.buffers.samplers import (  # noqa: F401
        PrioritizedSampler,
        RandomSampler,
        SliceSampler,
        SliceSamplerWithoutReplacement,
    )
    from rlcollect.buffers.storage import LazyMemmapStorage, LazyTensorStorage  # noqa: F401
    from rlcollect.buffers.transforms import MultiStep  # noqa: F401
    from rlcollect.collectors.action_server import ActionServerCollector, AlternatingCollector  # noqa: F401
    from rlcollect.collectors.base import CollectorBase  # noqa: F401
    from rlcollect.collectors.delivery import Delivery  # noqa: F401
    from rlcollect.collectors.distributed.collector import DistributedCollector, DistributedSyncCollector  # noqa: F401
    from rlcollect.collectors.distributed.rpc import RPCCollector  # noqa: F401
    from rlcollect.collectors.evaluation import EvalCollector, EvalResult, evaluate_episodes  # noqa: F401
    from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector  # noqa: F401
    from rlcollect.collectors.options import (  # noqa: F401
        BatchSpec,
        DeliveryOptions,
        DeviceOptions,
        StepOptions,
        WorkerOptions,
    )
    from rlcollect.collectors.pool import PoolCollector  # noqa: F401
    from rlcollect.collectors.processes import WorkerError  # noqa: F401
    from rlcollect.collectors.ray import RayCollector, RayReplayBuffer  # noqa: F401
    from rlcollect.collectors.restarts import WorkerRestart  # noqa: F401
    from rlcollect.collectors.single import Collector  # noqa: F401
    from rlcollect.compat import (  # noqa: F401
        MultiaSyncDataCollector,
        MultiCollector,
        MultiSyncDataCollector,
        SyncDataCollector,
        TensorDictReplayBuffer,
        aSyncDataCollector,
    )
    from rlcollect.envs.gym_env import GymEnv  # noqa: F401
    from rlcollect.envs.random_start import RandomStart  # noqa: F401
    from rlcollect.envs.sources import make_env  # noqa: F401
    from rlcollect.envs.staging import StagedEnv  # noqa: F401
    from rlcollect.envs.torch_cartpole import TorchCartPole  # noqa: F401
    from rlcollect.envs.vmas import VmasEnv  # noqa: F401
    from rlcollect.errors import ConfigError, MissingDependencyError  # noqa: F401
    from rlcollect.logging.run_logger import RunLogger, WandbLogger  # noqa: F401
    from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic  # noqa: F401
    from rlcollect.modules.q_network import QValuePolicy  # noqa: F401
    from rlcollect.modules.recurrent import GRUModule, LSTMModule, recurrent_mode, set_recurrent_mode  # noqa: F401
    from rlcollect.pipeline.saved import load_policy  # noqa: F401
    from rlcollect.samplers import (  # noqa: F401
        AlternatingSampler,
        CpuResetCollector,
        CpuSampler,
        CpuWaitResetCollector,
        GpuResetCollector,
        GpuSampler,
        GpuWaitResetCollector,
        NoOverlapAlternatingSampler,
        SerialSampler,
    )
    from rlcollect.sweeps.members import MemberPolicy, MemberPPOLearner  # noqa: F401
    from rlcollect.sweeps.run import Sweep, build_sweep  # noqa: F401
    from rlcollect.sweeps.stacking import StackedLinear, stack_modules  # noqa: F401
    from rlcollect.trajectories import EpisodeTracker, TrajectoryInfo, TrajectoryPool, split_trajectories  # noqa: F401
    from rlcollect.weight_sync.pipes import MultiProcessWeightSyncScheme  # noqa: F401
    from rlcollect.weight_sync.ray import RayWeightSyncScheme  # noqa: F401
    from rlcollect.weight_sync.schemes import NoWeightSyncScheme, WeightSyncScheme  # noqa: F401
    from rlcollect.weight_sync.shared_mem import SharedMemWeightSyncScheme  # noqa: F401
