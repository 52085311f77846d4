"""Structured-config schemas for `rlcollect train`, registered in Hydra's ConfigStore.

Every YAML option under conf/<group>/ names its schema in its defaults list, so a
misspelled key or a value of the wrong type is rejected by Hydra before anything runs.
Keys mirror the constructor arguments they feed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class EnvConfig:
    id: str = MISSING  # a registered gymnasium id
    num_envs: Optional[int] = 8  # None: a single env, batch_size []
    max_episode_steps: Optional[int] = None
    solved_return: Optional[float] = None  # training stops once evaluation reaches it
    make_kwargs: Any = field(default_factory=dict)


@dataclass
class SyncCollectorConfig:
    type: str = "sync"
    frames_per_batch: int = 256
    max_frames_per_traj: Optional[int] = None
    init_random_frames: int = 0
    reset_at_each_iter: bool = False
    reset_when_done: bool = True
    split_trajs: bool = False
    exploration_type: str = "random"
    track_traj_ids: bool = True
    set_truncated: bool = False
    policy_device: Optional[str] = None
    env_device: Optional[str] = None
    storing_device: Optional[str] = None
    no_cuda_sync: bool = False


@dataclass
class MultiCollectorConfig(SyncCollectorConfig):
    type: str = "multisync"  # or "multiasync"
    num_workers: int = 2
    envs_per_worker: int = 4  # each worker steps a batched GymEnv of this many envs
    cat_results: Any = "stack"  # multisync only: "stack", 0 or -1
    update_at_each_batch: bool = False
    start_method: str = "spawn"
    worker_torch_threads: int = 1
    batch_timeout: Optional[float] = None
    shutdown_timeout: float = 5.0


@dataclass
class ActionServerCollectorConfig(SyncCollectorConfig):
    """ActionServerCollector: envs step in worker processes, the policy runs in the training
    process. env_device must stay null (the envs live in the workers, on the CPU)."""

    type: str = "action_server"
    num_workers: int = 2
    envs_per_worker: int = 4
    max_decorrelation_steps: int = 0
    start_method: str = "spawn"
    worker_torch_threads: int = 1
    worker_cpu_affinity: Optional[List[List[int]]] = None  # one list of CPU ids per worker
    batch_timeout: Optional[float] = None
    shutdown_timeout: float = 5.0


@dataclass
class AlternatingCollectorConfig(ActionServerCollectorConfig):
    type: str = "alternating"
    overlap: bool = True


@dataclass
class RayRemoteConfig:
    num_cpus: Optional[float] = 1
    num_gpus: Optional[float] = None
    memory: Optional[int] = None  # bytes


@dataclass
class RayCollectorConfig(MultiCollectorConfig):
    """RayCollector; num_workers, envs_per_worker, start_method and worker_torch_threads
    describe what runs inside each actor (collector_class)."""

    type: str = "ray"
    num_collectors: int = 2
    sync: bool = True
    collector_class: str = "sync"  # sync | multisync | multiasync
    remote_config: RayRemoteConfig = field(default_factory=RayRemoteConfig)
    ray_address: Optional[str] = None  # None: a local Ray on loopback; "auto" or host:port: join a cluster


@dataclass
class WeightSyncConfig:
    type: str = "shared_mem"  # shared_mem | multiprocess | ray | none
    strategy: str = "tensordict"  # multiprocess only: "tensordict" or "state_dict"


@dataclass
class PPOConfig:
    name: str = "ppo"
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.2
    epochs: int = 10
    minibatch_size: int = 64
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    max_grad_norm: float = 0.5
    normalize_advantage: bool = True
    anneal_lr: bool = True
    anneal_clip: bool = False
    hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    log_std_init: float = 0.0
    recurrent: Optional[str] = None  # None: MLP actor-critic; gru | lstm: RecurrentActorCritic
    rnn_hidden_size: int = 64
    rnn_layers: int = 1
    sequence_length: Optional[int] = None  # recurrent minibatches: steps per sequence (None: whole rollout rows)


@dataclass
class DQNConfig:
    name: str = "dqn"
    lr: float = 1e-3
    gamma: float = 0.99
    batch_size: int = 64  # transitions per gradient step
    gradient_steps_per_batch: int = 128  # per collected batch (background collection: per frames_per_batch frames)
    learning_starts: int = 1000  # frames collected with random actions before training
    target_update: str = "periodic"  # periodic | polyak
    target_update_period: int = 128  # gradient steps
    tau: float = 0.005
    double_dqn: bool = True
    loss: str = "huber"
    max_grad_norm: float = 10.0
    eps_start: float = 1.0
    eps_end: float = 0.04
    eps_decay_frames: int = 8000
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    background: bool = False  # collector.start(): collect while training


@dataclass
class ReplayBufferConfig:
    type: str = "replay"
    max_size: int = 100_000
    ndim: int = 1  # 1: flat (safe for every collector); 2/3: rows per env (see data-layout.txt)
    sampler: str = "random"  # random | slice
    slice_len: int = 32
    storage: str = "memory"  # memory | memmap
    scratch_dir: Optional[str] = None  # memmap files (default: the run folder)
    trajs_per_batch: Optional[int] = None  # collectors write only complete trajectories


@dataclass
class RolloutBufferConfig:
    type: str = "rollout"
    device: Optional[str] = None  # defaults to the training device


@dataclass
class EvalConfig:
    every_frames: int = 2048
    episodes: int = 10  # eval envs stepped together (EvalCollector's eval_n_envs)
    max_steps: Optional[int] = None  # step budget over all eval envs; episodes still running are not counted
    max_trajectories: Optional[int] = None  # None: one episode per eval env; else episodes back to back until this many


@dataclass
class WandbLoggerConfig:
    type: str = "wandb"
    project: str = "rlcollect"
    entity: Optional[str] = None
    mode: str = "offline"  # "online" needs a W&B login


@dataclass
class NoLoggerConfig:
    type: str = "none"


@dataclass
class TrainConfig:
    env: Any = MISSING
    collector: Any = MISSING
    algo: Any = MISSING
    buffer: Any = MISSING
    logger: Any = MISSING
    weight_sync: Any = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0
    total_frames: int = 100_000
    device: str = "cpu"  # training device; also the collector's default device
    torch_threads: int = 1
    progress: bool = True
    checkpoint_every_frames: Optional[int] = 20_000  # null: no checkpoint
    resume: Optional[str] = None  # a run folder: continue it from its checkpoint


def register_configs() -> None:
    """Register every schema; YAML options refer to them by ``<name>_schema``."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(group="env", name="env_schema", node=EnvConfig)
    store.store(group="collector", name="sync_schema", node=SyncCollectorConfig)
    store.store(group="collector", name="multi_schema", node=MultiCollectorConfig)
    store.store(group="collector", name="ray_schema", node=RayCollectorConfig)
    store.store(group="collector", name="action_server_schema", node=ActionServerCollectorConfig)
    store.store(group="collector", name="alternating_schema", node=AlternatingCollectorConfig)
    store.store(group="weight_sync", name="weight_sync_schema", node=WeightSyncConfig)
    store.store(group="algo", name="ppo_schema", node=PPOConfig)
    store.store(group="algo", name="dqn_schema", node=DQNConfig)
    store.store(group="buffer", name="replay_schema", node=ReplayBufferConfig)
    store.store(group="buffer", name="rollout_schema", node=RolloutBufferConfig)
    store.store(group="logger", name="wandb_schema", node=WandbLoggerConfig)
    store.store(group="logger", name="none_schema", node=NoLoggerConfig)
