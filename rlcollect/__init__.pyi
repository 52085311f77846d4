"""rlcollect's public names, each declared once, here: type checkers read this stub, and
rlcollect/__init__.py reads it at import for ``__all__``, the modules the names load from on
first access, and the list in ``help(rlcollect)`` (each ``# <group>: <what>`` line heads a
group). A name is added by adding its import line."""
# ruff: noqa: I001  (the imports stand in their groups, not in isort's order)

# Envs: gymnasium envs speaking TensorDicts (single or batched, stepped as a list, by gymnasium's
#   vector envs or an id's vector entry point), a batched torch env on any device, VMAS's multi-
#   agent scenarios, and make_env (any env source: an id, a GymEnv, or a callable returning either)
from rlcollect.envs.gym_env import GymEnv as GymEnv
from rlcollect.envs.random_start import RandomStart as RandomStart
from rlcollect.envs.staging import StagedEnv as StagedEnv
from rlcollect.envs.torch_cartpole import TorchCartPole as TorchCartPole
from rlcollect.envs.vmas import VmasEnv as VmasEnv
from rlcollect.envs.sources import make_env as make_env

# Collectors (iterate to get [T] / [P, T] batches): in process, worker processes, action servers
#   (envs in workers, one batched policy forward here), an asynchronous env pool, Ray actors, a
#   torch.distributed group or RPC workers, evaluation; their option groups, WorkerError and
#   WorkerRestart
from rlcollect.collectors.action_server import (
    ActionServerCollector as ActionServerCollector,
    AlternatingCollector as AlternatingCollector,
)
from rlcollect.collectors.options import (
    BatchSpec as BatchSpec,
    DeliveryOptions as DeliveryOptions,
    DeviceOptions as DeviceOptions,
    StepOptions as StepOptions,
    WorkerOptions as WorkerOptions,
)
from rlcollect.collectors.single import Collector as Collector
from rlcollect.collectors.base import CollectorBase as CollectorBase
from rlcollect.collectors.delivery import Delivery as Delivery
from rlcollect.collectors.distributed.collector import (
    DistributedCollector as DistributedCollector,
    DistributedSyncCollector as DistributedSyncCollector,
)
from rlcollect.collectors.distributed.rpc import RPCCollector as RPCCollector
from rlcollect.collectors.evaluation import (
    EvalCollector as EvalCollector,
    EvalResult as EvalResult,
    evaluate_episodes as evaluate_episodes,
)
from rlcollect.collectors.multi import (
    MultiAsyncCollector as MultiAsyncCollector,
    MultiSyncCollector as MultiSyncCollector,
)
from rlcollect.collectors.pool import PoolCollector as PoolCollector
from rlcollect.collectors.ray import RayCollector as RayCollector, RayReplayBuffer as RayReplayBuffer
from rlcollect.collectors.processes import WorkerError as WorkerError
from rlcollect.collectors.restarts import WorkerRestart as WorkerRestart

# Weight sync: the schemes that move a trainer's weights to the policy copies
from rlcollect.weight_sync.pipes import MultiProcessWeightSyncScheme as MultiProcessWeightSyncScheme
from rlcollect.weight_sync.schemes import NoWeightSyncScheme as NoWeightSyncScheme, WeightSyncScheme as WeightSyncScheme
from rlcollect.weight_sync.ray import RayWeightSyncScheme as RayWeightSyncScheme
from rlcollect.weight_sync.shared_mem import SharedMemWeightSyncScheme as SharedMemWeightSyncScheme

# Buffers: the on-policy rollout [N, T + 1], the replay buffer over its storages and samplers,
#   n-step transitions, a full storage saved without a copy
from rlcollect.buffers.storage import LazyMemmapStorage as LazyMemmapStorage, LazyTensorStorage as LazyTensorStorage
from rlcollect.buffers.samplers import (
    RandomSampler as RandomSampler,
    SliceSampler as SliceSampler,
    SliceSamplerWithoutReplacement as SliceSamplerWithoutReplacement,
    PrioritizedSampler as PrioritizedSampler,
)
from rlcollect.buffers.replay import ReplayBuffer as ReplayBuffer, ReplayBufferEnsemble as ReplayBufferEnsemble
from rlcollect.buffers.rollout import (
    RolloutBuffer as RolloutBuffer,
    iterate_minibatches as iterate_minibatches,
    transition_view as transition_view,
)
from rlcollect.buffers.transforms import MultiStep as MultiStep
from rlcollect.buffers.in_place import saved_in_place as saved_in_place

# Trajectories: trajectory ids, finished episodes, the legacy padded layout
from rlcollect.trajectories import (
    EpisodeTracker as EpisodeTracker,
    TrajectoryInfo as TrajectoryInfo,
    TrajectoryPool as TrajectoryPool,
    split_trajectories as split_trajectories,
)

# Models and algorithms: actor-critics, Q-networks, recurrent modules, PPO, DQN, GAE, the learners
#   the runner trains with (Learner is their contract), SAC and its actor; set_actions_only /
#   actions_only (a caller that reads the action alone)
from rlcollect.modules.actor_critic import ActorCritic as ActorCritic, RecurrentActorCritic as RecurrentActorCritic
from rlcollect.algos.dqn import DQN as DQN
from rlcollect.modules.recurrent import (
    GRUModule as GRUModule,
    LSTMModule as LSTMModule,
    recurrent_mode as recurrent_mode,
    set_recurrent_mode as set_recurrent_mode,
)
from rlcollect.algos.ppo import PPO as PPO
from rlcollect.modules.q_network import QValuePolicy as QValuePolicy
from rlcollect.algos.gae import generalized_advantage_estimate as generalized_advantage_estimate
from rlcollect.algos.learners import Learner as Learner
from rlcollect.algos.ppo import PPOLearner as PPOLearner
from rlcollect.algos.dqn import DQNLearner as DQNLearner
from rlcollect.algos.sac import SACLearner as SACLearner
from rlcollect.modules.sac import SACActor as SACActor
from rlcollect.acting import actions_only as actions_only, set_actions_only as set_actions_only

# rlpyt's sampler interface over the collectors (docs/rlpyt.md), at home in rlcollect.rlpyt
from rlcollect.rlpyt import (
    AlternatingSampler as AlternatingSampler,
    BaseSampler as BaseSampler,
    CpuResetCollector as CpuResetCollector,
    CpuSampler as CpuSampler,
    CpuWaitResetCollector as CpuWaitResetCollector,
    GpuResetCollector as GpuResetCollector,
    GpuSampler as GpuSampler,
    GpuWaitResetCollector as GpuWaitResetCollector,
    NoOverlapAlternatingSampler as NoOverlapAlternatingSampler,
    SamplerCollector as SamplerCollector,
    SerialSampler as SerialSampler,
)

# Batched sweeps (hydra/launcher=batched, docs/sweeps.md): S runs as the members of one stacked
#   model (PPO, recurrent PPO, DQN, SAC), or in lockstep on one collector (a user's own classes)
from rlcollect.sweeps.members import MemberPPOLearner as MemberPPOLearner, MemberPolicy as MemberPolicy
from rlcollect.sweeps.member_dqn import MemberDQNLearner as MemberDQNLearner, MemberQPolicy as MemberQPolicy
from rlcollect.sweeps.member_sac import MemberSACActor as MemberSACActor, MemberSACLearner as MemberSACLearner
from rlcollect.sweeps.lockstep import (
    LockstepLearner as LockstepLearner,
    LockstepPolicy as LockstepPolicy,
    MemberStreams as MemberStreams,
)
from rlcollect.sweeps.stacking import (
    StackedConv2d as StackedConv2d,
    StackedLinear as StackedLinear,
    stack_modules as stack_modules,
)
from rlcollect.sweeps.stacked_rnn import StackedRNN as StackedRNN
from rlcollect.sweeps.run import Sweep as Sweep, build_sweep as build_sweep

# Logging: metrics.jsonl and W&B, usable as a post-collect hook
from rlcollect.logging.run_logger import RunLogger as RunLogger, WandbLogger as WandbLogger

# Trained runs and errors: a run's policy from its folder and checkpoint (acting
#   deterministically unless deterministic=False); ConfigError (a user's mistake, one line),
#   MissingDependencyError, and NonFiniteActionError (a policy wrote a NaN or infinite action)
from rlcollect.errors import ConfigError as ConfigError, MissingDependencyError as MissingDependencyError
from rlcollect.envs.gym_env import NonFiniteActionError as NonFiniteActionError
from rlcollect.pipeline.saved import load_policy as load_policy

# Names for users who migrate, at home in rlcollect.compat (each the rlcollect class, or builds
#   one): TorchRL's and the seed's
from rlcollect.compat import (
    MultiCollector as MultiCollector,
    MultiSyncDataCollector as MultiSyncDataCollector,
    MultiaSyncDataCollector as MultiaSyncDataCollector,
    SyncDataCollector as SyncDataCollector,
    TensorDictReplayBuffer as TensorDictReplayBuffer,
    aSyncDataCollector as aSyncDataCollector,
)

__version__: str
