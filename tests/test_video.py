"""eval.video: an evaluation episode rendered to an mp4 in the run folder and logged to W&B."""
import importlib.util
import json
import os

import gymnasium as gym
import numpy as np
import pytest
from commands import rlcollect
from hydra import compose, initialize_config_module

from rlcollect.config import register_configs
from rlcollect.envs.video import FrameRecorder
from rlcollect.logging.wandb_offline import find_offline_runs, read_offline_run
from rlcollect.testing import CountingEnv

pytestmark = pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None,
                                reason="needs imageio-ffmpeg (envs extra)")


class Painted(CountingEnv):
    """Episodes of 5 steps; each frame is gray at 40 x the step count."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode=None):
        super().__init__(episode_length=5)
        self.render_mode = render_mode

    def render(self):
        return np.full((48, 64, 3), 40 * self.count, np.uint8)


gym.register("rlcollect-test/Painted-v0", entry_point=Painted)


def test_frame_recorder_keeps_each_episode_and_needs_rgb_array():
    env = FrameRecorder(gym.make("rlcollect-test/Painted-v0", render_mode="rgb_array"))
    env.reset()
    for _ in range(5):
        env.step(0)
    env.reset()
    assert [int(frame[0, 0, 0]) for frame in env.finished[0]] == [0, 40, 80, 120, 160, 200]
    assert len(env.frames) == 1
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        FrameRecorder(gym.make("rlcollect-test/Painted-v0"))


def test_an_eval_video_decodes_to_the_episodes_frames(tmp_path):
    import imageio.v2 as imageio

    from rlcollect import pipeline
    from rlcollect.pipeline.video import EvalVideo

    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        cfg = compose("train", overrides=["env.id=rlcollect-test/Painted-v0", "eval.video=true", "logger=none"])
    env = pipeline.make_env(cfg, num_envs=None, seed=0)
    policy = pipeline.make_policy(cfg, env.observation_space, env.action_space)
    video = EvalVideo(cfg, policy, tmp_path / "videos")
    try:
        path = video.record("eval_100")
    finally:
        video.shutdown()
    assert path == tmp_path / "videos" / "eval_100.mp4"
    reader = imageio.get_reader(path)
    frames = [frame for frame in reader]
    assert len(frames) == 6 and frames[0].shape == (48, 64, 3) and reader.get_meta_data()["fps"] == 10
    # lossy, but each frame's gray level is its step's: 0, 40, ..., 200
    assert [round(float(frame.mean()) / 40) for frame in frames] == [0, 1, 2, 3, 4, 5]


@pytest.mark.timeout(240)
def test_train_with_eval_video_writes_mp4s_and_logs_them_to_wandb(tmp_path):
    result = rlcollect(tmp_path, "train", "total_frames=512", "collector.frames_per_batch=256", "eval.every_frames=256",
                       "eval.episodes=2", "eval.video=true", "progress=false", "hydra.run.dir=run",
                       env={"SDL_VIDEODRIVER": "dummy"}, timeout=200)
    assert result.returncode == 0, result.stderr
    videos = sorted(path.name for path in (tmp_path / "run" / "videos").iterdir())
    assert videos == ["eval_256.mp4", "eval_512.mp4"]
    [run_file] = find_offline_runs(tmp_path / "run")
    logged = [(row["_step"], row["eval/video"]["_type"]) for row in read_offline_run(run_file).history
              if "eval/video" in row]
    assert logged == [(256, "video-file"), (512, "video-file")]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "finished"


def test_without_a_display_mujoco_renders_through_egl_and_pygame_headless_unless_a_backend_was_chosen(monkeypatch):
    from rlcollect.envs.video import headless_rendering

    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(name, raising=False)
    headless_rendering()
    assert (os.environ["MUJOCO_GL"], os.environ["SDL_VIDEODRIVER"]) == ("egl", "dummy")
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.setenv("SDL_VIDEODRIVER", "x11")
    headless_rendering()
    assert (os.environ["MUJOCO_GL"], os.environ["SDL_VIDEODRIVER"]) == ("osmesa", "x11")  # the user's choice stays
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.delenv("SDL_VIDEODRIVER")
    monkeypatch.setenv("DISPLAY", ":0")
    headless_rendering()
    assert "MUJOCO_GL" not in os.environ and "SDL_VIDEODRIVER" not in os.environ  # a display: their own defaults


@pytest.mark.timeout(120)
def test_a_pygame_env_renders_without_a_display_and_without_a_word_on_stderr(tmp_path):
    # SDL's default video driver, without a display or XDG_RUNTIME_DIR, printed "error: XDG_RUNTIME_DIR is
    # invalid or not set in the environment." to the terminal of every `rlcollect eval --video`
    import subprocess
    import sys

    script = ("from rlcollect.envs.video import headless_rendering\n"
              "import gymnasium as gym\n"
              "headless_rendering()\n"
              "env = gym.make('CartPole-v1', render_mode='rgb_array')\n"
              "env.reset(seed=0)\n"
              "frame = env.render()\n"
              "env.close()\n"
              "print(frame.shape, frame.dtype, int(frame.min()), int(frame.max()))\n")
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                            env=environment, timeout=100)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(400, 600, 3) uint8 0 255"
    assert result.stderr == ""


@pytest.mark.timeout(300)
def test_a_mujoco_run_renders_its_eval_video_on_a_machine_without_a_display(tmp_path):
    """eval.video and eval --video with MuJoCo and no DISPLAY (MUJOCO_GL chosen here, no user setting);
    HalfCheetah never ends early: the video has exactly the steps asked for."""
    pytest.importorskip("mujoco")
    no_display = {"DISPLAY": None, "WAYLAND_DISPLAY": None, "MUJOCO_GL": None}
    train = rlcollect(tmp_path, "train", "env=halfcheetah", "env.num_envs=1", "total_frames=256",
                      "collector.frames_per_batch=128", "algo.minibatch_size=64", "algo.epochs=1",
                      "eval.every_frames=256", "eval.episodes=1", "eval.max_steps=30", "eval.video=true", "logger=none",
                      "progress=false", "hydra.run.dir=run", env=no_display, timeout=240)
    assert train.returncode == 0, train.stderr
    assert [path.name for path in (tmp_path / "run" / "videos").iterdir()] == ["eval_256.mp4"]
    evaluated = rlcollect(tmp_path, "eval", "run", "--episodes", "1", "--video", "env.max_episode_steps=20",
                          env=no_display, timeout=240)
    assert evaluated.returncode == 0, evaluated.stderr
    import imageio.v2 as imageio

    frames = [frame for frame in imageio.get_reader(tmp_path / "run" / "videos" / "eval_last.mp4")]
    assert len(frames) == 21 and frames[0].shape[2] == 3  # the reset's frame and one per step
