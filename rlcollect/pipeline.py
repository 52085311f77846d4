"""From a composed config to wired objects (``build``), and the training loop (``run``).

This is the only module, with cli.py, that reads a config: every object it builds takes
explicit arguments.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import multiprocessing
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
from rlcollect.checkpoint import CHECKPOINT_FILE, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rlcollect.buffers.rollout import RolloutBuffer
from rlcollect.collectors.action_server import STEP_LOOP_ARGUMENTS, ActionServerCollector, AlternatingCollector
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
from rlcollect.collectors.ray import RayCollector
from rlcollect.collectors.single import Collector
from rlcollect.envs.gym_env import GymEnv
from rlcollect.envs.spaces import sample_shape, torch_dtype
from rlcollect.logging.run_logger import EpisodeStatsHook, RunLogger, WandbLogger, truncate_metrics
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.q_network import QValuePolicy
from rlcollect.modules.recurrent import policy_primers
from rlcollect.weight_sync import (MultiProcessWeightSyncScheme, NoWeightSyncScheme, RayWeightSyncScheme,
                                   SharedMemWeightSyncScheme)

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
# Collectors that call their post-collect hook in this process, on the whole batch: the
# logger itself is their hook (in the foreground); the others report through a queue.
IN_PROCESS_HOOK_TYPES = ("sync", "action_server", "alternating")


@dataclass
class Progress:
    """The training loop's own state: what a checkpoint restores besides the objects."""

    summary: dict
    next_eval: int
    next_checkpoint: int | None
    seconds_before: float = 0.0  # wall-clock spent by earlier sessions of a resumed run

    def state_dict(self) -> dict:
        return {"summary": json.dumps(self.summary), "next_eval": self.next_eval,
                "next_checkpoint": -1 if self.next_checkpoint is None else self.next_checkpoint,
                "seconds_before": self.seconds_before}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Progress":
        next_checkpoint = int(state["next_checkpoint"])
        return cls(json.loads(state["summary"]), int(state["next_eval"]),
                   None if next_checkpoint < 0 else next_checkpoint, float(state["seconds_before"]))


@dataclass
class Pipeline:
    cfg: DictConfig
    run_dir: Path
    policy: torch.nn.Module
    collector: CollectorBase
    learner: Learner
    evaluator: EvalCollector
    logger: RunLogger
    progress: Progress
    background: bool = False  # collector.start(): the loop trains as frames arrive

    def state_dict(self, seconds: float) -> dict:
        """Everything needed to continue this run (all weights_only-loadable)."""
        progress = Progress(self.progress.summary, self.progress.next_eval, self.progress.next_checkpoint,
                            seconds)
        return {"frames": self.collector.frames, "policy": self.policy.state_dict(),
                "learner": self.learner.state_dict(), "collector": self.collector.state_dict(),
                "rng": rng_state(), "progress": progress.state_dict(), "wandb_run_id": self.logger.run_id or ""}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.learner.load_state_dict(state["learner"])
        self.collector.load_state_dict(state["collector"])
        self.collector.update_policy_weights_()
        self.progress = Progress.from_state_dict(state["progress"])
        set_rng_state(state["rng"])

    def save_checkpoint(self, seconds: float) -> None:
        save_checkpoint(self.run_dir / CHECKPOINT_FILE, self.state_dict(seconds))

    def close(self) -> None:
        self.collector.shutdown()
        self.evaluator.shutdown()
        self.logger.close()


def make_env(cfg: DictConfig, *, num_envs: int | None, seed: int) -> GymEnv:
    return env_factory(cfg, num_envs=num_envs, seed=seed)()


def env_factory(cfg: DictConfig, *, num_envs: int | None, seed: int) -> functools.partial:
    """A picklable zero-argument GymEnv factory (worker processes build their own env)."""
    return functools.partial(GymEnv, cfg.env.id, num_envs, seed=seed, max_episode_steps=cfg.env.max_episode_steps,
                             **OmegaConf.to_container(cfg.env.make_kwargs))


def make_logger(cfg: DictConfig, run_dir: Path, *, name: str | None, group: str | None,
                job_type: str | None, run_id: str | None = None, start_frames: int = 0) -> RunLogger:
    gamma = cfg.algo.gamma
    if cfg.logger.type == "none":
        return RunLogger(run_dir, start_frames=start_frames, gamma=gamma)
    return WandbLogger(run_dir, project=cfg.logger.project, entity=cfg.logger.entity, mode=cfg.logger.mode,
                       name=name, group=group, job_type=job_type, config=OmegaConf.to_container(cfg, resolve=True),
                       run_id=run_id, start_frames=start_frames, gamma=gamma)


def make_weight_sync_scheme(cfg: DictConfig):
    kind = cfg.weight_sync.type
    if kind == "shared_mem":
        return SharedMemWeightSyncScheme()
    if kind == "multiprocess":
        return MultiProcessWeightSyncScheme(strategy=cfg.weight_sync.strategy)
    if kind == "ray":
        return RayWeightSyncScheme()
    if kind == "none":
        return NoWeightSyncScheme()
    raise ValueError(f"weight_sync.type must be shared_mem, multiprocess, ray or none, got {kind!r}")


def make_collector(cfg: DictConfig, policy, logger: RunLogger, replay_buffer=None) -> CollectorBase:
    """The configured collector. With a replay buffer it writes into it directly; its
    post-collect hook is the logger itself in the foreground single-process case, else a
    queue the training loop drains (worker processes, or a background thread), or for Ray
    a hook whose results come back with the actors' batches."""
    c = cfg.collector
    background = cfg.algo.get("background", False)
    per_step = dict(
        device=cfg.device, policy_device=c.policy_device, env_device=c.env_device,
        storing_device=c.storing_device, max_frames_per_traj=c.max_frames_per_traj,
        init_random_frames=max(c.init_random_frames, cfg.algo.get("learning_starts", 0)),
        reset_at_each_iter=c.reset_at_each_iter,
        reset_when_done=c.reset_when_done, split_trajs=c.split_trajs, exploration_type=c.exploration_type,
        track_traj_ids=c.track_traj_ids, set_truncated=c.set_truncated, no_cuda_sync=c.no_cuda_sync,
    )
    if c.type == "ray":
        return make_ray_collector(cfg, policy, per_step, replay_buffer)
    in_process = c.type in IN_PROCESS_HOOK_TYPES and not background
    hook = logger if in_process else logger.worker_hook(_mp_context(c.get("start_method", "spawn")))
    writes = {}
    if replay_buffer is not None:
        writes = dict(replay_buffer=replay_buffer, trajs_per_batch=cfg.buffer.trajs_per_batch)
    if c.type in ("action_server", "alternating"):
        return make_action_server_collector(cfg, policy, per_step, post_collect_hook=hook, **writes)
    common = dict(total_frames=cfg.total_frames, post_collect_hook=hook, **per_step, **writes)
    if c.type == "sync":
        env = make_env(cfg, num_envs=cfg.env.num_envs, seed=cfg.seed)
        return Collector(env, policy, frames_per_batch=c.frames_per_batch, **common)
    if c.type not in ("multisync", "multiasync"):
        raise ValueError(f"collector.type must be sync, multisync, multiasync, action_server, alternating or ray, "
                         f"got {c.type!r}")
    envs = _worker_env_factories(cfg, first_seed=cfg.seed)
    multi = dict(
        weight_sync_schemes={"policy": make_weight_sync_scheme(cfg)}, update_at_each_batch=c.update_at_each_batch,
        start_method=c.start_method, worker_torch_threads=c.worker_torch_threads, batch_timeout=c.batch_timeout,
        shutdown_timeout=c.shutdown_timeout,
    )
    if c.type == "multisync":
        return MultiSyncCollector(envs, policy, frames_per_batch=c.frames_per_batch, cat_results=c.cat_results,
                                  **multi, **common)
    _warn_policy_lag(cfg, "collector=multiasync", "prefer multisync")
    return MultiAsyncCollector(envs, policy, frames_per_batch=c.frames_per_batch, **multi, **common)


def make_action_server_collector(cfg: DictConfig, policy, per_step: dict, **delivery) -> ActionServerCollector:
    """ActionServerCollector (or AlternatingCollector) on ``collector.num_workers`` x
    ``collector.envs_per_worker`` envs seeded ``seed + i``. The policy is the trainer's own:
    no weight-sync scheme. ``delivery`` (post_collect_hook, replay_buffer, trajs_per_batch)
    applies here, to the whole ``[P, T]`` batch."""
    c = cfg.collector
    step_loop = {name: per_step[name] for name in STEP_LOOP_ARGUMENTS}
    affinity = None if c.worker_cpu_affinity is None else OmegaConf.to_container(c.worker_cpu_affinity)
    collector_class = ActionServerCollector
    if c.type == "alternating":
        collector_class = functools.partial(AlternatingCollector, overlap=c.overlap)
    return collector_class(
        cfg.env.id, policy, num_workers=c.num_workers, envs_per_worker=c.envs_per_worker,
        frames_per_batch=c.frames_per_batch, total_frames=cfg.total_frames,
        policy_device=c.policy_device or cfg.device, storing_device=c.storing_device or cfg.device,
        max_decorrelation_steps=c.max_decorrelation_steps, seed=cfg.seed,
        env_kwargs=dict(max_episode_steps=cfg.env.max_episode_steps, **OmegaConf.to_container(cfg.env.make_kwargs)),
        start_method=c.start_method, worker_torch_threads=c.worker_torch_threads, worker_cpu_affinity=affinity,
        batch_timeout=c.batch_timeout, shutdown_timeout=c.shutdown_timeout, split_trajs=c.split_trajs,
        **step_loop, **delivery,
    )


def make_ray_collector(cfg: DictConfig, policy, per_step: dict, replay_buffer=None) -> RayCollector:
    """RayCollector of ``collector.num_collectors`` actors, each running
    ``collector.collector_class`` on its own envs (seeds offset by 1000 per env group).
    Episode statistics are computed in the actors and come back with their batches."""
    c = cfg.collector
    inner = dict(per_step)
    if c.collector_class == "sync":
        envs = [env_factory(cfg, num_envs=c.envs_per_worker, seed=cfg.seed + 1000 * actor)
                for actor in range(c.num_collectors)]
    else:
        envs = [_worker_env_factories(cfg, first_seed=cfg.seed + 1000 * c.num_workers * actor)
                for actor in range(c.num_collectors)]
        inner.update(start_method=c.start_method, worker_torch_threads=c.worker_torch_threads,
                     batch_timeout=c.batch_timeout, shutdown_timeout=c.shutdown_timeout)
    if not c.sync:
        _warn_policy_lag(cfg, "collector=ray with collector.sync=false", "prefer collector.sync=true")
    return RayCollector(
        envs, policy, num_collectors=c.num_collectors, frames_per_batch=c.frames_per_batch,
        total_frames=cfg.total_frames, sync=c.sync, collector_class=c.collector_class, collector_kwargs=inner,
        remote_config=OmegaConf.to_container(c.remote_config), ray_address=c.ray_address,
        weight_sync_schemes={"policy": make_weight_sync_scheme(cfg)}, replay_buffer=replay_buffer,
        trajs_per_batch=cfg.buffer.trajs_per_batch if replay_buffer is not None else None,
        post_collect_hook=EpisodeStatsHook(cfg.algo.gamma), batch_timeout=c.batch_timeout, shutdown_timeout=c.shutdown_timeout,
    )


def _worker_env_factories(cfg: DictConfig, *, first_seed: int) -> list:
    c = cfg.collector
    return [env_factory(cfg, num_envs=c.envs_per_worker, seed=first_seed + 1000 * worker)
            for worker in range(c.num_workers)]


def _warn_policy_lag(cfg: DictConfig, what: str, advice: str) -> None:
    if cfg.algo.name == "ppo":
        log.warning("%s feeds PPO on-policy updates with data collected by possibly older weights (policy lag, "
                    "see ('collector', 'policy_version')); %s for PPO", what, advice)


def _mp_context(start_method: str):
    return multiprocessing.get_context(start_method)


def build(cfg: DictConfig, run_dir: str | Path, *, name: str | None = None, group: str | None = None,
          job_type: str | None = None, checkpoint: dict | None = None) -> Pipeline:
    """Seed, then build the policy, logger, collector, learner (algorithm + buffer) and eval
    env; with ``checkpoint`` (see ``resume``), continue that run where it stopped."""
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
    resumed_frames = int(checkpoint["frames"]) if checkpoint else 0
    logger = make_logger(cfg, run_dir, name=name, group=group, job_type=job_type,
                         run_id=checkpoint["wandb_run_id"] or None if checkpoint else None, start_frames=resumed_frames)
    try:
        replay_buffer = make_replay_buffer(cfg, run_dir, reopen=checkpoint is not None) if cfg.algo.name == "dqn" else None
        collector = make_collector(cfg, policy, logger, replay_buffer)
        if isinstance(collector, RayCollector) and replay_buffer is not None:
            replay_buffer = collector.replay_buffer  # the buffer now lives in a Ray actor
        learner = make_learner(cfg, policy, collector, observation_space, action_space, replay_buffer)
    except BaseException:
        if "collector" in locals():
            collector.shutdown()
        logger.close()
        raise
    evaluator = EvalCollector(make_env(cfg, num_envs=cfg.eval.episodes, seed=cfg.seed + 10_000), policy,
                              eval_max_steps=cfg.eval.max_steps, eval_max_trajectories=cfg.eval.max_trajectories,
                              gamma=cfg.algo.gamma)
    progress = Progress(
        summary={"frames": 0, "seconds": 0.0, "solved_return": cfg.env.solved_return, "frames_to_solve": None,
                 "seconds_to_solve": None, "final_eval_return": None, "best_eval_return": None},
        next_eval=cfg.eval.every_frames, next_checkpoint=cfg.checkpoint_every_frames)
    pipeline = Pipeline(cfg, run_dir, policy, collector, learner, evaluator, logger, progress,
                        background=bool(cfg.algo.get("background", False)))
    if checkpoint is not None:
        pipeline.load_state_dict(checkpoint)
    return pipeline


def resume(run_dir: str | Path, **build_kwargs) -> Pipeline:
    """Continue the run in ``run_dir`` from its last checkpoint: same config, same W&B run id,
    metrics.jsonl cut back to the checkpoint's frame count so no row is written twice."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise ValueError(f"resume={run_dir}: not a run folder (no {CONFIG_FILE})")
    if not (run_dir / CHECKPOINT_FILE).is_file():
        raise ValueError(f"resume={run_dir}: no {CHECKPOINT_FILE} (checkpoint_every_frames was too large, or the "
                         "run stopped before its first checkpoint)")
    cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE)
    truncate_metrics(run_dir, last_step=int(checkpoint["frames"]))
    log.info("resuming %s at frame %d", run_dir, checkpoint["frames"])
    return build(cfg, run_dir, checkpoint=checkpoint, **build_kwargs)


def check_combination(cfg: DictConfig) -> None:
    """Reject config combinations that cannot train, naming the keys to change."""
    algo, buffer = cfg.algo.name, cfg.buffer.type
    if (algo, buffer) not in (("ppo", "rollout"), ("dqn", "replay")):
        raise ValueError(f"algo={algo} trains from buffer={'rollout' if algo == 'ppo' else 'replay'}, "
                         f"not buffer={buffer}")
    if cfg.collector.split_trajs:
        raise ValueError("collector.split_trajs=true gives padded batches; the learners need the collector "
                         "layout: keep split_trajs=false")
    ray_collector, ray_weights = cfg.collector.type == "ray", cfg.weight_sync.type == "ray"
    if ray_collector and cfg.weight_sync.type not in ("ray", "none"):
        raise ValueError(f"collector=ray shares no memory with its actors: use weight_sync=ray (or none), not "
                         f"weight_sync={cfg.weight_sync.type}")
    if ray_weights and not ray_collector:
        raise ValueError(f"weight_sync=ray needs collector=ray (got collector={cfg.collector.type})")
    if cfg.collector.type in ("action_server", "alternating") and cfg.collector.env_device is not None:
        raise ValueError(f"collector.env_device={cfg.collector.env_device}: collector={cfg.collector.type} steps its "
                         "envs in worker processes, on the CPU; leave collector.env_device=null and set "
                         "collector.policy_device / collector.storing_device instead")
    if algo == "ppo" and cfg.collector.type == "multisync" and cfg.collector.cat_results == -1:
        raise ValueError("collector.cat_results=-1 concatenates workers along time; PPO's rollout buffer "
                         "needs one row per env: use cat_results=stack or 0")


def make_policy(cfg: DictConfig, observation_space, action_space) -> torch.nn.Module:
    a = cfg.algo
    if a.name == "ppo" and a.recurrent is not None:
        policy = RecurrentActorCritic(observation_space, action_space, rnn=a.recurrent, hidden_size=a.rnn_hidden_size,
                                      num_layers=a.rnn_layers, hidden_sizes=list(a.hidden_sizes),
                                      activation=a.activation, log_std_init=a.log_std_init)
    elif a.name == "ppo":
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
            state_shapes={key: shape for primer in policy_primers(policy) for key, shape in primer.shapes.items()},
        )
        ppo = PPO(policy, lr=a.lr, gamma=a.gamma, gae_lambda=a.gae_lambda, clip_epsilon=a.clip_epsilon,
                  epochs=a.epochs, minibatch_size=a.minibatch_size, value_coef=a.value_coef,
                  entropy_coef=a.entropy_coef, max_grad_norm=a.max_grad_norm,
                  normalize_advantage=a.normalize_advantage, anneal_lr=a.anneal_lr, anneal_clip=a.anneal_clip,
                  total_frames=cfg.total_frames, sequence_length=a.sequence_length)
        return PPOLearner(ppo, buffer)
    dqn = DQN(policy, lr=a.lr, gamma=a.gamma, target_update=a.target_update,
              target_update_period=a.target_update_period, tau=a.tau, double_dqn=a.double_dqn, loss=a.loss,
              max_grad_norm=a.max_grad_norm)
    return DQNLearner(dqn, replay_buffer, gradient_steps=a.gradient_steps_per_batch,
                      learning_starts=a.learning_starts, eps_start=a.eps_start, eps_end=a.eps_end,
                      eps_decay_frames=a.eps_decay_frames, storage_ndim=cfg.buffer.ndim)


def make_replay_buffer(cfg: DictConfig, run_dir: Path, *, reopen: bool = False):
    from rlcollect.buffers import LazyMemmapStorage, LazyTensorStorage, RandomSampler, ReplayBuffer, SliceSampler

    b = cfg.buffer
    if b.storage == "memory":
        storage = LazyTensorStorage(b.max_size, ndim=b.ndim, device=cfg.device)
    elif b.storage == "memmap":
        scratch_dir = Path(b.scratch_dir or run_dir / "replay")
        if reopen and scratch_dir.exists():  # a resumed run continues with its files
            storage = LazyMemmapStorage.load(scratch_dir)
        else:
            storage = LazyMemmapStorage(b.max_size, ndim=b.ndim, scratch_dir=str(scratch_dir))
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
    """Collect, update, evaluate every ``eval.every_frames``, checkpoint every
    ``checkpoint_every_frames``; stop at ``env.solved_return`` (deterministic evaluation
    mean) or at ``total_frames``. Returns the run summary, also written to summary.json."""
    p, cfg = pipeline, pipeline.cfg
    progress, summary = p.progress, p.progress.summary
    start = time.perf_counter()
    p.logger.start_clock(progress.seconds_before)  # metrics' "time" and the summary share one clock

    def seconds() -> float:
        return progress.seconds_before + time.perf_counter() - start

    bar = tqdm(total=cfg.total_frames, initial=p.collector.frames, unit="frame", disable=not cfg.progress,
               dynamic_ncols=True)
    try:
        for batch, frames in _collected(p):
            if getattr(p.collector, "post_collect_hook", None) is not p.logger:  # the hooks ran elsewhere
                p.logger.drain_worker_hooks(frames, p.collector.hook_results())
            p.logger.log({f"train/{k}": v for k, v in p.learner.learn(batch, frames).items()}, step=frames)
            p.collector.update_policy_weights_()
            bar.update(frames - bar.n)
            postfix = {"fps": f"{frames / seconds():.0f}"}
            if p.logger.recent_episode_return is not None:
                postfix["return"] = f"{p.logger.recent_episode_return:.1f}"
            solved = False
            if frames >= progress.next_eval or frames >= cfg.total_frames:
                progress.next_eval += cfg.eval.every_frames
                eval_return = _evaluate(p, frames)
                postfix["eval"] = f"{eval_return:.1f}"
                solved = cfg.env.solved_return is not None and eval_return >= cfg.env.solved_return
                if solved:
                    summary["frames_to_solve"], summary["seconds_to_solve"] = frames, seconds()
            bar.set_postfix(postfix)
            if progress.next_checkpoint is not None and (frames >= progress.next_checkpoint or solved):
                progress.next_checkpoint = frames + cfg.checkpoint_every_frames
                p.logger.flush()
                p.save_checkpoint(seconds())
            if solved:
                break
    finally:
        bar.close()
        summary["frames"] = p.collector.frames
        summary["seconds"] = seconds()
        summary["frames_per_second"] = summary["frames"] / max(summary["seconds"], 1e-9)
        (p.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        p.close()
    return summary


def _evaluate(p: Pipeline, frames: int) -> float:
    """Deterministic evaluation episodes; logs and records the mean return (completed
    episodes only: those cut by eval.max_steps are counted in eval/cut)."""
    result = p.evaluator.evaluate()
    eval_return = result.mean_return if result.returns else float("nan")
    p.logger.log({"eval/episode_return": eval_return, "eval/episodes": len(result.returns), "eval/cut": result.cut},
                 step=frames)
    summary = p.progress.summary
    summary["final_eval_return"] = eval_return
    best = summary["best_eval_return"]
    summary["best_eval_return"] = eval_return if best is None else max(best, eval_return)
    return eval_return
