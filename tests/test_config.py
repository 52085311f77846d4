"""Every shipped config option composes, builds its objects from their `_target_` and runs
one tiny step; every default is written once (in the schemas); the wheel carries the
config tree."""
import dataclasses
import functools
import importlib.util
import inspect
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.utils import get_class

from rlcollect import pipeline
from rlcollect.config import (
    SCHEMAS,
    DQNConfig,
    EnvConfig,
    EvalConfig,
    PPOConfig,
    TrainConfig,
    eval_every_frames,
    register_configs,
)

CONF = Path(__file__).parents[1] / "rlcollect" / "conf"
ONE_STEP = ["total_frames=64", "collector.frames_per_batch=64", "eval.every_frames=64", "eval.episodes=1",
            "eval.max_steps=20", "progress=false"]
PPO_STEP = ["algo.epochs=1", "algo.minibatch_size=32"]
DQN_STEP = ["algo=dqn", "algo.learning_starts=0", "algo.gradient_steps_per_batch=2", "algo.batch_size=16"]
GROUPS = ["env", "collector", "weight_sync", "algo", "model", "buffer", "buffer/storage", "buffer/sampler", "logger",
          "experiment"]


def options(group, *, ray=False):
    """The group's options; Ray's only with ``ray`` (they run in tests/collectors/test_ray.py,
    on that module's loopback Ray head)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if ray or p.stem != "ray")


def compose_train(overrides, **kwargs):
    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        return compose("train", overrides=overrides, **kwargs)


SAC_STEP = ["algo=sac", "algo.learning_starts=0", "algo.gradient_steps_per_batch=2", "algo.batch_size=16",
            "algo.critic_hidden_sizes=[8]", "model.hidden_sizes=[8]"]


# the experiments of off-policy algorithms: their one-step settings
OFF_POLICY_EXPERIMENTS = {"experiment=mujoco_sac": [step for step in SAC_STEP if step != "algo=sac"],
                          "experiment=atari_dqn": [step for step in DQN_STEP if step != "algo=dqn"]}


def one_step(overrides):
    off_policy = "algo=dqn" in overrides or "algo=sac" in overrides
    algo_step = [] if off_policy else PPO_STEP
    for experiment, steps in OFF_POLICY_EXPERIMENTS.items():
        if experiment in overrides:
            algo_step = [*steps, "buffer.storage.max_size=4096"]
    logger = [] if any(o.startswith("logger=") for o in overrides) else ["logger=none"]
    return [*overrides, *algo_step, *ONE_STEP, *logger]


MULTI = ["collector.start_method=fork", "collector.envs_per_worker=2"]
# the presets of the envs extra (make setup installs it); skipped where it is not installed
EXTRA = {"halfcheetah": "mujoco", "hopper": "mujoco", "walker2d": "mujoco", "mujoco_ppo": "mujoco",
         "mujoco_sac": "mujoco", "breakout": "ale_py", "pong": "ale_py", "atari_ppo": "ale_py",
         "atari_dqn": "ale_py"}


def preset(group, name):
    module = EXTRA.get(name)
    missing = module is not None and importlib.util.find_spec(module) is None
    return pytest.param([f"{group}={name}"], marks=pytest.mark.skipif(missing, reason=f"needs {module} (envs extra)"))


RUNS = ([preset("env", name) for name in options("env")]
        + [preset("experiment", name) for name in options("experiment")]
        + [[f"collector={name}", *MULTI] for name in options("collector") if name != "sync"]
        + [["collector=multisync", f"weight_sync={name}", *MULTI] for name in options("weight_sync")]
        + [[*DQN_STEP, f"collector={name}", *(MULTI if name != "sync" else [])] for name in options("collector")]
        + [[f"model={name}"] for name in options("model") if name not in ("q_network", "sac_actor")]  # DQN/SAC
        + [[f"logger={name}"] for name in options("logger")]
        + [[*DQN_STEP, "algo.background=true"],
           [*DQN_STEP, "buffer/storage=memmap", "buffer/sampler=slice", "buffer.sampler.slice_len=4"],
           [*DQN_STEP, "buffer/sampler=slice_without_replacement", "buffer.sampler.slice_len=4"],
           [*DQN_STEP, "buffer/sampler=prioritized", "algo.n_step=3"],
           [*DQN_STEP, "algo.prioritized=true"],
           [*DQN_STEP, "buffer.storage.ndim=2", "buffer.storage.max_size=256"],
           [*DQN_STEP, "collector=multiasync", *MULTI, "buffer.trajs_per_batch=1"],
           [*SAC_STEP, "env=pendulum"], [*SAC_STEP, "env=pendulum", "collector=multiasync", *MULTI]])


@pytest.mark.parametrize("overrides", RUNS,
                         ids=lambda overrides: " ".join(o for o in overrides if "=" in o and not o.startswith("algo.")
                                                        and "start_method" not in o and "envs_per" not in o))
def test_every_config_composes_builds_its_targets_and_runs_one_step(tmp_path, overrides):
    cfg = compose_train(one_step(overrides))
    built = pipeline.build(cfg, tmp_path)
    # every component is the class its node's _target_ names
    assert type(built.collector) is get_class(cfg.collector._target_)
    assert type(built.policy) is get_class(cfg.model._target_)
    assert type(built.logger) is get_class(cfg.logger._target_)
    assert type(pipeline.make_weight_sync_scheme(cfg)) is get_class(cfg.weight_sync._target_)
    if cfg.algo.name == "ppo":
        assert type(built.learner.buffer) is get_class(cfg.buffer._target_)
    else:
        buffer = built.learner.replay_buffer
        assert type(buffer) is get_class(cfg.buffer._target_)
        assert type(buffer.storage) is get_class(cfg.buffer.storage._target_)
        sampler_target = ("rlcollect.buffers.samplers.PrioritizedSampler" if cfg.algo.prioritized
                          else cfg.buffer.sampler._target_)
        assert type(buffer.sampler) is get_class(sampler_target)
    summary = pipeline.run(built)
    assert summary["frames"] >= 64


def test_dqn_n_step_and_prioritized_replay_from_the_config_through_worker_processes(tmp_path):
    cfg = compose_train(one_step([*DQN_STEP, "buffer/sampler=prioritized", "algo.n_step=3", "collector=multisync",
                                  *MULTI, "buffer.storage.max_size=500"]))
    built = pipeline.build(cfg, tmp_path)
    buffer = built.learner.replay_buffer
    assert repr(buffer.write_transform) == f"MultiStep(gamma={cfg.algo.gamma}, n_steps=3)"
    assert (buffer.sampler.max_capacity, buffer.sampler.alpha, buffer.sampler.beta) == (500, 0.6, 0.4)
    pipeline.run(built)
    stored = buffer[:]
    assert len(buffer) == 64
    # written by the workers as 3-step transitions: 3 steps, fewer at an episode's or a batch's end
    steps = stored["next", "steps_to_next_obs"].reshape(-1)
    assert set(steps.tolist()) <= {1, 2, 3} and int((steps == 3).sum()) >= 40
    # two gradient steps gave the sampled transitions their TD errors: priorities differ now
    probabilities = buffer.sampler.probabilities(buffer.storage)
    assert probabilities.shape == (64,) and probabilities.max() > probabilities.min()
    assert json.loads((tmp_path / "summary.json").read_text())["frames"] == 64
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 64 and "eval/episode_return" in rows[-1]


def test_the_runs_cover_every_option_of_every_group():
    """Each YAML option of each group (nested groups and experiments included) is picked by
    one of the runs above, or, for Ray's, by the Ray tests below and in test_ray.py."""
    shipped = {(group, name) for group in GROUPS for name in options(group, ray=True)}
    assert {group for group, _ in shipped} == set(GROUPS)  # no group folder left out of GROUPS
    folders = {p.parent.relative_to(CONF).as_posix() for p in CONF.rglob("*.yaml") if p.parent != CONF}
    # Hydra's own groups: the tune_* presets and their sampler run in test_tuning.py (hydra/launcher=batched is
    # its plugin's ConfigStore node, run in test_sweeps.py and test_launcher_conformance.py)
    assert folders - {"hydra/sweeper", "hydra/sweeper/sampler"} == set(GROUPS)
    assert sorted(p.name for p in (CONF / "hydra" / "sweeper").glob("*.yaml")) == ["tune_dqn.yaml", "tune_ppo.yaml",
                                                                                  "tune_sac.yaml"]
    assert [p.name for p in (CONF / "hydra" / "sweeper" / "sampler").glob("*.yaml")] == ["tpe_seeded.yaml"]
    picked = {("collector", "ray"), ("weight_sync", "ray")}
    for run in RUNS:
        overrides = run.values[0] if hasattr(run, "values") else run  # a preset's pytest.param
        choices = compose_train(one_step(overrides), return_hydra_config=True).hydra.runtime.choices
        picked |= {(group, choices[group]) for group in GROUPS if choices.get(group)}
    assert shipped <= picked, sorted(shipped - picked)


def test_collector_ray_composes_with_ray_weight_sync_and_its_actor_resources():
    cfg = compose_train(["collector=ray", "collector.remote_config.num_gpus=0.5", "collector.ray_address=auto"])
    assert (cfg.collector._target_, cfg.weight_sync._target_) == ("rlcollect.collectors.ray.collector.RayCollector",
                                                                   "rlcollect.weight_sync.ray.RayWeightSyncScheme")
    assert (cfg.collector.num_workers, cfg.collector.collector_class, cfg.collector.sync) == (2, "sync", True)
    assert cfg.collector.num_collectors is None  # num_workers's old name, declared for a release: not set
    assert dict(cfg.collector.remote_config) == {"num_cpus": 1, "num_gpus": 0.5, "memory": None}
    assert cfg.collector.ray_address == "auto"
    assert pipeline.collector_name(cfg) == "ray"
    # the user's choice wins
    assert compose_train(["collector=ray", "weight_sync=none"]).weight_sync._target_ == \
        "rlcollect.weight_sync.schemes.NoWeightSyncScheme"
    # only keys RayCollector uses
    assert not {"cat_results", "update_at_each_batch"} & set(cfg.collector)


# ---------------------------------------------------------------------------- renamed keys
def test_collector_ray_num_collectors_composes_and_moves_to_num_workers_with_a_warning(caplog):
    """num_collectors was collector=ray's name of what collector=distributed calls num_workers:
    for a release it still composes, and the pipeline moves its value to num_workers (the
    config the run saves and builds from), with a warning naming the new key."""
    from rlcollect.config.fields import rename_keys
    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import batch_frames, check_config

    cfg = compose_train(["collector=ray", "collector.num_collectors=3"])
    with caplog.at_level("WARNING", logger="rlcollect.pipeline.checks"):
        check_config(cfg)
    assert (cfg.collector.num_workers, cfg.collector.num_collectors) == (3, None)
    assert [record.getMessage() for record in caplog.records] == [
        "collector.num_collectors is deprecated: it is collector.num_workers now (collector.num_workers=3 is used); "
        "the old key will be removed in a future release"]
    assert batch_frames(cfg) == batch_frames(compose_train(["collector=ray", "collector.num_workers=3"])) == 264
    check_config(compose_train(["collector=ray", "collector.num_collectors=3", "collector.num_workers=3"]))
    with pytest.raises(ConfigError, match=r"^collector\.num_collectors=3 and collector\.num_workers=4: num_collectors "
                                          r"is the old name of num_workers; set collector\.num_workers only$"):
        check_config(compose_train(["collector=ray", "collector.num_collectors=3", "collector.num_workers=4"]))
    with pytest.raises(ConfigError, match=r"^collector\.num_collectors=0: must be >= 1$"):
        check_config(compose_train(["collector=ray", "collector.num_collectors=0"]))
    # the new key set to its default (2): a conflict where the command line names it, the old key's value otherwise
    default_too = compose_train(["collector=ray", "collector.num_collectors=3", "collector.num_workers=2"])
    with pytest.raises(ConfigError, match=r"^collector\.num_collectors=3 and collector\.num_workers=2: "):
        rename_keys(default_too.copy(), given={"collector.num_workers"})
    rename_keys(default_too)
    assert default_too.collector.num_workers == 3


def test_collector_distributed_launcher_composes_and_moves_to_start_workers_with(caplog):
    """launcher (a word Hydra's hydra/launcher=... owns) was collector=distributed's name of
    how its workers start: for a release it still composes, checked against the same choices,
    and the pipeline moves its value to start_workers_with, with a warning."""
    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import check_config

    cfg = compose_train(["collector=distributed", "collector.launcher=ray"])
    assert (cfg.collector.start_workers_with, cfg.collector.launcher) == ("mp", "ray")
    with caplog.at_level("WARNING", logger="rlcollect.pipeline.checks"):
        check_config(cfg)
    assert (cfg.collector.start_workers_with, cfg.collector.launcher) == ("ray", None)
    assert [record.getMessage() for record in caplog.records] == [
        "collector.launcher is deprecated: it is collector.start_workers_with now (collector.start_workers_with='ray' "
        "is used); the old key will be removed in a future release"]
    assert compose_train(["collector=distributed"]).collector.launcher is None
    with pytest.raises(ConfigError, match=r"^collector\.launcher='ssh': choose one of mp, submitit, ray$"):
        check_config(compose_train(["collector=distributed", "collector.launcher=ssh"]))
    with pytest.raises(ConfigError, match=r"^collector\.launcher='ray' and collector\.start_workers_with='submitit': "):
        check_config(compose_train(["collector=distributed", "collector.launcher=ray",
                                    "collector.start_workers_with=submitit"]))


def test_a_run_folder_s_config_with_the_old_keys_is_moved_too():
    """A config.yaml written before the renames (read back untyped by resume) names only the old
    keys: they move to the new ones, found by the node's _target_."""
    from omegaconf import OmegaConf

    from rlcollect.config import rename_keys

    for overrides, old, new, value in ((["collector=ray"], "num_collectors", "num_workers", 3),
                                       (["collector=distributed"], "launcher", "start_workers_with", "submitit")):
        saved = OmegaConf.to_container(compose_train(overrides), resolve=True)
        del saved["collector"][new]
        saved["collector"][old] = value
        cfg = OmegaConf.create(saved)
        assert rename_keys(cfg) == [f"collector.{old} is deprecated: it is collector.{new} now (collector.{new}="
                                    f"{value!r} is used); the old key will be removed in a future release"]
        assert (cfg.collector[new], cfg.collector[old]) == (value, None)
        assert rename_keys(cfg) == []  # moved once


def test_every_renamed_argument_of_a_configured_class_is_a_renamed_key_of_its_schema():
    """rlcollect.moved.RENAMED_ARGUMENTS and the schemas' ``renamed`` keys say the same: the
    class takes the old keyword, default None, and its schema declares the old key (default
    None) that moves to the new one."""
    from rlcollect.config import RENAMED
    from rlcollect.moved import RENAMED_ARGUMENTS

    declared = {(schema._target_, f.name): f.metadata[RENAMED] for schema in SCHEMAS.values()
                for f in dataclasses.fields(schema) if RENAMED in f.metadata}
    assert declared == {(owner, old): new for owner, renames in RENAMED_ARGUMENTS.items()
                        for old, new in renames.items()}
    for (owner, old), new in declared.items():
        defaults = constructor_defaults(get_class(owner))
        assert defaults[old] is None and new in defaults, owner


class _Built(Exception):
    """Raised by the stand-in constructor once it has its arguments."""


@pytest.mark.parametrize("collector_class", ["sync", "multisync"])
def test_collector_ray_gets_its_node_and_the_runtime_arguments(tmp_path, monkeypatch, collector_class):
    """What the Ray builder passes RayCollector, checked against its signature (without Ray:
    the constructor is replaced once it has bound its arguments)."""
    from rlcollect.collectors.ray import RayCollector
    from rlcollect.weight_sync import RayWeightSyncScheme

    original = RayCollector.__init__
    signature = inspect.signature(original)
    seen = {}

    @functools.wraps(original)  # its signature stays what the pipeline reads (accepted_arguments)
    def bind(self, *args, **kwargs):
        seen.update(signature.bind(self, *args, **kwargs).arguments)
        raise _Built

    monkeypatch.setattr(RayCollector, "__init__", bind)
    inner = ["collector.collector_kwargs.num_workers=2", "collector.collector_kwargs.start_method=fork"]
    cfg = compose_train(["collector=ray", f"collector.collector_class={collector_class}", "logger=none", *DQN_STEP,
                         "algo.learning_starts=300", "collector.collector_kwargs.max_frames_per_traj=50", "seed=3",
                         *(inner if collector_class == "multisync" else [])])
    with pytest.raises(_Built):
        pipeline.build(cfg, tmp_path)
    assert (seen["create_env_fn"], seen["seed"], seen["envs_per_worker"]) == ("CartPole-v1", 3, 4)
    assert seen["env_kwargs"] == {"max_episode_steps": None}
    assert (seen["collector_class"], seen["num_workers"], seen["frames_per_batch"]) == (collector_class, 2, 256)
    assert seen["num_collectors"] is None
    assert seen["remote_config"] == {"num_cpus": 1, "num_gpus": None, "memory": None}
    # the node's collector_kwargs as they are (RayCollector drops the null ones: host_collector_kwargs);
    # the run's device and the algorithm's random start as arguments of their own
    from rlcollect.collectors.host_plan import host_collector_kwargs

    expected_inner = {"max_frames_per_traj": 50, "init_random_frames": 300, "reset_at_each_iter": False,
                      "reset_when_done": True, "split_trajs": False, "exploration_type": "random",
                      "track_traj_ids": True, "set_truncated": False, "reset_policy": "immediate",
                      "no_cuda_sync": False, "device": "cpu"}
    if collector_class == "multisync":
        expected_inner.update(num_workers=2, start_method="fork")
    assert (seen["device"], seen["init_random_frames"]) == ("cpu", 300)
    assert host_collector_kwargs(seen["collector_kwargs"], device=seen["device"],
                                 init_random_frames=seen["init_random_frames"]) == expected_inner
    assert isinstance(seen["weight_sync_schemes"]["policy"], RayWeightSyncScheme)
    assert type(seen["replay_buffer"]).__name__ == "ReplayBuffer" and seen["trajs_per_batch"] is None
    assert callable(seen["post_collect_hook"]) and seen["total_frames"] == 100_000


def test_defaults_are_ppo_on_batched_cartpole_with_offline_wandb():
    cfg = compose_train([])
    assert (cfg.env.id, cfg.env.num_envs, cfg.algo.name) == ("CartPole-v1", 8, "ppo")
    assert (cfg.collector._target_, pipeline.collector_name(cfg)) == ("rlcollect.collectors.single.Collector", "sync")
    assert (cfg.model._target_, cfg.buffer._target_) == ("rlcollect.modules.actor_critic.ActorCritic",
                                                         "rlcollect.buffers.rollout.RolloutBuffer")
    assert (cfg.logger._target_, cfg.logger.mode) == ("rlcollect.logging.run_logger.WandbLogger", "offline")


def test_the_defaults_that_run_are_the_presets():
    """The values docs/benchmarks.md's results were measured with are what `rlcollect train`
    composes: the YAML options set the CartPole-tuned ones (conf/algo/ppo.yaml, dqn.yaml),
    over schemas whose defaults are the library's (pinned below)."""
    ppo, dqn = PPOConfig(), DQNConfig()
    assert (ppo.lr, ppo.gamma, ppo.gae_lambda, ppo.epochs, ppo.minibatch_size, ppo.anneal_clip) == \
        (3e-4, 0.99, 0.95, 10, 64, False)  # rlcollect.PPO's
    assert EvalConfig().every_frames is None and TrainConfig().total_frames == 100_000
    cfg = compose_train([])
    assert (cfg.algo.lr, cfg.algo.gamma, cfg.algo.epochs, cfg.algo.minibatch_size, eval_every_frames(cfg)) == \
        (0.001, 0.98, 20, 256, 1024)  # the CartPole preset's cadence
    assert (cfg.algo.gae_lambda, cfg.algo.anneal_clip) == (0.8, True)
    dqn_cfg = compose_train(["algo=dqn"])
    assert (dqn_cfg.algo.lr, dqn_cfg.algo.learning_starts, dqn.learning_starts) == (0.0023, 1000, 0)
    assert (dqn_cfg.algo.gradient_steps_per_batch, dqn_cfg.algo.target_update_period, dqn_cfg.algo.eps_end,
            dqn_cfg.algo.eps_decay_frames) == (128, 128, 0.04, 8000)
    assert dqn_cfg.model.epsilon == dqn.eps_start  # linked to algo.eps_start


# Where a schema's default differs from its class's on purpose: (group, option, key) -> why.
DELIBERATE_DEFAULTS = {
    **{("collector", option, "num_workers"): "the class's None takes the number of workers from a list of env "
       "sources, one per worker; the config names one env id, so it gives a number"
       for option in ("multisync", "multiasync")},
    ("collector", "ray", "num_workers"): "the class requires it; its None lets the deprecated num_collectors give it "
                                         "for a release (rlcollect.moved.RENAMED_ARGUMENTS)",
    ("buffer", "rollout", "device"): "None is the run's device: the pipeline passes cfg.device in its place; the "
                                     "class, which knows no run, keeps its batches on the CPU",
    ("buffer_storage", "memory", "device"): "None is the run's device: the pipeline passes cfg.device in its "
                                            "place; the class, which knows no run, stores on the CPU",
}
# The learners whose **options go to the algorithm's own class (a collector routes its **options
# through its bases and option groups: CollectorBase.argument_defaults)
FORWARDS = {"rlcollect.algos.ppo.PPOLearner": "rlcollect.PPO",
            "rlcollect.algos.dqn.DQNLearner": "rlcollect.DQN"}


def constructor_defaults(cls) -> dict:
    """``{argument: default}`` of what ``cls(...)`` takes by name, following ``**kwargs`` to
    where the class passes them (``inspect.Parameter.empty``: required)."""
    from rlcollect.collectors.base import CollectorBase

    if issubclass(cls, CollectorBase):
        return cls.argument_defaults()
    parameters = inspect.signature(cls).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        name = f"{cls.__module__}.{cls.__qualname__}"
        assert name in FORWARDS, f"{name} takes **kwargs: say in FORWARDS which class they go to"
        defaults = {**constructor_defaults(get_class(FORWARDS[name])), **defaults}
    return defaults


def plain(value) -> bool:
    """A number, string, bool, None, or a list / tuple of them (not a nested node)."""
    if isinstance(value, (list, tuple)):
        return all(plain(entry) for entry in value)
    return value is None or isinstance(value, (str, int, float, bool))


def test_every_schema_default_is_its_constructors():
    """One declaration per option: a schema key's default is the default of the argument of
    the same name of the class its _target_ builds, so that a library user and a CLI user get
    the same algorithm (what the command line picks otherwise is in the YAML options). Keys
    that are no constructor argument are the pipeline's (targets.PIPELINE_KEYS); a difference
    kept on purpose is listed above with its reason. Every mismatch is said at once."""
    from rlcollect.pipeline.targets import PIPELINE_KEYS

    nodes = {"buffer_storage": "buffer.storage", "buffer_sampler": "buffer.sampler"}
    mismatches, deliberate_seen = [], set()
    for (group, option), schema in SCHEMAS.items():
        defaults = constructor_defaults(get_class(schema._target_))
        pipeline_keys = PIPELINE_KEYS.get(nodes.get(group, group), frozenset())
        for schema_field in dataclasses.fields(schema):
            if schema_field.name.startswith("_"):
                continue
            key = (group, option, schema_field.name)
            where = f"{group}={option} {schema_field.name} ({schema.__name__}, {schema._target_})"
            if schema_field.name in pipeline_keys:
                if schema_field.name in defaults:
                    mismatches.append(f"{where}: a pipeline key (targets.PIPELINE_KEYS) that is an argument too")
                continue
            if schema_field.name not in defaults:
                mismatches.append(f"{where}: no argument of the class, nor a pipeline key (targets.PIPELINE_KEYS)")
                continue
            ours = (schema_field.default_factory() if schema_field.default_factory is not dataclasses.MISSING
                    else schema_field.default)
            theirs = defaults[schema_field.name]
            if ours == "???" or theirs is inspect.Parameter.empty or not (plain(ours) and plain(theirs)):
                continue  # chosen by a YAML option's defaults list; required by the class; a nested node
            same = (list(ours) if isinstance(ours, (list, tuple)) else ours) == \
                (list(theirs) if isinstance(theirs, (list, tuple)) else theirs)
            if key in DELIBERATE_DEFAULTS:
                deliberate_seen.add(key)
                if same:
                    mismatches.append(f"{where}: listed in DELIBERATE_DEFAULTS but the same ({ours!r}): drop it")
            elif not same:
                mismatches.append(f"{where}: {ours!r} in the schema, {theirs!r} in the constructor")
    mismatches += [f"DELIBERATE_DEFAULTS lists {key}, which is no key of a schema"
                   for key in sorted(set(DELIBERATE_DEFAULTS) - deliberate_seen)]
    assert not mismatches, f"{len(mismatches)} schema defaults differ from their constructors':\n" + \
        "\n".join(mismatches)


def test_algo_prioritized_builds_the_prioritized_sampler_option_as_it_composes(tmp_path):
    from rlcollect.pipeline.builders import make_replay_buffer

    chosen = compose_train(["algo=dqn", "buffer/sampler=prioritized"]).buffer.sampler
    sampler = make_replay_buffer(compose_train(["algo=dqn", "algo.prioritized=true"]), tmp_path).sampler
    assert (sampler.alpha, sampler.beta, sampler.eps) == (chosen.alpha, chosen.beta, chosen.eps) == (0.6, 0.4, 1e-6)


@pytest.mark.parametrize("overrides, every", [
    ([], 1024),  # the preset's, for its env id
    (["env.id=LunarLander-v3"], 5000),  # another id: not CartPole's cadence but the run's: 100,000 / 20
    (["env.id=LunarLander-v3", "total_frames=40000"], 2000),
    (["eval.every_frames=300"], 300),
    (["env=halfcheetah"], 20480),
])
def test_the_evaluation_cadence_belongs_to_the_env_id_or_scales_with_the_run(overrides, every):
    assert eval_every_frames(compose_train(overrides)) == every


def _schema_of(group, name):
    if group == "env":
        return EnvConfig
    return SCHEMAS[(group.replace("/", "_"), name)]


@pytest.mark.parametrize("group", [g for g in GROUPS if g != "experiment"])
def test_a_yaml_option_sets_only_what_differs_from_its_schema(group):
    """Every default is written once: a value a YAML option repeats from its schema is a
    second copy that could drift."""
    for name in options(group, ray=True):
        text = yaml.safe_load((CONF / group / f"{name}.yaml").read_text()) or {}
        defaults = text.pop("defaults")
        schema_name = "env_schema" if group == "env" else f"{group.replace('/', '_')}_{name}_schema"
        assert any(str(entry).startswith(f"/{schema_name}@") for entry in defaults), (group, name, defaults)
        if group in ("algo", "collector", "env") and group in text:  # `# @package _global_` options
            for key, value in text.get("eval", {}).items():  # an env preset's evaluation cadence
                assert value != getattr(EvalConfig(), key), f"conf/{group}/{name}.yaml repeats eval.{key}={value!r}"
            text = text[group]
        schema = _schema_of(group, name)
        fields = {f.name: f for f in dataclasses.fields(schema)}
        for key, value in text.items():
            f = fields[key]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            assert value != default, f"conf/{group}/{name}.yaml repeats {key}={value!r} of {schema.__name__}"


def test_the_recurrent_experiment_composes_with_the_feed_forward_model_its_docs_compare():
    """docs/benchmarks.md runs experiment=cartpole_novel_gru with model=actor_critic as well:
    the experiment sets no key of the recurrent model's that the feed-forward one lacks."""
    recurrent = compose_train(["experiment=cartpole_novel_gru"])
    assert (recurrent.model.rnn, recurrent.model.hidden_size) == ("gru", 64)
    feed_forward = compose_train(["experiment=cartpole_novel_gru", "model=actor_critic"])
    assert feed_forward.model._target_ == "rlcollect.modules.actor_critic.ActorCritic"
    assert feed_forward.algo == recurrent.algo and feed_forward.env == recurrent.env
    algo = recurrent.algo
    assert (algo.gae_lambda, algo.minibatch_size, algo.normalize_reward) == (0.8, 256, True)


def test_an_added_key_is_checked_against_the_schema_and_the_target():
    with pytest.raises(ValueError, match=r"Key 'frame_per_batch' not in 'SyncCollectorConfig' \(collector"):
        pipeline.check_keys(compose_train(["+collector.frame_per_batch=512"]))
    with pytest.raises(ValueError, match="Key 'lrr' not in 'PPOConfig'"):
        pipeline.check_keys(compose_train(["+algo.lrr=0.1"]))
    with pytest.raises(ValueError, match="Key 'device' not in 'SyncCollectorConfig'"):  # the pipeline sets it
        pipeline.check_keys(compose_train(["+collector.device=cpu"]))
    pipeline.check_keys(compose_train(["+collector.postproc=null"]))  # an argument of Collector left to the config
    pipeline.check_keys(compose_train(["+env.make_kwargs.render_mode=null"]))  # make_kwargs is free-form


@pytest.mark.timeout(300)
def test_wheel_ships_a_config_tree_hydra_can_compose(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(CONF.parents[1])], check=True, capture_output=True)
    [wheel] = tmp_path.glob("rlcollect-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("rlcollect/conf/")}
    expected = {f"rlcollect/{p.relative_to(CONF.parent)}" for p in CONF.rglob("*.yaml")}
    assert expected <= shipped and "rlcollect/conf/__init__.py" in shipped
    assert "rlcollect/py.typed" in zipfile.ZipFile(wheel).namelist()  # type checkers read the package's hints
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    probe = ("import rlcollect, sys; from hydra import compose, initialize_config_module;"
             "from rlcollect.config import register_configs; register_configs();"
             "assert rlcollect.__file__.startswith(sys.argv[1]), rlcollect.__file__;"
             "initialize_config_module('rlcollect.conf', version_base='1.3').__enter__();"
             "print(compose('train', overrides=['env=pendulum', 'algo=dqn', 'buffer/storage=memmap']).env.id)")
    result = subprocess.run([sys.executable, "-c", probe, str(unpacked)], cwd=tmp_path,
                            env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True)
    assert result.stdout.strip() == "Pendulum-v1", result.stderr


def test_a_stopping_threshold_belongs_to_its_env_id():
    from rlcollect.logging.runs import solved_threshold

    cartpole = compose_train([])
    assert solved_threshold(cartpole.env.id, cartpole.env.solved_return) == 475.0
    other = compose_train(["env.id=Acrobot-v1"])  # the cartpole preset's threshold does not follow
    assert solved_threshold(other.env.id, other.env.solved_return) is None
    given = compose_train(["env.id=Acrobot-v1", "env.solved_return=-90"])  # a number set for this run applies
    assert solved_threshold(given.env.id, given.env.solved_return) == -90.0


# ---------------------------------------------------------------------------- value ranges
RANGE_COMPOSITIONS = [[], ["algo=dqn"], ["algo=dqn", "buffer/storage=memmap", "buffer/sampler=slice"],
                      ["algo=dqn", "buffer/sampler=prioritized"], ["model=recurrent_actor_critic"],
                      *[[f"collector={name}"] for name in options("collector", ray=True)],
                      ["weight_sync=multiprocess"]]


def numeric_kind(schema_field) -> str | None:
    """"int", "float", "int list" or None, from a schema field's annotation."""
    annotation = str(schema_field.type)
    if annotation.startswith(("List[int]", "Optional[List[int]]")):
        return "int list"
    if "List" in annotation or annotation.startswith(("str", "bool", "Any")) or "Optional[str]" in annotation:
        return None
    return "float" if "float" in annotation else "int" if "int" in annotation else None


def out_of_range(allowed, kind: str) -> list:
    """Values just outside ``allowed`` (a Range) for a field of ``kind``."""
    step = 1 if kind.startswith("int") else 0.5
    values = []
    if allowed.low is not None:
        values.append(allowed.low if allowed.open_low else allowed.low - step)
    if allowed.high is not None:
        values.append(allowed.high if allowed.open_high else allowed.high + step)
    if kind == "float":
        values.append(float("inf"))
    return [int(value) if kind.startswith("int") else float(value) for value in values]


def composed_schema_fields():
    """``(cfg, key, schema, field)`` for every field of every schema-typed node of each of
    RANGE_COMPOSITIONS: what the range and choice tests walk."""
    from omegaconf import OmegaConf

    from rlcollect.pipeline.checks import schema_nodes

    for composition in RANGE_COMPOSITIONS:
        cfg = compose_train(composition)
        for path, node in schema_nodes(cfg, ""):
            schema = OmegaConf.get_type(node)
            for schema_field in dataclasses.fields(schema):
                yield cfg, f"{path}.{schema_field.name}" if path else schema_field.name, schema, schema_field


def test_every_numeric_option_declares_its_range_and_an_out_of_range_value_is_one_line_naming_it():
    """Each int / float option of every schema says the range it takes (config.ranged); each
    value just outside it (and an infinite float) is refused before anything is built, with
    one line naming the key and the range."""
    from omegaconf import OmegaConf

    from rlcollect.config import RANGE
    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import check_config

    checked = set()
    for cfg, key, schema, schema_field in composed_schema_fields():
        kind = numeric_kind(schema_field)
        if kind is None:
            continue
        allowed = schema_field.metadata.get(RANGE)
        assert allowed is not None, f"{schema.__name__}.{schema_field.name} declares no range"
        for value in out_of_range(allowed, kind):
            bad = cfg.copy()
            OmegaConf.update(bad, key, [1, value] if kind == "int list" else value)
            with pytest.raises(ConfigError) as refused:
                check_config(bad)
            message = str(refused.value)
            assert message.startswith(f"{key}=") and "\n" not in message, message
            assert str(allowed) in message
            checked.add((schema.__name__, schema_field.name))
    assert {("PPOConfig", "epochs"), ("PPOConfig", "gamma"), ("TrainConfig", "seed"), ("EvalConfig", "episodes"),
            ("ActorCriticConfig", "hidden_sizes"), ("RayRemoteConfig", "num_cpus")} <= checked
    assert len(checked) > 80


def test_docs_configuration_md_lists_every_experiment_preset():
    """Its table row of the experiment group names each file of rlcollect/conf/experiment/."""
    text = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    [row] = [line for line in text.splitlines() if line.startswith("| experiment |")]
    listed = {name.strip() for name in row.split("|")[2].split(",")}
    assert listed == set(options("experiment"))


@pytest.mark.parametrize("algo, starts", [("dqn", 1000), ("sac", 5000)])
def test_an_off_policy_run_that_would_never_learn_is_refused(algo, starts):
    """learning_starts >= total_frames: every frame a random action, no gradient step, yet
    the run would end as finished. Refused for every learner whose class has replay = True."""
    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import check_config

    env = ["env=pendulum"] if algo == "sac" else []
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train([f"algo={algo}", *env, f"total_frames={starts}"]))
    assert str(refused.value).startswith(f"algo.learning_starts={starts}: must be less than total_frames={starts} "
                                         f"(algo={algo} collects random actions")
    check_config(compose_train([f"algo={algo}", *env, f"total_frames={starts + 1}"]))  # one step: accepted
    check_config(compose_train(["algo.lr=0.001", "total_frames=1"]))  # PPO has no learning_starts


def test_the_collector_schemas_declare_the_option_groups_fields_with_their_defaults():
    """An option of the collectors is declared once, in its option group (collectors/options.py);
    the Hydra schemas repeat the names the config takes, and this pins that they agree: same
    names, same defaults, every schema field an argument of the class it builds."""
    from rlcollect.collectors.options import DeliveryOptions, DeviceOptions, StepOptions, WorkerOptions
    from rlcollect.config import HostCollectorConfig, StepLoopConfig, WorkerProcessesConfig

    def defaults(cls, exclude=()):
        return {f.name: f.default for f in dataclasses.fields(cls) if f.name not in exclude}

    step_and_devices = {**defaults(StepOptions), **defaults(DeviceOptions, exclude=("device",)),
                        "split_trajs": defaults(DeliveryOptions)["split_trajs"]}  # the config's only delivery key
    assert defaults(StepLoopConfig) == step_and_devices
    worker = {f.name for f in dataclasses.fields(WorkerProcessesConfig)} - set(step_and_devices)
    options = defaults(WorkerOptions)
    assert {name: options[name] for name in options if name in worker} == \
        {f.name: f.default for f in dataclasses.fields(WorkerProcessesConfig) if f.name in options}
    assert set(options) <= worker  # every WorkerOptions field is a key of the worker collectors' schemas
    # a hosted collector's inner options: the same, and the inner multi-process collector's worker count
    assert {f.name for f in dataclasses.fields(HostCollectorConfig)} - set(step_and_devices) - set(options) == \
        {"num_workers"}
    for (group, option), schema in SCHEMAS.items():
        if group != "collector":
            continue
        cls = get_class(schema._target_)
        keys = {f.name for f in dataclasses.fields(schema)} - {"_target_", "_partial_"}
        assert keys <= cls.accepted_arguments(), (option, sorted(keys - cls.accepted_arguments()))


def test_multisync_and_multiasync_defaults_give_each_worker_the_same_batch():
    """frames_per_batch is the yielded batch for both; a multisync batch stacks one batch per
    worker, a multiasync batch is one worker's. The defaults (256, 128) are what makes each
    worker collect the same batch, T = 32 steps of its envs, as the sync collector's; the
    schemas' comments and docs/collectors.md say so: this pins it."""
    from rlcollect.pipeline.checks import batch_frames

    sync, multisync, multiasync = (compose_train(overrides).collector for overrides in
                                   ([], ["collector=multisync"], ["collector=multiasync"]))
    assert (sync.frames_per_batch, multisync.frames_per_batch, multiasync.frames_per_batch) == (256, 256, 128)
    per_worker = {"multisync": multisync.frames_per_batch // multisync.num_workers,
                  "multiasync": multiasync.frames_per_batch}
    assert per_worker == {"multisync": 128, "multiasync": 128}
    assert multisync.envs_per_worker == multiasync.envs_per_worker == 4
    steps = {name: frames // 4 for name, frames in per_worker.items()}
    assert steps == {"multisync": 32, "multiasync": 32} and 256 // compose_train([]).env.num_envs == 32
    # the frames of a yielded batch, as the classes count them
    assert batch_frames(compose_train(["collector=multisync"])) == 256
    assert batch_frames(compose_train(["collector=multiasync"])) == 128


def test_a_size_is_compared_with_the_batch_the_collector_will_collect():
    """algo.minibatch_size against frames_per_batch as the collector rounds it up (8 envs: 250
    frames are 256), not as written."""
    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import check_config

    check_config(compose_train(["collector.frames_per_batch=250", "algo.minibatch_size=256"]))
    with pytest.raises(ConfigError, match=r"^algo\.minibatch_size=256: must be at most the frames of a batch "
                                          r"\(collector\.frames_per_batch=100, rounded up to 104 frames\)$"):
        check_config(compose_train(["collector.frames_per_batch=100", "algo.minibatch_size=256"]))


# ---------------------------------------------------------------------------- choices
def test_every_option_with_choices_declares_them_and_a_value_outside_is_one_line_naming_them():
    """Each option with a fixed set of values says them (config.chosen), and a value outside
    them is refused before anything is built, in one line naming the key, the values and the
    closest of them."""
    from omegaconf import OmegaConf

    from rlcollect.config import CHOICES
    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import check_config

    checked = set()
    for cfg, key, schema, schema_field in composed_schema_fields():
        allowed = schema_field.metadata.get(CHOICES)
        if allowed is None:
            continue
        first = str(allowed.values[0])
        for value in (first.upper() + "x", 7):  # a misspelling, a number
            bad = cfg.copy()
            OmegaConf.update(bad, key, value)
            with pytest.raises(ConfigError) as refused:
                check_config(bad)
            message = str(refused.value)
            assert message.startswith(f"{key}={OmegaConf.select(bad, key)!r}: choose one of {allowed}"), message
            assert "\n" not in message
        checked.add((schema.__name__, schema_field.name))
    # the options whose values the classes check: their choices are declared in the schemas
    assert {("SyncCollectorConfig", "exploration_type"), ("SyncCollectorConfig", "reset_policy"),
            ("MultiSyncCollectorConfig", "start_method"), ("MultiSyncCollectorConfig", "cat_results"),
            ("PoolCollectorConfig", "layout"), ("HostCollectorConfig", "start_method"),
            ("RayCollectorConfig", "collector_class"), ("DistributedCollectorConfig", "collector_class"),
            ("DistributedCollectorConfig", "start_workers_with"), ("DistributedCollectorConfig", "launcher"),
            ("DistributedCollectorConfig", "backend"),
            ("MultiProcessWeightSyncConfig", "strategy"), ("RayWeightSyncConfig", "strategy"),
            ("DQNConfig", "target_update"), ("DQNConfig", "loss"), ("ActorCriticConfig", "activation"),
            ("ActorCriticConfig", "encoder"), ("RecurrentActorCriticConfig", "rnn"), ("QValuePolicyConfig", "encoder"),
            ("EnvConfig", "backend"), ("WandbLoggerConfig", "mode"), ("TrainConfig", "objective")} <= checked


def test_a_misspelled_choice_is_told_its_closest_value():
    from rlcollect.config import check_ranges
    from rlcollect.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^collector\.layout='per-env': choose one of flat, per_env "
                                          r"\(did you mean per_env\?\)$"):
        check_ranges(compose_train(["collector=pool", "collector.layout=per-env"]))
    with pytest.raises(ConfigError, match=r"^collector\.cat_results=False: choose one of stack, 0, -1$"):
        check_ranges(compose_train(["collector=multisync", "collector.cat_results=false"]))  # not 0
    check_ranges(compose_train(["collector=multisync", "collector.cat_results=0"]))
    check_ranges(compose_train(["collector=ray"]))  # collector_kwargs.start_method=null: not set


def test_the_choices_are_the_tuples_the_classes_check_their_arguments_against():
    """Declared once (rlcollect/choices.py, a leaf without torch): the schemas' choices and
    the classes' checks are the same tuples; ActorCritic's activations map each name to its
    torch class, pinned here."""
    from rlcollect import choices
    from rlcollect.algos import dqn
    from rlcollect.collectors import host_plan, multi, options, pool
    from rlcollect.collectors.distributed import collector as distributed
    from rlcollect.collectors.distributed import starters
    from rlcollect.envs import backends
    from rlcollect.modules import actor_critic, encoders
    from rlcollect.weight_sync import strategies

    pairs = [(options.EXPLORATION_TYPES, choices.EXPLORATION_TYPES), (options.RESET_POLICIES, choices.RESET_POLICIES),
             (options.START_METHODS, choices.START_METHODS), (multi.CAT_RESULTS, choices.CAT_RESULTS),
             (pool.LAYOUTS, choices.POOL_LAYOUTS), (host_plan.COLLECTOR_CLASSES, choices.HOSTED_COLLECTOR_CLASSES),
             (starters.STARTERS, choices.DISTRIBUTED_WORKER_STARTERS),
             (distributed.BACKENDS, choices.DISTRIBUTED_BACKENDS),
             (strategies.STRATEGIES, choices.WEIGHT_SYNC_STRATEGIES), (dqn.TARGET_UPDATES, choices.DQN_TARGET_UPDATES),
             (dqn.LOSSES, choices.DQN_LOSSES), (encoders.ENCODERS, choices.ENCODERS),
             (backends.BACKENDS, choices.ENV_BACKENDS)]
    assert all(used is declared for used, declared in pairs)
    assert tuple(actor_critic.ACTIVATIONS) == choices.ACTIVATIONS


def test_the_config_checks_ranges_and_choices_without_torch():
    """`rlcollect train` refuses a value out of its range or choices before torch loads."""
    code = ("import sys\n"
            "from hydra import compose, initialize_config_module\n"
            "from rlcollect.config import check_ranges, register_configs\n"
            "from rlcollect.errors import ConfigError\n"
            "register_configs()\n"
            "with initialize_config_module('rlcollect.conf', version_base='1.3'):\n"
            "    cfg = compose('train', overrides=['collector=multisync', 'collector.cat_results=1'])\n"
            "try:\n"
            "    check_ranges(cfg)\n"
            "except ConfigError as error:\n"
            "    print(error)\n"
            "assert 'torch' not in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("collector.cat_results=1: choose one of stack, 0, -1")


@pytest.mark.timeout(60)
def test_an_envpool_run_builds_its_model_for_the_spaces_envpool_steps():
    """EnvPool's Blackjack-v1 observes a Box where gymnasium's observes a Tuple: the model is
    built for what the run steps (it was built for gymnasium's, and failed on the Box)."""
    pytest.importorskip("envpool")
    import gymnasium as gym
    from train_configs import composed

    from rlcollect.pipeline.builders import probe_spaces

    observation_space, action_space = probe_spaces(composed("env.backend=envpool", "env.id=Blackjack-v1"))
    assert observation_space == gym.spaces.Box(0, 31, (3,), "int32") and action_space == gym.spaces.Discrete(2)
    assert isinstance(probe_spaces(composed("env.id=Blackjack-v1"))[0], gym.spaces.Tuple)  # gymnasium's own
