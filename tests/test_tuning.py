"""Tuning sweeps (hydra/sweeper=tune_ppo: Hydra's Optuna sweeper, the tune extra) and the
objective a run returns."""
import json
import os
import signal

import pytest
from commands import rlcollect as cli
from commands import rlcollect_all as cli_all
from commands import start_rlcollect
from processes import ctrl_c_group_when, wait_for
from run_states import job_dirs

TINY = ["total_frames=256", "collector.frames_per_batch=128", "algo.minibatch_size=64", "env.num_envs=4",
        "eval.every_frames=128", "eval.episodes=2", "progress=false", "logger=none", "env.solved_return=null",
        "eval.max_time_share=null"]


@pytest.mark.timeout(600)
def test_a_tuning_study_tells_failed_trials_goes_on_persists_and_resumes(tmp_path):
    """algo.lr=-1 is refused: its trials are told to the study as failed, the others complete;
    the study lives in sqlite, and the same command again adds trials to it; compare reads
    the sweep folder, the refused trials listed apart."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    def tune(sweep_dir):
        return cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_ppo", "hydra.sweeper.n_trials=3",
                   "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=3", "algo.lr=choice(-1,0.001)",
                   "algo.epochs=choice(1,2)", f"hydra.sweeper.storage=sqlite:///{tmp_path / 'study.db'}",
                   "hydra.sweeper.study_name=tiny", *TINY, f"hydra.sweep.dir={sweep_dir}")

    first = tune("sweep1")
    assert first.returncode == 1  # some trials were refused: listed, and the command says so
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE  # objective=final_eval_return
    states = [(trial.params["algo.lr"], trial.state.name) for trial in study.trials]
    assert len(states) == 3 and {state for _, state in states} == {"COMPLETE", "FAIL"}
    assert all((lr == -1) == (state == "FAIL") for lr, state in states)
    refused = [path for path in (tmp_path / "sweep1").glob("*/summary.json")
               if json.loads(path.read_text())["status"] == "refused"]
    assert len(refused) == sum(lr == -1 for lr, _ in states)
    for trial in study.trials:
        if trial.state.name == "COMPLETE":  # the value told is what the run returned: its final eval return
            [summary] = [json.loads(path.read_text()) for path in (tmp_path / "sweep1").glob(
                f"{trial.number}_*/summary.json")]
            assert trial.value == summary["final_eval_return"]

    second = tune("sweep2")
    assert second.returncode in (0, 1), second.stderr
    assert "Using an existing study with name 'tiny'" in second.stdout + second.stderr
    # seeded 3 again, the sampler would ask trials 0-2's values again: it is seeded past them
    assert ("rlcollect train: the study 'tiny' holds 3 trial(s): its sampler is seeded 3 + 3 = 6 for this command's "
            "trials (seeded 3, it would ask the first trials again)") in second.stderr.splitlines()
    trials = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'study.db'}").trials
    assert len(trials) == 6
    asked = [(trial.params["algo.lr"], trial.params["algo.epochs"]) for trial in trials]
    assert asked[3:] != asked[:3]

    compared = cli(tmp_path, "compare", "sweep1")
    assert compared.returncode == 0, compared.stderr
    assert compared.stdout.count(": refused") == len(refused)


@pytest.mark.timeout(300)
def test_a_tuning_study_trains_each_batch_of_trials_as_one_batched_model(tmp_path):
    """hydra/sweeper=tune_ppo with hydra/launcher=batched and n_jobs=2: each pair of trials
    Optuna asks (different lr, clip range, lambda, entropy weight and epochs) trains as one
    batched model of 2 members, and every trial's value reaches the study: 4 complete
    trials, each with its job folder's final eval return."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    storage = f"sqlite:///{tmp_path / 't.db'}"
    result = cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_ppo", "hydra/launcher=batched",
                 "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", f"hydra.sweeper.storage={storage}",
                 "algo.epochs=range(1,4)", "total_frames=512", "collector.frames_per_batch=256",
                 "algo.minibatch_size=128", "eval.episodes=2", "logger=none", "progress=false", "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert output.count("train as one batched model of 2 members") == 2
    assert "runs as a solo run" not in output and "run one by one" not in output
    trials = optuna.load_study(study_name="rlcollect", storage=storage).trials
    assert [trial.state.name for trial in trials] == ["COMPLETE"] * 4
    assert len({trial.params["algo.lr"] for trial in trials}) == 4  # four settings: the members differ
    for trial in trials:
        [summary] = [json.loads(path.read_text()) for path in (tmp_path / "sw").glob(f"{trial.number}_*/summary.json")]
        assert summary["status"] == "finished" and summary["frames"] == 512
        assert trial.value == summary["final_eval_return"]


@pytest.mark.timeout(300)
def test_a_stopped_study_resumes_as_one_batched_model_and_its_trials_values_reach_the_study(tmp_path):
    """Ctrl-C to a tuning study (2 trials as one batched model, kept in sqlite) once both
    trials have checkpointed: they stay RUNNING in the study, the sweep folder holds its
    multirun.yaml and the stop names ``resume=sw``; that resume trains both on as one batched
    model and tells the study each trial's final eval return."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    from rlcollect.commands.sweep_study import TRIAL_JOB

    storage = f"sqlite:///{tmp_path / 't.db'}"
    process = start_rlcollect(tmp_path, "train", "--multirun", "hydra/sweeper=tune_ppo", "hydra/launcher=batched",
                              "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", f"hydra.sweeper.storage={storage}",
                              "algo.epochs=range(1,3)", "total_frames=10000000", "env.solved_return=100000",
                              "collector.frames_per_batch=256", "algo.minibatch_size=128", "eval.episodes=2",
                              "logger=none", "progress=false", "hydra.sweep.dir=sw", start_new_session=True)
    wait_for(lambda: process.poll() is not None or len(list((tmp_path / "sw").glob("*/checkpoint.pt"))) == 2, 120)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.count("or continue every member of the sweep as it trained: `rlcollect train resume=sw`") == 1
    assert (tmp_path / "sw" / "multirun.yaml").is_file()
    study = optuna.load_study(study_name="rlcollect", storage=storage)
    assert [trial.state.name for trial in study.trials] == ["RUNNING"] * 2
    members = job_dirs(tmp_path / "sw")
    frames = json.loads((members[0] / "summary.json").read_text())["frames"]
    resumed = cli(tmp_path, "train", "resume=sw", f"total_frames={frames + 256}")
    assert resumed.returncode == 0, resumed.stderr
    assert f"jobs #0, #1 resume at frame {frames} as one batched model of 2 members" in resumed.stdout
    assert f"the study 'rlcollect' ({storage}) took the values of jobs #0, #1" in resumed.stdout
    trials = optuna.load_study(study_name="rlcollect", storage=storage).trials
    for trial, member in zip(trials, members):
        summary = json.loads((member / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["frames"] == frames + 256
        assert trial.state.name == "COMPLETE" and trial.value == summary["final_eval_return"]
        assert f"algo.lr={trial.params['algo.lr']}" in member.name
        # each trial marked with its job as it was launched: what the resume told it by
        assert trial.user_attrs[TRIAL_JOB] == {"sweep": str((tmp_path / "sw").resolve()), "job": trial.number}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("storage", ["null", "sqlite:///study.db"])
def test_a_study_whose_every_trial_fails_lists_them_without_a_traceback(tmp_path, storage):
    """No trial completes (each refused: a searched value out of range fails its trial):
    Optuna has no best trial for the results file (in memory or in a database, where it
    says so otherwise); one line says so, the trials are listed as any sweep's jobs, exit 1."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    result = cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_ppo", "hydra.sweeper.n_trials=2",
                 "algo.gamma=choice(1.5)", f"hydra.sweeper.storage={storage}", "logger=none", "progress=false",
                 "hydra.sweep.dir=sw")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("rlcollect train: ")]
    assert lines == ["rlcollect train: invalid configuration: algo.gamma=1.5: must be in (0, 1]"] * 2 + [
        "rlcollect train: no trial of the study completed, so it has no best trial to write "
        "(optimization_results.yaml)", "rlcollect train: 2 of 2 sweep jobs did not finish (job folders in sw):"]


def test_a_resumed_study_whose_storage_is_not_there_is_said_and_not_made_anew(tmp_path, monkeypatch, caplog):
    """A study kept in ``sqlite:///t.db`` (a path relative to where it ran) and resumed from
    another folder: one warning names the storage and the folder; no new database is made."""
    from omegaconf import OmegaConf

    from rlcollect.commands.sweep_study import Resumed, tell_study

    sweeper = OmegaConf.create({"_target_": "hydra_plugins.rlcollect_tuning.tuning_sweeper.TuningSweeper",
                                "study_name": "s", "storage": "sqlite:///t.db"})  # the sweep's hydra.sweeper
    member = tmp_path / "0_algo.lr=0.001"
    member.mkdir()
    (member / "summary.json").write_text('{"status": "finished", "final_eval_return": 10.0}')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    tell_study(sweeper, [Resumed(0, member, OmegaConf.create({"objective": "final_eval_return"}))], tmp_path)
    assert f"the sweep's study storage sqlite:///t.db is not there from {elsewhere}" in caplog.text
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("preset, overrides", [("tune_ppo", []), ("tune_sac", ["experiment=mujoco_sac"]),
                                               ("tune_dqn", ["algo=dqn"])])
def test_each_tuning_preset_searches_settings_of_its_algo_within_their_ranges(preset, overrides):
    """hydra/sweeper=tune_ppo, tune_sac and tune_dqn compose (with their algo); every key of
    their search space is a setting of that algo, a sweep in Hydra's syntax, and its ends
    (or choices) are values the algo's schema accepts."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from hydra import compose, initialize_config_module
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    from rlcollect.config import check_ranges, register_configs

    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        cfg = compose("train", overrides=[f"hydra/sweeper={preset}", *overrides], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_ == "hydra_plugins.rlcollect_tuning.tuning_sweeper.TuningSweeper"
    assert sweeper.sampler.seed == 0 and sweeper.max_failure_rate == 1.0
    params = OmegaConf.to_container(sweeper.params)
    assert len(params) >= 5
    for key, text in params.items():
        group, name = key.split(".", 1)
        assert group == "algo" and name in cfg.algo, key
        override = OverridesParser.create().parse_override(f"{key}={text}")
        assert override.is_sweep_override(), key
        sweep = override.value()
        ends = list(sweep.list) if override.is_choice_sweep() else \
            [sweep.start, sweep.stop] if override.is_range_sweep() else [sweep.start, sweep.end]
        for value in ends:
            job = OmegaConf.masked_copy(cfg, [field for field in cfg if field != "hydra"])
            with open_dict(job):
                job.algo[name] = value
            check_ranges(job)


@pytest.mark.parametrize("overrides, line", [
    (["hydra/sweeper=tune_dqn"], "rlcollect train: invalid override algo.eps_end: Key 'eps_end' not in 'PPOConfig' "
                                 "(`rlcollect train --cfg job` lists the keys)"),
    (["hydra/sweeper=tune_ppo", "algo.gamma=1.5"], "rlcollect train: invalid configuration: algo.gamma=1.5: must be in "
                                                   "(0, 1]"),
    (["hydra/sweeper=tune_ppo", "algo.lr=-1"], "rlcollect train: invalid configuration: algo.lr=-1.0: must be > 0"),
    (["hydra/sweeper=tune_ppo", "hydra/sweeper/sampler=grid"],
     "rlcollect train: invalid configuration: hydra/sweeper/sampler=grid: algo.lr is searched over a continuous "
     "interval; a grid takes choice(...) and range(...) alone: give it one (algo.lr=choice(...))"),
    (["hydra/sweeper=tune_ppo", "algo.lr=interval(1,0.5)"],
     "rlcollect train: invalid configuration: algo.lr=interval(1,0.5): The `low` value must be smaller than or equal "
     "to the `high` value (low=1.0, high=0.5)."),
    (["hydra/sweeper=tune_ppo", "objective=nosuch"],
     "rlcollect train: invalid configuration: objective='nosuch': choose one of final_eval_return, best_eval_return, "
     "eval_auc, frames_to_solve"),
    (["hydra/sweeper=tune_ppo", "objective=frames_to_solve", "env.solved_return=null"],
     "rlcollect train: invalid configuration: objective=frames_to_solve: env.solved_return gives CartPole-v1 no "
     "threshold to solve, so every trial's value would be infinite: set env.solved_return, or tune another objective"),
], ids=["another_algos_preset", "a_fixed_value_out_of_range", "a_preset_key_fixed_out_of_range", "a_grid_of_intervals",
        "a_space_optuna_cannot_make", "an_unknown_objective", "frames_to_solve_without_a_threshold"])
def test_a_study_that_cannot_train_leaves_its_storage_as_it_was(tmp_path, overrides, line):
    """tune_dqn's keys without algo=dqn, or a fixed value out of range: one line, exit 2,
    before the study is made or opened: the sqlite file given stays byte for byte, one not
    there is not made, and no sweep folder is left."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    (tmp_path / "study.db").write_bytes(b"a study's storage, left as it is")
    for storage in ("study.db", "new.db"):
        result = cli(tmp_path, "train", "--multirun", *overrides, f"hydra.sweeper.storage=sqlite:///{storage}", *TINY,
                     "hydra.sweep.dir=sw")
        assert result.returncode == 2
        assert result.stderr.splitlines() == [line]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["study.db"]
    assert (tmp_path / "study.db").read_bytes() == b"a study's storage, left as it is"


@pytest.mark.timeout(300)
def test_a_study_continued_with_another_space_or_direction_is_refused_and_left_as_it_was(tmp_path):
    """A study in sqlite searched algo.epochs as an int range, to maximize: continuing it with
    algo.epochs as a choice, or with an objective to minimize, is one line naming what the
    study keeps, exit 2, before Optuna opens it (it would fail once a trial had started,
    that trial RUNNING in the study for good); a storage in a folder not there is one line."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    study = optuna.create_study(study_name="rlcollect", storage=storage, direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"algo.epochs": 5}, value=10.0, distributions={
        "algo.epochs": optuna.distributions.IntUniformDistribution(4, 20)}))
    before = (tmp_path / "tune.db").read_bytes()
    common = ["train", "--multirun", "hydra/sweeper=tune_ppo", *TINY]
    results = cli_all(tmp_path, [[*common, f"hydra.sweeper.storage={storage}", "algo.epochs=choice(4,8)",
                                  "hydra.sweep.dir=sw0"],
                                 [*common, f"hydra.sweeper.storage={storage}", "objective=frames_to_solve",
                                  "env.solved_return=1000", "hydra.sweep.dir=sw1"],
                                 [*common, "hydra.sweeper.storage=sqlite:///missing/tune.db", "hydra.sweep.dir=sw2"]])
    assert [(result.returncode, result.stderr.splitlines()) for result in results] == [
        (2, [f"rlcollect train: invalid configuration: algo.epochs: the study 'rlcollect' ({storage}) searched it "
             "as IntUniformDistribution(high=20, low=4, step=1), and a study keeps one kind of space per key (and one "
             "set of choices): search it so, or start another study (hydra.sweeper.study_name=<new name>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.sweeper.direction=minimize (objective=frames_to_solve): "
             f"the study 'rlcollect' ({storage}) is to maximize (a study keeps its direction, set by its objective): "
             "keep it, or start another study (hydra.sweeper.study_name=<new name>)"]),
        (2, [f"rlcollect train: invalid configuration: hydra.sweeper.storage=sqlite:///missing/tune.db: no folder "
             f"{tmp_path / 'missing'} to make the study's database in"])]
    assert (tmp_path / "tune.db").read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tune.db"]


def test_a_resume_tells_each_trial_of_its_own_sweep_not_another_sweeps_with_the_same_values(tmp_path):
    """Two sweeps of one study asked trials with the same sampled values (a seeded sampler
    asks them again as a study goes on), both stopped: each trial is marked with its
    sweep's job (TRIAL_JOB), and a sweep's member finds its own; a trial of a study of an
    earlier version (no mark) is found by its values, and never a marked trial of another sweep."""
    import optuna

    from rlcollect.commands.sweep_study import TRIAL_JOB, Resumed, matching_trial

    study = optuna.create_study()
    trials = [study.ask() for _ in range(3)]
    for trial, sweep in zip(trials, ("/runs/a", "/runs/b")):
        trial.suggest_float("algo.lr", 1e-3, 1e-3)
        trial.set_user_attr(TRIAL_JOB, {"sweep": sweep, "job": 0})
    trials[2].suggest_float("algo.lr", 1e-3, 1e-3)  # unmarked
    running = study.get_trials(deepcopy=False)
    folder = tmp_path / "0_algo.lr=0.001"  # job 0's folder, its overrides as Hydra wrote them
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("- algo.lr=0.001\n")
    job = Resumed(0, folder, None)
    assert matching_trial(running, job, "/runs/b").number == 1
    assert matching_trial(running, job, "/runs/a").number == 0
    assert matching_trial(running, job, "/runs/c").number == 2  # by its values: the unmarked one
    assert matching_trial(running[:2], job, "/runs/c") is None


@pytest.mark.parametrize("option, line", [
    ("hydra.sweeper.n_trials=0", "invalid configuration: hydra.sweeper.n_trials must be a positive int, got 0"),
    ("hydra.sweeper.direction=sideways",
     "invalid configuration: hydra.sweeper.direction=sideways: choose one of minimize, maximize"),
    ("hydra.sweeper.sampler.seed=abc",
     "invalid override hydra.sweeper.sampler.seed: Value 'abc' of type 'str' could not be converted to Integer"),
    ("+hydra.sweeper.sampler.bogus=1", "invalid configuration: hydra.sweeper.sampler: TPESampler.__init__() got an "
                                       "unexpected keyword argument 'bogus'"),
    ("hydra.sweeper.sampler.seed=-1", "invalid configuration: hydra.sweeper.sampler: Seed must be between 0 and "
                                      "2**32 - 1"),
    ("hydra.sweeper.max_failure_rate=0.5",
     "invalid configuration: hydra.sweeper.max_failure_rate=0.5: a failed or refused trial never stops the study here "
     "(each is told failed and the study goes on): leave it at 1.0"),
    ("hydra.sweeper.direction=[maximize,minimize]",
     "invalid configuration: hydra.sweeper.direction=[maximize,minimize]: a run returns one objective (`objective`): "
     "give one direction (minimize or maximize)"),
    ("hydra/sweeper/sampler=nosuch", "invalid override: hydra/sweeper/sampler=nosuch: no such sampler (installed "
                                     "samplers: cmaes, grid, motpe, nsgaii, random, tpe, tpe_seeded)"),
], ids=["n_trials_0", "a_direction_sideways", "a_seed_not_an_int", "an_option_the_sampler_does_not_take",
        "a_negative_seed", "a_max_failure_rate_below_1", "a_list_of_directions", "an_unknown_sampler"])
def test_a_bad_sweeper_option_is_one_line_exit_2_before_any_trial(tmp_path, option, line):
    """Optuna itself would fail with a traceback: n_trials=0 once the study ends, a bad
    direction once it starts, a sampler's bad option (a seed that is not an int or below 0,
    an option it does not take) as Hydra makes the sweeper. A max_failure_rate below 1
    would have no effect (a failed trial returns no value, which never stops Hydra's
    sweeper), a list of directions would fail every trial (a run returns one value), and a
    mistyped sampler is not a missing extra."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    result = cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_ppo", option, *TINY, "hydra.sweep.dir=sweep")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"rlcollect train: {line}"]
    assert not (tmp_path / "sweep").exists()


def test_the_objective_picks_what_a_run_returns_and_its_direction(tmp_path):
    from omegaconf import OmegaConf

    from rlcollect.commands.jobs import objective_value
    from rlcollect.config import objective_direction

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [
        {"step": 100, "eval/episode_return": 10.0}, {"step": 200}, {"step": 300, "eval/episode_return": 30.0}]))
    summary = {"final_eval_return": 30.0, "best_eval_return": 30.0, "frames_to_solve": None}

    def value(objective, **summary_changes):
        cfg = OmegaConf.create({"objective": objective, "total_frames": 500})
        return objective_value(cfg, {**summary, **summary_changes}, tmp_path)

    assert value("final_eval_return") == 30.0 and value("final_eval_return", final_eval_return=None) is None
    # the eval curve 10 -> 30 over frames 100..300, held at 30 to total_frames: (2 * 20 + 2 * 30) / 4
    assert value("eval_auc") == pytest.approx(25.0)
    assert value("frames_to_solve") == float("inf") and value("frames_to_solve", frames_to_solve=300) == 300.0
    assert [objective_direction(name) for name in ("final_eval_return", "eval_auc", "frames_to_solve")] == [
        "maximize", "maximize", "minimize"]


@pytest.mark.timeout(400)
def test_the_ray_launcher_runs_a_sweep_s_jobs_on_a_local_ray_bound_to_loopback(tmp_path):
    """hydra/launcher=ray (the raylauncher extra, not in `make setup`): each job a Ray task on
    a Ray instance the launcher starts on 127.0.0.1."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    from rlcollect.collectors.ray import loopback_ray_env

    result = cli(tmp_path, "train", "--multirun", "hydra/launcher=ray", "seed=0,1", *TINY, "algo.epochs=1",
                       "+hydra.launcher.ray.init._node_ip_address=127.0.0.1",
                       "+hydra.launcher.ray.init.include_dashboard=false", "+hydra.launcher.ray.remote.num_cpus=1",
                       "hydra.sweep.dir=sweep", env=loopback_ray_env(), timeout=360)
    assert result.returncode == 0, result.stderr
    summaries = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert [json.loads(path.read_text())["frames"] for path in summaries] == [256, 256]
    assert "'_node_ip_address': '127.0.0.1'" in result.stdout + result.stderr


@pytest.mark.timeout(300)
def test_a_study_stopped_before_its_trials_jobs_started_tells_them_failed(tmp_path):
    """Ctrl-C after the study asked for a batch of trials and before the launcher made their
    jobs' folders (here: as the batched launcher groups them): the trials are told failed,
    where they stayed RUNNING in the study's storage for good (the sweep's resume continues
    jobs from their folders, and these have none)."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna
    from test_cli import CTRL_C_AT

    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CTRL_C_AT)
    (tmp_path / "ctrl_c_at.txt").write_text("import rlcollect.sweeps.grouping")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    [stopped] = cli_all(tmp_path, [(["train", "--multirun", "hydra/sweeper=tune_ppo", "hydra/launcher=batched",
                                     "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
                                     f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=stopped", *TINY,
                                     "hydra.sweep.dir=sweep"], tmp_path / "hooks")])
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.splitlines()[-2:] == [
        "rlcollect train: the study 'stopped' was told trial(s) #0, #1 failed: stopped before their jobs started",
        "rlcollect train: interrupted"]
    study = optuna.load_study(study_name="stopped", storage=storage)
    assert [trial.state.name for trial in study.trials] == ["FAIL", "FAIL"]
    assert sorted(path.name for path in (tmp_path / "sweep").iterdir()) == ["multirun.yaml"]


KILL_AT_JOB_1S_SECOND_CHECKPOINT = """
# SIGKILL (a crash, `kill -9`) as job 1 of the sweep writes a checkpoint once it has one: that one stays complete
import os
import signal
import sys


def kill_at(event, args):
    path = str(args[0]) if event == "open" else ""
    if "/1_" in path and path.endswith("checkpoint.pt.partial") and os.path.exists(path[:-len(".partial")]):
        os.kill(os.getpid(), signal.SIGKILL)


sys.addaudithook(kill_at)
"""


def stopped_study_command(storage: str, *overrides: str) -> list[str]:
    """A tiny tune_ppo study of 2 trials asked together (the basic launcher runs them one
    after the other), kept in ``storage``, into the sweep folder sw."""
    return ["train", "--multirun", "hydra/sweeper=tune_ppo", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
            f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=stopped", *TINY,
            "checkpoint_every_seconds=null", *overrides, "hydra.sweep.dir=sw"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("checkpoint_every, status, states", [(512, "finished", ["COMPLETE", "FAIL"]),
                                                               (256, "interrupted", ["RUNNING", "FAIL"])])
def test_ctrl_c_to_a_study_tells_an_ended_trial_and_fails_a_trial_that_never_started(tmp_path, checkpoint_every,
                                                                                      status, states):
    """Ctrl-C as job 0 (of 2 trials asked together, the basic launcher) writes a checkpoint:
    its last batch's (it finishes, and the stop keeps job 1 from starting) or its first (it
    stops there). The study is told job 0's value where its run finished (the sweeper that
    would have told it stopped), or leaves it RUNNING for the resume, which tells it; job 1,
    asked and never started, is told failed (RUNNING, it stayed so for good)."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna
    from test_cli import CTRL_C_AT

    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CTRL_C_AT)
    (tmp_path / "ctrl_c_at.txt").write_text("open checkpoint.pt.partial")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    [stopped] = cli_all(tmp_path, [(stopped_study_command(storage, "total_frames=512",
                                                          f"checkpoint_every_frames={checkpoint_every}"),
                                    tmp_path / "hooks")])
    assert stopped.returncode == 130, stopped.stderr
    assert ("rlcollect train: the study 'stopped' was told trial(s) #1 failed: stopped before their jobs started"
            in stopped.stderr.splitlines())
    [job] = job_dirs(tmp_path / "sw")
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == status
    trials = optuna.load_study(study_name="stopped", storage=storage).trials
    assert [trial.state.name for trial in trials] == states
    if status == "finished":
        assert trials[0].value == summary["final_eval_return"]
        return
    (tmp_path / "ctrl_c_at.txt").unlink()
    resumed = cli(tmp_path, "train", "resume=sw")
    assert resumed.returncode == 0, resumed.stderr
    assert f"the study 'stopped' ({storage}) took the value of job #0" in resumed.stdout
    trial = optuna.load_study(study_name="stopped", storage=storage).trials[0]
    assert trial.state.name == "COMPLETE"
    assert trial.value == json.loads((job / "summary.json").read_text())["final_eval_return"]


@pytest.mark.timeout(300)
def test_a_resume_tells_the_study_the_value_of_a_trial_that_ended_before_a_crash(tmp_path):
    """A study killed (SIGKILL) while job 1 trains, job 0 finished and not told yet (the
    sweeper tells a batch once it is over): both trials stay RUNNING. The sweep's resume
    leaves job 0 as it is and trains job 1 on, and the study takes both values."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(KILL_AT_JOB_1S_SECOND_CHECKPOINT)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    [killed] = cli_all(tmp_path, [(stopped_study_command(storage, "total_frames=1024", "checkpoint_every_frames=256"),
                                   tmp_path / "hooks")])
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    study = optuna.load_study(study_name="stopped", storage=storage)
    assert [trial.state.name for trial in study.trials] == ["RUNNING", "RUNNING"]
    resumed = cli(tmp_path, "train", "resume=sw")
    assert resumed.returncode == 0, resumed.stderr
    assert f"the study 'stopped' ({storage}) took the values of jobs #0, #1" in resumed.stdout
    trials = optuna.load_study(study_name="stopped", storage=storage).trials
    for trial, job in zip(trials, job_dirs(tmp_path / "sw")):
        summary = json.loads((job / "summary.json").read_text())
        assert (summary["status"], summary["frames"]) == ("finished", 1024)
        assert trial.state.name == "COMPLETE" and trial.value == summary["final_eval_return"]


@pytest.mark.timeout(300)
def test_ctrl_c_to_a_joblib_study_leaves_its_stopped_trials_running_and_the_resume_tells_them(tmp_path):
    """hydra/launcher=joblib runs 2 trials in parallel processes: Ctrl-C (to the process
    group, as a terminal sends it) once both have checkpointed stops each after its batch,
    and their trials stay RUNNING (Hydra's sweeper would tell them failed: an interrupted
    job returns no value); the sweep's resume trains both on and tells the study their values."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    import optuna

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    command = [arg for arg in stopped_study_command(storage, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                                                    "total_frames=100000000") if arg != "total_frames=256"]
    process = start_rlcollect(tmp_path, *command, start_new_session=True)
    stderr = ctrl_c_group_when(process, lambda: len(list((tmp_path / "sw").glob("*/checkpoint.pt"))) == 2)
    assert process.returncode == 130, stderr
    assert "Return value must be float-castable" not in stderr
    study = optuna.load_study(study_name="stopped", storage=storage)
    assert [trial.state.name for trial in study.trials] == ["RUNNING", "RUNNING"]
    jobs = job_dirs(tmp_path / "sw")
    frames = max(json.loads((job / "summary.json").read_text())["frames"] for job in jobs)
    resumed = cli(tmp_path, "train", "resume=sw", f"total_frames={frames + 256}")
    assert resumed.returncode == 0, resumed.stderr
    assert f"the study 'stopped' ({storage}) took the values of jobs #0, #1" in resumed.stdout
    trials = optuna.load_study(study_name="stopped", storage=storage).trials
    for trial, job in zip(trials, jobs):
        summary = json.loads((job / "summary.json").read_text())
        assert trial.state.name == "COMPLETE" and trial.value == summary["final_eval_return"]


@pytest.mark.parametrize("overrides, line", [
    (["hydra.sweeper.storage=notaurl"], "hydra.sweeper.storage=notaurl: not a database URL (sqlite:///<file>, "
                                        "postgresql://..., or null for a study in memory)"),
    (["hydra.sweeper.storage=sqlite:///folder"], "hydra.sweeper.storage=sqlite:///folder: folder is a folder, not a "
                                                 "sqlite database file"),
    (["hydra.sweeper.storage=sqlite:///notes.txt"], "hydra.sweeper.storage=sqlite:///notes.txt: notes.txt is not a "
                                                    "sqlite database (a file of another kind, left as it is)"),
    (["objective=choice(final_eval_return,frames_to_solve)", "env.solved_return=100"],
     "objective: searched per trial, but a study optimises one objective in one direction: give it one value "
     "(objective=final_eval_return), or run a study per objective"),
    (["hydra/sweeper=tune_sac", "algo=sac", "env=pendulum"],
     "algo.learning_starts=5000: must be less than total_frames=2048 (algo=sac collects random actions and takes no "
     "gradient step before algo.learning_starts frames); lower algo.learning_starts or raise total_frames"),
], ids=["a_storage_that_is_not_a_url", "a_sqlite_storage_that_is_a_folder", "a_sqlite_storage_that_is_a_text_file",
        "a_searched_objective", "a_fixed_combination_that_cannot_train"])
def test_a_study_that_no_trial_could_train_in_is_refused_in_one_line_and_leaves_nothing(tmp_path, overrides, line):
    """A storage Optuna cannot open, an objective searched per trial (a study has one
    direction), fixed settings that cannot train together whatever is sampled: one line,
    exit 2, before the study or the sweep folder is made; the folder and the text file
    given as storage stay as they were."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.txt").write_text("not a study")
    result = cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_ppo", *overrides, "total_frames=2048",
                 "logger=none", "progress=false", "hydra.sweep.dir=sw")
    assert (result.returncode, result.stderr.splitlines()) == (2, [f"rlcollect train: invalid configuration: {line}"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder", "notes.txt"]
    assert list((tmp_path / "folder").iterdir()) == [] and (tmp_path / "notes.txt").read_text() == "not a study"


@pytest.mark.timeout(300)
def test_a_grid_takes_a_preset_key_fixed_on_the_command_line_and_is_not_run_twice(tmp_path):
    """hydra/sweeper/sampler=grid with the preset's intervals given fixed values and
    algo.lr and algo.epochs searched: the fixed keys leave the search space (Hydra's sweeper
    made a grid of the preset's interval first: a traceback), range(1,3) gives 1 and 2 on a
    grid, and the study runs its 4 points once; the same grid continued is refused in one
    line (Optuna would ask the points it ran again), the storage left as it was."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    storage = f"sqlite:///{tmp_path / 'grid.db'}"
    grid = ["train", "--multirun", "hydra/sweeper=tune_ppo", "hydra/sweeper/sampler=grid",
            "algo.lr=choice(0.002,0.0000001)", "algo.clip_epsilon=0.2", "algo.gae_lambda=0.9",
            "algo.entropy_coef=0.001", "algo.epochs=range(1,3)", f"hydra.sweeper.storage={storage}", *TINY]
    first = cli(tmp_path, *grid, "hydra.sweep.dir=sw1")
    assert first.returncode == 0, first.stderr
    trials = optuna.load_study(study_name="rlcollect", storage=storage).trials
    assert sorted((trial.params["algo.lr"], trial.params["algo.epochs"]) for trial in trials) == [
        (1e-7, 1), (1e-7, 2), (0.002, 1), (0.002, 2)]
    assert all(trial.state.name == "COMPLETE" and "algo.clip_epsilon" not in trial.params for trial in trials)
    before = (tmp_path / "grid.db").read_bytes()
    again = cli(tmp_path, *grid, "hydra.sweep.dir=sw2")
    assert (again.returncode, again.stderr.splitlines()) == (2, [
        f"rlcollect train: invalid configuration: hydra/sweeper/sampler=grid: the study 'rlcollect' ({storage}) has "
        "run every point of this grid (4): another trial would repeat one; search another grid, or start another "
        "study (hydra.sweeper.study_name=<new name>)"])
    assert (tmp_path / "grid.db").read_bytes() == before and not (tmp_path / "sw2").exists()


@pytest.mark.timeout(300)
def test_a_study_continued_past_the_largest_seed_seeds_its_sampler_from_0_again(tmp_path):
    """A study of 1 trial continued with hydra.sweeper.sampler.seed=4294967295 (2**32 - 1,
    the largest a sampler takes): seed + 1 is past it, so the sampler is seeded modulo
    2**32 (0), said in the seeding line, where it stopped with a traceback."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna

    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    study = optuna.create_study(study_name="rlcollect", storage=storage, direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"algo.epochs": 5}, value=10.0, distributions={
        "algo.epochs": optuna.distributions.IntUniformDistribution(4, 20)}))
    result = cli(tmp_path, "train", "--multirun", "hydra/sweeper=tune_ppo", "hydra.sweeper.n_trials=1",
                 "hydra.sweeper.sampler.seed=4294967295", f"hydra.sweeper.storage={storage}", *TINY,
                 "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert ("rlcollect train: the study 'rlcollect' holds 1 trial(s): its sampler is seeded 4294967295 + 1 = "
            "4294967296 modulo 2**32 = 0 for this command's trials (seeded 4294967295, it would ask the first trials "
            "again)") in result.stderr.splitlines()
    assert len(optuna.load_study(study_name="rlcollect", storage=storage).trials) == 2
