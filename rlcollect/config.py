"""Structured-config schemas for `rlcollect train`, registered in Hydra's ConfigStore.

Every default of the config tree is written here, once: a YAML option under conf/<group>/
names its schema in its defaults list and sets only what differs from it (an experiment
overlays a few values). A misspelled key or a value of the wrong type is rejected by
Hydra before anything runs; a key added with ``+`` is rejected by the pipeline
(rlcollect/pipeline/checks.py) unless it is an argument of the node's ``_target_``.

Components are ``_target_`` nodes (docs/configuration.md, "Building components from
`_target_`"): their keys are the constructor's arguments, built with
``hydra.utils.instantiate``; ``_partial_: true`` marks the nodes the pipeline completes
with runtime arguments (env, policy, hooks, run folder, ...). Point ``_target_`` at a
class of your own to use it instead.

Schemas are registered at the root of the ConfigStore as ``<group>_<option>_schema`` (not
in the groups), so ``--help`` and Hydra's "could not find" errors list only the YAML
options.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from rlcollect.errors import ConfigError
from rlcollect.logging.runs import for_env_id
from rlcollect.validation import Range

RANGE = "range"  # a numeric field's metadata: the Range its value (each value, for a list) must be in


def ranged(default: Any, spec: str) -> Any:
    """A numeric field (or a list of numbers) with ``default`` whose values must be in the
    range ``spec`` (validation.Range: ``">= 1"``, ``"(0, 1]"``, ``"any"``...); checked by
    before a run is built (``check_ranges``)."""
    metadata = {RANGE: Range.parse(spec)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


# ---------------------------------------------------------------------------- env
@dataclass
class EnvConfig:
    """The training env: ``GymEnv(id, num_envs, seed=..., max_episode_steps=..., **make_kwargs)``
    (the collectors with worker processes build ``envs_per_worker`` of them per worker)."""

    id: str = MISSING  # a registered gymnasium id
    num_envs: Optional[int] = ranged(8, ">= 1")  # collector=sync: None is a single env, batch_size []
    # how the envs are stepped: list | sync | async | vector (envs/backends.py)
    backend: str = "list"
    max_episode_steps: Optional[int] = ranged(None, ">= 1")  # None: the env's own limit
    # training stops once evaluation reaches it: a number, or {env id: number} (the presets:
    # a threshold belongs to its env id, so env.id=<another> has none unless given)
    solved_return: Any = None
    # scores `rlcollect compare` normalises to 0 and 1: {random: R, max: M}, or {env id: {random: R,
    # max: M}} (the presets: the random policy's mean return and a reference best)
    reference_scores: Any = None
    make_kwargs: Any = field(default_factory=dict)  # more gymnasium.make arguments
    imports: List[str] = field(default_factory=list)  # modules that register env ids (a plugin, your package)
    info_keys: List[str] = field(default_factory=list)  # info entries stored as ("next", key), logged at episode ends
    wrappers: List[Any] = field(default_factory=list)  # _target_ nodes applied to each sub-env in order


# ---------------------------------------------------------------------------- collector
@dataclass
class CollectorTarget:
    """What every collector node has: the class, built by the pipeline (``_partial_``) with
    the env source, the policy, total_frames, device, hooks and the replay buffer."""

    _target_: str = MISSING
    _partial_: bool = True
    frames_per_batch: int = ranged(256, ">= 1")


@dataclass
class StepLoopConfig:
    """The per-step loop and the devices (StepOptions, DeviceOptions), taken by every collector."""

    max_frames_per_traj: Optional[int] = ranged(None, ">= 1")
    init_random_frames: int = ranged(0, ">= 0")  # the pipeline raises it to algo.learning_starts (DQN)
    reset_at_each_iter: bool = False
    reset_when_done: bool = True
    split_trajs: bool = False
    exploration_type: str = "random"
    track_traj_ids: bool = True
    set_truncated: bool = False
    reset_policy: str = "immediate"  # immediate | wait (finished envs wait for the next batch; padding masked)
    policy_device: Optional[str] = None  # null: the top-level device
    env_device: Optional[str] = None
    storing_device: Optional[str] = None
    no_cuda_sync: bool = False


@dataclass
class SyncCollectorConfig(StepLoopConfig, CollectorTarget):
    """Collector: the per-step loop in the training process, on env.num_envs envs
    (frames_per_batch is rounded up to a multiple of them)."""

    _target_: str = "rlcollect.Collector"
    cudagraph_policy: bool = False  # replay the policy's forward as a CUDA graph (device=cuda)


@dataclass
class WorkerProcessesConfig(StepLoopConfig, CollectorTarget):
    """Collectors with worker processes: num_workers x envs_per_worker envs, env i seeded
    seed + i (env.num_envs is not used)."""

    num_workers: int = ranged(2, ">= 1")
    envs_per_worker: int = ranged(4, ">= 1")
    start_method: str = "spawn"  # spawn | forkserver | fork
    worker_torch_threads: Optional[int] = ranged(1, ">= 1")
    worker_cpu_affinity: Optional[List[List[int]]] = None  # one list of CPU ids per worker
    batch_timeout: Optional[float] = ranged(None, "> 0")  # seconds; None waits as long as the workers are alive
    shutdown_timeout: float = ranged(5.0, "> 0")
    max_worker_restarts: int = ranged(0, ">= 0")  # workers replaced when one dies or hangs (0: the run fails)
    restart_on_env_error: bool = False  # also replace a worker whose env or policy raised


@dataclass
class MultiCollectorConfig(WorkerProcessesConfig):
    """Each worker runs a Collector on its envs; the policy is copied to the workers
    (weight_sync)."""

    update_at_each_batch: bool = False


@dataclass
class MultiSyncCollectorConfig(MultiCollectorConfig):
    """MultiSyncCollector: every batch gathers one from each worker (frames_per_batch split
    across them), collected with the latest weights."""

    _target_: str = "rlcollect.MultiSyncCollector"
    cat_results: Any = "stack"  # stack | 0 | -1  (PPO takes stack or 0)


@dataclass
class MultiAsyncCollectorConfig(MultiCollectorConfig):
    """MultiAsyncCollector: each batch is one worker's, first come first served, possibly
    collected with older weights (see policy_version)."""

    _target_: str = "rlcollect.MultiAsyncCollector"
    frames_per_batch: int = ranged(128, ">= 1")  # per batch, i.e. per worker batch


@dataclass
class ActionServerCollectorConfig(WorkerProcessesConfig):
    """ActionServerCollector: envs step in the workers, the policy runs once per step for all
    of them in the training process (no weights to send: weight_sync is not used); ``device``
    sets policy_device and storing_device. env_device must stay null (the envs live in the
    workers, on the CPU)."""

    _target_: str = "rlcollect.ActionServerCollector"
    max_decorrelation_steps: int = ranged(0, ">= 0")  # after a reset, each env takes 0..this many random steps


@dataclass
class AlternatingCollectorConfig(ActionServerCollectorConfig):
    """AlternatingCollector: an action server whose workers form two groups; the policy
    computes one group's actions while the other group steps (num_workers must be even)."""

    _target_: str = "rlcollect.AlternatingCollector"
    overlap: bool = True  # false: a group steps only once the other group's step is over


@dataclass
class PoolCollectorConfig(WorkerProcessesConfig):
    """PoolCollector: an asynchronous env pool; the policy (in the training process) serves
    the first batch_size envs ready, whole workers, while the other workers keep stepping
    (no weights to send: weight_sync is not used). layout=per_env gives [P, T] batches,
    every env the same steps (what PPO needs); layout=flat, [F] steps grouped by env, the
    fast envs contributing more (DQN only). env_device must stay null."""

    _target_: str = "rlcollect.PoolCollector"
    batch_size: Optional[int] = ranged(None, ">= 1")  # envs served per pool step, a multiple of envs_per_worker
    layout: str = "per_env"  # per_env | flat
    max_decorrelation_steps: int = ranged(0, ">= 0")  # after a reset, each env takes 0..this many random steps


@dataclass
class RayRemoteConfig:
    """Ray resources of each actor (None: Ray's default)."""

    num_cpus: Optional[float] = ranged(1, ">= 0")
    num_gpus: Optional[float] = ranged(None, ">= 0")
    memory: Optional[int] = ranged(None, ">= 1")  # bytes


@dataclass
class HostCollectorConfig(StepLoopConfig):
    """collector_kwargs of collector=ray and collector=distributed: the options of the
    collector each actor or worker runs. The worker keys apply to collector_class
    multisync/multiasync only; null: not passed (that collector's default)."""

    num_workers: Optional[int] = ranged(None, ">= 1")  # multisync/multiasync actors: worker processes per actor
    start_method: Optional[str] = None
    worker_torch_threads: Optional[int] = ranged(None, ">= 1")
    worker_cpu_affinity: Optional[List[List[int]]] = None
    batch_timeout: Optional[float] = ranged(None, "> 0")
    shutdown_timeout: Optional[float] = ranged(None, "> 0")


@dataclass
class RayCollectorConfig(CollectorTarget):
    """RayCollector: num_collectors Ray actors, each running collector_class on its own envs
    (envs_per_worker per actor, per worker process for multi*), env i seeded seed + i."""

    _target_: str = "rlcollect.RayCollector"
    num_collectors: int = ranged(2, ">= 1")
    sync: bool = True  # true: one batch from every actor, stacked; false: first come first served
    collector_class: str = "sync"  # sync | multisync | multiasync
    envs_per_worker: int = ranged(4, ">= 1")
    collector_kwargs: HostCollectorConfig = field(default_factory=HostCollectorConfig)
    remote_config: RayRemoteConfig = field(default_factory=RayRemoteConfig)
    ray_address: Optional[str] = None  # None: a local Ray on loopback; "auto" or host:port: join a cluster
    batch_timeout: Optional[float] = ranged(None, "> 0")  # seconds; None waits as long as the actors are alive
    shutdown_timeout: float = ranged(5.0, "> 0")
    max_worker_restarts: int = ranged(0, ">= 0")  # actors replaced when one dies or hangs (0: the run fails)
    restart_on_env_error: bool = False  # also replace an actor whose env or policy raised


@dataclass
class DistributedCollectorConfig(CollectorTarget):
    """DistributedCollector: num_workers processes (or SLURM jobs) joined with the trainer in
    a torch.distributed gloo group, each running collector_class on its own envs
    (envs_per_worker, per inner worker process for multi*), env i seeded seed + i. The
    weights travel over the group (weight_sync=none: no other scheme)."""

    _target_: str = "rlcollect.DistributedCollector"
    num_workers: int = ranged(2, ">= 1")
    sync: bool = True  # true: one batch from every worker, stacked; false: first come first served
    collector_class: str = "sync"  # sync | multisync | multiasync
    envs_per_worker: int = ranged(4, ">= 1")
    collector_kwargs: HostCollectorConfig = field(default_factory=HostCollectorConfig)
    backend: str = "gloo"
    launcher: str = "mp"  # mp: local processes | submitit: SLURM jobs (cluster=local: local jobs) | ray: Ray tasks
    start_method: str = "spawn"  # launcher=mp
    cluster: Optional[str] = None  # launcher=submitit: null picks SLURM where sbatch exists, or "local"
    slurm_kwargs: Any = field(default_factory=dict)  # launcher=submitit: executor.update_parameters(...)
    submitit_folder: str = "submitit"  # launcher=submitit: job logs, relative to the run folder
    ray_address: Optional[str] = None  # launcher=ray: a cluster's address; null: a local Ray on loopback
    master_addr: str = "127.0.0.1"  # where the store and the group listen: this machine only, or an address
    master_port: int = ranged(0, "[0, 65535]")  # 0: a free port
    timeout: float = ranged(60.0, "> 0")  # seconds any wait on the group may take (a hung worker fails the run)
    worker_torch_threads: Optional[int] = ranged(1, ">= 1")
    shutdown_timeout: float = ranged(10.0, "> 0")


# ---------------------------------------------------------------------------- weight sync
@dataclass
class SharedMemWeightSyncConfig:
    """Weights in shared memory: an update is one copy plus a version bump."""

    _target_: str = "rlcollect.SharedMemWeightSyncScheme"


@dataclass
class MultiProcessWeightSyncConfig:
    """Weights sent through a pipe to each worker and acknowledged."""

    _target_: str = "rlcollect.MultiProcessWeightSyncScheme"
    strategy: str = "tensordict"  # tensordict | state_dict
    ack_timeout: float = ranged(120.0, "> 0")


@dataclass
class RayWeightSyncConfig:
    """Weights put once in the Ray object store per update; every actor pulls them."""

    _target_: str = "rlcollect.RayWeightSyncScheme"
    strategy: str = "tensordict"  # tensordict | state_dict


@dataclass
class NoWeightSyncConfig:
    """Workers keep the weights they started with."""

    _target_: str = "rlcollect.NoWeightSyncScheme"


# ---------------------------------------------------------------------------- algo
@dataclass
class LearnerTarget:
    """What every algo node has: the learner class (algos/learners.py, the contract), built
    by the pipeline (``_partial_``) with the policy, the buffer it asks for and the run's
    total_frames and spaces where its constructor names them. ``name`` labels the algorithm
    (W&B, compare); the pipeline reads no other key of it."""

    _target_: str = MISSING
    _partial_: bool = True
    name: str = MISSING


@dataclass
class PPOConfig(LearnerTarget):
    """Clipped PPO, tuned for CartPole (close to rl-zoo's: 8 envs x 32 steps, lambda 0.8)."""

    _target_: str = "rlcollect.PPOLearner"
    name: str = "ppo"
    lr: float = ranged(0.001, "> 0")
    gamma: float = ranged(0.98, "(0, 1]")
    gae_lambda: float = ranged(0.8, "[0, 1]")
    clip_epsilon: float = ranged(0.2, "> 0")
    epochs: int = ranged(20, ">= 1")
    minibatch_size: int = ranged(256, ">= 1")  # at most the frames of a batch (collector.frames_per_batch)
    value_coef: float = ranged(0.5, ">= 0")
    entropy_coef: float = ranged(0.0, ">= 0")
    max_grad_norm: float = ranged(0.5, "> 0")
    normalize_advantage: bool = True
    anneal_lr: bool = True
    anneal_clip: bool = True
    # recurrent models: steps per minibatch sequence (None: whole rollout rows)
    sequence_length: Optional[int] = ranged(None, ">= 1")
    normalize_reward: bool = False  # train on rewards / running std of the discounted return (logged ones unchanged)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending value targets: [life_lost]


@dataclass
class DQNConfig(LearnerTarget):
    """DQN (double, target network, epsilon-greedy) from a replay buffer."""

    _target_: str = "rlcollect.DQNLearner"
    name: str = "dqn"
    lr: float = ranged(1e-3, "> 0")
    gamma: float = ranged(0.99, "(0, 1]")
    batch_size: int = ranged(64, ">= 1")  # transitions per gradient step
    # per collected batch (background collection: per frames_per_batch frames)
    gradient_steps_per_batch: int = ranged(128, ">= 1")
    learning_starts: int = ranged(1000, ">= 0")  # frames collected with random actions before training
    target_update: str = "periodic"  # periodic | polyak
    target_update_period: int = ranged(128, ">= 1")  # gradient steps: one target refresh per collected batch
    tau: float = ranged(0.005, "(0, 1]")
    double_dqn: bool = True
    loss: str = "huber"
    max_grad_norm: float = ranged(10.0, "> 0")
    eps_start: float = ranged(1.0, "[0, 1]")
    eps_end: float = ranged(0.04, "[0, 1]")
    eps_decay_frames: int = ranged(8000, ">= 0")
    # >1: n-step transitions (MultiStep on the buffer's writes), bootstrapped gamma**m ahead
    n_step: int = ranged(1, ">= 1")
    prioritized: bool = False  # prioritized replay: buffer/sampler=prioritized with its defaults (or choose that)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending the bootstrap: [life_lost]
    background: bool = False  # collector.start(): collect while training


@dataclass
class SACConfig(LearnerTarget):
    """Soft actor-critic (twin Q, automatic entropy tuning) from a replay buffer, the
    settings of cleanrl's sac_continuous_action (one update per collected frame)."""

    _target_: str = "rlcollect.SACLearner"
    name: str = "sac"
    gamma: float = ranged(0.99, "(0, 1]")
    tau: float = ranged(0.005, "(0, 1]")  # Polyak step of the target critics
    actor_lr: float = ranged(3e-4, "> 0")  # also alpha's
    critic_lr: float = ranged(1e-3, "> 0")
    alpha: float = ranged(0.2, "> 0")  # the entropy weight (its start, with autotune)
    autotune: bool = True  # tune alpha towards an entropy of -action_dim
    policy_frequency: int = ranged(2, ">= 1")  # critic steps per round of as many actor updates
    target_network_frequency: int = ranged(1, ">= 1")  # critic steps between target updates
    batch_size: int = ranged(256, ">= 1")  # transitions per gradient step
    gradient_steps_per_batch: int = ranged(256, ">= 1")  # one per collected frame (collector.frames_per_batch)
    learning_starts: int = ranged(5000, ">= 0")  # frames of random actions before the first update
    critic_hidden_sizes: List[int] = ranged([256, 256], ">= 1")
    n_step: int = ranged(1, ">= 1")  # >1: n-step transitions, bootstrapped gamma**m ahead
    prioritized: bool = False  # prioritized replay (buffer/sampler=prioritized's defaults)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending the bootstrap
    background: bool = False  # collector.start(): collect while training


# ---------------------------------------------------------------------------- model
@dataclass
class ActorCriticConfig:
    """ActorCritic(observation_space, action_space, ...): separate actor and critic MLPs (PPO)."""

    _target_: str = "rlcollect.ActorCritic"
    _partial_: bool = True  # the pipeline passes the env's spaces
    hidden_sizes: List[int] = ranged([64, 64], ">= 1")
    activation: str = "tanh"
    log_std_init: float = ranged(0.0, "any")
    encoder: str = "auto"  # auto (from the observation space) | mlp | cnn (images) | multi_input (Dict/Tuple)
    normalize_observation: bool = False  # running mean/std of the observations, inside the policy


@dataclass
class RecurrentActorCriticConfig:
    """RecurrentActorCritic(observation_space, action_space, ...): a GRU or LSTM feeding the
    actor and critic heads (PPO; see experiment=cartpole_novel_gru)."""

    _target_: str = "rlcollect.RecurrentActorCritic"
    _partial_: bool = True
    rnn: str = "gru"  # gru | lstm
    encoder: str = "auto"  # auto (from the observation space) | mlp | cnn (images) | multi_input (Dict/Tuple)
    hidden_size: int = ranged(64, ">= 1")
    num_layers: int = ranged(1, ">= 1")
    hidden_sizes: List[int] = ranged([64, 64], ">= 1")
    activation: str = "tanh"
    log_std_init: float = ranged(0.0, "any")


@dataclass
class QValuePolicyConfig:
    """QValuePolicy(observation_space, action_space, ...): an MLP of Q-values, epsilon-greedy (DQN)."""

    _target_: str = "rlcollect.QValuePolicy"
    _partial_: bool = True
    hidden_sizes: List[int] = ranged([256, 256], ">= 1")
    activation: str = "relu"
    # the first batches'; DQN then follows algo.eps_* (conf/model/q_network.yaml links them)
    epsilon: float = ranged(1.0, "[0, 1]")
    encoder: str = "auto"  # auto (from the observation space) | mlp | cnn (images) | multi_input (Dict/Tuple)
    normalize_observation: bool = False  # running mean/std of the observations, inside the policy


@dataclass
class SACActorConfig:
    """SACActor(observation_space, action_space, ...): a tanh-squashed Gaussian over Box
    actions (SAC; algo=sac selects it)."""

    _target_: str = "rlcollect.SACActor"
    _partial_: bool = True
    hidden_sizes: List[int] = ranged([256, 256], ">= 1")
    activation: str = "relu"
    encoder: str = "auto"  # auto (from the observation space) | mlp | cnn (images) | multi_input (Dict/Tuple)
    normalize_observation: bool = False  # running mean/std of the observations, inside the policy


# ---------------------------------------------------------------------------- buffer
@dataclass
class RolloutBufferConfig:
    """RolloutBuffer(num_envs, rollout_len, shapes, ...): one collector batch per PPO update."""

    _target_: str = "rlcollect.RolloutBuffer"
    _partial_: bool = True  # the pipeline passes the batch and env shapes
    device: Optional[str] = None  # None: the training device


@dataclass
class ReplayBufferConfig:
    """ReplayBuffer(storage, sampler, batch_size=algo.batch_size). ``trajs_per_batch`` is not a
    ReplayBuffer argument: the collector's, when it writes into the buffer."""

    _target_: str = "rlcollect.ReplayBuffer"
    storage: Any = MISSING  # buffer/storage: memory | memmap
    sampler: Any = MISSING  # buffer/sampler: random | slice
    trajs_per_batch: Optional[int] = ranged(None, ">= 1")  # collectors write only complete trajectories, this many


@dataclass
class LazyTensorStorageConfig:
    """LazyTensorStorage: a ring buffer in memory."""

    _target_: str = "rlcollect.LazyTensorStorage"
    max_size: int = ranged(100_000, ">= 1")
    ndim: int = ranged(1, ">= 1")  # 1: flat, safe with every collector; 2/3 keep env rows (docs/data-layout.md)
    device: Optional[str] = None  # None: the training device
    dedup_observations: bool = False  # each observation stored once (docs/data-layout.md, "Observations stored once")
    frame_stack: int = ranged(1, ">= 1")  # with dedup_observations: FrameStackObservation stacks stored frame by frame
    spare_frames: Optional[int] = ranged(None, ">= 1")  # None: max_size / (4 * frame_stack); fixed once shared


@dataclass
class LazyMemmapStorageConfig:
    """LazyMemmapStorage: a ring buffer in memory-mapped files (a resumed run re-opens them)."""

    _target_: str = "rlcollect.LazyMemmapStorage"
    max_size: int = ranged(100_000, ">= 1")
    ndim: int = ranged(1, ">= 1")
    scratch_dir: Optional[str] = None  # None: <run folder>/replay
    dedup_observations: bool = False  # as LazyTensorStorageConfig's; a resumed run keeps its files' choice
    frame_stack: int = ranged(1, ">= 1")
    spare_frames: Optional[int] = ranged(None, ">= 1")


@dataclass
class RandomSamplerConfig:
    _target_: str = "rlcollect.RandomSampler"


@dataclass
class SliceSamplerConfig:
    """SliceSampler: contiguous slices of trajectories (exactly one of slice_len, num_slices)."""

    _target_: str = "rlcollect.SliceSampler"
    slice_len: Optional[int] = ranged(32, ">= 1")
    num_slices: Optional[int] = ranged(None, ">= 1")
    strict_length: bool = False
    pad_output: bool = False


@dataclass
class SliceSamplerWithoutReplacementConfig(SliceSamplerConfig):
    """SliceSamplerWithoutReplacement: every stored slice once per epoch, in random order."""

    _target_: str = "rlcollect.SliceSamplerWithoutReplacement"
    shuffle: bool = True


@dataclass
class PrioritizedSamplerConfig:
    """PrioritizedSampler: proportional prioritized replay; DQN gives the sampled transitions
    their TD errors as priorities (max_capacity: the storage's max_size, set by the pipeline)."""

    _target_: str = "rlcollect.PrioritizedSampler"
    alpha: float = ranged(0.6, ">= 0")
    beta: float = ranged(0.4, "[0, 1]")
    eps: float = ranged(1e-6, "> 0")


# ---------------------------------------------------------------------------- logger
@dataclass
class WandbLoggerConfig:
    """WandbLogger: metrics.jsonl and a W&B run (offline: no account, no network)."""

    _target_: str = "rlcollect.WandbLogger"
    _partial_: bool = True  # the pipeline passes the run folder, name, group, job_type, config
    project: str = "rlcollect"
    entity: Optional[str] = None
    mode: str = "offline"  # "online" needs a W&B login


@dataclass
class RunLoggerConfig:
    """RunLogger: metrics.jsonl in the run folder only."""

    _target_: str = "rlcollect.RunLogger"
    _partial_: bool = True  # the pipeline passes the run folder


# ---------------------------------------------------------------------------- top level
EVALUATIONS_PER_RUN = 20  # eval.every_frames=null: the cadence that gives a run this many evaluations


def eval_every_frames(cfg) -> int:
    """``eval.every_frames`` for the run's env id (a number, or an {env id: frames} mapping
    as the presets give), else the cadence that gives the run EVALUATIONS_PER_RUN
    evaluations."""
    return for_env_id(cfg.env.id, cfg.eval.every_frames) or max(1, cfg.total_frames // EVALUATIONS_PER_RUN)


@dataclass
class EvalConfig:
    every_frames: Any = None  # cadence in collected frames, or {env id: frames}; null: total_frames / 20
    # runs with no solved_return: skip evaluations above this time share
    max_time_share: Optional[float] = ranged(0.25, "(0, 1]")
    episodes: int = ranged(10, ">= 1")  # eval envs stepped together, one episode each (the unbiased estimate)
    # step budget over all eval envs (at least eval.episodes); an episode cut by it is not counted (eval/cut)
    max_steps: Optional[int] = ranged(None, ">= 1")
    # None: one episode per eval env; else episodes back to back until this many
    max_trajectories: Optional[int] = ranged(None, ">= 1")
    video: bool = False  # record one evaluation episode (rgb_array) to videos/eval_<frames>.mp4 and W&B


@dataclass
class TrainConfig:
    env: Any = MISSING
    collector: Any = MISSING
    weight_sync: Any = MISSING
    algo: Any = MISSING
    model: Any = MISSING
    buffer: Any = MISSING
    logger: Any = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = ranged(0, ">= 0")  # env i of the run is seeded seed + i (rlcollect/seeding.py)
    total_frames: int = ranged(100_000, ">= 1")
    device: str = "cpu"  # training device; also the collector's default device
    torch_threads: int = ranged(1, ">= 1")  # small MLPs run fastest on one thread; more threads only add overhead
    progress: bool = True
    # checkpoint.pt in the run folder every this many frames (None: no periodic one; the final one is always written)
    checkpoint_every_frames: Optional[int] = ranged(20_000, ">= 1")
    # and after the run's first batch, then whenever this many seconds passed since the last one (None: not by time)
    checkpoint_every_seconds: Optional[float] = ranged(60.0, "> 0")
    resume: Optional[str] = None  # a run folder: `rlcollect train resume=<folder>` continues it
    # what `train` returns (a tuning sweep's objective, docs/tuning.md): final_eval_return | best_eval_return |
    # eval_auc (mean eval return over the run's frames) | frames_to_solve (to minimise)
    objective: str = "final_eval_return"


# (group, option) -> schema; YAML options refer to them as /<group>_<option>_schema
SCHEMAS: dict[tuple[str, str], type] = {
    ("collector", "sync"): SyncCollectorConfig,
    ("collector", "multisync"): MultiSyncCollectorConfig,
    ("collector", "multiasync"): MultiAsyncCollectorConfig,
    ("collector", "action_server"): ActionServerCollectorConfig,
    ("collector", "alternating"): AlternatingCollectorConfig,
    ("collector", "pool"): PoolCollectorConfig,
    ("collector", "ray"): RayCollectorConfig,
    ("collector", "distributed"): DistributedCollectorConfig,
    ("weight_sync", "shared_mem"): SharedMemWeightSyncConfig,
    ("weight_sync", "multiprocess"): MultiProcessWeightSyncConfig,
    ("weight_sync", "ray"): RayWeightSyncConfig,
    ("weight_sync", "none"): NoWeightSyncConfig,
    ("algo", "ppo"): PPOConfig,
    ("algo", "dqn"): DQNConfig,
    ("algo", "sac"): SACConfig,
    ("model", "actor_critic"): ActorCriticConfig,
    ("model", "recurrent_actor_critic"): RecurrentActorCriticConfig,
    ("model", "q_network"): QValuePolicyConfig,
    ("model", "sac_actor"): SACActorConfig,
    ("buffer", "rollout"): RolloutBufferConfig,
    ("buffer", "replay"): ReplayBufferConfig,
    ("buffer_storage", "memory"): LazyTensorStorageConfig,
    ("buffer_storage", "memmap"): LazyMemmapStorageConfig,
    ("buffer_sampler", "random"): RandomSamplerConfig,
    ("buffer_sampler", "slice"): SliceSamplerConfig,
    ("buffer_sampler", "slice_without_replacement"): SliceSamplerWithoutReplacementConfig,
    ("buffer_sampler", "prioritized"): PrioritizedSamplerConfig,
    ("logger", "wandb"): WandbLoggerConfig,
    ("logger", "none"): RunLoggerConfig,
}


# objective -> the direction a tuning sweep optimises it in (conf/hydra/sweeper/*.yaml read it
# as ${objective_direction:${objective}})
OBJECTIVES = {"final_eval_return": "maximize", "best_eval_return": "maximize", "eval_auc": "maximize",
              "frames_to_solve": "minimize"}


def objective_direction(objective: str) -> str:
    """The direction a tuning sweep optimises ``objective`` in ("maximize" for unknown ones:
    the run refuses them itself, naming the choices)."""
    return OBJECTIVES.get(objective, "maximize")


JOB_DIRNAME_BYTES = 200  # a sweep job folder's name, within the file systems' 255 bytes


def job_dirname(override_dirname: str) -> str:
    """A sweep job's folder name from its overrides (``hydra.job.override_dirname``), cut to
    JOB_DIRNAME_BYTES with a digest of the whole appended where it is longer (a tuning
    trial's sampled values run past what a file system takes); .hydra/overrides.yaml keeps
    them all."""
    encoded = override_dirname.encode()
    if len(encoded) <= JOB_DIRNAME_BYTES:
        return override_dirname
    digest = hashlib.sha1(encoded).hexdigest()[:8]
    return encoded[:JOB_DIRNAME_BYTES - 9].decode(errors="ignore") + "-" + digest


def schema_name(group: str, option: str) -> str:
    return f"{group}_{option}_schema"


def register_configs() -> None:
    """Register every schema at the root of the ConfigStore (not in a group: ``--help``
    lists only the YAML options); YAML options refer to them as ``/<name>@_here_``."""
    for name, resolver in (("objective_direction", objective_direction), ("job_dirname", job_dirname)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="env_schema", node=EnvConfig)
    for (group, option), node in SCHEMAS.items():
        store.store(name=schema_name(group, option), node=node)


def schema_nodes(node: DictConfig, path: str) -> Iterator[tuple[str, DictConfig]]:
    """``(path, node)`` for ``node`` and the nodes under it that are typed by a schema."""
    if dataclasses.is_dataclass(OmegaConf.get_type(node)):
        yield path, node
    for key in node.keys():
        if key == "hydra" or OmegaConf.is_missing(node, key):
            continue
        try:
            child = node.get(key)
        except InterpolationResolutionError:  # options that do not go together: the pipeline's checks say which
            continue
        if isinstance(child, DictConfig):
            yield from schema_nodes(child, f"{path}.{key}" if path else str(key))


def check_ranges(cfg: DictConfig) -> None:
    """Every numeric option in the range its schema declares (``config.ranged``), each
    entry of a list of numbers too: a ConfigError naming the key and the range."""
    for path, node in schema_nodes(cfg, ""):
        prefix = f"{path}." if path else ""
        for schema_field in dataclasses.fields(OmegaConf.get_type(node)):
            allowed = schema_field.metadata.get(RANGE)
            if allowed is None or schema_field.name not in node or OmegaConf.is_missing(node, schema_field.name):
                continue
            try:
                value = node[schema_field.name]
            except InterpolationResolutionError:  # options that do not go together: the pipeline's checks say which
                continue
            if isinstance(value, ListConfig):
                if any(entry not in allowed for entry in value):
                    raise ConfigError(f"{prefix}{schema_field.name}={list(value)}: every entry must be {allowed}")
            else:
                allowed.check(f"{prefix}{schema_field.name}", value)
