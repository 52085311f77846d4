"""The schemas of `rlcollect train`'s config tree, one dataclass per YAML option's node,
each registered where it is declared (``@schema(group, option)``, rlcollect/config/registry.py;
a YAML option under conf/<group>/ names it in its defaults list as ``/<group>_<option>_schema``).
A schema declares its node's keys, their types, ranges (``ranged``) and choices (``chosen``);
its defaults are its class's constructor defaults (tests/test_config.py pins them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

from rlcollect import choices
from rlcollect.config.fields import chosen, ranged, renamed
from rlcollect.config.registry import schema
from rlcollect.config.resolvers import OBJECTIVES


# ---------------------------------------------------------------------------- env
@schema("env")
@dataclass
class EnvConfig:
    """The training env: ``GymEnv(id, num_envs, seed=..., max_episode_steps=..., **make_kwargs)``
    (the collectors with worker processes build ``envs_per_worker`` of them per worker)."""

    id: str = MISSING  # a registered gymnasium id
    num_envs: Optional[int] = ranged(8, ">= 1")  # collector=sync: None is a single env, batch_size []
    backend: str = chosen("list", choices.ENV_SOURCE_BACKENDS)  # how the envs are stepped (docs/envs.md)
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
    # frames of each batch the collector yields (what the learner gets per step), rounded up to
    # whole steps of its envs; how many of them each worker collects is the collector's
    # (multisync, ray/distributed sync=true: a share; multiasync, sync=false: all of them)
    frames_per_batch: int = ranged(256, ">= 1")


@dataclass
class StepLoopConfig:
    """The per-step loop and the devices (StepOptions, DeviceOptions), taken by every collector."""

    max_frames_per_traj: Optional[int] = ranged(None, ">= 1")
    init_random_frames: int = ranged(0, ">= 0")  # the pipeline raises it to algo.learning_starts (DQN)
    reset_at_each_iter: bool = False
    reset_when_done: bool = True
    split_trajs: bool = False
    exploration_type: str = chosen("random", choices.EXPLORATION_TYPES)
    track_traj_ids: bool = True
    set_truncated: bool = False
    reset_policy: str = chosen("immediate", choices.RESET_POLICIES)  # wait: finished envs wait for the next batch
    policy_device: Optional[str] = None  # null: the top-level device
    env_device: Optional[str] = None
    storing_device: Optional[str] = None
    no_cuda_sync: bool = False


@schema("collector", "sync")
@dataclass
class SyncCollectorConfig(StepLoopConfig, CollectorTarget):
    """Collector: the per-step loop in the training process, on env.num_envs envs
    (frames_per_batch is rounded up to a multiple of them)."""

    _target_: str = "rlcollect.collectors.single.Collector"
    cudagraph_policy: bool = False  # replay the policy's forward as a CUDA graph (device=cuda)


@dataclass
class WorkerProcessesConfig(StepLoopConfig, CollectorTarget):
    """Collectors with worker processes: num_workers x envs_per_worker envs, env i seeded
    seed + i (env.num_envs is not used)."""

    num_workers: int = ranged(2, ">= 1")
    envs_per_worker: int = ranged(1, ">= 1")  # the YAML options: 4
    start_method: str = chosen("spawn", choices.START_METHODS)
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

    envs_per_worker: Optional[int] = ranged(None, ">= 1")  # None: one unbatched env per worker (the YAML options: 4)
    update_at_each_batch: bool = False


@schema("collector", "multisync")
@dataclass
class MultiSyncCollectorConfig(MultiCollectorConfig):
    """MultiSyncCollector: every batch gathers one from each worker (frames_per_batch split
    across them), collected with the latest weights."""

    _target_: str = "rlcollect.collectors.multi.MultiSyncCollector"
    # per yielded batch, which stacks one batch per worker: each worker collects
    # frames_per_batch / num_workers frames (the defaults: 256 / 2 = 128, 32 steps of 4 envs)
    frames_per_batch: int = ranged(256, ">= 1")
    cat_results: Any = chosen("stack", choices.CAT_RESULTS)  # PPO takes stack or 0


@schema("collector", "multiasync")
@dataclass
class MultiAsyncCollectorConfig(MultiCollectorConfig):
    """MultiAsyncCollector: each batch is one worker's, first come first served, possibly
    collected with older weights (see policy_version)."""

    _target_: str = "rlcollect.collectors.multi.MultiAsyncCollector"
    # per yielded batch too, but a batch here is one worker's: each worker collects all
    # frames_per_batch frames (not a share). 128: what a multisync worker collects by default
    # (256 / 2 workers), so both collectors' workers collect 32 steps of their 4 envs per batch;
    # a multiasync run's learner then gets batches of 128 frames, twice as often
    frames_per_batch: int = ranged(128, ">= 1")


@schema("collector", "action_server")
@dataclass
class ActionServerCollectorConfig(WorkerProcessesConfig):
    """ActionServerCollector: envs step in the workers, the policy runs once per step for all
    of them in the training process (no weights to send: weight_sync is not used); ``device``
    sets policy_device and storing_device. env_device must stay null (the envs live in the
    workers, on the CPU)."""

    _target_: str = "rlcollect.collectors.action_server.ActionServerCollector"
    max_decorrelation_steps: int = ranged(0, ">= 0")  # after a reset, each env takes 0..this many random steps


@schema("collector", "alternating")
@dataclass
class AlternatingCollectorConfig(ActionServerCollectorConfig):
    """AlternatingCollector: an action server whose workers form two groups; the policy
    computes one group's actions while the other group steps (num_workers must be even)."""

    _target_: str = "rlcollect.collectors.action_server.AlternatingCollector"
    overlap: bool = True  # false: a group steps only once the other group's step is over


@schema("collector", "pool")
@dataclass
class PoolCollectorConfig(WorkerProcessesConfig):
    """PoolCollector: an asynchronous env pool; the policy (in the training process) serves
    the first batch_size envs ready, whole workers, while the other workers keep stepping
    (no weights to send: weight_sync is not used). layout=per_env gives [P, T] batches,
    every env the same steps (what PPO needs); layout=flat, [F] steps grouped by env, the
    fast envs contributing more (DQN only). env_device must stay null."""

    _target_: str = "rlcollect.collectors.pool.PoolCollector"
    batch_size: Optional[int] = ranged(None, ">= 1")  # envs served per pool step, a multiple of envs_per_worker
    layout: str = chosen("flat", choices.POOL_LAYOUTS)  # conf/collector/pool.yaml: per_env (PPO, the default algo)
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
    start_method: Optional[str] = chosen(None, choices.START_METHODS)
    worker_torch_threads: Optional[int] = ranged(None, ">= 1")
    worker_cpu_affinity: Optional[List[List[int]]] = None
    batch_timeout: Optional[float] = ranged(None, "> 0")
    shutdown_timeout: Optional[float] = ranged(None, "> 0")


@schema("collector", "ray")
@dataclass
class RayCollectorConfig(CollectorTarget):
    """RayCollector: num_workers Ray actors, each running collector_class on its own envs
    (envs_per_worker per actor, per worker process for multi*), env i seeded seed + i."""

    _target_: str = "rlcollect.collectors.ray.collector.RayCollector"
    num_workers: int = ranged(2, ">= 1")  # Ray actors (collector=distributed's num_workers: its processes)
    # true: one batch from every actor, stacked (each collects frames_per_batch / num_workers);
    # false: first come first served (each batch one actor's: it collects frames_per_batch)
    sync: bool = True
    collector_class: str = chosen("sync", choices.HOSTED_COLLECTOR_CLASSES)
    envs_per_worker: Optional[int] = ranged(None, ">= 1")  # None: one unbatched env (the YAML options: 4)
    collector_kwargs: HostCollectorConfig = field(default_factory=HostCollectorConfig)
    remote_config: RayRemoteConfig = field(default_factory=RayRemoteConfig)
    ray_address: Optional[str] = None  # None: a local Ray on loopback; "auto" or host:port: join a cluster
    batch_timeout: Optional[float] = ranged(None, "> 0")  # seconds; None waits as long as the actors are alive
    shutdown_timeout: float = ranged(5.0, "> 0")
    max_worker_restarts: int = ranged(0, ">= 0")  # actors replaced when one dies or hangs (0: the run fails)
    restart_on_env_error: bool = False  # also replace an actor whose env or policy raised
    # deprecated, for one release: num_workers's former name; a value set moves there, with a warning
    num_collectors: Optional[int] = renamed("num_workers", ">= 1")


@schema("collector", "distributed")
@dataclass
class DistributedCollectorConfig(CollectorTarget):
    """DistributedCollector: num_workers processes (or SLURM jobs) joined with the trainer in
    a torch.distributed gloo group, each running collector_class on its own envs
    (envs_per_worker, per inner worker process for multi*), env i seeded seed + i. The
    weights travel over the group (weight_sync=none: no other scheme)."""

    _target_: str = "rlcollect.collectors.distributed.collector.DistributedCollector"
    num_workers: int = ranged(2, ">= 1")
    # true: one batch from every worker, stacked (each collects frames_per_batch / num_workers);
    # false: first come first served (each batch one worker's: it collects frames_per_batch)
    sync: bool = True
    collector_class: str = chosen("sync", choices.HOSTED_COLLECTOR_CLASSES)
    envs_per_worker: Optional[int] = ranged(None, ">= 1")  # None: one unbatched env (the YAML options: 4)
    collector_kwargs: HostCollectorConfig = field(default_factory=HostCollectorConfig)
    backend: str = chosen("gloo", choices.DISTRIBUTED_BACKENDS)
    # how the workers start: mp: local processes | submitit: SLURM jobs (cluster=local: local jobs) | ray: Ray tasks
    start_workers_with: str = chosen("mp", choices.DISTRIBUTED_WORKER_STARTERS)
    start_method: str = chosen("spawn", choices.START_METHODS)  # start_workers_with=mp
    cluster: Optional[str] = None  # start_workers_with=submitit: null picks SLURM where sbatch exists, or "local"
    slurm_kwargs: Any = field(default_factory=dict)  # start_workers_with=submitit: executor.update_parameters(...)
    submitit_folder: str = "submitit"  # start_workers_with=submitit: job logs, relative to the run folder
    ray_address: Optional[str] = None  # start_workers_with=ray: a cluster's address; null: a local Ray on loopback
    master_addr: str = "127.0.0.1"  # where the store and the group listen: this machine only, or an address
    master_port: int = ranged(0, "[0, 65535]")  # 0: a free port
    timeout: float = ranged(60.0, "> 0")  # seconds any wait on the group may take (a hung worker fails the run)
    worker_torch_threads: Optional[int] = ranged(1, ">= 1")
    shutdown_timeout: float = ranged(10.0, "> 0")
    # deprecated, for one release: start_workers_with's former name (Hydra's launchers are
    # hydra/launcher=...); a value set moves there, with a warning
    launcher: Optional[str] = renamed("start_workers_with", values=choices.DISTRIBUTED_WORKER_STARTERS)


# ---------------------------------------------------------------------------- weight sync
@schema("weight_sync", "shared_mem")
@dataclass
class SharedMemWeightSyncConfig:
    """Weights in shared memory: an update is one copy plus a version bump."""

    _target_: str = "rlcollect.weight_sync.shared_mem.SharedMemWeightSyncScheme"


@schema("weight_sync", "multiprocess")
@dataclass
class MultiProcessWeightSyncConfig:
    """Weights sent through a pipe to each worker and acknowledged."""

    _target_: str = "rlcollect.weight_sync.pipes.MultiProcessWeightSyncScheme"
    strategy: str = chosen("tensordict", choices.WEIGHT_SYNC_STRATEGIES)
    ack_timeout: float = ranged(120.0, "> 0")


@schema("weight_sync", "ray")
@dataclass
class RayWeightSyncConfig:
    """Weights put once in the Ray object store per update; every actor pulls them."""

    _target_: str = "rlcollect.weight_sync.ray.RayWeightSyncScheme"
    strategy: str = chosen("tensordict", choices.WEIGHT_SYNC_STRATEGIES)


@schema("weight_sync", "none")
@dataclass
class NoWeightSyncConfig:
    """Workers keep the weights they started with."""

    _target_: str = "rlcollect.weight_sync.schemes.NoWeightSyncScheme"


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


@schema("algo", "ppo")
@dataclass
class PPOConfig(LearnerTarget):
    """Clipped PPO (rlcollect.PPO's defaults; conf/algo/ppo.yaml tunes it for CartPole)."""

    _target_: str = "rlcollect.algos.ppo.PPOLearner"
    name: str = "ppo"
    lr: float = ranged(3e-4, "> 0")
    gamma: float = ranged(0.99, "(0, 1]")
    gae_lambda: float = ranged(0.95, "[0, 1]")
    clip_epsilon: float = ranged(0.2, "> 0")
    epochs: int = ranged(10, ">= 1")
    minibatch_size: int = ranged(64, ">= 1")  # at most the frames of a batch (collector.frames_per_batch)
    value_coef: float = ranged(0.5, ">= 0")
    entropy_coef: float = ranged(0.0, ">= 0")
    max_grad_norm: float = ranged(0.5, "> 0")
    normalize_advantage: bool = True
    anneal_lr: bool = True
    anneal_clip: bool = False
    # recurrent models: steps per minibatch sequence (None: whole rollout rows)
    sequence_length: Optional[int] = ranged(None, ">= 1")
    normalize_reward: bool = False  # train on rewards / running std of the discounted return (logged ones unchanged)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending value targets: [life_lost]


@schema("algo", "dqn")
@dataclass
class DQNConfig(LearnerTarget):
    """DQN (double, target network, epsilon-greedy) from a replay buffer (DQNLearner's
    defaults; conf/algo/dqn.yaml sets rl-zoo's CartPole schedule)."""

    _target_: str = "rlcollect.algos.dqn.DQNLearner"
    name: str = "dqn"
    lr: float = ranged(1e-3, "> 0")
    gamma: float = ranged(0.99, "(0, 1]")
    batch_size: int = ranged(64, ">= 1")  # transitions per gradient step
    # per collected batch (background collection: per frames_per_batch frames)
    gradient_steps_per_batch: int = ranged(1, ">= 1")
    learning_starts: int = ranged(0, ">= 0")  # frames collected with random actions before training
    target_update: str = chosen("periodic", choices.DQN_TARGET_UPDATES)
    target_update_period: int = ranged(10, ">= 1")  # gradient steps between target refreshes (periodic)
    tau: float = ranged(0.005, "(0, 1]")
    double_dqn: bool = True
    loss: str = chosen("huber", choices.DQN_LOSSES)
    max_grad_norm: float = ranged(10.0, "> 0")
    eps_start: float = ranged(1.0, "[0, 1]")
    eps_end: float = ranged(0.05, "[0, 1]")
    eps_decay_frames: int = ranged(0, ">= 0")  # frames over which epsilon falls from eps_start to eps_end
    # >1: n-step transitions (MultiStep on the buffer's writes), bootstrapped gamma**m ahead
    n_step: int = ranged(1, ">= 1")
    prioritized: bool = False  # prioritized replay: buffer/sampler=prioritized with its defaults (or choose that)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending the bootstrap: [life_lost]
    background: bool = False  # collector.start(): collect while training


@schema("algo", "sac")
@dataclass
class SACConfig(LearnerTarget):
    """Soft actor-critic (twin Q, automatic entropy tuning) from a replay buffer, the
    settings of cleanrl's sac_continuous_action (conf/algo/sac.yaml: one update per
    collected frame)."""

    _target_: str = "rlcollect.algos.sac.SACLearner"
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
    gradient_steps_per_batch: int = ranged(1, ">= 1")  # conf/algo/sac.yaml: one per collected frame
    learning_starts: int = ranged(5000, ">= 0")  # frames of random actions before the first update
    critic_hidden_sizes: List[int] = ranged([256, 256], ">= 1")
    n_step: int = ranged(1, ">= 1")  # >1: n-step transitions, bootstrapped gamma**m ahead
    prioritized: bool = False  # prioritized replay (buffer/sampler=prioritized's defaults)
    terminal_keys: List[str] = field(default_factory=list)  # ("next", key) flags ending the bootstrap
    background: bool = False  # collector.start(): collect while training


# ---------------------------------------------------------------------------- model
@schema("model", "actor_critic")
@dataclass
class ActorCriticConfig:
    """ActorCritic(observation_space, action_space, ...): separate actor and critic MLPs (PPO)."""

    _target_: str = "rlcollect.modules.actor_critic.ActorCritic"
    _partial_: bool = True  # the pipeline passes the env's spaces
    hidden_sizes: List[int] = ranged([64, 64], ">= 1")
    activation: str = chosen("tanh", choices.ACTIVATIONS)
    log_std_init: float = ranged(0.0, "any")
    encoder: str = chosen("auto", choices.ENCODERS)  # auto: cnn for images, multi_input for Dict/Tuple, else mlp
    normalize_observation: bool = False  # running mean/std of the observations, inside the policy


@schema("model", "recurrent_actor_critic")
@dataclass
class RecurrentActorCriticConfig:
    """RecurrentActorCritic(observation_space, action_space, ...): a GRU or LSTM feeding the
    actor and critic heads (PPO; see experiment=cartpole_novel_gru)."""

    _target_: str = "rlcollect.modules.actor_critic.RecurrentActorCritic"
    _partial_: bool = True
    rnn: str = chosen("gru", choices.RNN_TYPES)
    encoder: str = chosen("auto", choices.ENCODERS)  # auto: cnn for images, multi_input for Dict/Tuple, else mlp
    hidden_size: int = ranged(64, ">= 1")
    num_layers: int = ranged(1, ">= 1")
    hidden_sizes: List[int] = ranged([64], ">= 1")  # the heads' MLP (conf/model/recurrent_actor_critic.yaml: [64, 64])
    activation: str = chosen("tanh", choices.ACTIVATIONS)
    log_std_init: float = ranged(0.0, "any")


@schema("model", "q_network")
@dataclass
class QValuePolicyConfig:
    """QValuePolicy(observation_space, action_space, ...): an MLP of Q-values, epsilon-greedy (DQN)."""

    _target_: str = "rlcollect.modules.q_network.QValuePolicy"
    _partial_: bool = True
    hidden_sizes: List[int] = ranged([256, 256], ">= 1")
    activation: str = chosen("relu", choices.ACTIVATIONS)
    # the first batches'; DQN then follows algo.eps_* (conf/model/q_network.yaml links them)
    epsilon: float = ranged(1.0, "[0, 1]")
    encoder: str = chosen("auto", choices.ENCODERS)  # auto: cnn for images, multi_input for Dict/Tuple, else mlp
    normalize_observation: bool = False  # running mean/std of the observations, inside the policy


@schema("model", "sac_actor")
@dataclass
class SACActorConfig:
    """SACActor(observation_space, action_space, ...): a tanh-squashed Gaussian over Box
    actions (SAC; algo=sac selects it)."""

    _target_: str = "rlcollect.modules.sac.SACActor"
    _partial_: bool = True
    hidden_sizes: List[int] = ranged([256, 256], ">= 1")
    activation: str = chosen("relu", choices.ACTIVATIONS)
    encoder: str = chosen("auto", choices.ENCODERS)  # auto: cnn for images, multi_input for Dict/Tuple, else mlp
    normalize_observation: bool = False  # running mean/std of the observations, inside the policy


# ---------------------------------------------------------------------------- buffer
@schema("buffer", "rollout")
@dataclass
class RolloutBufferConfig:
    """RolloutBuffer(num_envs, rollout_len, shapes, ...): one collector batch per PPO update."""

    _target_: str = "rlcollect.buffers.rollout.RolloutBuffer"
    _partial_: bool = True  # the pipeline passes the batch and env shapes
    device: Optional[str] = None  # None: the training device


@schema("buffer", "replay")
@dataclass
class ReplayBufferConfig:
    """ReplayBuffer(storage, sampler, batch_size=algo.batch_size). ``trajs_per_batch`` is not a
    ReplayBuffer argument: the collector's, when it writes into the buffer."""

    _target_: str = "rlcollect.buffers.replay.ReplayBuffer"
    storage: Any = MISSING  # buffer/storage: memory | memmap
    sampler: Any = MISSING  # buffer/sampler: random | slice
    trajs_per_batch: Optional[int] = ranged(None, ">= 1")  # collectors write only complete trajectories, this many


@schema("buffer_storage", "memory")
@dataclass
class LazyTensorStorageConfig:
    """LazyTensorStorage: a ring buffer in memory."""

    _target_: str = "rlcollect.buffers.storage.LazyTensorStorage"
    max_size: int = ranged(100_000, ">= 1")
    ndim: int = ranged(1, ">= 1")  # 1: flat, safe with every collector; 2/3 keep env rows (docs/data-layout.md)
    device: Optional[str] = None  # None: the training device
    dedup_observations: bool = False  # each observation stored once (docs/data-layout.md, "Observations stored once")
    frame_stack: int = ranged(1, ">= 1")  # with dedup_observations: FrameStackObservation stacks stored frame by frame
    spare_frames: Optional[int] = ranged(None, ">= 1")  # None: max_size / (4 * frame_stack); fixed once shared


@schema("buffer_storage", "memmap")
@dataclass
class LazyMemmapStorageConfig:
    """LazyMemmapStorage: a ring buffer in memory-mapped files (a resumed run re-opens them)."""

    _target_: str = "rlcollect.buffers.storage.LazyMemmapStorage"
    max_size: int = ranged(100_000, ">= 1")
    ndim: int = ranged(1, ">= 1")
    scratch_dir: Optional[str] = None  # None: <run folder>/replay
    dedup_observations: bool = False  # as LazyTensorStorageConfig's; a resumed run keeps its files' choice
    frame_stack: int = ranged(1, ">= 1")
    spare_frames: Optional[int] = ranged(None, ">= 1")


@schema("buffer_sampler", "random")
@dataclass
class RandomSamplerConfig:
    _target_: str = "rlcollect.buffers.samplers.RandomSampler"


@schema("buffer_sampler", "slice")
@dataclass
class SliceSamplerConfig:
    """SliceSampler: contiguous slices of trajectories (exactly one of slice_len, num_slices)."""

    _target_: str = "rlcollect.buffers.samplers.SliceSampler"
    slice_len: Optional[int] = ranged(None, ">= 1")  # the YAML options: 32
    num_slices: Optional[int] = ranged(None, ">= 1")
    strict_length: bool = False
    pad_output: bool = False


@schema("buffer_sampler", "slice_without_replacement")
@dataclass
class SliceSamplerWithoutReplacementConfig(SliceSamplerConfig):
    """SliceSamplerWithoutReplacement: every stored slice once per epoch, in random order."""

    _target_: str = "rlcollect.buffers.samplers.SliceSamplerWithoutReplacement"
    shuffle: bool = True


@schema("buffer_sampler", "prioritized")
@dataclass
class PrioritizedSamplerConfig:
    """PrioritizedSampler: proportional prioritized replay; DQN and SAC give the sampled transitions
    their TD errors as priorities (max_capacity: the storage's max_size, set by the pipeline)."""

    _target_: str = "rlcollect.buffers.samplers.PrioritizedSampler"
    alpha: float = ranged(0.6, ">= 0")
    beta: float = ranged(0.4, "[0, 1]")
    eps: float = ranged(1e-8, "> 0")  # conf/buffer/sampler/prioritized.yaml: 1e-6


# ---------------------------------------------------------------------------- logger
@schema("logger", "wandb")
@dataclass
class WandbLoggerConfig:
    """WandbLogger: metrics.jsonl and a W&B run (offline: no account, no network)."""

    _target_: str = "rlcollect.logging.run_logger.WandbLogger"
    _partial_: bool = True  # the pipeline passes the run folder, name, group, job_type, config
    project: str = "rlcollect"
    entity: Optional[str] = None
    mode: str = chosen("offline", choices.WANDB_MODES)  # "online" needs a W&B login


@schema("logger", "none")
@dataclass
class RunLoggerConfig:
    """RunLogger: metrics.jsonl in the run folder only."""

    _target_: str = "rlcollect.logging.run_logger.RunLogger"
    _partial_: bool = True  # the pipeline passes the run folder


# ---------------------------------------------------------------------------- top level
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


@schema("train")
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
    objective: str = chosen("final_eval_return", tuple(OBJECTIVES))


__all__ = sorted(name for name, value in globals().items()  # every schema: rlcollect.config re-exports them
                 if isinstance(value, type) and value.__module__ == __name__)
