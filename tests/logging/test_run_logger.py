import json

import pytest

from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.logging import RunLogger, WandbLogger
from rlcollect.testing import counting_env_factories


def rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_hook_and_trainer_metrics_merge_into_one_row_per_step(tmp_path):
    logger = RunLogger(tmp_path)
    collector = Collector(GymEnv(counting_env_factories([2, 3]), num_envs=2), frames_per_batch=4,
                          total_frames=8, post_collect_hook=logger)
    for _ in collector:
        logger.log({"train/loss": 0.5}, step=collector.frames)
    logger.close()
    logger.close()
    first, second = rows(tmp_path)
    assert (first["step"], first["frames"], first["train/loss"]) == (4, 4, 0.5)
    assert first["collect/episodes"] == 1 and first["collect/episode_return"] == 2.0
    assert second["collect/episodes"] == 2 and second["collect/episode_length"] == 2.5  # lengths 2 and 3
    assert second["frames"] == 8 and second["collect/frames_per_second"] > 0


def test_online_mode_without_a_login_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    with pytest.raises(ValueError, match="needs a W&B login"):
        WandbLogger(tmp_path, project="p", mode="online")
    with pytest.raises(ValueError, match="mode must be"):
        WandbLogger(tmp_path, project="p", mode="cloud")


def test_info_keys_are_logged_as_the_mean_at_episode_ends(tmp_path):
    import functools
    import json

    from rlcollect import Collector, GymEnv
    from rlcollect.testing import InfoEnv

    logger = RunLogger(tmp_path, info_keys=["is_success", "cost"])
    env = GymEnv(functools.partial(InfoEnv, 3), 2, info_keys=["is_success", "cost"])
    list(Collector(env, frames_per_batch=8, total_frames=8, post_collect_hook=logger))
    logger.close()
    [row] = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # 4 steps per env: one complete episode of 3 in each; at its end is_success 1, cost 0.5 * 3
    assert row["collect/episodes"] == 2 and row["collect/is_success"] == 1.0 and row["collect/cost"] == 1.5
