"""DQN's members stacked into one model (rlcollect.sweeps.member_dqn): one member is its solo
run bit for bit, every member's update is its solo run's on its own samples, and a sweep or
a tuning study of DQN trains as one batched model from the command line."""
import json

import pytest
from commands import rlcollect as cli
from run_states import assert_member_is_its_solo_run, assert_members_near_solo_runs, assert_pbt_sweep, metric_rows
from train_configs import train_configs

from rlcollect.checkpoint import load_checkpoint
from rlcollect.errors import ConfigError
from rlcollect.sweeps.grouping import check_sweep, member_options
from rlcollect.sweeps.run import build_sweep

TINY = ["algo=dqn", "progress=false", "logger=none", "eval.max_time_share=null", "eval.episodes=2", "env.num_envs=2",
        "total_frames=1024", "collector.frames_per_batch=128", "eval.every_frames=256", "algo.learning_starts=256",
        "algo.gradient_steps_per_batch=4", "algo.batch_size=16", "model.hidden_sizes=[32]"]
NAMES = dict(name=None, group=None, job_type=None)


def configs(*overrides_per_member):
    return train_configs(*overrides_per_member, base=TINY)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("overrides", [[], ["algo.n_step=3", "algo.prioritized=true", "algo.target_update=polyak",
                                            "model.normalize_observation=true"]],
                         ids=["double_periodic", "nstep_prioritized_polyak_normalized"])
def test_one_member_is_its_solo_run_bit_for_bit(tmp_path, overrides):
    """A stacked model of one member: the same metrics, evaluations, summary and checkpoint
    (Q network, Adam state, target network, replay buffer, RNG stream) as the solo run."""
    [cfg] = configs([*overrides, "seed=3"])
    sweep = build_sweep([cfg], [tmp_path / "member"], [NAMES])
    assert type(sweep.policy).__name__ == "MemberQPolicy"
    sweep.run()
    assert_member_is_its_solo_run(cfg, tmp_path / "member", tmp_path / "solo", list(range(128, 1025, 128)),
                                  "train/loss_q")


@pytest.mark.timeout(300)
def test_the_members_full_replay_buffers_are_checkpointed_in_place(tmp_path, storage_saves):
    """Each member's 256-step buffer, full at its last checkpoint, is saved as it is (the
    shared collector writes only while the sweep iterates it), and holds its own steps."""
    cfgs = configs(["seed=3", "buffer.storage.max_size=256"], ["seed=4", "buffer.storage.max_size=256"])
    build_sweep(cfgs, [tmp_path / "m3", tmp_path / "m4"], [NAMES] * 2).run()
    assert storage_saves[-2:] == [(True, True), (True, True)]  # the two members' last checkpoints
    buffers = [load_checkpoint(tmp_path / member / "checkpoint.pt")["learner"]["replay_buffer"]["storage"]
               for member in ("m3", "m4")]
    assert [(buffer["filled"], buffer["write_count"]) for buffer in buffers] == [(256, 1024), (256, 1024)]
    assert not (buffers[0]["data"]["observation"] == buffers[1]["data"]["observation"]).all()  # its own steps


@pytest.mark.timeout(300)
def test_each_member_updates_as_its_solo_run_with_its_own_settings(tmp_path):
    """Three members, differing in seed, lr, gamma, the epsilon schedule's end, the target
    period and the batch size (16, 24 and 8: the smaller samples padded, their padding
    weighing nothing, in the losses, the priorities of prioritized replay and the observation
    statistics alike): each member's metrics are its solo run's (its own samples,
    exploration, update and target copies), to float32 rounding of a batched matrix product."""
    replay = ["algo.prioritized=true", "model.normalize_observation=true"]  # priorities, statistics: real samples
    cfgs = configs([*replay, "seed=3"], [*replay, "seed=4", "algo.lr=0.0005", "algo.gamma=0.9", "algo.batch_size=24"],
                   [*replay, "seed=5", "algo.eps_end=0.2", "algo.target_update_period=3", "algo.batch_size=8"])
    assert member_options(cfgs) == {"lr": [0.0023, 0.0005, 0.0023], "gamma": [0.99, 0.9, 0.99],
                                    "target_update_period": [128, 128, 3], "eps_end": [0.04, 0.04, 0.2],
                                    "batch_size": [16, 24, 8]}
    build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in (3, 4, 5)], [NAMES] * 3).run()
    finals = assert_members_near_solo_runs(tmp_path, cfgs, (3, 4, 5), list(range(128, 1025, 128)), abs_tol=1e-6)
    # epsilon 1 -> eps_end over 8,000 frames: at frame 1,024, 12.8% of the way
    assert [final["train/epsilon"] for final in finals] == pytest.approx([0.87712, 0.87712, 0.8976])


def test_members_of_one_dqn_model_differ_in_its_per_member_settings_only():
    check_sweep(configs(["seed=0"], ["seed=1", "algo.lr=0.01", "algo.tau=0.01", "algo.max_grad_norm=1",
                                     "algo.eps_start=0.5", "algo.eps_decay_frames=100"]))
    with pytest.raises(ConfigError, match="differ only in seed and algo.lr, algo.gamma, algo.tau, .*, algo.batch_size"):
        check_sweep(configs(["seed=0"], ["seed=1", "algo.double_dqn=false"]))
    with pytest.raises(ConfigError, match="differ only in seed"):  # n-step returns: the collector discounts
        check_sweep(configs(["seed=0", "algo.n_step=3"], ["seed=1", "algo.n_step=3", "algo.gamma=0.9"]))


@pytest.mark.timeout(300)
def test_a_dqn_sweep_and_a_dqn_study_train_as_batched_models_from_the_command_line(tmp_path):
    """Two seeds x two learning rates: one batched model of 4 members, four runs of their own
    in solo shapes; a tuning study in pairs of trials (batch sizes among them): two models
    of 2, every value in the study."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    result = cli(tmp_path, "train", "--multirun", "seed=0,1", "algo.lr=0.001,0.003", "hydra/launcher=batched",
                 *TINY, "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert "jobs #0-#3 train as one batched model of 4 members" in result.stdout + result.stderr
    members = sorted((tmp_path / "sw").glob("*_*"), key=lambda path: int(path.name.split("_")[0]))
    assert [json.loads((member / "summary.json").read_text())["frames"] for member in members] == [1024] * 4
    assert len({json.dumps(metric_rows(member)[-1]) for member in members}) == 4
    checkpoint = load_checkpoint(members[1] / "checkpoint.pt")
    assert checkpoint["policy"]["q_net.0.weight"].shape == (32, 4) and checkpoint["policy"]["epsilon"].shape == ()
    assert checkpoint["learner"]["dqn"]["target"]["q_net.0.weight"].shape == (32, 4)
    storage = f"sqlite:///{tmp_path / 't.db'}"
    study = cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_dqn", "hydra/launcher=batched",
                "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", f"hydra.sweeper.storage={storage}",
                "algo.batch_size=choice(8,16)", *TINY, "hydra.sweep.dir=study")
    assert study.returncode == 0, study.stderr
    assert (study.stdout + study.stderr).count("train as one batched model of 2 members") == 2
    trials = optuna.load_study(study_name="rlcollect", storage=storage).trials
    assert [trial.state.name for trial in trials] == ["COMPLETE"] * 4
    for trial in trials:
        [summary] = [json.loads(path.read_text())
                     for path in (tmp_path / "study").glob(f"{trial.number}_*/summary.json")]
        assert summary["status"] == "finished" and trial.value == summary["final_eval_return"]


# ---------------------------------------------------------------------------- population-based training
def test_pbt_s_exploit_copies_a_dqn_member_s_state_and_explores_its_settings(tmp_path):
    """Four DQN members after a few updates, members 1 and 3 at the bottom: each takes its
    drawn parent's Q network, target network, observation statistics and Adam state, and
    the parent's lr and epsilon end perturbed; its replay buffer and RNG stream stay its own;
    the next update steps it at its new lr."""
    import random

    import torch

    from rlcollect.sweeps.pbt import clamped, exploit_and_explore, setting_ranges
    from rlcollect.sweeps.pbt_options import PBTOptions

    lrs, ends = [0.001, 0.002, 0.003, 0.0005], [0.05, 0.1, 0.02, 0.2]
    cfgs = configs(*[[f"seed={seed}", f"algo.lr={lrs[seed]}", f"algo.eps_end={ends[seed]}",
                      "model.normalize_observation=true", "algo.learning_starts=128"] for seed in range(4)])
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in range(4)], [NAMES] * 4)
    learner = sweep.learner
    for frames, batch in zip((128, 256), sweep.collector):
        learner.learn(batch, frames)

    def state(member):
        dqn = learner.dqn
        values = {f"q/{key}": value[member].clone() for key, value in dqn.q_policy.state_dict().items()}
        values.update({f"target/{key}": value[member].clone() for key, value in dqn.target.state_dict().items()})
        values.update({"adam/exp_avg": dqn.optimizer.exp_avg[member].clone(),
                       "adam/exp_avg_sq": dqn.optimizer.exp_avg_sq[member].clone(),
                       "adam/step": torch.tensor(dqn.optimizer.steps[member])})
        return values

    def own(member):
        buffer = learner.replay_buffer.buffers[member]
        return {"buffer": buffer.state_dict(include_storage=True)["storage"]["data"]["observation"][:len(buffer)],
                "rng": sweep.policy.streams.generators[member].get_state()}

    before, kept = [state(m) for m in range(4)], [own(m) for m in range(4)]
    keys = ["lr", "eps_end"]
    ranges = {key: setting_ranges(cfgs[0])[key] for key in keys}
    replacements = exploit_and_explore(learner, {0: 5.0, 1: -1.0, 2: 9.0, 3: 0.0}, keys, ranges,
                                       PBTOptions(every_frames=128, quantile=0.5), random.Random(3))
    draws, expected = random.Random(3), {}
    for member in (1, 3):
        parent = draws.choice([0, 2])
        expected[member] = (parent, {key: clamped([lrs, ends][index][parent] * draws.choice((0.8, 1.2)),
                                                  ranges[key]) for index, key in enumerate(keys)})
    assert [(r.member, r.parent, r.settings) for r in replacements] == [(m, *expected[m]) for m in (1, 3)]
    for member in range(4):
        source = expected[member][0] if member in expected else member
        for key, value in state(member).items():
            assert torch.equal(value, before[source][key]), (member, key)
        assert torch.equal(own(member)["buffer"], kept[member]["buffer"])
        assert torch.equal(own(member)["rng"], kept[member]["rng"])
        settings = expected[member][1] if member in expected else {"lr": lrs[member], "eps_end": ends[member]}
        assert {key: learner.member_setting(member, key) for key in keys} == settings
    batch = next(iter(sweep.collector))
    learner.learn(batch, 384)
    assert learner.dqn.optimizer.lrs == [learner.member_setting(m, "lr") for m in range(4)]
    sweep.shutdown()


@pytest.mark.timeout(300)
def test_a_dqn_pbt_sweep_writes_its_events_and_settings(tmp_path):
    """Four learning rates of DQN, PBT every 256 frames: an event at 256, 512 and 768 (one
    member of four each time, none at the last batch), each lr a parent's lr times 0.8 or
    1.2, every member's rows carry the lr it trained with, its summary its parents."""
    lrs = [0.0005, 0.001, 0.002, 0.004]
    result = cli(tmp_path, "train", "--multirun", f"algo.lr={','.join(map(str, lrs))}", "hydra/launcher=batched",
                 "hydra.launcher.pbt.every_frames=256", *TINY, "env.solved_return=null", "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    for member in assert_pbt_sweep(tmp_path / "sw", "algo.lr", lrs, [256, 512, 768]):
        rows = metric_rows(member)
        assert [row["step"] for row in rows if "eval/episode_return" in row] == [256, 512, 768, 1024]
