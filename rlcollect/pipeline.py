"""From a composed config to wired objects (``build``), and the training loop (``run``).

This is the only module, with cli.py, that reads a config: every object it builds takes
explicit arguments.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDictBase
from tqdm import tqdm

from rlcollect.algos.dqn import DQN
from rlcollect.algos.learners import DQNLearner, Learner, PPOLearner
from rlcollect.algos.ppo import PPO
from rlcollect.buffers.rollout import RolloutBuffer
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.evaluation import evaluate_episodes
from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
from rlcollect.collectors.single import Collector
from rlcollect.envs.gym_env import GymEnv
from rlcollect.envs.spaces import sample_shape, torch_dtype
from rlcollect.logging.run_logger import RunLogger, WandbLogger
from rlcollect.modules.actor_critic import ActorCritic
from rlcollect.modules.q_network import QValuePolicy
from rlcollect.weight_sync import MultiProcessWeightSyncScheme, NoWeightSyncScheme, SharedMemWeightSyncScheme

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"


@dataclass
class Pipeline:
    cfg: DictConfig
    run_dir: Path
    policy: torch.nn.Module
    collector: CollectorBase
    learner: Learner
    eval_env: GymEnv
    logger: RunLogger
    background: bool = False  # collector.start(): the loop trains as frames arrive

    def close(self) -> None:
        self.collector.shutdown()
        self.eval_env.close()
        self.logger.close()


def make_env(cfg: DictConfig, *, num_envs: int | None, seed: int) -> GymEnv:
    return env_factory(cfg, num_envs=num_envs, seed=seed)()


def env_factory(cfg: DictConfig, *, num_envs: int | None, seed: int) -> functools.partial:
    """A picklable zero-argument GymEnv factory (worker processes build their own env)."""
    return functools.partial(GymEnv, cfg.env.id, num_envs, seed=seed, max_episode_steps=cfg.env.max_episode_steps,
                             **OmegaConf.to_container(cfg.env.make_kwargs))


def make_logger(cfg: DictConfig, run_dir: Path, *, name: str | None, group: str | None,
                job_type: str | None) -> RunLogger:
    if cfg.logger.type == "none":
        return RunLogger(run_dir)
    return WandbLogger(run_dir, project=cfg.logger.project, entity=cfg.logger.entity, mode=cfg.logger.mode,
                       name=name, group=group, job_type=job_type,
                       config=OmegaConf.to_container(cfg, resolve=True))


def make_weight_sync_scheme(cfg: DictConfig):
    kind = cfg.weight_sync.type
    if kind == "shared_mem":
        return SharedMemWeightSyncScheme()
    if kind == "multiprocess":
        return MultiProcessWeightSyncScheme(strategy=cfg.weight_sync.strategy)
    if kind == "none":
        return NoWeightSyncScheme()
    raise ValueError(f"weight_sync.type must be shared_mem, multiprocess or none, got {kind!r}")


def make_collector(cfg: DictConfig, policy, logger: RunLogger, replay_buffer=None) -> CollectorBase:
    """The configured collector. With a replay buffer it writes into it directly; its
    post-collect hook is the logger itself in the foreground single-process case, else a
    queue the training loop drains (worker processes, or a background thread)."""
    c = cfg.collector
    background = cfg.algo.get("background", False)
    hook = logger if c.type == "sync" and not background else logger.worker_hook(_mp_context(c.get("start_method", "spawn")))
    writes = {}
    if replay_buffer is not None:
        writes = dict(replay_buffer=replay_buffer, trajs_per_batch=cfg.buffer.trajs_per_batch)
    common = dict(
        total_frames=cfg.total_frames, device=cfg.device, policy_device=c.policy_device, env_device=c.env_device,
        storing_device=c.storing_device, max_frames_per_traj=c.max_frames_per_traj,
        init_random_frames=max(c.init_random_frames, cfg.algo.get("learning_starts", 0)),
        reset_at_each_iter=c.reset_at_each_iter,
        reset_when_done=c.reset_when_done, split_trajs=c.split_trajs, exploration_type=c.exploration_type,
        track_traj_ids=c.track_traj_ids, set_truncated=c.set_truncated, no_cuda_sync=c.no_cuda_sync,
        post_collect_hook=hook, **writes,
    )
    if c.type == "sync":
        env = make_env(cfg, num_envs=cfg.env.num_envs, seed=cfg.seed)
        return Collector(env, policy, frames_per_batch=c.frames_per_batch, **common)
    if c.type not in ("multisync", "multiasync"):
        raise ValueError(f"collector.type must be sync, multisync or multiasync, got {c.type!r}")
    envs = [env_factory(cfg, num_envs=c.envs_per_worker, seed=cfg.seed + 1000 * worker)
            for worker in range(c.num_workers)]
    multi = dict(
        weight_sync_schemes={"policy": make_weight_sync_scheme(cfg)}, update_at_each_batch=c.update_at_each_batch,
        start_method=c.start_method, worker_torch_threads=c.worker_torch_threads, batch_timeout=c.batch_timeout,
        shutdown_timeout=c.shutdown_timeout,
    )
    if c.type == "multisync":
        return MultiSyncCollector(envs, policy, frames_per_batch=c.frames_per_batch, cat_results=c.cat_results,
                                  **multi, **common)
    if cfg.algo.name == "ppo":
        log.warning("collector=multiasync feeds PPO on-policy updates with data collected by possibly older "
                    "weights (policy lag, see ('collector', 'policy_version')); prefer multisync for PPO")
    return MultiAsyncCollector(envs, policy, frames_per_batch=c.frames_per_batch, **multi, **common)


def _mp_context(start_method: str):
    import multiprocessing

    return multiprocessing.get_context(start_method)


def build(cfg: DictConfig, run_dir: str | Path, *, name: str | None = None, group: str | None = None,
          job_type: str | None = None) -> Pipeline:
    """Seed, then build the policy, logger, collector, learner (algorithm + buffer) and eval env."""
    run_dir = Path(run_dir)
    torch.set_num_threads(cfg.torch_threads)
    torch.manual_seed(cfg.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    check_combination(cfg)
    probe = make_env(cfg, num_envs=None, seed=cfg.seed)
    observation_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    policy = make_policy(cfg, observation_space, action_space)
    logger = make_logger(cfg, run_dir, name=name, group=group, job_type=job_type)
    try:
        replay_buffer = make_replay_buffer(cfg, run_dir) if cfg.algo.name == "dqn" else None
        collector = make_collector(cfg, policy, logger, replay_buffer)
        learner = make_learner(cfg, policy, collector, observation_space, action_space, replay_buffer)
    except BaseException:
        if "collector" in locals():
            collector.shutdown()
        logger.close()
        raise
    eval_env = make_env(cfg, num_envs=cfg.eval.episodes, seed=cfg.seed + 10_000)
    return Pipeline(cfg, run_dir, policy, collector, learner, eval_env, logger,
                    background=bool(cfg.algo.get("background", False)))


def check_combination(cfg: DictConfig) -> None:
    """Reject config combinations that cannot train, naming the keys to change."""
    algo, buffer = cfg.algo.name, cfg.buffer.type
    if (algo, buffer) not in (("ppo", "rollout"), ("dqn", "replay")):
        raise ValueError(f"algo={algo} trains from buffer={'rollout' if algo == 'ppo' else 'replay'}, "
                         f"not buffer={buffer}")
    if cfg.collector.split_trajs:
        raise ValueError("collector.split_trajs=true gives padded batches; the learners need the collector "
                         "layout: keep split_trajs=false")
    if algo == "ppo" and cfg.collector.type == "multisync" and cfg.collector.cat_results == -1:
        raise ValueError("collector.cat_results=-1 concatenates workers along time; PPO's rollout buffer "
                         "needs one row per env: use cat_results=stack or 0")


def make_policy(cfg: DictConfig, observation_space, action_space) -> torch.nn.Module:
    a = cfg.algo
    if a.name == "ppo":
        policy = ActorCritic(observation_space, action_space, hidden_sizes=list(a.hidden_sizes),
                             activation=a.activation, log_std_init=a.log_std_init)
    else:
        policy = QValuePolicy(observation_space, action_space, hidden_sizes=list(a.hidden_sizes),
                              activation=a.activation, epsilon=a.eps_start)
    return policy.to(cfg.device)


def make_learner(cfg: DictConfig, policy, collector: CollectorBase, observation_space, action_space,
                 replay_buffer=None) -> Learner:
    a = cfg.algo
    if a.name == "ppo":
        *env_dims, time_steps = collector.batch_size
        buffer = RolloutBuffer(
            math.prod(env_dims), time_steps, sample_shape(observation_space), sample_shape(action_space),
            observation_dtype=torch_dtype(observation_space), action_dtype=torch_dtype(action_space),
            device=cfg.buffer.device or cfg.device,
        )
        ppo = PPO(policy, lr=a.lr, gamma=a.gamma, gae_lambda=a.gae_lambda, clip_epsilon=a.clip_epsilon,
                  epochs=a.epochs, minibatch_size=a.minibatch_size, value_coef=a.value_coef,
                  entropy_coef=a.entropy_coef, max_grad_norm=a.max_grad_norm,
                  normalize_advantage=a.normalize_advantage, anneal_lr=a.anneal_lr, anneal_clip=a.anneal_clip,
                  total_frames=cfg.total_frames)
        return PPOLearner(ppo, buffer)
    dqn = DQN(policy, lr=a.lr, gamma=a.gamma, target_update=a.target_update,
              target_update_period=a.target_update_period, tau=a.tau, double_dqn=a.double_dqn, loss=a.loss,
              max_grad_norm=a.max_grad_norm)
    return DQNLearner(dqn, replay_buffer, gradient_steps=a.gradient_steps_per_batch,
                      learning_starts=a.learning_starts, eps_start=a.eps_start, eps_end=a.eps_end,
                      eps_decay_frames=a.eps_decay_frames, storage_ndim=cfg.buffer.ndim)


def make_replay_buffer(cfg: DictConfig, run_dir: Path):
    from rlcollect.buffers import LazyMemmapStorage, LazyTensorStorage, RandomSampler, ReplayBuffer, SliceSampler

    b = cfg.buffer
    if b.storage == "memory":
        storage = LazyTensorStorage(b.max_size, ndim=b.ndim, device=cfg.device)
    elif b.storage == "memmap":
        storage = LazyMemmapStorage(b.max_size, ndim=b.ndim, scratch_dir=b.scratch_dir or str(run_dir / "replay"))
    else:
        raise ValueError(f"buffer.storage must be memory or memmap, got {b.storage!r}")
    if b.sampler == "random":
        sampler = RandomSampler()
    elif b.sampler == "slice":
        sampler = SliceSampler(slice_len=b.slice_len)
    else:
        raise ValueError(f"buffer.sampler must be random or slice, got {b.sampler!r}")
    return ReplayBuffer(storage, sampler, batch_size=cfg.algo.batch_size)


def _collected(p: Pipeline) -> Iterator[tuple[TensorDictBase | None, int]]:
    """``(batch, frames)`` each time a batch's worth of new frames is there to learn from.
    In the foreground, the collector's iteration (batch is None when it wrote into the
    replay buffer itself); in the background, new frames in the replay buffer."""
    if not p.background:
        for batch in p.collector:
            yield batch, p.collector.frames
        return
    replay_buffer = p.learner.replay_buffer
    p.collector.start()
    next_frames = p.collector.frames_per_batch
    while True:
        p.collector.check_background()
        if replay_buffer.write_count >= next_frames:  # one learn() per batch's worth, even when behind
            yield None, next_frames
            next_frames += p.collector.frames_per_batch
        elif not p.collector.running:
            p.collector.check_background()
            return
        else:
            time.sleep(0.001)


def run(pipeline: Pipeline) -> dict:
    """Collect, update, evaluate every ``eval.every_frames``; stop at ``env.solved_return``
    (deterministic evaluation mean) or at ``total_frames``. Returns the run summary,
    also written to summary.json."""
    p, cfg = pipeline, pipeline.cfg
    solved_return = cfg.env.solved_return
    summary = {"frames": 0, "seconds": 0.0, "solved_return": solved_return, "frames_to_solve": None,
               "seconds_to_solve": None, "final_eval_return": None, "best_eval_return": None}
    start = time.perf_counter()
    next_eval = cfg.eval.every_frames
    bar = tqdm(total=cfg.total_frames, unit="frame", disable=not cfg.progress, dynamic_ncols=True)
    try:
        for batch, frames in _collected(p):
            if p.background or not isinstance(p.collector, Collector):
                p.logger.drain_worker_hooks(frames)
            p.logger.log({f"train/{k}": v for k, v in p.learner.learn(batch, frames).items()}, step=frames)
            p.collector.update_policy_weights_()
            bar.update(frames - bar.n)
            postfix = {"fps": f"{frames / (time.perf_counter() - start):.0f}"}
            if p.logger.recent_episode_return is not None:
                postfix["return"] = f"{p.logger.recent_episode_return:.1f}"
            if frames >= next_eval or frames >= cfg.total_frames:
                next_eval += cfg.eval.every_frames
                result = evaluate_episodes(p.eval_env, p.policy, max_steps=cfg.eval.max_steps)
                eval_return = result.mean_return if result.returns else float("nan")
                elapsed = time.perf_counter() - start
                p.logger.log({"eval/episode_return": eval_return, "eval/episodes": len(result.returns)}, step=frames)
                summary["final_eval_return"] = eval_return
                best = summary["best_eval_return"]
                summary["best_eval_return"] = eval_return if best is None else max(best, eval_return)
                postfix["eval"] = f"{eval_return:.1f}"
                if solved_return is not None and eval_return >= solved_return:
                    summary["frames_to_solve"], summary["seconds_to_solve"] = frames, elapsed
                    bar.set_postfix(postfix)
                    break
            bar.set_postfix(postfix)
    finally:
        bar.close()
        summary["frames"] = p.collector.frames
        summary["seconds"] = time.perf_counter() - start
        summary["frames_per_second"] = summary["frames"] / max(summary["seconds"], 1e-9)
        (p.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        p.close()
    return summary
