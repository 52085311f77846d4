"""A run's objects (``Pipeline``): built from a config (``build``), continued from its
checkpoint (``resume``), and the checkpoint state itself."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from rlcollect.algos.learners import Learner
from rlcollect.checkpoint import CHECKPOINT_FILE, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.collectors.ray import RayCollector
from rlcollect.config import eval_every_frames
from rlcollect.logging.run_logger import RunLogger, truncate_metrics
from rlcollect.logging.runs import solved_threshold
from rlcollect.pipeline.builders import (
    algo_collection,
    make_collector,
    make_env,
    make_learner,
    make_logger,
    make_policy,
    make_replay_buffer,
)
from rlcollect.pipeline.checks import check_combination, check_keys, warn_combination
from rlcollect.pipeline.loop import Progress
from rlcollect.pipeline.video import EvalVideo
from rlcollect.seeding import eval_seed

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
# What a resumed run may change (`rlcollect train resume=<run> total_frames=N`): everything
# else was built into its checkpoint (weights, buffers, collector state, seeds).
RESUME_OVERRIDES = ("total_frames", "checkpoint_every_frames", "progress", "torch_threads")


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
    names: dict | None = None  # the W&B run's name, group and job_type, kept for a resumed run
    video: EvalVideo | None = None  # eval.video: an evaluation episode recorded at each evaluation

    def state_dict(self, seconds: float) -> dict:
        """Everything needed to continue this run (all weights_only-loadable)."""
        progress = Progress(self.progress.summary, self.progress.next_eval, self.progress.next_checkpoint,
                            seconds)
        return {"frames": self.collector.frames, "policy": self.policy.state_dict(),
                "learner": self.learner.state_dict(), "collector": self.collector.state_dict(),
                "rng": rng_state(), "progress": progress.state_dict(), "wandb_run_id": self.logger.run_id or "",
                "run_names": {key: value or "" for key, value in (self.names or {}).items()}}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.learner.load_state_dict(state["learner"])
        self.collector.load_state_dict(state["collector"])
        self.collector.update_policy_weights_()
        self.progress = Progress.from_state_dict(state["progress"])
        set_rng_state(state["rng"])

    def save_checkpoint(self, seconds: float) -> None:
        save_checkpoint(self.run_dir / CHECKPOINT_FILE, self.state_dict(seconds))

    def close(self, exit_code: int = 0) -> None:
        """Shut the collector and the evaluator down, close the logger with ``exit_code``."""
        self.collector.shutdown()
        self.evaluator.shutdown()
        if self.video is not None:
            self.video.shutdown()
        self.logger.close(exit_code)


def build(cfg: DictConfig, run_dir: str | Path, *, name: str | None = None, group: str | None = None,
          job_type: str | None = None, checkpoint: dict | None = None) -> Pipeline:
    """Check the config, seed, then build the policy, logger, collector, learner (algorithm +
    buffer) and eval env; with ``checkpoint`` (see ``resume``), continue that run where it
    stopped."""
    check_keys(cfg)
    check_combination(cfg)
    run_dir = Path(run_dir)
    torch.set_num_threads(cfg.torch_threads)
    torch.manual_seed(cfg.seed)
    probe = make_env(cfg, num_envs=None, seed=cfg.seed)  # an unknown env id fails here, before anything is written
    observation_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    policy = make_policy(cfg, observation_space, action_space)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    warn_combination(cfg)
    resumed_frames = int(checkpoint["frames"]) if checkpoint else 0
    if checkpoint is not None:  # the resumed W&B run keeps its name, group and job type
        saved = checkpoint.get("run_names", {})
        name, group, job_type = (saved.get(key) or None for key in ("name", "group", "job_type"))
    names = {"name": name, "group": group, "job_type": job_type}
    logger = make_logger(cfg, run_dir, name=name, group=group, job_type=job_type,
                         run_id=checkpoint["wandb_run_id"] or None if checkpoint else None, start_frames=resumed_frames)
    try:
        replay_buffer = None
        if cfg.algo.name == "dqn":
            replay_buffer = make_replay_buffer(cfg, run_dir, reopen=checkpoint is not None)
        collector = make_collector(cfg, policy, logger, replay_buffer)
        if isinstance(collector, RayCollector) and replay_buffer is not None:
            replay_buffer = collector.replay_buffer  # the buffer now lives in a Ray actor
        learner = make_learner(cfg, policy, collector, observation_space, action_space, replay_buffer)
    except BaseException:
        if "collector" in locals():
            collector.shutdown()
        logger.close(exit_code=1)
        raise
    evaluator = EvalCollector(make_env(cfg, num_envs=cfg.eval.episodes, seed=eval_seed(cfg.seed)), policy,
                              eval_max_steps=cfg.eval.max_steps, eval_max_trajectories=cfg.eval.max_trajectories,
                              gamma=cfg.algo.gamma)
    progress = Progress.start(env_id=cfg.env.id, solved_return=solved_threshold(cfg.env.id, cfg.env.solved_return),
                              eval_every_frames=eval_every_frames(cfg),
                              checkpoint_every_frames=cfg.checkpoint_every_frames)
    pipeline = Pipeline(cfg, run_dir, policy, collector, learner, evaluator, logger, progress,
                        background=algo_collection(cfg).background, names=names,
                        video=EvalVideo(cfg, policy, run_dir) if cfg.eval.get("video") else None)
    if checkpoint is not None:
        pipeline.load_state_dict(checkpoint)
    return pipeline


def resume(run_dir: str | Path, overrides: dict | None = None, **build_kwargs) -> Pipeline:
    """Continue the run in ``run_dir`` from its last checkpoint: same config, same W&B run
    (id, name, group, job type), metrics.jsonl cut back to the checkpoint's frame count so no
    row is written twice. ``overrides``: ``{config key: value}`` for the keys a resumed run
    may change (``RESUME_OVERRIDES``; ``total_frames`` beyond the frames it has); any other
    key is a ValueError naming it."""
    run_dir = Path(run_dir)
    overrides = dict(overrides or {})
    if not (run_dir / CONFIG_FILE).is_file():
        raise ValueError(f"resume={run_dir}: not a run folder (no {CONFIG_FILE})")
    if not (run_dir / CHECKPOINT_FILE).is_file():
        raise ValueError(f"resume={run_dir}: no {CHECKPOINT_FILE} (checkpoint_every_frames was too large, or the "
                         "run stopped before its first checkpoint)")
    refused = [key for key in overrides if key not in RESUME_OVERRIDES]
    if refused:
        raise ValueError(f"resume={run_dir}: {', '.join(refused)} cannot change on resume (the run's config is "
                         f"built into its checkpoint); a resumed run takes only {', '.join(RESUME_OVERRIDES)}")
    cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    if "_target_" not in cfg.get("collector", {}):
        raise ValueError(f"resume={run_dir}: its {CONFIG_FILE} was written by an rlcollect without `_target_` "
                         "configs; rerun it with this version")
    checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE)
    frames = int(checkpoint["frames"])
    if "total_frames" in overrides and overrides["total_frames"] <= frames:
        raise ValueError(f"total_frames={overrides['total_frames']}: the run in {run_dir} has {frames} frames "
                         f"already; resume it with total_frames > {frames}")
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    truncate_metrics(run_dir, last_step=frames)
    log.info("resuming %s at frame %d", run_dir, checkpoint["frames"])
    return build(cfg, run_dir, checkpoint=checkpoint, **build_kwargs)
