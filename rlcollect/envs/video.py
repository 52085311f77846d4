"""Evaluation videos: the frames of one episode (``render_mode="rgb_array"``) to an mp4."""
from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import numpy as np

from rlcollect.errors import MissingDependencyError


def headless_rendering() -> None:
    """On a machine without a display, MuJoCo renders through EGL (``MUJOCO_GL=egl``) and
    pygame (classic control, Box2D) draws its rgb_array frames with SDL's dummy video
    driver (``SDL_VIDEODRIVER=dummy``: the same pixels, without SDL printing "error:
    XDG_RUNTIME_DIR is invalid" to the terminal), unless the user chose a backend: set
    before the first env renders."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


class FrameRecorder(gym.Wrapper):
    """Keeps the rendered frames of each episode: ``frames`` of the current one (one after
    the reset, one after each step), ``finished`` those of the episodes before it (until
    ``clear()``). The env must be made with ``render_mode="rgb_array"``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ValueError(f"FrameRecorder needs an env made with render_mode='rgb_array', got {env.render_mode!r}")
        self.frames: list[np.ndarray] = []
        self.finished: list[list[np.ndarray]] = []

    def clear(self) -> None:
        self.frames, self.finished = [], []

    def reset(self, **kwargs):
        result = self.env.reset(**kwargs)
        if self.frames:
            self.finished.append(self.frames)
        self.frames = [self.env.render()]
        return result

    def step(self, action):
        result = self.env.step(action)
        self.frames.append(self.env.render())
        return result


class Recorders:
    """A wrapper factory for GymEnv (``wrappers=[..., recorders]``) that remembers the
    FrameRecorders it made, so the frames can be read from the process that built the env."""

    def __init__(self) -> None:
        self.made: list[FrameRecorder] = []

    def __call__(self, env: gym.Env) -> FrameRecorder:
        recorder = FrameRecorder(env)
        self.made.append(recorder)
        return recorder


def write_mp4(frames: list[np.ndarray], path: str | Path, fps: int) -> Path:
    """Write ``frames`` (``[H, W, 3]`` uint8) to an H.264 mp4 at ``path`` (imageio-ffmpeg,
    from the envs extra); returns the path."""
    try:
        import imageio.v2 as imageio
    except ImportError as error:
        raise MissingDependencyError("videos need imageio and imageio-ffmpeg: pip install 'rlcollect[envs]'"
                                     ) from error
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimwrite(path, frames, fps=fps, codec="libx264", macro_block_size=1)
    return path
