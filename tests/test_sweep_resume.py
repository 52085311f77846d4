"""A batched sweep resumed as one batched model (docs/sweeps.md, "Resuming a sweep"): each
member's checkpoint loaded into its rows of the stacked parts (or its solo parts, in
lockstep), the inverse of what its checkpoints save."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from train_configs import train_configs as configs

from rlcollect.checkpoint import load_checkpoint
from rlcollect.errors import ConfigError
from rlcollect.pipeline import build, resume, run
from rlcollect.sweeps.run import build_sweep

NAMES = dict(name=None, group=None, job_type=None)
TIMING_KEYS = ("time", "_timestamp", "_runtime")
QUIET = ["progress=false", "logger=none", "eval.max_time_share=null", "eval.episodes=2", "env.num_envs=2",
         "total_frames=256", "collector.frames_per_batch=64", "eval.every_frames=128", "env.solved_return=null"]
REPLAY = ["algo.learning_starts=64", "algo.gradient_steps_per_batch=2", "algo.batch_size=16",
          "buffer.storage.max_size=1024"]
KINDS = {  # each kind of batched model: its overrides
    "ppo": ["algo.minibatch_size=32", "algo.epochs=2", "algo.normalize_reward=true"],
    "recurrent_ppo": ["experiment=cartpole_novel_gru", "algo.minibatch_size=32", "algo.epochs=2",
                      "algo.sequence_length=8", "model.hidden_size=16"],
    "dqn": ["algo=dqn", *REPLAY, "model.hidden_sizes=[16]"],
    "sac": ["algo=sac", "env=pendulum", *REPLAY, "model.hidden_sizes=[16]", "algo.critic_hidden_sizes=[16]"],
    "lockstep": ["algo=dqn", "model._target_=lockstep_models.OwnQValuePolicy", *REPLAY, "model.hidden_sizes=[16]"],
}


def metric_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{key: value for key, value in row.items() if not key.startswith(TIMING_KEYS) and "per_second" not in key}
            for row in rows]


def resumed_config(run_dir: Path, total_frames: int):
    cfg = OmegaConf.load(run_dir / "config.yaml")
    cfg.total_frames = total_frames
    return cfg


def assert_same_tensors(first, second, where: str = "") -> None:
    if torch.is_tensor(second):
        assert torch.equal(first, second), where
    elif isinstance(second, dict):
        assert set(first) == set(second), where
        for key in second:
            assert_same_tensors(first[key], second[key], f"{where}.{key}")
    elif isinstance(second, (list, tuple)):
        assert len(first) == len(second), where
        for index, (a, b) in enumerate(zip(first, second)):
            assert_same_tensors(a, b, f"{where}[{index}]")
    else:
        assert first == second, where


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", list(KINDS))
def test_one_member_resumed_as_a_batched_model_is_its_solo_resume_bit_for_bit(tmp_path, kind):
    """A run trained to 256 frames, then resumed to 512 twice from the same files: as a solo
    run (lifecycle.resume) and as a batched model of one member (build_sweep with its
    checkpoint). The same metric rows, summary and final checkpoint: policy, optimizers,
    target networks, replay buffer, RNG stream."""
    [cfg] = configs([*QUIET, *KINDS[kind], "seed=5"])
    run(build(cfg, tmp_path / "first"))
    for name in ("solo", "member"):
        shutil.copytree(tmp_path / "first", tmp_path / name)
    run(resume(tmp_path / "solo", overrides={"total_frames": 512}))
    member = tmp_path / "member"
    sweep = build_sweep([resumed_config(member, 512)], [member], [NAMES],
                        checkpoints=[load_checkpoint(member / "checkpoint.pt")])
    assert type(sweep.policy).__name__ == ("LockstepPolicy" if kind == "lockstep" else
                                           {"dqn": "MemberQPolicy", "sac": "MemberSACActor"}.get(kind, "MemberPolicy"))
    sweep.run()
    rows = metric_rows(member)
    assert [row["step"] for row in rows] == list(range(64, 513, 64))
    assert rows == metric_rows(tmp_path / "solo")
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (member, tmp_path / "solo")]
    for key in ("status", "frames", "final_eval_return", "best_eval_return", "checkpoint_frames"):
        assert summaries[0][key] == summaries[1][key], key
    assert summaries[0]["frames"] == 512
    checkpoints = [load_checkpoint(folder / "checkpoint.pt") for folder in (member, tmp_path / "solo")]
    for key in ("frames", "policy", "learner", "rng"):
        assert_same_tensors(checkpoints[0][key], checkpoints[1][key], key)


def test_members_at_other_frames_are_refused_in_one_line(tmp_path):
    cfgs = configs([*QUIET, *KINDS["ppo"], "seed=0"], [*QUIET, *KINDS["ppo"], "seed=1"])
    run(build(cfgs[0], tmp_path / "a"))
    run(build(configs([*QUIET, *KINDS["ppo"], "seed=1", "total_frames=128"])[0], tmp_path / "b"))
    with pytest.raises(ConfigError, match="resume from checkpoints at one frame; these are at 256, 128"):
        build_sweep([resumed_config(tmp_path / "a", 512), resumed_config(tmp_path / "b", 512)],
                    [tmp_path / "a", tmp_path / "b"], [NAMES] * 2,
                    checkpoints=[load_checkpoint(tmp_path / folder / "checkpoint.pt") for folder in "ab"])


def without_param_groups(state):
    """A learner state without its optimizers' param groups (their lr is the one of the last
    update, which a resumed learner sets again before its next)."""
    if isinstance(state, dict):
        return {key: without_param_groups(value) for key, value in state.items() if key != "param_groups"}
    return state


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind, differing", [("ppo", None), ("ppo", "algo.lr"), ("dqn", None), ("sac", "algo.tau"),
                                             ("lockstep", None)])
def test_three_members_resume_as_one_model_from_their_checkpoints(tmp_path, kind, differing):
    """Three members trained as one model to 256 frames, then built again from their
    checkpoints: each member's state, as its checkpoint saves it, is its checkpoint's
    (policy, optimizers, target networks, replay buffer, RNG stream; torch's fused Adam
    where the members share their lr, MemberAdam where they differ), and the model trains
    on to 512 frames, each member's rows following its first part's."""
    settings = {"algo.lr": ["0.001", "0.0005", "0.002"], "algo.tau": ["0.005", "0.01", "0.02"]}
    cfgs = configs(*[[*QUIET, *KINDS[kind], f"seed={seed}",
                      *([f"{differing}={settings[differing][seed]}"] if differing else [])] for seed in range(3)])
    folders = [tmp_path / f"m{seed}" for seed in range(3)]
    build_sweep(cfgs, folders, [NAMES] * 3).run()
    first = [metric_rows(folder) for folder in folders]
    checkpoints = [load_checkpoint(folder / "checkpoint.pt") for folder in folders]
    sweep = build_sweep([resumed_config(folder, 512) for folder in folders], folders, [NAMES] * 3,
                        checkpoints=checkpoints)
    for pipeline, checkpoint in zip(sweep.pipelines, checkpoints):
        state = pipeline.state_dict(0.0)
        assert_same_tensors(state["policy"], checkpoint["policy"], "policy")
        assert_same_tensors(without_param_groups(state["learner"]), without_param_groups(checkpoint["learner"]),
                            "learner")
        assert_same_tensors(state["rng"]["torch"], checkpoint["rng"]["torch"], "rng")
        assert state["frames"] == 256 and state["collector"]["frames"] == 256
    assert sweep.collector.frames == 3 * 256
    sweep.run()
    for folder, rows in zip(folders, first):
        resumed = metric_rows(folder)
        assert [row["step"] for row in resumed] == list(range(64, 513, 64))
        assert resumed[:len(rows)] == rows
        assert json.loads((folder / "summary.json").read_text())["frames"] == 512
