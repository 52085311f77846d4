"""``eval.video``: one evaluation episode rendered to ``<run>/videos/eval_<frames>.mp4``."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.envs.gym_env import GymEnv
from rlcollect.envs.video import Recorders, headless_rendering, write_mp4
from rlcollect.errors import ConfigError
from rlcollect.pipeline.builders import discount, env_kwargs
from rlcollect.seeding import eval_seed


class EvalVideo:
    """A single eval env of its own, made with ``render_mode="rgb_array"`` and recorded; each
    ``record(name)`` runs one episode (within ``eval.max_steps``; deterministic unless
    ``exploration_type="random"``) with the current policy and writes it as
    ``<folder>/<name>.mp4`` at the env's ``render_fps``. Without a display, MuJoCo renders
    through EGL (``headless_rendering``)."""

    def __init__(self, cfg: DictConfig, policy, folder: Path, *, seed: int | None = None,
                 exploration_type: str = "deterministic") -> None:
        if cfg.env.backend == "torch":
            raise ConfigError(f"videos need an env that renders: env.backend=torch ({cfg.env.id} as torch "
                              "tensors) has no render_mode; use env.backend=list")
        headless_rendering()
        self.recorders = Recorders()
        kwargs = env_kwargs(cfg)
        kwargs.pop("backend", None)  # one env, stepped here
        kwargs["wrappers"] = [*kwargs.get("wrappers", []), self.recorders]
        seed = eval_seed(cfg.seed) if seed is None else seed
        env = GymEnv(cfg.env.id, None, seed=seed, render_mode="rgb_array", **kwargs)
        [self.recorder] = self.recorders.made
        self.fps = int(self.recorder.metadata.get("render_fps") or 30)
        self.evaluator = EvalCollector(env, policy, eval_max_steps=cfg.eval.max_steps, gamma=discount(cfg),
                                       exploration_type=exploration_type, seed=seed)  # each video: the same start
        self.folder = Path(folder)

    def record(self, name: str) -> Path:
        self.recorder.clear()
        self.evaluator.evaluate()
        # the episode the evaluation counted: the first after its reset (later ones fill the rest of its batch)
        episode = self.recorder.finished[0] if self.recorder.finished else self.recorder.frames  # or the cut one
        return write_mp4(episode, self.folder / f"{name}.mp4", self.fps)

    def shutdown(self) -> None:
        self.evaluator.shutdown()
