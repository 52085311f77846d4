"""From a composed config to wired objects (``build``), and the training loop (``run``).

This package is the only place, with cli.py, that reads a config: every object it builds
takes explicit arguments. One job per module:

    targets     `_target_` nodes: the class a node names, the object built from it
    builders    config nodes to objects, with the runtime arguments the pipeline supplies
    checks      key, value-range and option-combination checks, before anything is built
    lifecycle   Pipeline, build(), resume(), the checkpoint state
    loop        run(): collect, learn, evaluate, checkpoint
    progress    Progress: the loop's own state, checkpointed
    saved       a trained run read back: its config, checkpoints, policy (load_policy)
    eval_run    a trained run evaluated again (rlcollect eval)
    export_run  a trained run's policy as a standalone file (rlcollect export)
"""
from rlcollect.pipeline.builders import (
    AlgoCollection,
    algo_collection,
    env_factory,
    env_kwargs,
    make_collector,
    make_env,
    make_learner,
    make_logger,
    make_policy,
    make_replay_buffer,
    make_rollout_buffer,
    make_storage,
    make_weight_sync_scheme,
    probe_spaces,
)
from rlcollect.pipeline.checks import (
    check_combination,
    check_config,
    check_keys,
    check_ranges,
    collector_name,
    option_name,
    warn_combination,
)
from rlcollect.pipeline.lifecycle import CONFIG_FILE, Pipeline, build, resume
from rlcollect.pipeline.loop import SUMMARY_FILE, evaluate, one_line, run
from rlcollect.pipeline.progress import Progress
from rlcollect.pipeline.saved import load_policy, load_run_config
from rlcollect.pipeline.targets import RUNTIME_ARGUMENTS, build_node, target_class

__all__ = [
    "AlgoCollection", "CONFIG_FILE", "Pipeline", "Progress", "RUNTIME_ARGUMENTS", "SUMMARY_FILE", "algo_collection",
    "build", "build_node", "check_combination", "check_config", "check_keys", "check_ranges", "collector_name",
    "env_factory", "env_kwargs", "evaluate", "load_policy", "load_run_config", "make_collector", "make_env",
    "make_learner", "make_logger", "make_policy", "make_replay_buffer", "make_rollout_buffer", "make_storage",
    "make_weight_sync_scheme", "one_line", "option_name", "probe_spaces", "resume", "run", "target_class",
    "warn_combination",
]
