"""Every shipped config composes and runs one tiny step; the wheel carries the config tree."""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from rlcollect import pipeline
from rlcollect.config import register_configs

CONF = Path(__file__).parents[1] / "rlcollect" / "conf"
ONE_STEP = ["total_frames=64", "collector.frames_per_batch=64", "eval.every_frames=64", "eval.episodes=1",
            "eval.max_steps=20", "logger=none", "progress=false"]
PPO_STEP = ["algo.epochs=1", "algo.minibatch_size=32"]
DQN_STEP = ["algo=dqn", "algo.learning_starts=0", "algo.gradient_steps_per_batch=2", "algo.batch_size=16"]


def options(group, *, ray=False):
    """The group's options; Ray's only with ``ray`` (they run in tests/collectors/test_ray.py,
    on that module's loopback Ray head)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if ray or p.stem != "ray")


def compose_train(overrides):
    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        return compose("train", overrides=overrides)


MULTI = ["collector.start_method=fork", "collector.envs_per_worker=2"]


@pytest.mark.parametrize("overrides", [[f"env={name}"] for name in options("env")]
                         + [[f"experiment={name}"] for name in options("experiment")]
                         + [[f"collector={name}", *MULTI] for name in options("collector") if name != "sync"]
                         + [["collector=multisync", f"weight_sync={name}", *MULTI] for name in options("weight_sync")]
                         + [[*DQN_STEP, f"collector={name}", *(MULTI if name != "sync" else [])]
                            for name in options("collector")]
                         + [[*DQN_STEP, "algo.background=true"],
                            [*DQN_STEP, "buffer.storage=memmap", "buffer.sampler=slice", "buffer.slice_len=4"],
                            [*DQN_STEP, "buffer.ndim=2", "buffer.max_size=256"],
                            [*DQN_STEP, "collector=multiasync", *MULTI, "buffer.trajs_per_batch=1"]],
                         ids=lambda overrides: " ".join(o for o in overrides if "=" in o and not o.startswith("algo.")
                                                        and "start_method" not in o and "envs_per" not in o))
def test_every_config_composes_and_runs_one_step(tmp_path, overrides):
    algo_step = [] if "algo=dqn" in overrides else PPO_STEP
    cfg = compose_train([*overrides, *algo_step, *ONE_STEP])
    summary = pipeline.run(pipeline.build(cfg, tmp_path))
    assert summary["frames"] >= 64
    assert json.loads((tmp_path / "summary.json").read_text())["frames"] == 64
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 64 and "eval/episode_return" in rows[-1]


def test_collector_ray_composes_with_ray_weight_sync_and_its_actor_resources():
    cfg = compose_train(["collector=ray", "collector.remote_config.num_gpus=0.5", "collector.ray_address=auto"])
    assert (cfg.collector.type, cfg.weight_sync.type) == ("ray", "ray")
    assert (cfg.collector.num_collectors, cfg.collector.collector_class, cfg.collector.sync) == (2, "sync", True)
    assert dict(cfg.collector.remote_config) == {"num_cpus": 1, "num_gpus": 0.5, "memory": None}
    assert cfg.collector.ray_address == "auto"
    assert compose_train(["collector=ray", "weight_sync=none"]).weight_sync.type == "none"  # the user's choice wins


def test_defaults_are_ppo_on_batched_cartpole_with_offline_wandb():
    cfg = compose_train([])
    assert (cfg.env.id, cfg.env.num_envs, cfg.collector.type, cfg.algo.name) == ("CartPole-v1", 8, "sync", "ppo")
    assert (cfg.logger.type, cfg.logger.mode) == ("wandb", "offline")


@pytest.mark.timeout(300)
def test_wheel_ships_a_config_tree_hydra_can_compose(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(CONF.parents[1])], check=True, capture_output=True)
    [wheel] = tmp_path.glob("rlcollect-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("rlcollect/conf/")}
    expected = {f"rlcollect/{p.relative_to(CONF.parent)}" for p in CONF.rglob("*.yaml")}
    assert expected <= shipped and "rlcollect/conf/__init__.py" in shipped
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    probe = ("import rlcollect, sys; from hydra import compose, initialize_config_module;"
             "from rlcollect.config import register_configs; register_configs();"
             "assert rlcollect.__file__.startswith(sys.argv[1]), rlcollect.__file__;"
             "initialize_config_module('rlcollect.conf', version_base='1.3').__enter__();"
             "print(compose('train', overrides=['env=pendulum']).env.id)")
    result = subprocess.run([sys.executable, "-c", probe, str(unpacked)], cwd=tmp_path,
                            env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True)
    assert result.stdout.strip() == "Pendulum-v1", result.stderr
