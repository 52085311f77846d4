"""Batched sweeps of models that do not stack (rlcollect.sweeps.lockstep): a model class of a
user's own (DQN's and SAC's here, tests/lockstep_models.py) and recurrent PPO whose
sequences do not divide the rollout train their members' solo policies and learners in
lockstep on one collector, each member its solo run bit for bit. (What stacks:
tests/test_sweeps.py for PPO, tests/test_member_dqn.py, test_member_sac.py,
test_member_recurrent.py and test_member_cnn.py for the others.)"""
import json

import pytest
import torch
from commands import rlcollect as cli
from run_states import assert_same_summary_and_checkpoint, metric_rows
from train_configs import train_configs as configs

import rlcollect.testing  # noqa: F401  (registers the rlcollect-test/ envs)
from rlcollect.errors import ConfigError
from rlcollect.sweeps.grouping import check_sweep, lockstep_reason
from rlcollect.sweeps.run import build_sweep

QUIET = ["progress=false", "logger=none", "eval.max_time_share=null", "eval.episodes=2", "env.num_envs=2",
         "total_frames=512", "collector.frames_per_batch=64", "eval.every_frames=256"]
TINY_PPO = ["algo.minibatch_size=32", "algo.epochs=2"]
TINY_REPLAY = ["algo.learning_starts=128", "algo.gradient_steps_per_batch=4", "algo.batch_size=16",
               "buffer.storage.max_size=1024"]
KINDS = {  # each kind of member that trains in lockstep: its overrides, the setting its two members differ in
    "own_dqn": (["algo=dqn", "model._target_=lockstep_models.OwnQValuePolicy", "env.solved_return=null",
                 *TINY_REPLAY, "model.hidden_sizes=[16]", "algo.n_step=3", "algo.prioritized=true"],
                "algo.lr=0.0005"),
    "own_sac": (["algo=sac", "env=pendulum", "model._target_=lockstep_models.OwnSACActor", *TINY_REPLAY,
                 "model.hidden_sizes=[16]", "algo.critic_hidden_sizes=[16]", "algo.batch_size=4"], "algo.gamma=0.9"),
    # 32 steps per env in sequences of 12 (the last of each row 8): minibatches of unequal sizes
    "gru": (["experiment=cartpole_novel_gru", "model._target_=lockstep_models.OwnRecurrentActorCritic", *TINY_PPO,
             "algo.sequence_length=12", "model.hidden_size=16"], "algo.lr=0.001"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_member_in_lockstep_is_its_solo_run_bit_for_bit(tmp_path, kind):
    """Two members (two seeds, and a setting of the algo that differs): each member's metrics,
    evaluations, summary and checkpoint (policy, learner with its optimizers, target networks
    and replay buffer, RNG stream) are its solo run's, bit for bit."""
    from rlcollect.pipeline import build, run

    overrides, differing = KINDS[kind]
    cfgs = configs([*QUIET, *overrides, "seed=3"], [*QUIET, *overrides, "seed=4", differing])
    sweep = build_sweep(cfgs, [tmp_path / "m3", tmp_path / "m4"], [dict(name=None, group=None, job_type=None)] * 2)
    assert type(sweep.policy).__name__ == "LockstepPolicy"
    sweep.run()
    finals = []
    for seed, cfg in zip((3, 4), cfgs):
        run(build(cfg, tmp_path / f"solo{seed}"))
        member, solo = tmp_path / f"m{seed}", tmp_path / f"solo{seed}"
        assert metric_rows(member) == metric_rows(solo)
        rows = metric_rows(solo)
        assert [row["step"] for row in rows] == list(range(64, 513, 64))
        assert any(key.startswith("train/loss") for key in rows[-1]), rows[-1]  # it learnt
        assert [row["step"] for row in rows if "eval/episode_return" in row] == [256, 512]
        assert_same_summary_and_checkpoint(member, solo)
        finals.append(rows[-1])
    assert finals[0] != finals[1]  # two seeds, two runs


def test_what_trains_in_lockstep_and_what_stacks():
    """PPO with the ActorCritic or the recurrent one (its sequences dividing the rollout or
    not), DQN and SAC with theirs stack, with any encoder; a model class of a user's own
    trains in lockstep, and its members may differ in every algo setting the collector does
    not read."""
    own_gru = ("experiment=cartpole_novel_gru", "model._target_=lockstep_models.OwnRecurrentActorCritic")
    cases = {(): None, ("algo=dqn",): None, ("algo=sac", "env=pendulum"): None,
             ("algo=sac", "env=pendulum", "model.encoder=cnn"): None, ("model.encoder=cnn",): None,
             ("experiment=cartpole_novel_gru",): None, ("experiment=cartpole_novel_gru", "model.rnn=lstm"): None,
             ("experiment=cartpole_novel_gru", "algo.sequence_length=12"): None,
             own_gru: "model=own_recurrent_actor_critic",
             ("algo=dqn", "model._target_=lockstep_models.OwnQValuePolicy"): "model=own_q_value_policy",
             ("algo=sac", "env=pendulum", "model._target_=lockstep_models.OwnSACActor"): "model=own_sac_actor"}
    for overrides, reason in cases.items():
        [cfg] = configs(overrides)
        assert lockstep_reason(cfg) == reason, overrides
    gru = [*own_gru, "algo.sequence_length=12"]
    check_sweep(configs([*gru, "seed=0"], [*gru, "seed=1", "algo.lr=0.01", "algo.minibatch_size=32",
                                           "algo.gamma=0.9", "algo.epochs=2"]))
    with pytest.raises(ConfigError, match="differ only in seed and algo.. but algo.learning_starts, algo.n_step"):
        own_sac = ["algo=sac", "env=pendulum", "model._target_=lockstep_models.OwnSACActor"]
        check_sweep(configs([*own_sac, "seed=0"], [*own_sac, "seed=1", "algo.learning_starts=10"]))
    with pytest.raises(ConfigError, match="algo.background=true: a batched sweep collects between"):
        check_sweep(configs(["algo=sac", "env=pendulum", "algo.background=true"]))


@pytest.mark.timeout(300)
def test_a_member_that_stops_leaves_the_others_their_solo_runs(tmp_path):
    """Two GRU members, a solved threshold between their evaluations: the first to reach it
    stops there (its policy is called no more), the other trains on to total_frames; each is
    its solo run with that threshold, bit for bit."""
    from rlcollect.pipeline import build, run

    overrides, _ = KINDS["gru"]
    seeds = range(3, 9)
    evals = {}
    for seed, cfg in zip(seeds, configs(*[[*QUIET, *overrides, f"seed={seed}", "env.solved_return=null"]
                                          for seed in seeds])):
        run(build(cfg, tmp_path / f"probe{seed}"))
        evals[seed] = [row["eval/episode_return"] for row in metric_rows(tmp_path / f"probe{seed}")
                       if "eval/episode_return" in row]
    # two seeds, a threshold the first reaches at its first evaluation and the second never does (seeds 3 and 4
    # here; another CPU's floats may pick others)
    first, other = next((a, b) for a in seeds for b in seeds if a != b and evals[a][0] > max(evals[b]))
    threshold = (evals[first][0] + max(evals[other])) / 2
    pair = (first, other)
    cfgs = configs(*[[*QUIET, *overrides, f"seed={seed}", f"env.solved_return={threshold}"] for seed in pair])
    names = [dict(name=None, group=None, job_type=None)] * 2
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in pair], names)
    sweep.run()
    assert sweep.policy.stopped == {0}
    for seed, cfg in zip(pair, cfgs):
        run(build(cfg, tmp_path / f"solo{seed}"))
        assert metric_rows(tmp_path / f"m{seed}") == metric_rows(tmp_path / f"solo{seed}")
    summaries = [json.loads((tmp_path / f"m{seed}" / "summary.json").read_text()) for seed in pair]
    assert summaries[0]["status"] == "solved" and summaries[0]["frames"] == 256
    assert summaries[1]["status"] == "finished" and summaries[1]["frames"] == 512


@pytest.mark.timeout(300)
def test_recurrent_and_cnn_policies_batch_from_the_command_line(tmp_path):
    """GRU and LSTM PPO, and PPO with a CNN over image observations (the auto encoder, found
    once the env is probed): each group trains as one batched model, every member a
    finished run of its own with its own results."""
    recurrent = cli(tmp_path, "train", "--multirun", "seed=0,1", "experiment=cartpole_novel_gru", "model.rnn=gru,lstm",
                    "hydra/launcher=batched", *QUIET, *TINY_PPO, "algo.sequence_length=8", "model.hidden_size=16",
                    "hydra.sweep.dir=recurrent")
    images = cli(tmp_path, "train", "--multirun", "seed=0,1,2,3", "hydra/launcher=batched", *QUIET, *TINY_PPO,
                 "env.id=rlcollect-test/Spaces-image_hwc-discrete-v0", "env.imports=[rlcollect.testing]",
                 "env.solved_return=null", "hydra.sweep.dir=images")
    for result in (recurrent, images):
        assert result.returncode == 0, result.stderr
    output = recurrent.stdout + recurrent.stderr
    assert "jobs #0, #2 train as one batched model of 2 members" in output  # Hydra's order: seed, then model.rnn
    assert "jobs #1, #3 train as one batched model of 2 members" in output and "lockstep" not in output
    output = images.stdout + images.stderr
    assert "jobs #0-#3 train as one batched model of 4 members" in output and "lockstep" not in output
    for sweep in ("recurrent", "images"):
        # an env id with a slash makes Hydra's job folder name a nested path: the run folders are where summaries are
        members = sorted((path.parent for path in (tmp_path / sweep).rglob("summary.json")),
                         key=lambda path: int(path.relative_to(tmp_path / sweep).parts[0].split("_")[0]))
        assert len(members) == 4
        summaries = [json.loads((member / "summary.json").read_text()) for member in members]
        assert [(summary["status"], summary["frames"]) for summary in summaries] == [("finished", 512)] * 4
        assert len({json.dumps(metric_rows(member)[-1]) for member in members}) == 4


def test_members_whose_rows_are_idle_or_stopped_are_not_called():
    """LockstepPolicy: a member whose rows an evaluation has paused (rows_idle), or that
    stopped, is not called and its rows take a called member's outputs; the others run on
    their own rows; with no row idle every member runs again."""
    from tensordict import TensorDict

    from rlcollect.sweeps.lockstep import LockstepPolicy, MemberStreams

    class Recorder(torch.nn.Module):
        in_keys, out_keys = ["observation"], ["action"]

        def __init__(self, offset):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(()))
            self.offset, self.calls = offset, []

        def forward(self, tensordict):
            self.calls.append(tensordict.get("observation").tolist())
            tensordict.set("action", tensordict.get("observation") + self.offset)
            return tensordict

    streams = MemberStreams()
    policies = [Recorder(100 * member) for member in range(3)]
    for _ in policies:
        streams.capture()
    policy = LockstepPolicy(policies, streams)
    rows = TensorDict({"observation": torch.arange(6)}, batch_size=[6])
    assert policy(rows.clone())["action"].tolist() == [0, 1, 102, 103, 204, 205]
    policy.rows_idle([0, 1, 2])  # member 0's two rows (and one of member 1's)
    assert policy(rows.clone())["action"].tolist() == [102, 103, 102, 103, 204, 205]
    policy.stop_member(2)
    assert policy(rows.clone())["action"].tolist() == [102, 103, 102, 103, 102, 103]
    policy.rows_idle(())  # the first member called stands in for the stopped one
    assert policy(rows.clone())["action"].tolist() == [0, 1, 102, 103, 0, 1]
    assert [len(recorder.calls) for recorder in policies] == [2, 4, 2]


@pytest.mark.timeout(300)
def test_a_lockstep_sweep_resumes_in_lockstep_and_says_so(tmp_path):
    """The members of a model that does not stack resume as they trained, in lockstep, and
    the resume's line says that (not 'as one batched model')."""
    from pathlib import Path

    overrides, _ = KINDS["own_dqn"]
    tests = Path(__file__).parent
    first = cli(tmp_path, "train", "--multirun", "seed=3,4", "hydra/launcher=batched", *QUIET, *overrides,
                "total_frames=256", "hydra.sweep.dir=sw", pythonpath=tests)
    assert first.returncode == 0, first.stderr
    resumed = cli(tmp_path, "train", "resume=sw", "total_frames=384", pythonpath=tests)
    assert resumed.returncode == 0, resumed.stderr
    lines = [line.split(" - ", 1)[-1] for line in resumed.stdout.splitlines()]
    assert ("jobs #0, #1 at frame 256 resume in lockstep in one process, each member its own model "
            "(model=own_q_value_policy does not stack)") in lines, resumed.stdout
    for folder in (tmp_path / "sw").glob("*_*"):
        assert json.loads((folder / "summary.json").read_text())["frames"] == 384
