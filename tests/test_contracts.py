"""The collector and learner contracts: a user's class runs from `_target_` with no other
change, through the same construction as rlcollect's own (docs/collectors.md, "A collector of
your own"; docs/configuration.md, "Algorithms")."""
import json

import pytest
from commands import rlcollect

from rlcollect.collectors.base import CollectionPlan

USER_LEARNER = '''
from pathlib import Path

from rlcollect import Learner


class CountingLearner(Learner):
    """On-policy: counts the rollout rows it is handed and the frames of each call."""

    def __init__(self, policy, buffer, *, marker: str = "learned.txt", scale: float = 1.0, total_frames: int = -1):
        self.policy, self.buffer, self.marker, self.scale = policy, buffer, Path(marker), scale
        self.total_frames, self.calls = total_frames, 0

    def learn(self, batch, frames):
        self.calls += 1
        with self.marker.open("a") as file:
            file.write(f"{frames} {batch.batch_size[0]} {self.total_frames}\\n")
        return {"calls": float(self.calls), "scale": self.scale}

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = int(state["calls"])
'''


@pytest.mark.timeout(300)
def test_a_user_learner_in_a_config_dir_runs_from_config_alone(tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "mylearners.py").write_text(USER_LEARNER)
    (tmp_path / "myconf" / "algo").mkdir(parents=True)
    (tmp_path / "myconf" / "algo" / "counting.yaml").write_text(
        "# a learner of one's own: its _target_ and its own keys\n_target_: mylearners.CountingLearner\n"
        "_partial_: true\nname: counting\nscale: 2.5\n")
    result = rlcollect(tmp_path, "train", "--config-dir", str(tmp_path / "myconf"), "algo=counting", "total_frames=512",
                       "collector.frames_per_batch=128", "env.num_envs=4", "eval.every_frames=512", "eval.episodes=1",
                       "logger=none", "progress=false", "hydra.run.dir=run", pythonpath=tmp_path / "user",
                       timeout=240)
    assert result.returncode == 0, result.stderr
    # the rollout buffer it asked for (on-policy: [4 envs, 32 + 1]), total_frames from the run
    assert (tmp_path / "learned.txt").read_text().split("\n")[:-1] == [f"{frames} 4 512" for frames in
                                                                       (128, 256, 384, 512)]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(row["train/calls"], row["train/scale"]) for row in rows] == [(1.0, 2.5), (2.0, 2.5), (3.0, 2.5),
                                                                          (4.0, 2.5)]


def test_every_collector_class_checks_its_own_plan():
    """The checks that belong to one collector live with it (a CollectionPlan in, a one-line
    ConfigError out); the pipeline only asks."""
    from rlcollect import AlternatingCollector, Collector, MultiSyncCollector, PoolCollector, RayCollector
    from rlcollect.errors import ConfigError
    from rlcollect.weight_sync import (
        MultiProcessWeightSyncScheme,
        NoWeightSyncScheme,
        RayWeightSyncScheme,
        SharedMemWeightSyncScheme,
    )

    refused = [
        (Collector, dict(name="sync", options={}, weight_sync=RayWeightSyncScheme, weight_sync_name="ray"),
         "weight_sync=ray needs collector=ray (got collector=sync)"),
        (Collector, dict(name="sync", options={}, weight_sync=MultiProcessWeightSyncScheme,
                         weight_sync_name="multiprocess"),
         "weight_sync=multiprocess: collector=sync runs the policy in the training process, so there are no weights "
         "to send to workers"),
        (PoolCollector, dict(name="pool", options={"layout": "per_env"}, weight_sync=MultiProcessWeightSyncScheme,
                             weight_sync_name="multiprocess"),
         "weight_sync=multiprocess: collector=pool runs the policy in the training process"),
        (Collector, dict(name="sync", options={}, env_backend="vector", num_envs=None),
         "env.backend=vector steps a batch of envs but env.num_envs is null"),
        (MultiSyncCollector, dict(name="multisync", options={"cat_results": -1}, algo="ppo"),
         "collector.cat_results=-1 concatenates workers along time; algo=ppo's rollout buffer"),
        (AlternatingCollector, dict(name="alternating", options={"num_workers": 3}),
         "collector.num_workers=3: collector=alternating splits its workers into 2 groups"),
        (PoolCollector, dict(name="pool", options={"layout": "flat"}, algo="ppo"),
         "collector=pool with collector.layout=flat yields steps grouped by env"),
        (RayCollector, dict(name="ray", options={}, weight_sync=SharedMemWeightSyncScheme,
                            weight_sync_name="shared_mem"),
         "collector=ray shares no memory with its actors: use weight_sync=ray (or none), not weight_sync=shared_mem"),
    ]
    for cls, plan, message in refused:
        with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            cls.check_plan(CollectionPlan(**plan))
    RayCollector.check_plan(CollectionPlan("ray", {}, weight_sync=NoWeightSyncScheme))
    for scheme in (SharedMemWeightSyncScheme, NoWeightSyncScheme):  # the default, unused in process; none
        Collector.check_plan(CollectionPlan("sync", {}, weight_sync=scheme))
        AlternatingCollector.check_plan(CollectionPlan("alternating", {"num_workers": 2}, weight_sync=scheme))
    MultiSyncCollector.check_plan(CollectionPlan("multisync", {}, weight_sync=MultiProcessWeightSyncScheme))
    MultiSyncCollector.check_plan(CollectionPlan("multisync", {"cat_results": -1}, on_policy=False))
    assert RayCollector.lags_policy({"sync": False}) and not RayCollector.lags_policy({"sync": True})
    assert {"seed", "env_kwargs", "num_envs", "post_collect_hook"} <= Collector.accepted_arguments()
    assert "weight_sync_schemes" in MultiSyncCollector.accepted_arguments()
    assert "weight_sync_schemes" not in AlternatingCollector.accepted_arguments()


def test_the_collector_contract_table_names_every_runtime_argument_once():
    """docs/collectors.md's table of the collector contract names exactly the runtime
    arguments the pipeline declares (COLLECTOR_RUNTIME_ARGUMENTS), each once."""
    import re
    from pathlib import Path

    from rlcollect.pipeline.targets import COLLECTOR_RUNTIME_ARGUMENTS

    text = (Path(__file__).parents[1] / "docs" / "collectors.md").read_text()
    table = text.split("| runtime argument | what it is |", 1)[1].split("\n\n", 1)[0]
    named = [name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])]
    assert sorted(named) == sorted(COLLECTOR_RUNTIME_ARGUMENTS)


ROUNDED = ["collector.frames_per_batch=250", "total_frames=250", "logger=none", "progress=false",
           "eval.episodes=1", "eval.max_steps=10", "algo.epochs=1", "algo.minibatch_size=64"]
WORKERS = ["collector.start_method=fork", "collector.num_workers=2", "collector.envs_per_worker=3"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("overrides", [[], ["env.num_envs=null"], ["collector=multisync", *WORKERS],
                                       ["collector=multiasync", *WORKERS], ["collector=action_server", *WORKERS],
                                       ["collector=alternating", *WORKERS], ["collector=pool", *WORKERS]],
                         ids=lambda overrides: (overrides or ["sync"])[0])
def test_a_collector_class_knows_the_frames_of_the_batches_it_will_collect(tmp_path, overrides):
    """``batch_frames``: frames_per_batch rounded as the class rounds it, before anything is
    built; what the pipeline compares algo.minibatch_size with. The batches it then yields
    have exactly that many frames."""
    from hydra import compose, initialize_config_module

    from rlcollect import pipeline
    from rlcollect.config import register_configs
    from rlcollect.pipeline.checks import batch_frames

    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        cfg = compose("train", overrides=[*ROUNDED, *overrides])
    planned = batch_frames(cfg)
    built = pipeline.build(cfg, tmp_path)
    try:
        batch = next(iter(built.collector))
    finally:
        built.collector.shutdown()
        built.evaluator.shutdown()
    assert batch.numel() == planned
    assert planned == (250 if "env.num_envs=null" in overrides else 252 if "collector=multiasync" in overrides
                       else 252 if any("collector=" in override for override in overrides) else 256)
