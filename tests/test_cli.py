"""`rlcollect train` end to end, in subprocesses, as a user runs it."""
import json
import os
from pathlib import Path

import pytest
from commands import rlcollect, rlcollect_all, start_rlcollect
from shm import leaked_since, shm_entries

from rlcollect.logging.wandb_offline import find_offline_runs, read_offline_run

TINY = ["total_frames=512", "collector.frames_per_batch=128", "algo.minibatch_size=64", "env.num_envs=4",
        "eval.every_frames=256", "eval.episodes=2", "algo.epochs=1", "progress=false"]


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.mark.timeout(300)
def test_train_dqn_on_a_flat_pool(tmp_path):
    """collector=pool collector.layout=flat: steps grouped by env, in unequal numbers,
    written into DQN's replay buffer (PPO needs layout=per_env, the config's default)."""
    result = rlcollect(tmp_path, "train", "algo=dqn", "total_frames=512", "collector.frames_per_batch=128",
                       "algo.learning_starts=128", "algo.gradient_steps_per_batch=4", "eval.every_frames=256",
                       "eval.episodes=2", "collector=pool", "collector.layout=flat", "collector.start_method=fork",
                       "collector.envs_per_worker=2", "logger=none", "progress=false", "hydra.run.dir=run")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["frames"] == 512
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [128, 256, 384, 512]
    assert sum(row["collect/episodes"] for row in rows) > 0


@pytest.mark.timeout(300)
def test_train_ppo_with_wait_reset_counts_only_real_episodes(tmp_path):
    """collector.reset_policy=wait: finished envs wait for the next batch; PPO skips the
    padding and the logged episodes are whole ones (CartPole: mean lengths in 8..500)."""
    result = rlcollect(tmp_path, "train", *TINY, "collector.reset_policy=wait", "logger=none", "hydra.run.dir=run")
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [128, 256, 384, 512]
    lengths = [row["collect/episode_length"] for row in rows if "collect/episode_length" in row]
    assert lengths and all(8 <= length <= 500 for length in lengths)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("collector", [["collector=sync"],
                                       ["collector=multisync", "collector.start_method=fork",
                                        "collector.envs_per_worker=2"],
                                       ["collector=alternating", "collector.start_method=fork",
                                        "collector.envs_per_worker=2"],
                                       ["collector=pool", "collector.start_method=fork",
                                        "collector.envs_per_worker=2"],
                                       ["env=cartpole_torch"],
                                       ["collector=distributed", "collector.start_method=fork",
                                        "collector.envs_per_worker=2"]],
                         ids=["sync", "multisync", "alternating", "pool", "torch_env", "distributed"])
def test_train_logs_the_same_values_to_metrics_jsonl_and_wandb(tmp_path, collector):
    """Collection metrics come from the post-collect hook: in-process for sync and the
    action-server collectors (alternating), inside the workers for multisync; all must
    reach the W&B run."""
    result = rlcollect(tmp_path, "train", *TINY, *collector, "hydra.run.dir=run")
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["frames"] == 512
    assert "id: CartPole-v1" in (run_dir / "config.yaml").read_text()
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [128, 256, 384, 512]
    assert all("collect/frames_per_second" in row and "train/loss_value" in row for row in rows)
    assert sum(row["collect/episodes"] for row in rows) > 0
    assert [row["frames"] for row in rows] == [128, 256, 384, 512]
    assert "eval/episode_return" in rows[1] and "eval/episode_return" in rows[3]
    # time split by phase; frames/s over the collecting time alone
    for row in rows:
        assert row["collect/frames_per_second"] == pytest.approx(row["frames"] / row["time/collect"])
    for phase in ("collect", "train", "eval"):
        seconds = [row[f"time/{phase}"] for row in rows]
        assert seconds == sorted(seconds) and summary[f"seconds_{phase}"] >= seconds[-1]
    assert rows[0]["time/eval"] == 0 < rows[1]["time/eval"]  # the first evaluation is at 256 frames
    [wandb_file] = find_offline_runs(run_dir)
    run = read_offline_run(wandb_file)
    assert run.config["env"]["id"] == "CartPole-v1" and run.config["seed"] == 0
    history = [{k: v for k, v in row.items() if not k.startswith("_")} for row in run.history]
    assert [row["_step"] for row in run.history] == [128, 256, 384, 512]
    assert history == [{k: v for k, v in row.items() if k != "step"} for row in rows]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_sweeps_run_through_hydra_s_launchers(tmp_path, launcher):
    """The joblib launcher (local parallel jobs, the sweep extra) and submitit's local executor
    (the SLURM launcher's path run as local jobs, the slurm extra) each run every job."""
    pytest.importorskip({"joblib": "hydra_plugins.hydra_joblib_launcher",
                         "submitit_local": "hydra_plugins.hydra_submitit_launcher"}[launcher])
    result = rlcollect(tmp_path, "train", "--multirun", "seed=0,1", f"hydra/launcher={launcher}", *TINY,
                       "total_frames=256", "logger=none", "hydra.sweep.dir=sweep")
    assert result.returncode == 0, result.stderr
    summaries = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert [json.loads(path.read_text())["frames"] for path in summaries] == [256, 256]
    assert ["seed: 0" in (path.parent / "config.yaml").read_text() for path in summaries] == [True, False]
    if launcher == "submitit_local":  # the jobs' own logs, as on a cluster
        assert list((tmp_path / "sweep" / ".submitit").glob("*/*_log.out"))


@pytest.mark.timeout(300)
def test_multirun_runs_every_job_and_groups_them_in_wandb(tmp_path):
    result = rlcollect(tmp_path, "train", "--multirun", "seed=0,1", *TINY, "total_frames=256",
                       "hydra.sweep.dir=sweep")
    assert result.returncode == 0, result.stderr
    summaries = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert len(summaries) == 2
    assert [json.loads(s.read_text())["frames"] for s in summaries] == [256, 256]
    configs = [(s.parent / "config.yaml").read_text() for s in summaries]
    assert "seed: 0" in configs[0] and "seed: 1" in configs[1]
    runs = [read_offline_run(find_offline_runs(s.parent)[0]) for s in summaries]
    assert [run.group for run in runs] == ["sweep", "sweep"]  # grouped by the sweep folder
    assert [run.job_type for run in runs] == ["sync", "sync"]  # by collector
    assert "seed=0" in runs[0].name and "seed=1" in runs[1].name  # named after the overrides


@pytest.mark.timeout(300)
def test_a_failing_sweep_job_is_reported_and_the_others_still_run(tmp_path):
    result = rlcollect(tmp_path, "train", "--multirun", "env.id=NoSuchEnv-v0,CartPole-v1", *TINY,
                       "total_frames=256", "logger=none", "hydra.sweep.dir=sweep")
    assert result.returncode == 1
    report = result.stderr.splitlines()[-2:]
    assert report[0] == "rlcollect train: 1 of 2 sweep jobs did not finish (job folders in sweep):"
    assert report[1].startswith("  refused  job 0 (env.id=NoSuchEnv-v0,") and report[1].endswith(
        "invalid configuration: Unknown gymnasium env id 'NoSuchEnv-v0'.")
    summaries = {path.parent.name.split("_")[0]: json.loads(path.read_text())
                 for path in (tmp_path / "sweep").glob("*/summary.json")}
    assert summaries["0"]["status"] == "refused" and summaries["1"]["frames"] == 256


@pytest.mark.timeout(300)
def test_a_sweep_whose_job_folders_nest_under_a_group_override_reports_its_failed_jobs(tmp_path):
    """``buffer/storage=memory`` in a job's overrides nests its run folder one level down
    (``0_...,buffer/storage=memory,...``): the sweep's report finds it there."""
    result = rlcollect(tmp_path, "train", "--multirun", "env.id=NoSuchEnv-v0,CartPole-v1", "algo=dqn",
                       "buffer/storage=memory", "total_frames=256", "collector.frames_per_batch=128",
                       "algo.learning_starts=128", "env.num_envs=4", "eval.episodes=2", "progress=false",
                       "logger=none", "hydra.sweep.dir=sweep")
    assert result.returncode == 1, result.stderr
    report = result.stderr.splitlines()[-2:]
    assert report[0] == "rlcollect train: 1 of 2 sweep jobs did not finish (job folders in sweep):"
    assert report[1].startswith("  refused  job 0 (env.id=NoSuchEnv-v0,algo=dqn,buffer/storage=memory,")
    summaries = sorted((tmp_path / "sweep").glob("*/*/summary.json"))
    assert [json.loads(path.read_text())["status"] for path in summaries] == ["refused", "finished"]


BAD_OPTIONS = [
    ("collector=nosuch", "Could not find 'collector/nosuch'"),
    ("algo.lrr=0.1", "Key 'lrr' not in 'PPOConfig'"),
    ("sed=1", "Key 'sed' not in 'TrainConfig'"),
    ("env.num_envs=many", "Value 'many' of type 'str' could not be converted to Integer"),
    ("env.id=CartPol-v1", "Unknown gymnasium env id 'CartPol-v1'. Did you mean: CartPole-v1"),
    ("collector=ray weight_sync=shared_mem", "collector=ray shares no memory with its actors: use weight_sync=ray"),
    ("weight_sync=ray", "weight_sync=ray needs collector=ray (got collector=sync)"),
    ("collector=sync weight_sync=multiprocess",
     "weight_sync=multiprocess: collector=sync runs the policy in the training process, so there are no weights to "
     "send to workers; leave weight_sync at its default (shared_mem, unused by this collector) or set "
     "weight_sync=none"),
    ("collector=action_server weight_sync=multiprocess",
     "weight_sync=multiprocess: collector=action_server runs the policy in the training process"),
    ("collector=ray collector.remote_config.gpus=1", "Key 'gpus' not in 'RayRemoteConfig'"),
    ("+collector.frame_per_batch=512", "Key 'frame_per_batch' not in 'SyncCollectorConfig'"),
    ("+env.foo=1", "Key 'foo' not in 'EnvConfig' (env.foo is not a key of its schema; an argument of gymnasium.make "
                   "goes under env.make_kwargs: +env.make_kwargs.foo)\n"),
    ("collector._target_=nosuch.Collector", "collector._target_=nosuch.Collector: not an importable class"),
    ("env.solved_return.Acrobot-v1=-100", "Key 'Acrobot-v1' is not in struct (env.solved_return is a mapping: a key "
                                          "new to it is added with a +, +env.solved_return.Acrobot-v1=...)"),
    ("algo=dqn model=actor_critic", "algo=dqn trains model=q_network, not model=actor_critic"),
    # q_network's epsilon interpolates ${algo.eps_start}, which PPO's config lacks
    ("algo=ppo model=q_network", "algo=ppo trains model=actor_critic or recurrent_actor_critic, not model=q_network"),
    ("env.wrappers=[nosuch.Wrapper]", "env.wrappers[0]='nosuch.Wrapper' has no _target_ (the callable to build)"),
    ("env.wrappers=[{_target_:nosuch.Wrapper}]",
     "env.wrappers[0]._target_=nosuch.Wrapper: not an importable callable (No module named 'nosuch')"),
    ("collector=action_server collector.overlap=false", "Key 'overlap' not in 'ActionServerCollectorConfig'"),
    ("collector=action_server collector.env_device=cpu",
     "collector.env_device=cpu: collector=action_server steps its envs in worker processes"),
    ("collector=alternating collector.num_workers=3", "num_workers=3: collector=alternating splits its workers"),
    ("collector=pool collector.layout=flat",
     "algo=ppo's rollout buffer needs one row per env: use collector.layout=per_env"),
    ("collector=pool collector.batch_size=3", "collector.batch_size=3: collector=pool serves whole workers"),
    ("collector=pool collector.max_worker_restarts=1",
     "collector=pool does not support collector.max_worker_restarts=1"),
    ("collector=multisync collector.envs_per_worker=-1", "collector.envs_per_worker=-1: must be >= 1"),
    ("device=cuda", "device=cuda: this machine or this torch build has no CUDA"),
    ("algo=dqn buffer.storage.device=cuda", "buffer.storage.device=cuda: this machine or this torch build has no CUDA"),
    ("algo=dqn collector=multisync buffer.storage.ndim=2",
     "buffer.storage.ndim=2: collector=multisync's workers write into one shared buffer in no set order: use "
     "buffer.storage.ndim=1"),
    ("algo=dqn collector=pool collector.layout=flat buffer.storage.ndim=2",
     "buffer.storage.ndim=2: collector=pool with collector.layout=flat yields batches of 1 batch dim: use ndim <= 1"),
    ("collector=multisync env.backend=async",
     "env.backend=async starts a process per env, which collector=multisync's worker processes cannot"),
    ("collector.cudagraph_policy=true",
     "collector.cudagraph_policy=true replays the policy as a CUDA graph: it needs the policy on cuda (device=cuda "
     "or collector.policy_device=cuda), not cpu"),
    ("algo=dqn buffer.storage.ndim=5", "buffer.storage.ndim=5: the collector's batches have 2 batch dims"),
    ("collector.frames_per_batch=0", "collector.frames_per_batch=0: must be >= 1"),
    ("algo=dqn algo.n_step=0", "algo.n_step=0: must be >= 1"),
    ("eval.every_frames=0", "eval.every_frames must be a positive int, got 0"),
    ("algo.terminal_keys=[life_lost]", "algo.terminal_keys=['life_lost']: each must also be in env.info_keys"),
    ("eval.max_time_share=1.5", "eval.max_time_share=1.5: must be in (0, 1]"),
    ("env.backend=threads", "env.backend='threads': choose one of list, sync, async, vector, envpool"),
    ("collector.reset_policy=later", "collector.reset_policy='later': choose one of immediate, wait"),
    ("algo=dqn collector.reset_policy=wait",
     "collector.reset_policy=wait pads batches with steps that are not transitions; algo=dqn would store them"),
    ("collector.reset_policy=wait env.backend=sync",
     "collector.reset_policy=wait leaves finished envs unstepped, which needs env.backend=list"),
    ("env.backend=vector env.num_envs=null", "env.backend=vector steps a batch of envs but env.num_envs is null"),
    ("env=acrobot env.backend=vector",
     "env.backend=vector: 'Acrobot-v1' has no vector entry point: use the sync or async backend"),
    ("collector=distributed weight_sync=shared_mem",
     "collector=distributed sends the weights over its process group itself: use weight_sync=none"),
    # the new key given at its default (2): told from one not set by the command line alone
    ("collector=ray collector.num_collectors=3 collector.num_workers=2",
     "collector.num_collectors=3 and collector.num_workers=2: num_collectors is the old name of num_workers; set "
     "collector.num_workers only"),
    ("algo=dqn algo.prioritized=true buffer/sampler=slice",
     "algo.prioritized=true draws single transitions in proportion to their priorities: it replaces "
     "buffer/sampler=random, not buffer/sampler=slice"),
    ("algo=dqn buffer/sampler=prioritized buffer.storage.ndim=2",
     "buffer/sampler=prioritized keeps one priority per stored transition: it needs buffer.storage.ndim=1, not 2"),
    # SAC's learning_starts (5000) past the run's frames: it would never take a gradient step
    ("algo=sac env=pendulum total_frames=3000",
     "invalid configuration: algo.learning_starts=5000: must be less than total_frames=3000 (algo=sac collects "
     "random actions and takes no gradient step before algo.learning_starts frames); lower algo.learning_starts "
     "or raise total_frames\n"),
]


BAD_OVERRIDES = [
    ("sed=1", "invalid override sed: Key 'sed' not in 'TrainConfig' (did you mean seed?)"),
    ("collector.total_frames=5",
     "invalid override collector.total_frames: Key 'total_frames' not in 'SyncCollectorConfig' (did you mean "
     "total_frames (a top-level key)?)"),
    ("env.nmu_envs=3", "invalid override env.nmu_envs: Key 'nmu_envs' not in 'EnvConfig' (did you mean env.num_envs?)"),
    ("zzz=1", "invalid override zzz: Key 'zzz' not in 'TrainConfig' (`rlcollect train --cfg job` lists the keys)"),
    ("env.num_envs=many",
     "invalid override env.num_envs: Value 'many' of type 'str' could not be converted to Integer"),
    ("collector=nosuch", "invalid override: Could not find 'collector/nosuch' (options: action_server, alternating, "
                         "distributed, multiasync, multisync, pool, ray, sync)"),
    ("algo.lr=[", "invalid override 'algo.lr=[': no viable alternative at input '['"),
    ("--multirun --cfg job", "invalid configuration: --multirun and --cfg do not go together: give one of them"),
]


@pytest.fixture(scope="module")
def bad_option_runs(tmp_path_factory):
    """The commands of BAD_OPTIONS (with progress=false) and BAD_OVERRIDES (with logger=none),
    each in a folder of its own, four at a time: (override, the option added) -> (its folder,
    its result)."""
    cases = [(override, "progress=false") for override, _ in BAD_OPTIONS]
    cases += [(override, "logger=none") for override, _ in BAD_OVERRIDES]
    folders = [tmp_path_factory.mktemp("bad_option") for _ in cases]
    results = rlcollect_all(folders, [["train", *override.split(), added, "hydra.run.dir=run"]
                                      for override, added in cases], at_once=4)
    return dict(zip(cases, zip(folders, results)))


@pytest.mark.timeout(300)  # the first case waits for every command
@pytest.mark.parametrize("override, message", BAD_OPTIONS)
def test_bad_options_exit_non_zero_with_a_clear_message(bad_option_runs, override, message):
    folder, result = bad_option_runs[override, "progress=false"]
    assert result.returncode == 2  # the user's mistake, found before anything starts: nothing is left
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (folder / "run").exists()


@pytest.mark.timeout(300)  # the first case waits for every command
@pytest.mark.parametrize("override, line", BAD_OVERRIDES)
def test_an_override_hydra_cannot_apply_exits_2_with_one_line(bad_option_runs, override, line):
    folder, result = bad_option_runs[override, "logger=none"]
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"rlcollect train: {line}"]
    assert not (folder / "run").exists()


def test_an_added_unknown_key_exits_2_with_one_line_naming_it(tmp_path):
    """Hydra lets `+collector.<key>=...` through; the pipeline checks it against the schema
    before anything runs (without it, the run would silently use frames_per_batch=256)."""
    result = rlcollect(tmp_path, "train", "+collector.frame_per_batch=512", "logger=none", "progress=false",
                       "hydra.run.dir=run")
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if "frame_per_batch" in line]
    assert line == ("rlcollect train: invalid configuration: Key 'frame_per_batch' not in 'SyncCollectorConfig' "
                    "(collector.frame_per_batch is not a key of its schema, nor an argument of "
                    "rlcollect.collectors.single.Collector left to the config; did you mean "
                    "collector.frames_per_batch?)")
    assert "Traceback" not in result.stderr and not (tmp_path / "run" / "metrics.jsonl").exists()


CHOICES_OUTSIDE = [
    ("collector=multisync collector.cat_results=1", "collector.cat_results=1: choose one of stack, 0, -1"),
    ("weight_sync=multiprocess weight_sync.strategy=bogus",
     "weight_sync.strategy='bogus': choose one of state_dict, tensordict"),
]


@pytest.mark.timeout(300)
def test_a_value_outside_an_options_choices_exits_2_with_one_line_and_leaves_no_folder(tmp_path):
    """Choices are checked with the ranges, before anything is built (config.chosen): the
    user's mistake, not "error while building the run" with a traceback and a folder."""
    folders = [tmp_path / str(index) for index in range(len(CHOICES_OUTSIDE))]
    for folder in folders:
        folder.mkdir()
    results = rlcollect_all(folders, [["train", *override.split(), "progress=false", "hydra.run.dir=run"]
                                      for override, _ in CHOICES_OUTSIDE])
    for folder, (override, message), result in zip(folders, CHOICES_OUTSIDE, results):
        assert result.returncode == 2, (override, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith(f"rlcollect train: invalid configuration: {message}"), line
        assert not (folder / "run").exists() and not list(folder.iterdir())


def test_help_and_a_missing_option_list_only_the_yaml_options(tmp_path):
    """Schemas are registered outside the groups: neither `--help` nor "could not find"
    lists them as options."""
    result = rlcollect(tmp_path, "train", "--help")
    assert result.returncode == 0, result.stderr
    groups = dict(line.split(": ", 1) for line in result.stdout.split("== Config ==")[0].splitlines()
                  if ": " in line and not line.startswith(" "))
    assert groups["collector"] == "action_server, alternating, distributed, multiasync, multisync, pool, ray, sync"
    assert groups["weight_sync"] == "multiprocess, none, ray, shared_mem"
    assert groups["algo"] == "dqn, ppo, sac" and groups["logger"] == "none, wandb"
    assert groups["model"] == "actor_critic, q_network, recurrent_actor_critic, sac_actor"
    assert groups["buffer"] == "replay, rollout" and groups["buffer/storage"] == "memmap, memory"
    assert "schema" not in result.stdout
    missing = rlcollect(tmp_path, "train", "collector=nosuch")
    assert missing.returncode != 0 and "Could not find 'collector/nosuch'" in missing.stderr
    listed = missing.stderr.split("(options: ")[1].rstrip().rstrip(")").split(", ")
    assert listed == ["action_server", "alternating", "distributed", "multiasync", "multisync", "pool", "ray", "sync"]


USER_COLLECTOR = '''
from pathlib import Path

from rlcollect import Collector


class MarkedCollector(Collector):
    """A Collector that appends the size of every batch it yields to a file."""

    def __init__(self, *args, marker="marker.txt", **kwargs):
        super().__init__(*args, **kwargs)
        self.marker = Path(marker)

    def __iter__(self):
        for batch in super().__iter__():
            with self.marker.open("a") as file:
                file.write(f"{batch.numel()}\\n")
            yield batch
'''


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["config_dir", "override"])
def test_a_user_collector_class_given_by_target_is_built_and_used(tmp_path, how):
    """A class of one's own, named by `_target_`: in a YAML option of one's own config dir
    (`--config-dir`, collector/mine.yaml extending sync), or on the command line, with an
    argument of its own added with `+`."""
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "mycollectors.py").write_text(USER_COLLECTOR)
    (tmp_path / "myconf" / "collector").mkdir(parents=True)
    (tmp_path / "myconf" / "collector" / "mine.yaml").write_text(
        "# Collector, marking each batch\ndefaults:\n  - sync\n  - _self_\n\n_target_: mycollectors.MarkedCollector\n")
    if how == "config_dir":
        choice = ["--config-dir", str(tmp_path / "myconf"), "collector=mine"]
        marker = tmp_path / "marker.txt"  # the class's default, in the working folder
    else:
        marker = tmp_path / "batches.txt"
        choice = ["collector._target_=mycollectors.MarkedCollector", f"+collector.marker={marker}"]
    pythonpath = os.pathsep.join([str(tmp_path / "user"), os.environ.get("PYTHONPATH", "")])
    result = rlcollect(tmp_path, "train", *choice, *TINY, "hydra.run.dir=run", pythonpath=pythonpath, timeout=240)
    assert result.returncode == 0, result.stderr
    assert marker.read_text().split() == ["128"] * 4  # it collected every batch of the run
    assert "_target_: mycollectors.MarkedCollector" in (tmp_path / "run" / "config.yaml").read_text()
    [wandb_file] = find_offline_runs(tmp_path / "run")
    assert read_offline_run(wandb_file).job_type == "sync"  # the rlcollect collector it derives from


def test_collector_ray_without_the_extra_names_the_extra_to_install(tmp_path):
    shadow = tmp_path / "no_ray" / "ray"  # first on the path: `import ray` fails as if it were not installed
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n")
    result = rlcollect(tmp_path, "train", "collector=ray", "logger=none", "progress=false", "hydra.run.dir=run",
                       pythonpath=shadow.parent, timeout=120)
    assert result.returncode == 2
    assert "missing dependency: RayCollector needs Ray: pip install 'rlcollect[ray]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_hydra_launcher_without_its_extra_names_the_extra_to_install(tmp_path):
    import importlib.util

    if importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is not None:
        pytest.skip("hydra-ray-launcher is installed")
    result = rlcollect(tmp_path, "train", "--multirun", "hydra/launcher=ray", "seed=0,1", "logger=none")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("rlcollect train: missing dependency: hydra/launcher=ray is a Hydra plugin of the "
                           "raylauncher extra, not installed: pip install 'rlcollect[raylauncher]' (installed "
                           "options: basic, batched")
    assert not (tmp_path / "multirun").exists()


@pytest.mark.parametrize("missing, extra", [
    ("hydra/launcher/joblib", "sweep"), ("hydra/launcher/submitit_slurm", "slurm"),
    ("hydra/launcher/submitit_local", "slurm"), ("hydra/sweeper/optuna", "tune"),  # also what tune_ppo misses
])
def test_each_hydra_plugin_of_an_extra_is_named_with_its_extra(missing, extra):
    from hydra.errors import MissingConfigException

    from rlcollect.commands.overrides import override_error_line

    group, _, option = missing.rpartition("/")
    error = MissingConfigException(f"In 'hydra/config': Could not find '{missing}'\n\nAvailable options ...",
                                   missing, ["basic", "batched"])
    assert override_error_line(error) == (
        f"missing dependency: {group}={option} is a Hydra plugin of the {extra} extra, not installed: "
        f"pip install 'rlcollect[{extra}]' (installed options: basic, batched)")
    other = MissingConfigException("In 'train': Could not find 'collector/nosuch'", "collector/nosuch", ["sync"])
    assert override_error_line(other) == "invalid override: Could not find 'collector/nosuch' (options: sync)"


def test_unknown_command_and_help(tmp_path):
    result = rlcollect(tmp_path, "fly")
    assert result.returncode == 2 and "unknown command 'fly'" in result.stderr
    assert "train" in rlcollect(tmp_path, "--help").stdout


def test_the_process_s_own_command_leaves_its_objects_to_the_exit_and_a_call_does_not(monkeypatch, capsys):
    """main() run as the process's command (no argv) freezes the garbage collector's objects
    as it ends, whatever the command's outcome; main(argv), called from a program that goes
    on, leaves the collector alone."""
    import gc

    from rlcollect import cli

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    assert cli.main(["--help"]) == 0 and frozen == []
    monkeypatch.setattr("sys.argv", ["rlcollect", "--help"])
    assert cli.main() == 0 and frozen == [True]
    monkeypatch.setattr("sys.argv", ["rlcollect", "fly"])
    assert cli.main() == 2 and frozen == [True, True]
    assert "unknown command 'fly'" in capsys.readouterr().err


def _children(pid):
    children = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        children |= {int(c) for c in (task / "children").read_text().split()}
    return children


@pytest.mark.timeout(180)
def test_ctrl_c_during_multisync_training_leaves_no_worker_and_no_shared_memory(tmp_path):
    import signal
    import time

    shm_before = shm_entries()
    process = start_rlcollect(tmp_path, "train", "collector=multisync", "collector.start_method=fork", "logger=none",
                              "progress=false", "total_frames=10000000", "env.solved_return=100000",
                              "hydra.run.dir=run")
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    workers = _children(process.pid)
    assert len(workers) >= 2
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr  # 128 + SIGINT, after the batch under way and a checkpoint
    assert "Traceback" not in stderr and "interrupted at frame" in stderr
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers), "orphan worker"
    assert not leaked_since(shm_before)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["frames"] > 0 and summary["status"] == "interrupted"
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert rows[-1]["step"] == summary["frames"]  # the checkpoint holds the last batch: resume repeats nothing
    from rlcollect.checkpoint import load_checkpoint
    assert int(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["frames"]) == summary["frames"]
    # resumed for two more batches: every batch row exactly once
    frames = summary["frames"]
    resumed = rlcollect(tmp_path, "train", "resume=run", f"total_frames={frames + 512}", timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    steps = [row["step"] for row in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert steps == list(range(256, frames + 512 + 1, 256))


@pytest.mark.timeout(180)
def test_a_killed_worker_is_replaced_and_the_run_finishes_with_its_frames_and_the_restart_logged(tmp_path):
    import signal
    import time

    process = start_rlcollect(tmp_path, "train", "collector=multisync", "collector.start_method=fork",
                              "collector.max_worker_restarts=1", "algo.epochs=1", "progress=false",
                              "total_frames=16384", "env.solved_return=100000", "eval.every_frames=100000",
                              "hydra.run.dir=run")
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
    workers = sorted(pid for pid in _children(process.pid) if Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline)
    assert len(workers) == 2  # forked workers run the trainer's command line (W&B's process does not)
    os.kill(workers[1], signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert f"collector worker 1 died from signal SIGKILL (pid {workers[1]}); replaced it" in stdout  # Hydra's log
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["frames"], summary["status"]) == (16384, "finished")
    rows = read_jsonl(metrics)
    [event] = [row for row in rows if "event" in row]
    assert event == {"step": event["step"], "event": "worker_restart", "worker": 1,
                     "cause": f"died from signal SIGKILL (pid {workers[1]})", "frames_lost": 128}
    steps = [row["step"] for row in rows if "event" not in row]
    assert steps == list(range(256, 16384 + 1, 256))  # every batch once: the sync batch was completed
    [wandb_file] = find_offline_runs(tmp_path / "run")
    history = read_offline_run(wandb_file).history
    assert [row["event/worker_restart"] for row in history if "event/worker_restart" in row] == [1]


USER_ENVS = '''
import gymnasium as gym
import numpy as np
from rlcollect.testing import CountingEnv


class Seven(CountingEnv):
    """Episodes of 7 steps; its info reports is_success at the end."""

    def __init__(self):
        super().__init__(episode_length=7)

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated, truncated, {"is_success": terminated}


class Double(gym.RewardWrapper):
    """Doubles the reward (a wrapper of the user's, from the config)."""

    def reward(self, reward):
        return 2.0 * reward


gym.register("MySeven-v0", entry_point=Seven)
'''


@pytest.mark.timeout(300)
@pytest.mark.parametrize("collector", [["collector=sync"],
                                       ["collector=multisync", "collector.start_method=spawn",
                                        "collector.envs_per_worker=2"]], ids=["sync", "multisync-spawn"])
def test_a_users_own_env_module_trains_with_wrappers_and_info_keys_from_the_config(tmp_path, collector):
    """gymnasium's module:EnvId imports the user's module (in spawned workers too), the
    config's wrappers apply, and env.info_keys reach the batches and the logs."""
    (tmp_path / "my_rl_envs.py").write_text(USER_ENVS)
    result = rlcollect(tmp_path, "train", *TINY, *collector, "hydra.run.dir=run", "logger=none",
                       "env.id=my_rl_envs:MySeven-v0", "env.info_keys=[is_success]", "env.solved_return=null",
                       "env.wrappers=[{_target_: my_rl_envs.Double}]", pythonpath=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [128, 256, 384, 512]
    episodes = [row for row in rows if row["collect/episodes"]]
    assert episodes and all(row["collect/episode_length"] == 7.0 and row["collect/is_success"] == 1.0
                            and row["collect/episode_return"] == 14.0 for row in episodes)  # reward 1, doubled
    evaluations = [row["eval/episode_return"] for row in rows if "eval/episode_return" in row]
    assert evaluations and all(value == 14.0 for value in evaluations)


TUPLE_ACTIONS_ENV = """
import gymnasium as gym
import numpy as np
from rlcollect.testing import CountingEnv


class TupleActions(CountingEnv):
    \"\"\"A CountingEnv that takes a Tuple of actions (a discrete move and a continuous force).\"\"\"

    def __init__(self):
        super().__init__(episode_length=7)
        self.action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)))


gym.register("my-rl-envs/TupleActions-v0", entry_point=TupleActions)
"""


def test_an_env_with_an_unsupported_action_space_exits_2_with_one_line_and_leaves_no_folder(tmp_path):
    """An env whose action space rlcollect does not handle is the user's choice of env: refused
    when the pipeline probes its spaces, before any part is built (it was "error while building
    the run: TypeError", exit 1, a folder with error.log)."""
    (tmp_path / "tuple_envs.py").write_text(TUPLE_ACTIONS_ENV)
    result = rlcollect(tmp_path, "train", "env.id=my-rl-envs/TupleActions-v0", "env.imports=[tuple_envs]",
                       "env.solved_return=null", "progress=false", "hydra.run.dir=run",
                       pythonpath=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]), timeout=120)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("rlcollect train: invalid configuration: action space Tuple(Discrete(2), Box(") and \
        "is not supported: rlcollect handles Box, Discrete, MultiDiscrete, MultiBinary spaces" in line
    assert not (tmp_path / "run").exists()


INTERRUPTING_ENV = """
import os
import signal

import gymnasium as gym
from rlcollect.testing import CountingEnv


class Interrupted(CountingEnv):
    def __init__(self):
        # as Ctrl-C while the envs are being made (Python's own handler: a background job's
        # shell starts it with SIGINT ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
        super().__init__(episode_length=5)


gym.register("Interrupted-v0", entry_point=Interrupted)
"""


@pytest.mark.timeout(180)
def test_ctrl_c_to_a_run_with_async_envs_stops_it_after_its_batch_with_its_env_processes_alive_till_then(tmp_path):
    """Ctrl-C reaches every process of the terminal's group, env.backend=async's env
    processes too: they start with SIGINT blocked, so the run ends its batch, evaluates and
    checkpoints as any run does (they died of KeyboardInterrupt, and the run failed with a
    BrokenPipeError, its last checkpoint batches back)."""
    import signal

    from processes import wait_for

    from rlcollect.checkpoint import load_checkpoint

    process = start_rlcollect(tmp_path, "train", "env.backend=async", "env.num_envs=2", "logger=none",
                              "progress=false", "total_frames=10000000", "env.solved_return=100000",
                              "eval.episodes=2", "hydra.run.dir=run", start_new_session=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    wait_for(lambda: process.poll() is not None or (metrics.exists() and metrics.read_text().count("\n") >= 2),
             timeout=120)
    assert process.poll() is None, process.communicate()
    env_processes = _children(process.pid)
    assert len(env_processes) >= 2
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr and "failed" not in stderr, stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_frames"] == summary["frames"] > 0
    assert int(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["frames"]) == summary["frames"]
    assert all(not Path(f"/proc/{pid}").exists() for pid in env_processes), "orphan env process"


def test_ctrl_c_while_starting_exits_130_with_one_line_and_leaves_no_folder(tmp_path):
    """The envs being made: the run folder held only what Hydra wrote, and goes with it."""
    (tmp_path / "my_interrupted_envs.py").write_text(INTERRUPTING_ENV)
    result = rlcollect(tmp_path, "train", *TINY, "hydra.run.dir=run", "logger=none",
                       "env.id=my_interrupted_envs:Interrupted-v0", "env.solved_return=null", pythonpath=tmp_path,
                       timeout=120)
    assert result.returncode == 130
    assert result.stderr.strip().splitlines() == ["rlcollect train: interrupted while starting, before the first batch"]
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("collector", ["multisync", "distributed"])
def test_sigterm_to_the_group_stops_a_run_of_worker_processes_after_its_batch_with_its_checkpoint(tmp_path, collector):
    """``timeout`` (or a scheduler) sends SIGTERM to every process of the command's group:
    the collector's workers leave it to the command, which ends its batch, checkpoints and
    exits 143 (the workers died of it, and the run failed asking them for their state)."""
    import signal

    from processes import ctrl_c_group_when, wait_for

    process = start_rlcollect(tmp_path, "train", f"collector={collector}", "collector.num_workers=2", "logger=none",
                              "progress=false", "total_frames=10000000", "env.solved_return=null", "eval.episodes=2",
                              "hydra.run.dir=run", start_new_session=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    workers = []

    def running():
        if metrics.exists() and metrics.read_text().count("\n") >= 2:
            workers.extend(_children(process.pid))
            return True
        return False

    stderr = ctrl_c_group_when(process, running, signal_number=signal.SIGTERM)
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr and "failed" not in stderr and "could not" not in stderr, stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_frames"] == summary["frames"] > 0
    assert len(workers) >= 2
    wait_for(lambda: not [pid for pid in workers if Path(f"/proc/{pid}").exists()], timeout=30)  # none left behind


CTRL_C_AT = """
# Ctrl-C at the point ctrl_c_at.txt (in the working folder) names: an import, or the opening of a
# file whose path ends so (a third word: another signal, SIGTERM)
import os
import signal
import sys

try:
    with open("ctrl_c_at.txt") as file:
        EVENT, NAME, *SIGNAL = file.read().split()
except OSError:
    EVENT = NAME = None
SENT = []


def ctrl_c_at(event, args):
    if not SENT and event == EVENT and (args[0] == NAME if event == "import" else str(args[0]).endswith(NAME)):
        SENT.append(True)
        os.kill(os.getpid(), getattr(signal, SIGNAL[0]) if SIGNAL else signal.SIGINT)


if EVENT:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (pytest may run with it ignored)
    sys.addaudithook(ctrl_c_at)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signal_name, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_at_any_point_of_the_start_is_one_line_exit_130_and_leaves_no_folder(tmp_path, signal_name, code):
    """Ctrl-C in the first seconds lands in imports or in Hydra's work, before the job's own
    handling: wherever it lands, one line, no traceback, exit 130, and the folder Hydra made
    (if it got that far) is gone with what it wrote. SIGTERM (a scheduler's, timeout's) the
    same, exit 143."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CTRL_C_AT)
    starting = "rlcollect train: interrupted while starting, before the first batch"
    points = {"import rlcollect.config": "rlcollect train: interrupted",  # the command's module loads
              "import omegaconf._impl": starting,  # Hydra composes the config
              "open .hydra/hydra.yaml": starting,  # Hydra writes the job's folder
              "import torch": starting}  # the job loads torch
    folders = []
    for number, point in enumerate(points):
        folders.append(tmp_path / str(number))
        folders[-1].mkdir()
        (folders[-1] / "ctrl_c_at.txt").write_text(f"{point} {signal_name}")
    results = rlcollect_all(folders, [(["train", *TINY, "logger=none", "hydra.run.dir=run"], tmp_path / "hooks")]
                            * len(points))
    for folder, (point, line), result in zip(folders, points.items(), results):
        assert result.returncode == code, (point, result.stderr)
        assert result.stderr.splitlines() == [line], point
        assert sorted(path.name for path in folder.iterdir()) == ["ctrl_c_at.txt"], point


CTRL_C_IN_A_STARTING_WORKER = """
# Ctrl-C as a terminal sends it, to the command and to a collector worker while the worker (a spawned
# interpreter) still imports torch
import os
import signal
import sys

if "--multiprocessing-fork" in sys.argv:
    def ctrl_c(event, args):
        if event == "import" and args[0] == "torch":
            os.kill(os.getppid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    sys.addaudithook(ctrl_c)
else:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (pytest may run with it ignored)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("collector", ["multisync", "distributed"])
def test_ctrl_c_while_a_collectors_workers_start_is_one_line_without_their_tracebacks(tmp_path, collector):
    """A worker starts with SIGINT blocked, so a Ctrl-C that reaches it while its interpreter
    imports is not a KeyboardInterrupt traceback of its own: the command says its one line
    (a multi-process collector's workers, a torch.distributed collector's)."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CTRL_C_IN_A_STARTING_WORKER)
    [stopped] = rlcollect_all(tmp_path, [(["train", *TINY, f"collector={collector}", "collector.num_workers=2",
                                           "logger=none", "hydra.run.dir=run"], tmp_path / "hooks")])
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.splitlines() == ["rlcollect train: interrupted while starting, before the first batch"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hooks"]


@pytest.mark.timeout(300)
def test_ctrl_c_while_a_sweeps_first_job_loads_names_the_sweeps_resume_which_trains_every_job(tmp_path):
    """Ctrl-C while job 0 of a sweep loads torch: its folder keeps Hydra's records and
    {interrupted, 0}, job 1 never starts, and the lines name the sweep's resume, which
    starts both."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CTRL_C_AT)
    (tmp_path / "ctrl_c_at.txt").write_text("import torch")
    [stopped] = rlcollect_all(tmp_path, [(["train", "--multirun", "seed=0,1", *TINY, "logger=none",
                                           "hydra.sweep.dir=sw"], tmp_path / "hooks")])
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.splitlines() == [
        "rlcollect train: interrupted while starting, before the first batch",
        "rlcollect train: or continue every member of the sweep as it trained: `rlcollect train resume=sw`"]
    [job] = [path for path in (tmp_path / "sw").iterdir() if path.is_dir()]
    assert json.loads((job / "summary.json").read_text()) == {"status": "interrupted", "frames": 0}
    (tmp_path / "ctrl_c_at.txt").unlink()
    resumed = rlcollect(tmp_path, "train", "resume=sw")
    assert resumed.returncode == 0, resumed.stderr
    summaries = [json.loads(path.read_text()) for path in sorted((tmp_path / "sw").glob("*/summary.json"))]
    assert [summary["status"] for summary in summaries] == ["finished", "finished"]


@pytest.mark.timeout(300)
def test_ctrl_c_with_a_sweep_jobs_last_batch_finishes_it_and_starts_no_later_job(tmp_path):
    """Ctrl-C while job 0 of a sweep (the basic launcher, one job after the other) writes its
    last batch's checkpoint: job 0 has trained all its frames and is finished, job 1 does
    not start, the command exits 130 naming the sweep's resume, which trains job 1."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CTRL_C_AT)
    (tmp_path / "ctrl_c_at.txt").write_text("open checkpoint.pt.partial")  # the only checkpoint: the last batch's
    [stopped] = rlcollect_all(tmp_path, [(["train", "--multirun", "seed=0,1", *TINY, "logger=none",
                                           "checkpoint_every_seconds=null", "checkpoint_every_frames=512",
                                           "hydra.sweep.dir=sw"], tmp_path / "hooks")])
    assert stopped.returncode == 130, stopped.stderr
    [job] = [path for path in (tmp_path / "sw").iterdir() if path.is_dir()]
    assert stopped.stderr.splitlines()[-1] == (
        "rlcollect train: stopped after job #0 finished; continue every member of the sweep as it trained: "
        "`rlcollect train resume=sw`")
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["status"], summary["frames"], summary["checkpoint_frames"]) == ("finished", 512, 512)
    (tmp_path / "ctrl_c_at.txt").unlink()
    resumed = rlcollect(tmp_path, "train", "resume=sw")
    assert resumed.returncode == 0, resumed.stderr
    summaries = [json.loads(path.read_text()) for path in sorted((tmp_path / "sw").glob("*/summary.json"))]
    assert [(summary["status"], summary["frames"]) for summary in summaries] == [("finished", 512)] * 2


@pytest.mark.timeout(300)
def test_ctrl_c_while_w_and_b_starts_early_is_the_same_one_line_exit_130_and_leaves_no_folder(tmp_path):
    """With the W&B logger, W&B is imported and its service started before torch
    (rlcollect/logging/wandb_start.py): Ctrl-C in W&B's import, or in torch's while the
    service starts, ends the start as anywhere else."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CTRL_C_AT)
    points = ["import wandb.apis.public", "import torch"]  # deep in W&B's early import; torch's
    folders = []
    for number, point in enumerate(points):
        folders.append(tmp_path / str(number))
        folders[-1].mkdir()
        (folders[-1] / "ctrl_c_at.txt").write_text(point)
    results = rlcollect_all(folders, [(["train", *TINY, "hydra.run.dir=run"], tmp_path / "hooks")] * len(points))
    for folder, point, result in zip(folders, points, results):
        assert result.returncode == 130, (point, result.stderr)
        assert result.stderr.splitlines() == ["rlcollect train: interrupted while starting, before the first batch"]
        assert sorted(path.name for path in folder.iterdir()) == ["ctrl_c_at.txt"], point


CRASHING_ENV = """
import gymnasium as gym
from rlcollect.testing import CountingEnv


class Crash(CountingEnv):
    def __init__(self):
        super().__init__(episode_length=5)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps > 300:
            raise RuntimeError("the simulator lost its state")
        return super().step(action)


gym.register("Crash-v0", entry_point=Crash)
"""


@pytest.mark.timeout(300)
def test_the_run_record_tells_finished_from_failed_in_summary_json_and_wandb(tmp_path):
    (tmp_path / "crashing_envs.py").write_text(CRASHING_ENV)
    finished, failed = rlcollect_all(tmp_path, [
        ["train", *TINY, "hydra.run.dir=ok", "env.solved_return=null"],
        ["train", *TINY, "hydra.run.dir=crash", "env.id=crashing_envs:Crash-v0", "env.num_envs=1",
         "env.solved_return=null"]], pythonpath=tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert failed.returncode != 0
    ok_summary = json.loads((tmp_path / "ok" / "summary.json").read_text())
    crash_summary = json.loads((tmp_path / "crash" / "summary.json").read_text())  # strict JSON (json.loads)
    assert ok_summary["status"] == "finished" and "error" not in ok_summary
    assert crash_summary["status"] == "failed"
    assert crash_summary["error"] == "RuntimeError: the simulator lost its state"
    assert "the run failed: RuntimeError: the simulator lost its state" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) <= 5  # one short block, not a traceback
    assert "Traceback" in (tmp_path / "crash" / "error.log").read_text()
    assert read_offline_run(find_offline_runs(tmp_path / "ok")[0]).exit_code == 0
    assert read_offline_run(find_offline_runs(tmp_path / "crash")[0]).exit_code == 1


@pytest.mark.timeout(300)
def test_a_diverged_run_stops_at_once_as_failed_keeping_the_last_good_checkpoint(tmp_path):
    result = rlcollect(tmp_path, "train", "env=pendulum", "algo.lr=1e9", "total_frames=4096",
                       "collector.frames_per_batch=256", "eval.every_frames=256", "eval.episodes=1", "progress=false",
                       "logger=none", "checkpoint_every_frames=256", "hydra.run.dir=run", timeout=240)
    assert result.returncode == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())  # strict JSON: no bare NaN
    assert summary["status"] == "failed" and summary["error"].startswith("DivergedError: training diverged at frame")
    frame = int(summary["error"].split("at frame ")[1].split(":")[0])
    assert frame < 4096 and summary["frames"] == frame  # stopped at once
    from rlcollect.checkpoint import load_checkpoint
    path = tmp_path / "run" / "checkpoint.pt"
    if frame == 256:  # diverged on the first update: no checkpoint was written at all (none poisoned)
        assert not path.exists()
    else:
        checkpoint = load_checkpoint(path)
        assert int(checkpoint["frames"]) < frame  # the last good one
        assert all(bool(value.isfinite().all()) for value in checkpoint["policy"].values()
                   if value.is_floating_point())


@pytest.mark.timeout(120)
def test_evaluations_over_the_time_share_are_skipped_but_never_the_last(tmp_path):
    # with no threshold, a share no evaluation can stay under: the first one runs (none before it), then
    # every other is skipped until the last batch, whose evaluation always runs
    result = rlcollect(tmp_path, "train", "total_frames=1024", "collector.frames_per_batch=256", "env.num_envs=4",
                       "eval.every_frames=256", "eval.episodes=1", "eval.max_time_share=1e-9", "env.solved_return=null",
                       "algo.epochs=1", "progress=false", "logger=none", "hydra.run.dir=run")
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows if "eval/episode_return" in row] == [256, 1024]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["evaluations_skipped"] == 2
    assert "evaluations are skipped while it is above eval.max_time_share=1e-09" in result.stdout
