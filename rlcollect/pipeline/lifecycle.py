"""A run's objects (``Pipeline``): built from a config (``build``), continued from its
checkpoint (``resume``), and the checkpoint state itself.

Building touches no file of the run folder: every check, every part and, for a resumed
run, the whole checkpoint state loaded into the new parts come first; ``Pipeline.open()``
then writes config.yaml and opens the logger (metrics.jsonl, the W&B run). A run refused
at any point before that, or a resume that fails, leaves the folder as it found it.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from rlcollect.algos.learners import Learner
from rlcollect.buffers.in_place import saved_in_place
from rlcollect.checkpoint import (
    BEST_FILE,
    CHECKPOINT_FILE,
    CheckpointError,
    checkpoint_exists,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.config import eval_every_frames, typed_values
from rlcollect.config.values import check_resume_keys
from rlcollect.errors import ConfigError, ResumeNotOpened, one_line
from rlcollect.logging.run_logger import RunLogger, metrics_up_to
from rlcollect.logging.runs import PBT_PREFIX, DamagedRowError, json_lines, pbt_settings_at, solved_threshold
from rlcollect.pipeline.builders import (
    algo_collection,
    discount,
    learner_class,
    make_collector,
    make_env,
    make_learner,
    make_logger,
    make_policy,
    make_replay_buffer,
    probe_spaces,
)
from rlcollect.pipeline.checks import check_config, warn_combination
from rlcollect.pipeline.progress import Progress
from rlcollect.pipeline.video import EvalVideo
from rlcollect.run_files import (
    CONFIG_FILE,
    ENDED_STATUSES,
    METRICS_FILE,
    VIDEO_DIR,
    read_summary,
    staged_record,
    write_record,
)
from rlcollect.seeding import eval_seed

log = logging.getLogger(__name__)

class FramesAlready(ConfigError):
    """A resume's ``total_frames`` that the run has reached already (its checkpoint's ``frames``)."""

    def __init__(self, frames: int, message: str) -> None:
        super().__init__(message)
        self.frames = frames


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
    resumed_frames: int | None = None  # a resumed run: the frames of the checkpoint it continues from
    checkpoint_frames: int | None = None  # the frames of the run's last complete checkpoint.pt
    # a background run: the frames of the last batch's worth learnt from (its collector runs ahead of it), what its
    # checkpoints say they are at (a resume learns from the frames past it first)
    learnt_frames: int | None = None
    opened: bool = False  # open() ran: the run writes to its folder
    # where the run's torch draws come from: torch's global generator (None), or a CPU generator
    # of its own (a member of a batched sweep), whose state its checkpoints keep as the global one's
    generator: torch.Generator | None = None
    # best.pt's content (frames, eval_return, policy: a CPU copy), kept in each checkpoint: a run resumed from a
    # checkpoint older than best.pt gets back the best up to its checkpoint
    best: dict | None = None

    def state_dict(self, seconds: float, phase_seconds: dict[str, float] | None = None) -> dict:
        """Everything needed to continue this run (all weights_only-loadable); ``seconds``:
        the run's wall-clock so far, ``phase_seconds`` each phase's share of it."""
        progress = Progress(self.progress.summary, self.progress.next_eval, self.progress.next_checkpoint,
                            seconds, dict(phase_seconds or {}))
        rng = rng_state()
        if self.generator is not None:
            rng["torch"] = self.generator.get_state()
        frames = self.learnt_frames if self.background and self.learnt_frames is not None else self.collector.frames
        # background collection paused meanwhile: the collector's state is asked of its workers over the pipes its
        # thread reads, and the replay buffer and the collector are taken at one moment
        with self.collector.pause() if self.background else contextlib.nullcontext():
            state = {"frames": frames, "policy": self.policy.state_dict(),
                     "learner": self.learner.state_dict(), "collector": self.collector.state_dict(),
                     "rng": rng, "progress": progress.state_dict(), "wandb_run_id": self.logger.run_id or "",
                     "run_names": {key: value or "" for key, value in (self.names or {}).items()}}
        if self.best is not None:
            state["best"] = self.best
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.learner.load_state_dict(state["learner"])
        self.collector.load_state_dict(state["collector"])
        self.collector.update_policy_weights_()
        self.progress = Progress.from_state_dict(state["progress"])
        set_rng_state(state["rng"])
        if self.generator is not None:  # its draws come from its own stream, saved where torch's global one is
            self.generator.set_state(state["rng"]["torch"])
        self.checkpoint_frames = self.learnt_frames = int(state["frames"])
        self.progress.checkpoint_every(self.checkpoint_frames, self.cfg.checkpoint_every_frames)
        self.best = state.get("best")  # absent from a checkpoint written before any evaluation (or by an old version)

    def open(self) -> None:
        """Start writing to the run folder: a resumed run's metrics.jsonl cut back to its
        checkpoint (and best.pt back to the best up to it, where a later one was saved),
        config.yaml, then the logger's files (metrics.jsonl, the W&B run)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = OmegaConf.to_yaml(self.cfg, resolve=True)
        if self.resumed_frames is None:
            write_record(self.run_dir / CONFIG_FILE, config)
        else:
            try:
                self.open_resumed(config)
            except Exception as error:
                raise ResumeNotOpened(f"the resume could not start: {one_line(error)}") from error
        self.opened = True
        self.logger.open()

    def open_resumed(self, config: str) -> None:
        """A resumed run's files as it goes on from its checkpoint: metrics.jsonl cut back to
        it, best.pt back to the best up to it, config.yaml with the resume's overrides. Each
        is written to a partial file first and the partial files renamed over the run's once
        all are written, so a failure on the way (a full disk) leaves every file as it was."""
        texts = [(self.run_dir / METRICS_FILE, metrics_up_to(self.run_dir, last_step=self.resumed_frames)),
                 (self.run_dir / CONFIG_FILE, config)]
        partials = []
        try:
            for path, text in texts:
                if text is not None:
                    partials.append((staged_record(path, text), path))
            best = self.run_dir / BEST_FILE
            if self.best is not None and best_frames(best) != self.best["frames"]:
                # evaluated in the part the resumed run replays (or lost): the best up to the checkpoint again
                save_checkpoint(best, self.best, keep_previous=False)
        except BaseException:
            for partial, _ in partials:
                partial.unlink(missing_ok=True)
            raise
        for partial, path in partials:
            os.replace(partial, path)
        best = self.run_dir / BEST_FILE
        if self.best is None and best.is_file() and best_frames(best) > self.resumed_frames:
            best.unlink()  # evaluated in the part the resumed run replays, and none before it

    def save_checkpoint(self, seconds: float, phase_seconds: dict[str, float] | None = None) -> None:
        self.logger.flush()  # metrics.jsonl holds every row the checkpoint counts
        # between two batches of a collector that writes only while it is iterated, in this thread, nothing writes
        # until the file is saved: a full replay buffer is saved as it is, not copied (twice its memory) first
        quiet = not self.background and not getattr(self.collector, "writes_between_batches", True)
        with saved_in_place() if quiet else contextlib.nullcontext():
            state = self.state_dict(seconds, phase_seconds)
            save_checkpoint(self.run_dir / CHECKPOINT_FILE, state)
        # the frame it was taken at, which its resume continues from: the collector's may have moved on while its
        # state was taken (a MultiAsyncCollector waits for the batches in flight)
        self.checkpoint_frames = int(state["frames"])

    def save_best(self, frames: int, eval_return: float) -> None:
        """best.pt: the policy of the best evaluation so far, with its frame and return (and
        a copy kept for the checkpoints)."""
        policy = {key: value.detach().to("cpu", copy=True) for key, value in self.policy.state_dict().items()}
        self.best = {"frames": frames, "eval_return": eval_return, "policy": policy}
        save_checkpoint(self.run_dir / BEST_FILE, self.best, keep_previous=False)

    def close(self, exit_code: int = 0) -> None:
        """Shut the collector and the evaluator down, close the logger with ``exit_code``."""
        self.collector.shutdown()
        self.evaluator.shutdown()
        if self.video is not None:
            self.video.shutdown()
        self.logger.close(exit_code)


def best_frames(path: Path) -> int:
    """The frame count a best.pt was evaluated at (-1 when it cannot be read)."""
    try:
        return int(load_checkpoint(path)["frames"])
    except (CheckpointError, FileNotFoundError, KeyError):
        return -1


def build(cfg: DictConfig, run_dir: str | Path, *, name: str | None = None, group: str | None = None,
          job_type: str | None = None, checkpoint: dict | None = None) -> Pipeline:
    """Check the config, seed, then build the policy, logger, collector, learner (algorithm +
    buffer) and eval env; with ``checkpoint`` (see ``resume``), load that run's state into
    them. No file is written: ``Pipeline.open()`` (the training loop's first step) does."""
    check_config(cfg)
    run_dir = Path(run_dir)
    torch.set_num_threads(cfg.torch_threads)
    torch.manual_seed(cfg.seed)
    observation_space, action_space = probe_spaces(cfg)  # an unknown env id fails here, before any part
    policy = make_policy(cfg, observation_space, action_space)
    warn_combination(cfg)
    resumed_frames = int(checkpoint["frames"]) if checkpoint else 0
    if checkpoint is not None:  # the resumed W&B run keeps its name, group and job type
        saved = checkpoint.get("run_names", {})
        name, group, job_type = (saved.get(key) or None for key in ("name", "group", "job_type"))
    names = {"name": name, "group": group, "job_type": job_type}
    logger = make_logger(cfg, run_dir, name=name, group=group, job_type=job_type,
                         run_id=checkpoint["wandb_run_id"] or None if checkpoint else None, start_frames=resumed_frames)
    built: list = []  # the parts that hold processes, threads or envs, shut down if a later step fails
    try:
        replay_buffer = None
        if learner_class(cfg).replay:
            replay_buffer = make_replay_buffer(cfg, run_dir, reopen=checkpoint is not None)
        collector = make_collector(cfg, policy, run_dir, replay_buffer)
        built.append(collector)
        if replay_buffer is not None:
            replay_buffer = collector.replay_buffer  # what the collector writes into (RayCollector: a buffer actor)
        learner = make_learner(cfg, policy, collector, observation_space, action_space, replay_buffer)
        evaluator = EvalCollector(make_env(cfg, num_envs=cfg.eval.episodes, seed=eval_seed(cfg.seed)), policy,
                                  eval_max_steps=cfg.eval.max_steps, eval_max_trajectories=cfg.eval.max_trajectories,
                                  gamma=discount(cfg), seed=eval_seed(cfg.seed))  # every evaluation: the same starts
        built.append(evaluator)
        video = EvalVideo(cfg, policy, run_dir / VIDEO_DIR) if cfg.eval.get("video") else None
        if video is not None:
            built.append(video)
        progress = Progress.start(env_id=cfg.env.id,
                                  solved_return=solved_threshold(cfg.env.id, cfg.env.solved_return),
                                  eval_every_frames=eval_every_frames(cfg),
                                  checkpoint_every_frames=cfg.checkpoint_every_frames)
        pipeline = Pipeline(cfg, run_dir, policy, collector, learner, evaluator, logger, progress,
                            background=algo_collection(cfg).background, names=names, video=video)
        if checkpoint is not None:
            load_resumed_state(pipeline, checkpoint)
    except BaseException:
        for part in reversed(built):
            part.shutdown()
        logger.close(exit_code=1)
        raise
    return pipeline


def load_resumed_state(pipeline: Pipeline, checkpoint: dict) -> None:
    """Load a checkpoint into freshly built parts; one that does not fit them (another env,
    another model size, a foreign file) is a ConfigError in one line."""
    try:
        pipeline.load_state_dict(checkpoint)
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = next((line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))),
                      lines[0] if lines else type(error).__name__)
        raise ConfigError(f"resume={pipeline.run_dir}: its {CHECKPOINT_FILE} does not fit the run its "
                          f"{CONFIG_FILE} builds ({type(error).__name__}: {detail.rstrip('.')})") from None
    pipeline.resumed_frames = int(checkpoint["frames"])


def resume(run_dir: str | Path, overrides: dict | None = None, **build_kwargs) -> Pipeline:
    """Continue the run in ``run_dir`` from its last checkpoint: same config, same W&B run
    (id, name, group, job type), metrics.jsonl cut back to the checkpoint's frame count (by
    ``Pipeline.open``) so no row is written twice. ``overrides``: ``{config key: value}``
    for the keys a resumed run may change (``RESUME_OVERRIDES``; ``total_frames`` beyond the
    frames it has); a run that finished or was solved continues only with a larger
    ``total_frames``. Everything is checked, and the checkpoint loaded into the new parts,
    before any file of the run changes: any refusal is a ConfigError."""
    run_dir = Path(run_dir)
    cfg, checkpoint = resume_checks(run_dir, overrides)
    pipeline = build(cfg, run_dir, checkpoint=checkpoint, **build_kwargs)
    frames = int(checkpoint["frames"])
    log.info("resuming %s at frame %d", run_dir, frames)
    settings = pbt_settings_at(metric_rows(run_dir), frames)
    started = {key: OmegaConf.select(cfg, key) for key in settings}
    changed = {key: (started[key], value) for key, value in settings.items() if started[key] != value}
    if changed:  # a member of a population-based training sweep, resumed alone
        log.warning("resume=%s: population-based training had changed its settings by frame %d (%s); resumed alone, "
                    "it trains on with the starting ones of its %s", run_dir, frames,
                    ", ".join(f"{key} {start} -> {now}" for key, (start, now) in changed.items()), CONFIG_FILE)
    if settings:  # its settings at the end (summary.json) and in each row: those it trains on with
        pipeline.progress.summary["pbt_settings"] = {key: float(value) for key, value in started.items()}
        pipeline.logger.every_row = {f"{PBT_PREFIX}{key}": float(value) for key, value in started.items()}
    return pipeline


def resume_checks(run_dir: Path, overrides: dict | None = None, *, check_only: bool = False
                  ) -> tuple[DictConfig, dict]:
    """What ``resume`` continues the run in ``run_dir`` from: its config with ``overrides``
    applied and its checkpoint (loaded; ``check_only``: its tensors mapped from the file and
    a fallback to the previous one not said, for a check that reads only its frames and
    names before another process loads it), or the ConfigError that refuses it (not a
    run folder, no checkpoint yet, a damaged metrics row or checkpoint, a key a resume
    cannot change, an ended run without a larger ``total_frames``). Reads only."""
    overrides = dict(overrides or {})
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(f"resume={run_dir}: not a run folder (no {CONFIG_FILE})")
    rows = metric_rows(run_dir)
    if not checkpoint_exists(run_dir / CHECKPOINT_FILE):
        raise ConfigError(f"resume={run_dir}: no {CHECKPOINT_FILE} to continue from: {stopped_before(rows)}; "
                          "train it again in a new folder")
    check_resume_keys(run_dir, overrides)
    overrides = typed_values(overrides)
    try:
        cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"resume={run_dir}: cannot read its {CONFIG_FILE} ({' '.join(str(error).split())})"
                          ) from None
    if "_target_" not in cfg.get("collector", {}):
        raise ConfigError(f"resume={run_dir}: its {CONFIG_FILE} was written by an rlcollect without `_target_` "
                          "configs; rerun it with this version")
    try:
        checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE, mmap=check_only, quiet=check_only)
    except CheckpointError as error:
        raise ConfigError(f"resume={run_dir}: {error}") from None
    frames = int(checkpoint["frames"])
    status = run_status(run_dir)
    if status in ENDED_STATUSES and "total_frames" not in overrides:
        raise ConfigError(f"resume={run_dir}: the run {status} at {frames} frames; to train it on, resume it with "
                          f"total_frames > {frames}")
    if "total_frames" in overrides and overrides["total_frames"] <= frames:
        raise FramesAlready(frames, f"total_frames={overrides['total_frames']}: the run in {run_dir} has {frames} "
                            f"frames already; resume it with total_frames > {frames}")
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    return cfg, checkpoint


def metric_rows(run_dir: Path) -> list[dict]:
    """The rows of the run's metrics.jsonl that a resume keeps (a last row cut short by a
    crash is left out, as ``metrics_up_to`` leaves it); a damaged row before the last is a
    ConfigError naming the file and the line, found before any file changes."""
    path = run_dir / METRICS_FILE
    try:
        return [row for _, row in json_lines(path)] if path.is_file() else []
    except DamagedRowError as error:
        raise ConfigError(f"resume={run_dir}: {error}: repair or remove that line to resume the run") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"resume={run_dir}: cannot read its {METRICS_FILE} ({error})") from None


def stopped_before(rows: list[dict]) -> str:
    """Where a run without a checkpoint stopped, as its metric rows (``metric_rows``) tell."""
    batches = [row for row in rows if "event" not in row]
    if not batches:
        return f"the run stopped before its first batch (its {METRICS_FILE} has no rows)"
    return (f"the run stopped before its first checkpoint (its {METRICS_FILE} has {len(batches)} "
            f"row{'s' if len(batches) > 1 else ''}, to frame {batches[-1]['step']})")


def run_status(run_dir: Path) -> str | None:
    """summary.json's ``status`` (None without one)."""
    return read_summary(run_dir).get("status")
