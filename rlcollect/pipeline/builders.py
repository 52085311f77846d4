"""Config nodes to objects: each component is its node's ``_target_``, built with
``hydra.utils.instantiate`` (targets.build_node); this module adds the runtime arguments
(env source, policy, total_frames, device, hooks, replay buffer, seeds, run folder).

Collectors get the arguments of the rlcollect collector their class derives from (a class
of your own subclasses the collector it replaces):

    Collector (and any other class)   a GymEnv built here (env.num_envs envs seeded seed + i)
    MultiSync/MultiAsyncCollector     the gymnasium id, seed, env_kwargs, weight_sync_schemes
    ActionServer/AlternatingCollector the gymnasium id, seed, env_kwargs (the policy is the trainer's)
    PoolCollector                     the gymnasium id, seed, env_kwargs (the policy is the trainer's)
    RayCollector                      the gymnasium id, seed, env_kwargs, weight_sync_schemes, and
                                      device + init_random_frames in collector_kwargs
    DistributedCollector              as RayCollector, without weight_sync_schemes (its own group)

and, all of them, policy, total_frames, device, the post-collect hook, and with a replay
buffer replay_buffer + trajs_per_batch.
"""
from __future__ import annotations

import functools
import math
import multiprocessing
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rlcollect.algos.dqn import DQN
from rlcollect.algos.learners import DQNLearner, Learner, PPOLearner
from rlcollect.algos.ppo import PPO
from rlcollect.buffers import LazyMemmapStorage, LazyTensorStorage, MultiStep, PrioritizedSampler
from rlcollect.collectors.action_server import ActionServerCollector
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.distributed import DistributedCollector
from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
from rlcollect.collectors.pool import PoolCollector
from rlcollect.collectors.ray import RayCollector
from rlcollect.config import PrioritizedSamplerConfig
from rlcollect.envs.sources import make_env as make_env_source
from rlcollect.envs.spaces import sample_shape, torch_dtype
from rlcollect.envs.staging import StagedEnv
from rlcollect.logging.run_logger import EpisodeStatsHook, RunLogger, WandbLogger
from rlcollect.modules.recurrent import policy_primers
from rlcollect.pipeline.targets import build_node, target_class
from rlcollect.seeding import env_seed

# collectors whose steps run in hosts (actors, workers) built from collector.collector_kwargs,
# with the episode statistics hook running there too
HOSTED_COLLECTORS = (RayCollector, DistributedCollector)


# ---------------------------------------------------------------------------- envs
def env_kwargs(cfg: DictConfig) -> dict:
    """What GymEnv takes besides the id, the number of envs and the seed: the time limit,
    plugin imports, info keys, the wrappers (``_target_`` nodes, built as partials applied
    in list order) and gymnasium.make's own kwargs."""
    kwargs = dict(max_episode_steps=cfg.env.max_episode_steps, **OmegaConf.to_container(cfg.env.make_kwargs))
    if cfg.env.imports:
        kwargs["imports"] = list(cfg.env.imports)
    if cfg.env.info_keys:
        kwargs["info_keys"] = list(cfg.env.info_keys)
    if cfg.env.wrappers:
        kwargs["wrappers"] = [instantiate(wrapper, _partial_=True) for wrapper in cfg.env.wrappers]
    if cfg.env.backend != "list":
        kwargs["backend"] = cfg.env.backend
    return kwargs


def make_env(cfg: DictConfig, *, num_envs: int | None, seed: int) -> StagedEnv:
    return env_factory(cfg, num_envs=num_envs, seed=seed)()


def probe_spaces(cfg: DictConfig) -> tuple:
    """``(observation_space, action_space)`` of the configured env, from one env made and
    closed again (an unknown id or a missing package fails here, before any part is built)."""
    probe = make_env(cfg, num_envs=None, seed=cfg.seed)
    try:
        return probe.observation_space, probe.action_space
    finally:
        probe.close()


def env_factory(cfg: DictConfig, *, num_envs: int | None, seed: int) -> functools.partial:
    """A picklable zero-argument env factory: ``num_envs`` envs, env i seeded ``seed + i``
    (a GymEnv, or the task's torch env with ``env.backend=torch``; a single env,
    ``num_envs=None``, is always a GymEnv of backend "list")."""
    kwargs = env_kwargs(cfg)
    if num_envs is None:
        kwargs.pop("backend", None)
    return functools.partial(make_env_source, cfg.env.id, num_envs, seed=seed, **kwargs)


# ---------------------------------------------------------------------------- policy, logger, weights
def make_policy(cfg: DictConfig, observation_space, action_space) -> torch.nn.Module:
    """``model``'s class on the env's spaces, on the training device."""
    return build_node(cfg.model, "model", observation_space, action_space).to(cfg.device)


def make_logger(cfg: DictConfig, run_dir: Path, *, name: str | None, group: str | None,
                job_type: str | None, run_id: str | None = None, start_frames: int = 0) -> RunLogger:
    """``logger``'s class on the run folder; a WandbLogger also gets the run's name, group,
    job type, config and (resumed) run id."""
    runtime = dict(start_frames=start_frames, gamma=cfg.algo.gamma, info_keys=list(cfg.env.info_keys))
    if issubclass(target_class(cfg.logger, "logger"), WandbLogger):
        runtime.update(name=name, group=group, job_type=job_type, config=OmegaConf.to_container(cfg, resolve=True),
                       run_id=run_id)
    return build_node(cfg.logger, "logger", run_dir, **runtime)


def make_weight_sync_scheme(cfg: DictConfig):
    return build_node(cfg.weight_sync, "weight_sync")


# ---------------------------------------------------------------------------- collector
@dataclass(frozen=True)
class AlgoCollection:
    """The collector settings the algorithm decides (the one place they are read from cfg.algo)."""

    init_random_frames: int  # the collector's first frames are random: at least algo.learning_starts
    background: bool  # algo.background: collector.start(), the loop trains as frames arrive


def algo_collection(cfg: DictConfig) -> AlgoCollection:
    step = cfg.collector.collector_kwargs if _is_hosted(cfg) else cfg.collector
    return AlgoCollection(
        init_random_frames=max(step.get("init_random_frames") or 0, cfg.algo.get("learning_starts", 0)),
        background=bool(cfg.algo.get("background", False)),
    )


def make_collector(cfg: DictConfig, policy, logger: RunLogger, replay_buffer=None) -> CollectorBase:
    """The configured collector. With a replay buffer it writes into it directly. Its
    post-collect hook is the logger itself when the class runs hooks in this process on
    every batch (``hooks_run_in_process``) in the foreground, else a queue the training loop
    drains (worker processes, or a background thread); for Ray, a hook whose results come
    back with the actors' batches (``hook_results()``)."""
    node = cfg.collector
    cls = target_class(node, "collector")
    algo = algo_collection(cfg)
    runtime = dict(total_frames=cfg.total_frames)
    if replay_buffer is not None:
        runtime.update(replay_buffer=replay_buffer, trajs_per_batch=cfg.buffer.get("trajs_per_batch"))
    if issubclass(cls, HOSTED_COLLECTORS):
        host_options = {key: value for key, value in OmegaConf.to_container(node.collector_kwargs).items()
                        if value is not None}  # null: the hosted collector's default
        host_options.update(device=cfg.device, init_random_frames=algo.init_random_frames)
        if issubclass(cls, RayCollector):
            runtime["weight_sync_schemes"] = {"policy": make_weight_sync_scheme(cfg)}
        else:  # submitit's job logs go in the run folder
            runtime["submitit_folder"] = Path(logger.run_dir) / node.submitit_folder
        return build_node(node, "collector", cfg.env.id, policy, seed=cfg.seed, env_kwargs=env_kwargs(cfg),
                          collector_kwargs=host_options,
                          post_collect_hook=EpisodeStatsHook(cfg.algo.gamma, list(cfg.env.info_keys)), **runtime)
    if getattr(cls, "hooks_run_in_process", False) and not algo.background:
        hook = logger
    else:
        hook = logger.worker_hook(multiprocessing.get_context(node.get("start_method") or "spawn"))
    runtime.update(device=cfg.device, post_collect_hook=hook, init_random_frames=algo.init_random_frames)
    if issubclass(cls, (MultiSyncCollector, MultiAsyncCollector)):
        return build_node(node, "collector", cfg.env.id, policy, seed=cfg.seed, env_kwargs=env_kwargs(cfg),
                          weight_sync_schemes={"policy": make_weight_sync_scheme(cfg)}, **runtime)
    if issubclass(cls, (ActionServerCollector, PoolCollector)):
        return build_node(node, "collector", cfg.env.id, policy, seed=cfg.seed, env_kwargs=env_kwargs(cfg), **runtime)
    env = make_env(cfg, num_envs=cfg.env.num_envs, seed=env_seed(cfg.seed, 0))
    try:
        return build_node(node, "collector", env, policy, **runtime)
    except BaseException:
        env.close()
        raise


def _is_hosted(cfg: DictConfig) -> bool:
    return issubclass(target_class(cfg.collector, "collector"), HOSTED_COLLECTORS)


# ---------------------------------------------------------------------------- buffers, learner
def make_replay_buffer(cfg: DictConfig, run_dir: Path, *, reopen: bool = False):
    """``buffer``'s class on its storage and sampler (a PrioritizedSampler with
    ``algo.prioritized``), sampling ``algo.batch_size``, writing
    ``algo.n_step``-step transitions (MultiStep as its write transform) when n_step > 1; a
    memory-mapped storage lives in ``buffer.storage.scratch_dir`` (default: the run
    folder's replay/), which a resumed run (``reopen``) opens again."""
    node = cfg.buffer
    storage = make_storage(node.storage, device=cfg.device, run_dir=Path(run_dir), reopen=reopen)
    sampler_node = node.sampler
    if cfg.algo.get("prioritized") and not issubclass(target_class(sampler_node, "buffer.sampler"), PrioritizedSampler):
        sampler_node = OmegaConf.structured(PrioritizedSamplerConfig)  # algo.prioritized: the option's defaults
    sampler_runtime = {}
    if issubclass(target_class(sampler_node, "buffer.sampler"), PrioritizedSampler):
        sampler_runtime["max_capacity"] = node.storage.max_size  # one priority per element of the storage
    sampler = build_node(sampler_node, "buffer.sampler", **sampler_runtime)
    runtime = {}
    n_step = cfg.algo.get("n_step", 1)  # n-step transitions are made as batches are written
    if n_step > 1:
        runtime["write_transform"] = MultiStep(cfg.algo.gamma, n_step, end_keys=list(cfg.algo.terminal_keys))
    return build_node(node, "buffer", drop=("storage", "sampler", "trajs_per_batch"), storage=storage,
                      sampler=sampler, batch_size=cfg.algo.batch_size, **runtime)


def make_storage(node: DictConfig, *, device: str, run_dir: Path, reopen: bool = False):
    cls = target_class(node, "buffer.storage")
    if issubclass(cls, LazyMemmapStorage):
        scratch_dir = Path(node.get("scratch_dir") or run_dir / "replay")
        if reopen and scratch_dir.exists():  # a resumed run continues with its files
            return cls.load(scratch_dir)
        return build_node(node, "buffer.storage", scratch_dir=str(scratch_dir))
    if issubclass(cls, LazyTensorStorage):
        return build_node(node, "buffer.storage", device=node.get("device") or device)
    return build_node(node, "buffer.storage")


def make_rollout_buffer(cfg: DictConfig, policy, collector: CollectorBase, observation_space, action_space):
    """``buffer``'s class sized for one batch of ``collector``: [envs, T + 1]."""
    *env_dims, time_steps = collector.batch_size
    return build_node(
        cfg.buffer, "buffer", math.prod(env_dims), time_steps, sample_shape(observation_space),
        sample_shape(action_space), observation_dtype=torch_dtype(observation_space),
        action_dtype=torch_dtype(action_space), device=cfg.buffer.get("device") or cfg.device,
        state_shapes={key: shape for primer in policy_primers(policy) for key, shape in primer.shapes.items()},
        extra_keys=[("next", key) for key in cfg.algo.get("terminal_keys", [])],
    )


def make_learner(cfg: DictConfig, policy, collector: CollectorBase, observation_space, action_space,
                 replay_buffer=None) -> Learner:
    a = cfg.algo
    if a.name == "ppo":
        buffer = make_rollout_buffer(cfg, policy, collector, observation_space, action_space)
        ppo = PPO(policy, lr=a.lr, gamma=a.gamma, gae_lambda=a.gae_lambda, clip_epsilon=a.clip_epsilon,
                  epochs=a.epochs, minibatch_size=a.minibatch_size, value_coef=a.value_coef,
                  entropy_coef=a.entropy_coef, max_grad_norm=a.max_grad_norm,
                  normalize_advantage=a.normalize_advantage, anneal_lr=a.anneal_lr, anneal_clip=a.anneal_clip,
                  total_frames=cfg.total_frames, sequence_length=a.sequence_length,
                  normalize_reward=a.normalize_reward, terminal_keys=list(a.terminal_keys))
        return PPOLearner(ppo, buffer)
    dqn = DQN(policy, lr=a.lr, gamma=a.gamma, target_update=a.target_update,
              target_update_period=a.target_update_period, tau=a.tau, double_dqn=a.double_dqn, loss=a.loss,
              max_grad_norm=a.max_grad_norm, terminal_keys=list(a.terminal_keys))
    return DQNLearner(dqn, replay_buffer, gradient_steps=a.gradient_steps_per_batch,
                      learning_starts=a.learning_starts, eps_start=a.eps_start, eps_end=a.eps_end,
                      eps_decay_frames=a.eps_decay_frames)
