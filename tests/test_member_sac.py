"""SAC's members stacked into one model (rlcollect.sweeps.member_sac): one member is its solo
run bit for bit, every member's update is its solo run's on its own samples with its own
settings, and a sweep, a tuning study and a PBT sweep of SAC train as one batched model
from the command line."""
import json
import math

import pytest
import torch
from commands import rlcollect as cli
from run_states import assert_member_is_its_solo_run, assert_members_near_solo_runs, assert_pbt_sweep, metric_rows
from train_configs import train_configs

from rlcollect.checkpoint import load_checkpoint
from rlcollect.errors import ConfigError
from rlcollect.sweeps.grouping import check_sweep, member_options
from rlcollect.sweeps.run import build_sweep

TINY = ["algo=sac", "env=pendulum", "progress=false", "logger=none", "eval.max_time_share=null", "eval.episodes=2",
        "env.num_envs=2", "total_frames=512", "collector.frames_per_batch=64", "eval.every_frames=256",
        "algo.learning_starts=128", "algo.gradient_steps_per_batch=4", "algo.batch_size=16",
        "buffer.storage.max_size=1024", "model.hidden_sizes=[16]", "algo.critic_hidden_sizes=[16]"]
NAMES = dict(name=None, group=None, job_type=None)
STEPS = list(range(64, 513, 64))


def configs(*overrides_per_member):
    return train_configs(*overrides_per_member, base=TINY)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("overrides", [[], ["algo.n_step=3", "algo.prioritized=true", "algo.autotune=false",
                                            "model.normalize_observation=true", "algo.policy_frequency=1"]],
                         ids=["autotune", "nstep_prioritized_fixed_alpha_normalized"])
def test_one_member_is_its_solo_run_bit_for_bit(tmp_path, overrides):
    """A stacked model of one member: the same metrics, evaluations, summary and checkpoint
    (actor, critics, target critics, the three Adams, alpha, replay buffer, RNG stream) as
    the solo run; with prioritized replay, the replay buffer's priorities too, which its
    critics' TD errors set."""
    [cfg] = configs([*overrides, "seed=3"])
    sweep = build_sweep([cfg], [tmp_path / "member"], [NAMES])
    assert type(sweep.policy).__name__ == "MemberSACActor"
    sweep.run()
    assert_member_is_its_solo_run(cfg, tmp_path / "member", tmp_path / "solo", STEPS, "train/loss_q")
    if "algo.prioritized=true" in overrides:  # the TD errors were fed back: not every priority the first max (1.0)
        sampler = load_checkpoint(tmp_path / "member" / "checkpoint.pt")["learner"]["replay_buffer"]["sampler"]
        stored = sampler["priority"][sampler["priority"] > 0]  # (p + eps) ** alpha per stored transition
        assert len(stored) >= 500 and len(set(stored.tolist())) > 100 and sampler["max_priority"] > 1.0


@pytest.mark.timeout(300)
def test_each_member_gives_its_own_replay_buffer_its_own_td_errors_as_priorities(tmp_path):
    """Two members with prioritized replay (seeds 3 and 4, batch sizes 16 and 12: the
    second's samples padded to 16): after each batch's gradient steps, the transitions each
    member sampled last (its real ones) hold its own TD errors as priorities in its own
    replay buffer, (|TD error| + eps) ** alpha as PrioritizedSampler stores them."""
    cfgs = configs(["seed=3", "algo.prioritized=true"], ["seed=4", "algo.prioritized=true", "algo.batch_size=12"])
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in (3, 4)], [NAMES] * 2)
    try:
        learner = sweep.learner
        buffers = learner.replay_buffer.buffers
        assert learner.prioritized and all(buffer.prioritized for buffer in buffers)
        steps, update = [], learner.update

        def recorded_update(batch):
            metrics = update(batch)
            steps.append((batch.get("index"), metrics["td_error"]))
            return metrics

        learner.update = recorded_update
        for frames, batch in zip((64, 128, 192), sweep.collector):
            learner.learn(batch, frames)
            if frames < 128:  # algo.learning_starts
                assert steps == []
                continue
            index, td_error = steps[-1]
            assert index.shape == td_error.shape == (2, 16)
            for member, (buffer, size) in enumerate(zip(buffers, (16, 12))):
                sampler = buffer.sampler
                priority = sampler.state_dict()["priority"]
                ours, expected = index[member, :size], (td_error[member, :size].double() + sampler.eps) ** sampler.alpha
                for position in ours.unique().tolist():  # a position drawn twice holds one of its two
                    assert priority[position].item() in expected[ours == position].tolist(), (frames, member)
                unique = [j for j in range(size) if int((ours == ours[j]).sum()) == 1]
                assert len(unique) > size // 2
                assert [priority[ours[j]].item() for j in unique] == [expected[j].item() for j in unique]
        assert len(steps) == 8  # 4 gradient steps at 128 and at 192
        priorities = [buffer.sampler.state_dict()["priority"][:len(buffer)] for buffer in buffers]
        assert all(len(set(priority.tolist())) > 1 for priority in priorities)
        assert not torch.equal(*priorities)
    finally:
        sweep.shutdown()


@pytest.mark.timeout(300)
def test_each_member_updates_as_its_solo_run_with_its_own_settings(tmp_path):
    """Three members differing in seed, both learning rates, gamma, tau, alpha's start,
    whether alpha is tuned and the batch size (12 against 16: its samples padded, its noise
    drawn for its 12 alone): each member's metrics are its solo run's (its own samples, noise,
    updates and targets), to float32 rounding of a batched matrix product."""
    cfgs = configs(["seed=3"], ["seed=4", "algo.actor_lr=0.001", "algo.gamma=0.9", "algo.alpha=0.5"],
                   ["seed=5", "algo.critic_lr=0.003", "algo.tau=0.05", "algo.autotune=false", "algo.batch_size=12"])
    assert member_options(cfgs) == {"gamma": [0.99, 0.9, 0.99], "tau": [0.005, 0.005, 0.05],
                                    "actor_lr": [0.0003, 0.001, 0.0003], "critic_lr": [0.001, 0.001, 0.003],
                                    "alpha": [0.2, 0.5, 0.2], "autotune": [1, 1, 0], "batch_size": [16, 16, 12]}
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in (3, 4, 5)], [NAMES] * 3)
    assert type(sweep.learner.actor_optimizer).__name__ == "MemberAdam"
    sweep.run()
    finals = assert_members_near_solo_runs(tmp_path, cfgs, (3, 4, 5), STEPS)
    checkpoint = load_checkpoint(tmp_path / "m4" / "checkpoint.pt")["learner"]
    solo = load_checkpoint(tmp_path / "solo4" / "checkpoint.pt")["learner"]
    assert checkpoint["critics"]["0.q.0.weight"].shape == solo["critics"]["0.q.0.weight"].shape == (16, 4)
    assert checkpoint["log_alpha"].shape == () and checkpoint["updates"] == solo["updates"] == 4 * 7  # from 128 on
    assert checkpoint["actor_optimizer"]["param_groups"][0]["lr"] == 0.001
    assert checkpoint["log_alpha"].item() == pytest.approx(solo["log_alpha"].item(), rel=1e-4)
    fixed = load_checkpoint(tmp_path / "m5" / "checkpoint.pt")["learner"]  # autotune=false: alpha stays
    assert fixed["alpha_optimizer"] == {} and fixed["log_alpha"].item() == pytest.approx(math.log(0.2))
    assert "train/loss_alpha" not in finals[2] and "train/loss_alpha" in finals[1]


def test_members_of_one_sac_model_differ_in_its_per_member_settings_only():
    check_sweep(configs(["seed=0"], ["seed=1", "algo.actor_lr=0.01", "algo.tau=0.01", "algo.alpha=0.1"]))
    with pytest.raises(ConfigError, match="differ only in seed and algo.gamma, algo.tau, algo.actor_lr, "
                                          "algo.critic_lr, algo.alpha, algo.autotune, algo.batch_size"):
        check_sweep(configs(["seed=0"], ["seed=1", "algo.policy_frequency=1"]))
    with pytest.raises(ConfigError, match="differ only in seed"):  # n-step returns: the collector discounts
        check_sweep(configs(["seed=0", "algo.n_step=3"], ["seed=1", "algo.n_step=3", "algo.gamma=0.9"]))


@pytest.mark.timeout(300)
def test_a_sac_sweep_trains_as_one_batched_model_from_the_command_line_and_a_member_resumes_alone(tmp_path):
    """Two seeds x two critic learning rates of SAC: one line says they train as one batched
    model; four finished runs of their own in solo shapes, four different results; one
    resumes alone as a solo run."""
    result = cli(tmp_path, "train", "--multirun", "seed=0,1", "algo.critic_lr=0.001,0.003", "hydra/launcher=batched",
                 *TINY, "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert "jobs #0-#3 train as one batched model of 4 members" in result.stdout + result.stderr
    members = sorted((tmp_path / "sw").glob("*_*"), key=lambda path: int(path.name.split("_")[0]))
    summaries = [json.loads((member / "summary.json").read_text()) for member in members]
    assert [(summary["status"], summary["frames"]) for summary in summaries] == [("finished", 512)] * 4
    assert len({json.dumps(metric_rows(member)[-1]) for member in members}) == 4
    checkpoint = load_checkpoint(members[3] / "checkpoint.pt")
    assert checkpoint["policy"]["trunk.0.weight"].shape == (16, 3)
    assert checkpoint["learner"]["critic_optimizer"]["param_groups"][0]["lr"] == 0.003
    resumed = cli(tmp_path, "train", f"resume={members[2]}", "total_frames=640")
    assert resumed.returncode == 0, resumed.stderr
    assert [row["step"] for row in metric_rows(members[2])] == list(range(64, 641, 64))


@pytest.mark.timeout(300)
def test_a_sac_tuning_study_trains_each_batch_of_trials_as_one_batched_model(tmp_path):
    """hydra/sweeper=tune_sac hydra/launcher=batched n_jobs=2: each pair of trials (different
    learning rates, tau, gamma, alpha, autotune, batch sizes) trains as one batched model,
    and every trial's value reaches the study."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    storage = f"sqlite:///{tmp_path / 't.db'}"
    result = cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_sac", "hydra/launcher=batched",
                 "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", f"hydra.sweeper.storage={storage}",
                 "algo.batch_size=choice(8,16)", *TINY, "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert (result.stdout + result.stderr).count("train as one batched model of 2 members") == 2
    trials = optuna.load_study(study_name="rlcollect", storage=storage).trials
    assert [trial.state.name for trial in trials] == ["COMPLETE"] * 4
    assert len({trial.params["algo.critic_lr"] for trial in trials}) == 4
    for trial in trials:
        [summary] = [json.loads(path.read_text()) for path in (tmp_path / "sw").glob(f"{trial.number}_*/summary.json")]
        assert summary["status"] == "finished" and trial.value == summary["final_eval_return"]


@pytest.mark.timeout(300)
def test_a_sac_pbt_sweep_writes_its_events_and_settings(tmp_path):
    """Four critic learning rates of SAC, PBT every 256 frames (one event, at 256): its lr
    is its parent's times 0.8 or 1.2, every member's rows carry the lr it trained with, its
    summary its parents. An eval.max_time_share that would skip every evaluation but the
    last is off: PBT ranks the members on their evaluations."""
    lrs = [0.0005, 0.001, 0.002, 0.004]
    tiny = [override for override in TINY if not override.startswith("eval.max_time_share")]
    result = cli(tmp_path, "train", "--multirun", f"algo.critic_lr={','.join(map(str, lrs))}",
                 "hydra/launcher=batched", "hydra.launcher.pbt.every_frames=256", *tiny, "env.solved_return=null",
                 "eval.max_time_share=1e-9", "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert ("population-based training ranks the members on every evaluation: eval.max_time_share=1e-09 is off"
            in result.stdout + result.stderr)
    # one of four members at 256 (none at the last batch)
    for member in assert_pbt_sweep(tmp_path / "sw", "algo.critic_lr", lrs, [256]):
        assert [row["step"] for row in metric_rows(member) if "eval/episode_return" in row] == [256, 512]
        assert "max_time_share: null" in (member / "config.yaml").read_text()
        assert "evaluations_skipped" not in json.loads((member / "summary.json").read_text())


def test_pbt_s_exploit_copies_a_sac_member_s_state_and_explores_its_settings(tmp_path):
    """Four SAC members after a few updates, members 1 and 3 at the bottom: each takes its
    drawn parent's actor (observation statistics included), critics, target critics, alpha
    and Adam states, and the parent's critic lr and alpha perturbed; its replay buffer and
    RNG stream stay its own."""
    import random

    import torch

    from rlcollect.sweeps.optim import MemberAdam
    from rlcollect.sweeps.pbt import clamped, exploit_and_explore, setting_ranges
    from rlcollect.sweeps.pbt_options import PBTOptions

    lrs, alphas = [0.001, 0.002, 0.003, 0.0005], [0.1, 0.2, 0.3, 0.4]
    cfgs = configs(*[[f"seed={seed}", f"algo.critic_lr={lrs[seed]}", f"algo.alpha={alphas[seed]}",
                      "model.normalize_observation=true"] for seed in range(4)])
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in range(4)], [NAMES] * 4)
    learner = sweep.learner
    for frames, batch in zip((64, 128, 192), sweep.collector):
        learner.learn(batch, frames)

    def state(member):
        values = {f"{name}/{key}": value[member].clone() for name, module in
                  (("actor", sweep.policy.stacked), ("critics", learner.critics), ("targets", learner.targets))
                  for key, value in module.state_dict().items()}
        values["log_alpha"] = learner.log_alpha[member].detach().clone()
        for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
            optimizer = getattr(learner, name)
            if isinstance(optimizer, MemberAdam):  # the critics: the members differ in critic_lr
                values[f"{name}/exp_avg"] = optimizer.exp_avg[member].clone()
                values[f"{name}/step"] = torch.tensor(optimizer.steps[member])
            else:  # torch's fused Adam: each parameter's moments, a row per member
                parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
                for index, parameter in enumerate(parameters):
                    values[f"{name}/{index}"] = optimizer.state[parameter]["exp_avg"][member].clone()
        return values

    def own(member):
        buffer = learner.replay_buffer.buffers[member]
        return {"buffer": buffer.state_dict(include_storage=True)["storage"]["data"]["observation"][:len(buffer)],
                "rng": sweep.policy.streams.generators[member].get_state()}

    before, kept = [state(m) for m in range(4)], [own(m) for m in range(4)]
    assert learner.updates == 8 and "actor_optimizer/0" in before[0]  # two batches of 4 steps from frame 128
    keys = ["critic_lr", "alpha"]
    ranges = {key: setting_ranges(cfgs[0])[key] for key in keys}
    current = {member: {key: learner.member_setting(member, key) for key in keys} for member in range(4)}
    replacements = exploit_and_explore(learner, {0: 5.0, 1: -1.0, 2: 9.0, 3: 0.0}, keys, ranges,
                                       PBTOptions(every_frames=64, quantile=0.5), random.Random(3))
    draws, expected = random.Random(3), {}
    for member in (1, 3):
        parent = draws.choice([0, 2])
        expected[member] = (parent, {key: clamped(current[parent][key] * draws.choice((0.8, 1.2)), ranges[key])
                                     for key in keys})
    assert [(r.member, r.parent, r.settings) for r in replacements] == [(m, *expected[m]) for m in (1, 3)]
    for member in range(4):
        source = expected[member][0] if member in expected else member
        for key, value in state(member).items():
            if key != "log_alpha" or member not in expected:  # explored: alpha is set after the copy
                assert torch.equal(value, before[source][key]), (member, key)
        assert torch.equal(own(member)["buffer"], kept[member]["buffer"])
        assert torch.equal(own(member)["rng"], kept[member]["rng"])
        settings = expected[member][1] if member in expected else current[member]
        assert {key: learner.member_setting(member, key) for key in keys} == pytest.approx(settings, rel=1e-6)
    assert learner.critic_optimizer.lrs == [learner.member_setting(m, "critic_lr") for m in range(4)]
    sweep.shutdown()
