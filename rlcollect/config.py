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

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from rlcollect.logging.runs import for_env_id


# ---------------------------------------------------------------------------- env
@dataclass
class EnvConfig:
    """The training env: ``GymEnv(id, num_envs, seed=..., max_episode_steps=..., **make_kwargs)``
    (the collectors with worker processes build ``envs_per_worker`` of them per worker)."""

    id: str = MISSING  # a registered gymnasium id
    num_envs: Optional[int] = 8  # collector=sync: None is a single env, batch_size []
    # how the envs are stepped: list | sync | async | vector (envs/backends.py)
    backend: str = "list"
    max_episode_steps: Optional[int] = None  # None: the env's own limit
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
    frames_per_batch: int = 256


@dataclass
class StepLoopConfig:
    """The per-step loop and the devices (StepOptions, DeviceOptions), taken by every collector."""

    max_frames_per_traj: Optional[int] = None
    init_random_frames: int = 0  # the pipeline raises it to algo.learning_starts (DQN)
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

    num_workers: int = 2
    envs_per_worker: int = 4
    start_method: str = "spawn"  # spawn | forkserver | fork
    worker_torch_threads: Optional[int] = 1
    worker_cpu_affinity: Optional[List[List[int]]] = None  # one list of CPU ids per worker
    batch_timeout: Optional[float] = None  # seconds; None waits as long as the workers are alive
    shutdown_timeout: float = 5.0
    max_worker_restarts: int = 0  # workers replaced when one dies or hangs (0: the run fails)
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
    frames_per_batch: int = 128  # per batch, i.e. per worker batch


@dataclass
class ActionServerCollectorConfig(WorkerProcessesConfig):
    """ActionServerCollector: envs step in the workers, the policy runs once per step for all
    of them in the training process (no weights to send: weight_sync is not used); ``device``
    sets policy_device and storing_device. env_device must stay null (the envs live in the
    workers, on the CPU)."""

    _target_: str = "rlcollect.ActionServerCollector"
    max_decorrelation_steps: int = 0  # after a reset, each env takes 0..this many random steps


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
    batch_size: Optional[int] = None  # envs served per pool step, a multiple of envs_per_worker; null: half the envs
    layout: str = "per_env"  # per_env | flat
    max_decorrelation_steps: int = 0  # after a reset, each env takes 0..this many random steps


@dataclass
class RayRemoteConfig:
    """Ray resources of each actor (None: Ray's default)."""

    num_cpus: Optional[float] = 1
    num_gpus: Optional[float] = None
    memory: Optional[int] = None  # bytes


@dataclass
class HostCollectorConfig(StepLoopConfig):
    """collector_kwargs of collector=ray and collector=distributed: the options of the
    collector each actor or worker runs. The worker keys apply to collector_class
    multisync/multiasync only; null: not passed (that collector's default)."""

    num_workers: Optional[int] = None  # multisync/multiasync actors: worker processes per actor (required)
    start_method: Optional[str] = None
    worker_torch_threads: Optional[int] = None
    worker_cpu_affinity: Optional[List[List[int]]] = None
    batch_timeout: Optional[float] = None
    shutdown_timeout: Optional[float] = None


@dataclass
class RayCollectorConfig(CollectorTarget):
    """RayCollector: num_collectors Ray actors, each running collector_class on its own envs
    (envs_per_worker per actor, per worker process for multi*), env i seeded seed + i."""

    _target_: str = "rlcollect.RayCollector"
    num_collectors: int = 2
    sync: bool = True  # true: one batch from every actor, stacked; false: first come first served
    collector_class: str = "sync"  # sync | multisync | multiasync
    envs_per_worker: int = 4
    collector_kwargs: HostCollectorConfig = field(default_factory=HostCollectorConfig)
    remote_config: RayRemoteConfig = field(default_factory=RayRemoteConfig)
    ray_address: Optional[str] = None  # None: a local Ray on loopback; "auto" or host:port: join a cluster
    batch_timeout: Optional[float] = None  # seconds; None waits as long as the actors are alive
    shutdown_timeout: float = 5.0
    max_worker_restarts: int = 0  # actors replaced when one dies or hangs (0: the run fails)
    restart_on_env_error: bool = False  # also replace an actor whose env or policy raised


@dataclass
class DistributedCollectorConfig(CollectorTarget):
    """DistributedCollector: num_workers processes (or SLURM jobs) joined with the trainer in
    a torch.distributed gloo group, each running collector_class on its own envs
    (envs_per_worker, per inner worker process for multi*), env i seeded seed + i. The
    weights travel over the group (weight_sync=none: no other scheme)."""

    _target_: str = "rlcollect.DistributedCollector"
    num_workers: int = 2
    sync: bool = True  # true: one batch from every worker, stacked; false: first come first served
    collector_class: str = "sync"  # sync | multisync | multiasync
    envs_per_worker: int = 4
    collector_kwargs: HostCollectorConfig = field(default_factory=HostCollectorConfig)
    backend: str = "gloo"
    launcher: str = "mp"  # mp: local processes | submitit: SLURM jobs (cluster=local: local jobs) | ray: Ray tasks
    start_method: str = "spawn"  # launcher=mp
    cluster: Optional[str] = None  # launcher=submitit: null picks SLURM where sbatch exists, or "local"
    slurm_kwargs: Any = field(default_factory=dict)  # launcher=submitit: executor.update_parameters(...)
    submitit_folder: str = "submitit"  # launcher=submitit: job logs, relative to the run folder
    ray_address: Optional[str] = None  # launcher=ray: a cluster's address; null: a local Ray on loopback
    master_addr: str = "127.0.0.1"  # where the store and the group listen: this machine only, or an address
    master_port: int = 0  # 0: a free port
    timeout: float = 60.0  # seconds any wait on the group may take (a hung worker fails the run)
    worker_torch_threads: Optional[int] = 1
    shutdown_timeout: float = 10.0


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
    ack_timeout: float = 120.0


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
class PPOConfig:
    """Clipped PPO, tuned for CartPole (close to rl-zoo's: 8 envs x 32 steps, lambda 0.8)."""

    name: str = "ppo"
    lr: float = 0.001
    gamma: float = 0.98
    gae_lambda: float = 0.8
    clip_epsilon: float = 0.2
    epochs: int = 20
    minibatch_size: int = 256
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True
    anneal_lr: bool = True
    anneal_clip: bool = True
    sequence_length: Optional[int] = None  # recurrent models: steps per minibatch sequence (None: whole rollout rows)
    normalize_reward: bool = False  # train on rewards / running std of the discounted return (logged ones unchanged)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending value targets: [life_lost]


@dataclass
class DQNConfig:
    """DQN (double, target network, epsilon-greedy) from a replay buffer."""

    name: str = "dqn"
    lr: float = 1e-3
    gamma: float = 0.99
    batch_size: int = 64  # transitions per gradient step
    gradient_steps_per_batch: int = 128  # per collected batch (background collection: per frames_per_batch frames)
    learning_starts: int = 1000  # frames collected with random actions before training
    target_update: str = "periodic"  # periodic | polyak
    target_update_period: int = 128  # gradient steps: one target refresh per collected batch
    tau: float = 0.005
    double_dqn: bool = True
    loss: str = "huber"
    max_grad_norm: float = 10.0
    eps_start: float = 1.0
    eps_end: float = 0.04
    eps_decay_frames: int = 8000
    n_step: int = 1  # >1: n-step transitions (MultiStep on the buffer's writes), bootstrapped gamma**m ahead
    prioritized: bool = False  # prioritized replay: buffer/sampler=prioritized with its defaults (or choose that)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending the bootstrap: [life_lost]
    background: bool = False  # collector.start(): collect while training


# ---------------------------------------------------------------------------- model
@dataclass
class ActorCriticConfig:
    """ActorCritic(observation_space, action_space, ...): separate actor and critic MLPs (PPO)."""

    _target_: str = "rlcollect.ActorCritic"
    _partial_: bool = True  # the pipeline passes the env's spaces
    hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    log_std_init: float = 0.0
    encoder: str = "auto"  # auto (from the observation space) | mlp | cnn (images) | multi_input (Dict/Tuple)
    normalize_observation: bool = False  # running mean/std of the observations, inside the policy


@dataclass
class RecurrentActorCriticConfig:
    """RecurrentActorCritic(observation_space, action_space, ...): a GRU or LSTM feeding the
    actor and critic heads (PPO; see experiment=cartpole_novel_gru)."""

    _target_: str = "rlcollect.RecurrentActorCritic"
    _partial_: bool = True
    rnn: str = "gru"  # gru | lstm
    hidden_size: int = 64
    num_layers: int = 1
    hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    log_std_init: float = 0.0


@dataclass
class QValuePolicyConfig:
    """QValuePolicy(observation_space, action_space, ...): an MLP of Q-values, epsilon-greedy (DQN)."""

    _target_: str = "rlcollect.QValuePolicy"
    _partial_: bool = True
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    epsilon: float = 1.0  # the first batches'; DQN then follows algo.eps_* (conf/model/q_network.yaml links them)
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
    trajs_per_batch: Optional[int] = None  # collectors write only complete trajectories, at least this many


@dataclass
class LazyTensorStorageConfig:
    """LazyTensorStorage: a ring buffer in memory."""

    _target_: str = "rlcollect.LazyTensorStorage"
    max_size: int = 100_000
    ndim: int = 1  # 1: flat, safe with every collector; 2/3 keep env rows (docs/data-layout.md)
    device: Optional[str] = None  # None: the training device


@dataclass
class LazyMemmapStorageConfig:
    """LazyMemmapStorage: a ring buffer in memory-mapped files (a resumed run re-opens them)."""

    _target_: str = "rlcollect.LazyMemmapStorage"
    max_size: int = 100_000
    ndim: int = 1
    scratch_dir: Optional[str] = None  # None: <run folder>/replay


@dataclass
class RandomSamplerConfig:
    _target_: str = "rlcollect.RandomSampler"


@dataclass
class SliceSamplerConfig:
    """SliceSampler: contiguous slices of trajectories (exactly one of slice_len, num_slices)."""

    _target_: str = "rlcollect.SliceSampler"
    slice_len: Optional[int] = 32
    num_slices: Optional[int] = None
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
    alpha: float = 0.6
    beta: float = 0.4
    eps: float = 1e-6


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
    max_time_share: Optional[float] = 0.25  # runs with no solved_return: skip evaluations above this time share
    episodes: int = 10  # eval envs stepped together, one episode each (the unbiased estimate)
    max_steps: Optional[int] = None  # step budget over all eval envs; an episode cut by it is not counted (eval/cut)
    max_trajectories: Optional[int] = None  # None: one episode per eval env; else episodes back to back until this many
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
    seed: int = 0  # env i of the run is seeded seed + i (rlcollect/seeding.py)
    total_frames: int = 100_000
    device: str = "cpu"  # training device; also the collector's default device
    torch_threads: int = 1  # small MLPs run fastest on one thread; more threads only add overhead
    progress: bool = True
    checkpoint_every_frames: Optional[int] = 20_000  # checkpoint.pt in the run folder; None: none
    resume: Optional[str] = None  # a run folder: `rlcollect train resume=<folder>` continues it


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
    ("model", "actor_critic"): ActorCriticConfig,
    ("model", "recurrent_actor_critic"): RecurrentActorCriticConfig,
    ("model", "q_network"): QValuePolicyConfig,
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


def schema_name(group: str, option: str) -> str:
    return f"{group}_{option}_schema"


def register_configs() -> None:
    """Register every schema at the root of the ConfigStore (not in a group: ``--help``
    lists only the YAML options); YAML options refer to them as ``/<name>@_here_``."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="env_schema", node=EnvConfig)
    for (group, option), node in SCHEMAS.items():
        store.store(name=schema_name(group, option), node=node)
