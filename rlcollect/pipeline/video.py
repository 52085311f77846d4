"""``eval.video``: one evaluation episode rendered to ``<run>/videos/eval_<frames>.mp4``."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.envs.gym_env import GymEnv
from rlcollect.envs.video import Recorders, write_mp4
from rlcollect.pipeline.builders import env_kwargs
from rlcollect.seeding import eval_seed

VIDEO_DIR = "videos"


class EvalVideo:
    """A single eval env of its own, made with ``render_mode="rgb_array"`` and recorded; each
    ``record(frames)`` runs one deterministic episode (within ``eval.max_steps``) with the
    current policy and writes it as an mp4 at the env's ``render_fps``."""

    def __init__(self, cfg: DictConfig, policy, run_dir: Path) -> None:
        self.recorders = Recorders()
        kwargs = env_kwargs(cfg)
        kwargs["wrappers"] = [*kwargs.get("wrappers", []), self.recorders]
        env = GymEnv(cfg.env.id, None, seed=eval_seed(cfg.seed), render_mode="rgb_array", **kwargs)
        [self.recorder] = self.recorders.made
        self.fps = int(self.recorder.metadata.get("render_fps") or 30)
        self.evaluator = EvalCollector(env, policy, eval_max_steps=cfg.eval.max_steps, gamma=cfg.algo.gamma)
        self.folder = Path(run_dir) / VIDEO_DIR

    def record(self, frames: int) -> Path:
        self.recorder.clear()
        self.evaluator.evaluate()
        episode = self.recorder.finished[-1] if self.recorder.finished else self.recorder.frames  # or the cut one
        return write_mp4(episode, self.folder / f"eval_{frames}.mp4", self.fps)

    def shutdown(self) -> None:
        self.evaluator.shutdown()
