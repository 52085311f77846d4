"""A trained run evaluated again: its policy on fresh envs of its config (``rlcollect eval``).

    config.yaml (+ env.* overrides) ──▶ eval envs (episodes of them, seeded)
    checkpoint (last | best | file)  ──▶ the policy ──EvalCollector──▶ returns, lengths
                                                     ──EvalVideo──▶ videos/eval_<checkpoint>.mp4
"""
from __future__ import annotations

import math
from pathlib import Path

from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.pipeline.builders import discount, make_env
from rlcollect.pipeline.saved import CHECKPOINTS, checkpoint_file, load_run_config, read_checkpoint, rebuild_policy
from rlcollect.pipeline.video import VIDEO_DIR, EvalVideo
from rlcollect.seeding import eval_seed


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and (population) standard deviation; None for no values."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((value - mean) ** 2 for value in values) / len(values))


def evaluate_run(run_dir: str | Path, *, checkpoint: str = "last", episodes: int | None = None,
                 deterministic: bool = True, seed: int | None = None, video: bool = False,
                 env_overrides: dict | None = None) -> dict:
    """Evaluate the policy of ``checkpoint`` ("last", "best" or a file) of the run in
    ``run_dir``: ``episodes`` envs (default: the run's ``eval.episodes``), one episode each,
    seeded from ``seed`` (default: the run's own evaluation seed), within the run's
    ``eval.max_steps`` budget per env; with ``video``, one more episode rendered to
    ``<run>/videos/eval_<checkpoint>.mp4``. Returns the result as a JSON-ready dict."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir, env_overrides)
    source = checkpoint_file(run_dir, checkpoint)
    state = read_checkpoint(source)
    policy = rebuild_policy(cfg, state, source=source)
    episodes = episodes or cfg.eval.episodes
    seed = eval_seed(cfg.seed) if seed is None else seed
    steps_per_env = cfg.eval.max_steps // cfg.eval.episodes if cfg.eval.max_steps else None
    exploration = "deterministic" if deterministic else "random"
    evaluator = EvalCollector(make_env(cfg, num_envs=episodes, seed=seed), policy,
                              eval_max_steps=steps_per_env * episodes if steps_per_env else None,
                              gamma=discount(cfg), exploration_type=exploration)
    try:
        result = evaluator.evaluate()
    finally:
        evaluator.shutdown()
    name = checkpoint if checkpoint in CHECKPOINTS else source.stem
    video_file = None
    if video:
        recorder = EvalVideo(cfg, policy, run_dir / VIDEO_DIR, seed=seed, exploration_type=exploration)
        try:
            video_file = str(recorder.record(f"eval_{name}"))
        finally:
            recorder.shutdown()
    return_mean, return_std = mean_std(result.returns)
    length_mean, length_std = mean_std([float(length) for length in result.lengths])
    return {"run": str(run_dir), "checkpoint": name, "checkpoint_file": str(source), "frames": int(state["frames"]),
            "env_id": cfg.env.id, "deterministic": deterministic, "seed": seed, "episodes": len(result.returns),
            "cut": result.cut, "return_mean": return_mean, "return_std": return_std, "length_mean": length_mean,
            "length_std": length_std, "returns": list(result.returns), "lengths": list(result.lengths),
            "video": video_file}
