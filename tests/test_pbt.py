"""Population-based training in one batched model (hydra.launcher.pbt, rlcollect.sweeps.pbt):
the exploit/explore step on a MemberPPO, its options and refusals, and one small sweep."""
import json
import math
import random
from pathlib import Path

import pytest
import torch
from commands import rlcollect as cli
from commands import rlcollect_all as cli_all
from omegaconf import OmegaConf
from run_states import job_dirs

from rlcollect.buffers.rollout import RolloutBuffer
from rlcollect.collectors.single import Collector
from rlcollect.config.schemas import PPOConfig
from rlcollect.envs.gym_env import GymEnv
from rlcollect.errors import ConfigError
from rlcollect.modules.actor_critic import ActorCritic
from rlcollect.seeding import member_env_seeds
from rlcollect.sweeps.members import MemberPolicy, MemberPPOLearner
from rlcollect.sweeps.optim import MemberAdam
from rlcollect.sweeps.pbt import clamped, exploit_and_explore, setting_ranges
from rlcollect.sweeps.pbt_options import PBTOptions, pbt_options
from rlcollect.sweeps.stacking import stack_modules
from rlcollect.validation import Range

MEMBERS, ENVS, STEPS = 4, 2, 32


def trained_learner(own: dict[str, list]) -> MemberPPOLearner:
    """Four Pendulum members (observation and reward normalisers) after one update each,
    with the settings ``own`` of their own."""
    env = GymEnv("Pendulum-v1", MEMBERS * ENVS, seed=member_env_seeds(list(range(MEMBERS)), ENVS))
    solos = []
    for seed in range(MEMBERS):
        torch.manual_seed(seed)
        solos.append(ActorCritic(env.observation_space, env.action_space, normalize_observation=True))
    policy = MemberPolicy(stack_modules(solos), MEMBERS, [torch.Generator().manual_seed(seed) for seed in range(4)])
    buffer = RolloutBuffer(MEMBERS * ENVS, STEPS, (3,), (1,))
    learner = MemberPPOLearner(policy, buffer, total_frames=10_000, epochs=2, minibatch_size=32,
                               normalize_reward=True, member_options=own)
    collector = Collector(env, policy, frames_per_batch=MEMBERS * ENVS * STEPS, total_frames=-1)
    learner.learn(next(iter(collector)), ENVS * STEPS)
    collector.shutdown()
    return learner


def member_state(learner: MemberPPOLearner, member: int) -> dict[str, torch.Tensor]:
    """Everything of member ``member`` that PBT's exploit copies: the stacked policy's
    parameters and buffers (the observation normaliser's), Adam's moments and step count,
    the reward scaler's return statistics."""
    ppo = learner.ppo
    state = {f"policy/{key}": value[member].clone() for key, value in ppo.actor_critic.stacked.state_dict().items()}
    if isinstance(ppo.optimizer, MemberAdam):
        state["adam/exp_avg"] = ppo.optimizer.exp_avg[member].clone()
        state["adam/exp_avg_sq"] = ppo.optimizer.exp_avg_sq[member].clone()
        state["adam/step"] = torch.tensor(ppo.optimizer.steps[member])
    else:
        for index, entry in enumerate(ppo.optimizer.state.values()):
            state[f"adam/{index}/exp_avg"] = entry["exp_avg"][member].clone()
            state[f"adam/{index}/exp_avg_sq"] = entry["exp_avg_sq"][member].clone()
    for key, value in ppo.reward_scaler.members[member].state_dict().items():
        state[f"reward/{key}"] = value.clone()
    return state


def own_state(learner: MemberPPOLearner, member: int) -> dict[str, torch.Tensor]:
    """What stays member ``member``'s own: its envs' running returns, its RNG stream."""
    ppo = learner.ppo
    returns = ppo.reward_scaler.returns.unflatten(0, (MEMBERS, -1))[member].clone()
    return {"returns": returns, "rng": ppo.generators[member].get_state()}


def settings_of(learner: MemberPPOLearner, member: int, keys) -> dict[str, float]:
    return {key: float(learner.ppo.member_setting(member, key)) for key in keys}


@pytest.mark.parametrize("own", [
    {"lr": [3e-4, 1e-3, 2e-3, 5e-4], "gae_lambda": [0.9, 0.95, 0.9, 0.8], "epochs": [2, 1, 2, 2]},
    {"entropy_coef": [0.0, 0.01, 0.02, 0.005], "clip_epsilon": [0.1, 0.2, 0.3, 0.25]},
], ids=["member_adam", "fused_adam"])
def test_the_bottom_members_take_a_top_members_state_and_its_settings_perturbed(own):
    """Scores rank members 1 and 3 at the bottom (quantile 0.5 of 4: two), 0 and 2 at the
    top: each bottom member takes its drawn parent's parameters, observation statistics,
    Adam moments and step count, reward statistics exactly, and its float settings times
    the drawn factor, clamped into the schema's range (gae_lambda at most 1); its epochs,
    its envs' running returns and its RNG stream stay its own. Members 0 and 2 are not
    touched; the new settings drive the next update."""
    learner = trained_learner(own)
    ppo = learner.ppo
    keys = [key for key in own if key != "epochs"]
    before = [member_state(learner, member) for member in range(MEMBERS)]
    kept = [own_state(learner, member) for member in range(MEMBERS)]
    settings = [settings_of(learner, member, keys) for member in range(MEMBERS)]
    options = PBTOptions(every_frames=64, quantile=0.5, perturb=(0.8, 1.2))
    ranges = setting_ranges_for_ppo(keys)
    replacements = exploit_and_explore(ppo, {0: 10.0, 1: -5.0, 2: 30.0, 3: float("nan")}, keys, ranges, options,
                                       random.Random(7))

    draws = random.Random(7)  # the same draws, in the same order: a parent, then a factor per setting
    expected = {}
    for member in (3, 1):  # the bottom, worst first (a non-finite score ranks last)
        parent = draws.choice([0, 2])
        expected[member] = (parent, {key: clamped(settings[parent][key] * draws.choice((0.8, 1.2)), ranges[key])
                                     for key in keys})
    assert [(r.member, r.parent, r.settings) for r in replacements] == \
        [(member, *expected[member]) for member in (3, 1)]
    for member in range(MEMBERS):
        after = member_state(learner, member)
        source = expected[member][0] if member in expected else member
        assert after.keys() == before[source].keys()
        for key, value in before[source].items():
            assert torch.equal(after[key], value), (member, key)
        now = own_state(learner, member)
        assert torch.equal(now["returns"], kept[member]["returns"]) and torch.equal(now["rng"], kept[member]["rng"])
        assert settings_of(learner, member, keys) == (expected[member][1] if member in expected else settings[member])
    if "epochs" in own:
        assert ppo.member_epochs == own["epochs"]  # an integer setting is not explored
        assert max(settings_of(learner, member, ["gae_lambda"])["gae_lambda"] for member in range(4)) <= 1.0
    for key in ("entropy_coef", "clip_epsilon"):  # the per-member tensors of the losses
        if key in keys:
            assert getattr(ppo, key).tolist() == [pytest.approx(settings_of(learner, m, [key])[key], rel=1e-6)
                                                  for m in range(MEMBERS)]
    if "lr" in keys:  # the next update steps each member at its new lr (annealed)
        buffer = learner.buffer
        learner.learn(buffer.rollout, 2 * ENVS * STEPS)
        remaining = 1 - 2 * ENVS * STEPS / 10_000
        assert ppo.optimizer.lrs == [pytest.approx(settings_of(learner, m, ["lr"])["lr"] * remaining, rel=1e-12)
                                     for m in range(MEMBERS)]


def test_fewer_than_two_members_have_no_exploit_and_ties_rank_by_member():
    learner = trained_learner({"lr": [3e-4, 1e-3, 2e-3, 5e-4]})
    options = PBTOptions(every_frames=64, quantile=0.25)
    ranges = setting_ranges_for_ppo(["lr"])
    assert exploit_and_explore(learner.ppo, {2: 1.0}, ["lr"], ranges, options, random.Random(0)) == []
    [replacement] = exploit_and_explore(learner.ppo, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}, ["lr"], ranges, options,
                                        random.Random(0))
    assert (replacement.member, replacement.parent) == (0, 3)


def setting_ranges_for_ppo(keys) -> dict[str, Range]:
    """The ranges PPO's schema declares for ``keys`` (as PBT reads them from a run's config)."""
    ranges = setting_ranges(OmegaConf.create({"algo": OmegaConf.structured(PPOConfig)}))
    assert ranges["gae_lambda"] == Range.parse("[0, 1]") and ranges["lr"] == Range.parse("> 0")
    return {key: ranges[key] for key in keys}


def test_settings_are_clamped_into_their_ranges():
    assert clamped(1.14, Range.parse("[0, 1]")) == 1.0
    assert clamped(-0.1, Range.parse("[0, 1]")) == 0.0
    assert clamped(0.0, Range.parse("> 0")) == math.nextafter(0.0, 1.0)
    assert clamped(0.5, Range.parse("[0, 1)")) == 0.5
    assert clamped(2.0, Range.parse("[0, 1)")) == math.nextafter(1.0, 0.0)


# ---------------------------------------------------------------------------- the options
def test_pbt_options_are_checked_one_by_one():
    assert pbt_options(None) == PBTOptions() and not PBTOptions().on
    assert pbt_options({"every_frames": 512, "quantile": 0.5, "perturb": [0.5, 2]}) == \
        PBTOptions(512, 0.5, (0.5, 2.0))
    for node, message in [({"every_frames": 0}, "every_frames must be None or a positive int, got 0"),
                          ({"every_frames": True}, "every_frames must be None or a positive int, got True"),
                          ({"quantile": 0.0}, "quantile must be a number in (0, 0.5], got 0.0"),
                          ({"quantile": 0.75}, "quantile must be a number in (0, 0.5], got 0.75"),
                          ({"perturb": []}, "perturb must be a list of positive numbers"),
                          ({"perturb": 1.2}, "perturb must be a list of positive numbers"),
                          ({"perturb": [0.8, -1]}, "perturb must be a list of positive numbers"),
                          ({"every": 5}, "hydra.launcher.pbt has no option 'every'")]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
                           .replace("[", r"\[").replace("]", r"\]")):
            pbt_options(node)


SWEEP = ["train", "--multirun", "seed=0", "hydra/launcher=batched", "logger=none", "progress=false"]


@pytest.mark.timeout(300)
def test_bad_pbt_options_and_sweeps_pbt_cannot_train_are_one_line_exit_2_before_any_job(tmp_path):
    pbt = "hydra.launcher.pbt.every_frames=512"
    cases = [
        (["algo.lr=0.001,0.003", "hydra.launcher.pbt.every_frames=0"],
         "hydra.launcher.pbt.every_frames must be None or a positive int, got 0"),
        (["algo.lr=0.001,0.003", pbt, "hydra.launcher.pbt.quantile=0.7"],
         "hydra.launcher.pbt.quantile must be a number in (0, 0.5], got 0.7"),
        (["algo.lr=0.001,0.003", pbt, "hydra.launcher.pbt.perturb=[0.8,0]"],
         "hydra.launcher.pbt.perturb must be a list of positive numbers (the factors a copied setting is "
         "multiplied by), got [0.8, 0]"),
        (["algo.lr=0.001,0.003", pbt, "hydra.launcher.processes=2"],
         "hydra.launcher.pbt.every_frames with hydra.launcher.processes=2: population-based training copies "
         "weights between members, and members in other processes cannot exchange them (use "
         "hydra.launcher.processes=1)"),
        (["seed=0,1", pbt],
         "hydra.launcher.pbt: jobs #0, #1: the members differ in no float setting (algo.lr, algo.entropy_coef, "
         "algo.clip_epsilon, algo.value_coef, algo.max_grad_norm, algo.gae_lambda), and population-based training "
         "explores those they differ in: sweep over one too (e.g. 'algo.lr=0.0003,0.001,0.003')"),
        (["algo.gamma=0.9,0.99", "experiment=cartpole_novel_gru",
          "model._target_=lockstep_models.OwnRecurrentActorCritic", pbt],
         "hydra.launcher.pbt: jobs #0, #1: population-based training exchanges the state of the members of one "
         "stacked model (PPO, DQN or SAC with a shipped model), not model=own_recurrent_actor_critic (its "
         "members train in lockstep)"),
        (["seed=0,1", "algo=dqn", pbt],
         "hydra.launcher.pbt: jobs #0, #1: the members differ in no float setting (algo.lr, algo.gamma, algo.tau, "
         "algo.max_grad_norm, algo.eps_start, algo.eps_end), and population-based training explores those they "
         "differ in: sweep over one too (e.g. 'algo.lr=0.0003,0.001,0.003')"),
    ]
    folders = []
    for index in range(len(cases)):
        (tmp_path / str(index)).mkdir()
        folders.append(tmp_path / str(index))
    results = cli_all(folders, [[*SWEEP, *overrides, "hydra.sweep.dir=sw"] for overrides, _ in cases], at_once=2,
                      pythonpath=Path(__file__).parent)  # lockstep_models: a user's own model class
    for folder, result, (_, line) in zip(folders, results, cases):
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [f"rlcollect train: invalid configuration: {line}"]
        assert not [path for path in (folder / "sw").glob("*") if path.is_dir()]  # no job started


# ---------------------------------------------------------------------------- a small sweep


@pytest.mark.timeout(300)
def test_a_pbt_sweep_writes_its_events_settings_and_parents_and_repeats_exactly(tmp_path):
    """Four learning rates, PBT every 512 frames: every event is at a multiple of 512
    before the last batch, names job numbers, and its lr is a top member's lr times 0.8 or
    1.2; every member's metrics rows carry the lr it trained with (a replaced member's
    changes after the event's row), its summary its parents; the same sweep again writes
    the same events; eval and compare read the members' folders."""
    lrs = [0.0003, 0.001, 0.003, 0.01]
    sweep = [*SWEEP, f"algo.lr={','.join(map(str, lrs))}", "hydra.launcher.pbt.every_frames=512", "total_frames=2048",
             "collector.frames_per_batch=256", "algo.minibatch_size=128", "eval.every_frames=512", "eval.episodes=2",
             "env.solved_return=null", "eval.max_time_share=null"]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    results = cli_all([tmp_path / "a", tmp_path / "b"], [[*sweep, "hydra.sweep.dir=sw"]] * 2)
    for result in results:
        assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in (tmp_path / "a" / "sw" / "pbt.jsonl").read_text().splitlines()]
    assert events == [json.loads(line) for line in (tmp_path / "b" / "sw" / "pbt.jsonl").read_text().splitlines()]
    assert len(events) == 3  # one member replaced (a quarter of 4) at 512, 1024 and 1536: none at the last batch
    assert [event["frames"] for event in events] == [512, 1024, 1536]
    members = job_dirs(tmp_path / "a" / "sw")
    lr_of = {number: lrs[number] for number in range(4)}  # each job's lr, as the events change it
    parents: dict[int, list] = {number: [] for number in range(4)}
    rows = {number: [json.loads(line) for line in (members[number] / "metrics.jsonl").read_text().splitlines()]
            for number in range(4)}
    history = {number: [(0, lrs[number])] for number in range(4)}  # (from frames on, lr)
    for event in events:
        assert event["member"] != event["parent"] and {event["member"], event["parent"]} <= set(range(4))
        [(key, lr)] = event["settings"].items()
        assert key == "algo.lr" and lr > 0
        assert lr in (pytest.approx(lr_of[event["parent"]] * 0.8), pytest.approx(lr_of[event["parent"]] * 1.2))
        lr_of[event["member"]] = lr
        parents[event["member"]].append({"frames": event["frames"], "parent": event["parent"]})
        history[event["member"]].append((event["frames"], lr))
    for number, member in enumerate(members):
        summary = json.loads((member / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["pbt_parents"] == parents[number]
        assert summary["pbt_settings"] == {"algo.lr": lr_of[number]}
        assert f"lr: {lrs[number]}" in (member / "config.yaml").read_text()  # its starting setting
        assert [row["step"] for row in rows[number]] == list(range(256, 2049, 256))
        for row in rows[number]:  # the lr of the update that brought it to that step
            assert row["pbt/algo.lr"] == [lr for start, lr in history[number] if start < row["step"]][-1]
    evaluated = cli(tmp_path / "a", "eval", str(members[events[0]["member"]]), "--episodes", "2", "--format", "json")
    assert evaluated.returncode == 0, evaluated.stderr
    compared = cli(tmp_path / "a", "compare", "sw")
    assert compared.returncode == 0, compared.stderr
    # a replaced member resumed alone says that it goes on with its starting settings, not PBT's
    replaced = events[-1]["member"]
    resumed = cli(tmp_path / "a", "train", f"resume={members[replaced]}", "total_frames=2304")
    assert resumed.returncode == 0, resumed.stderr
    [line] = [line for line in resumed.stdout.splitlines() if "population-based training" in line]  # the run's log
    assert line.endswith(f"resume={members[replaced]}: population-based training had changed its settings by frame "
                         f"2048 (algo.lr {lrs[replaced]} -> {lr_of[replaced]}); resumed alone, it trains on with the "
                         "starting ones of its config.yaml")
    resumed_summary = json.loads((members[replaced] / "summary.json").read_text())
    assert resumed_summary["frames"] == 2304 and resumed_summary["pbt_settings"] == {"algo.lr": lrs[replaced]}
    rows_on = [json.loads(line) for line in (members[replaced] / "metrics.jsonl").read_text().splitlines()][8:]
    assert [(row["step"], row["pbt/algo.lr"]) for row in rows_on] == [(2304, lrs[replaced])]  # what it trained with
    [unchanged] = [number for number in range(4) if lr_of[number] == lrs[number]][:1]
    resumed = cli(tmp_path / "a", "train", f"resume={members[unchanged]}", "total_frames=2560")
    assert resumed.returncode == 0 and "population-based training" not in resumed.stdout, resumed.stderr
    # the sweep resumed: each member at a frame of its own resumes alone, the others on as a population
    resumed = cli(tmp_path / "a", "train", "resume=sw", "total_frames=2816")
    assert resumed.returncode == 0, resumed.stderr
    others = sorted(set(range(4)) - {replaced, unchanged})
    for number, frames in ((replaced, 2304), (unchanged, 2560)):
        assert (f"job #{number} resumes alone at frame {frames}: no other member of its population is at that frame"
                in resumed.stdout)
    assert f"jobs #{others[0]}, #{others[1]} resume at frame 2048 as one batched model of 2 members" in resumed.stdout
    for member in members:
        summary = json.loads((member / "summary.json").read_text())
        assert (summary["status"], summary["frames"]) == ("finished", 2816)
