"""A trained run evaluated again: its policy on fresh envs of its config (``rlcollect eval``).

    config.yaml (+ env.* overrides) ──▶ eval envs (episodes of them, seeded)
    checkpoint (last | best | file)  ──▶ the policy ──EvalCollector──▶ returns, lengths
                                                     ──EvalVideo──▶ videos/eval_<checkpoint>.mp4
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import torch

from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.errors import ConfigError
from rlcollect.pipeline.builders import discount, make_env
from rlcollect.pipeline.saved import checkpoint_file, checkpoint_name, load_run_config, read_checkpoint, rebuild_policy
from rlcollect.pipeline.video import EvalVideo
from rlcollect.run_files import VIDEO_DIR
from rlcollect.seeding import env_seed, eval_seed


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and (population) standard deviation; None for no values."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((value - mean) ** 2 for value in values) / len(values))


def evaluate_run(run_dir: str | Path, *, checkpoint: str = "last", episodes: int | None = None,
                 deterministic: bool = True, seed: int | None = None, video: bool = False,
                 env_overrides: dict | None = None, as_in_training: bool = False) -> dict:
    """Evaluate the policy of ``checkpoint`` ("last", "best" or a file) of the run in
    ``run_dir``: ``episodes`` envs (default: the run's ``eval.episodes``), one episode each,
    env i seeded ``seed + i`` (default seed: the run's own evaluation seed,
    ``eval_seed(run seed)``), within the run's ``eval.max_steps`` budget per env; torch's
    RNG, which samples a ``deterministic=False`` evaluation's actions, is seeded with
    ``seed`` too, so the same arguments give the same numbers. ``as_in_training``: the
    run's own evaluation exactly (its eval.episodes, seeds, eval.max_steps and
    eval.max_trajectories, deterministic actions), what its summary.json's eval returns
    come from; it takes none of the other options. With ``video``, one more episode
    rendered to ``<run>/videos/eval_<checkpoint>.mp4``. Returns the result as a JSON-ready
    dict, ``env_seeds`` naming the seed of each episode's env."""
    if as_in_training:
        given = [name for name, value in (("episodes", episodes), ("seed", seed), ("env overrides", env_overrides))
                 if value] + ([] if deterministic else ["stochastic actions"])
        if given:
            raise ConfigError(f"as_in_training repeats the run's own evaluation: it takes no {', '.join(given)}")
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir, env_overrides)
    source = checkpoint_file(run_dir, checkpoint)
    state = read_checkpoint(source)
    try:
        policy = rebuild_policy(cfg, state, source=source)
    except ConfigError as error:  # the run's env no longer builds (an env id gone): said with the run it is
        raise ConfigError(f"{run_dir}: {error}") from None
    episodes = episodes or cfg.eval.episodes
    seed = eval_seed(cfg.seed) if seed is None else seed
    if as_in_training:  # as the run's evaluator (pipeline/lifecycle.py) evaluates
        max_steps, max_trajectories = cfg.eval.max_steps, cfg.eval.get("max_trajectories")
    else:
        steps_per_env = cfg.eval.max_steps // cfg.eval.episodes if cfg.eval.max_steps else None
        max_steps, max_trajectories = steps_per_env * episodes if steps_per_env else None, None
    exploration = "deterministic" if deterministic else "random"
    evaluator = EvalCollector(make_env(cfg, num_envs=episodes, seed=seed), policy, eval_max_steps=max_steps,
                              eval_max_trajectories=max_trajectories, gamma=discount(cfg),
                              exploration_type=exploration, seed=seed)
    try:
        with seeded_torch(seed):
            result = evaluator.evaluate()
    finally:
        evaluator.shutdown()
    name = checkpoint_name(run_dir, checkpoint, source)
    video_file = None
    if video:
        recorder = EvalVideo(cfg, policy, run_dir / VIDEO_DIR, seed=seed, exploration_type=exploration)
        try:
            with seeded_torch(seed):
                video_file = str(recorder.record(f"eval_{name}"))
        finally:
            recorder.shutdown()
    return_mean, return_std = mean_std(result.returns)
    length_mean, length_std = mean_std([float(length) for length in result.lengths])
    return {"run": str(run_dir), "checkpoint": name, "checkpoint_file": str(source), "frames": int(state["frames"]),
            "env_id": cfg.env.id, "deterministic": deterministic, "as_in_training": as_in_training, "seed": seed,
            "episodes": len(result.returns), "cut": result.cut, "max_steps": max_steps,
            "max_trajectories": max_trajectories, "return_mean": return_mean, "return_std": return_std,
            "length_mean": length_mean, "length_std": length_std, "returns": list(result.returns),
            "lengths": list(result.lengths),
            "env_seeds": [env_seed(seed, env) if env >= 0 else None for env in result.envs], "video": video_file}


@contextlib.contextmanager
def seeded_torch(seed: int):
    """torch's (CPU) RNG seeded with ``seed`` inside, as it was outside: what samples a
    stochastic evaluation's actions."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
