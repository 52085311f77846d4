"""`_target_` nodes: the class a node names, and the object built from it.

A component node's keys are its class's constructor arguments; the pipeline adds the
runtime ones (``RUNTIME_ARGUMENTS``) when it builds the object, so a node never sets them.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any, Callable

from hydra.utils import get_class, get_method, instantiate
from omegaconf import DictConfig, OmegaConf

from rlcollect.errors import ConfigError

# The runtime arguments of the collector contract (docs/collectors.md, "A collector of your
# own"): what pipeline/builders.make_collector passes a collector, each only when its class
# takes it (CollectorBase.accepted_arguments), besides the env source and the policy.
COLLECTOR_RUNTIME_ARGUMENTS = frozenset({
    "total_frames", "seed", "env_kwargs", "num_envs",  # what to collect, from which envs (env i seeded seed + i)
    "device", "init_random_frames",  # where the policy runs; the algorithm's random start
    "post_collect_hook",  # an EpisodeStatsHook: its results come back through collector.hook_results()
    "weight_sync_schemes",  # {"policy": the weight_sync node's scheme}
    "replay_buffer", "trajs_per_batch",  # with an off-policy learner: the collector writes into its buffer
    "run_dir",  # the run folder (a relative folder of the collector's lives in it)
})
# Constructor arguments the pipeline supplies, per node (docs/configuration.md): a config
# key of the same name would be overridden, so checks.check_keys refuses one added with `+`.
RUNTIME_ARGUMENTS: dict[str, frozenset[str]] = {
    "collector": frozenset({"create_env_fn", "policy"}) | COLLECTOR_RUNTIME_ARGUMENTS,
    "logger": frozenset({"run_dir", "start_frames", "gamma", "name", "group", "job_type", "config", "run_id"}),
    "model": frozenset({"observation_space", "action_space"}),
    "algo": frozenset({"policy", "buffer", "total_frames", "observation_space", "action_space"}),
    "buffer": frozenset({"num_envs", "rollout_len", "obs_dim", "action_dim", "observation_dtype", "action_dtype",
                         "state_shapes", "extra_keys", "storage", "sampler", "batch_size", "write_transform"}),
    "buffer.sampler": frozenset({"max_capacity"}),
}
# Keys of a node that are no argument of rlcollect's class for it, the one list of them
# (tests/test_config.py pins every other key's default to its constructor's): the pipeline
# reads them itself. algo: the label, the replay buffer's sampling batch, n-step writes,
# prioritized sampling, background collection (passed to a learner only where its
# constructor names them: one of your own may); buffer: the trajectories per write, the
# collector's.
PIPELINE_KEYS: dict[str, frozenset[str]] = {
    "algo": frozenset({"name", "batch_size", "n_step", "prioritized", "background"}),
    "buffer": frozenset({"trajs_per_batch"}),
}


def target_class(node: DictConfig, path: str) -> type:
    """The class named by ``node._target_`` (``path`` names the node in errors)."""
    return located_target(node, path, get_class, "class")


def target_callable(node: DictConfig, path: str) -> Callable:
    """The class or function named by ``node._target_`` (an env wrapper may be either)."""
    return located_target(node, path, get_method, "callable")


def located_target(node: DictConfig, path: str, locate: Callable[[str], Any], kind: str) -> Any:
    """``locate(node._target_)``, or a ConfigError naming ``path`` and the ``kind`` it needs."""
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    if not target:
        given = "" if isinstance(node, DictConfig) else f"={node!r}"
        raise ConfigError(f"{path}{given} has no _target_ (the {kind} to build)")
    try:
        with hydra_utils_quiet():  # Hydra logs a failed lookup as an ERROR of its own before it raises
            return locate(target)
    except Exception as error:  # Hydra's message spans lines, its cause says why: keep the cause's first line
        cause = error.__cause__ or error
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise ConfigError(f"{path}._target_={target}: not an importable {kind} ({reason})") from None


@contextlib.contextmanager
def hydra_utils_quiet():
    """hydra.utils' logger silent inside: its ERROR lines about a ``_target_`` that does not
    import repeat, over several lines, what the one-line ConfigError says."""
    logger = logging.getLogger("hydra.utils")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def build_node(node: DictConfig, path: str, *args: Any, drop: tuple[str, ...] = (), **runtime: Any) -> Any:
    """Build ``node``'s ``_target_`` with its keys (nested ``_target_`` nodes built too,
    containers as plain lists and dicts) plus ``args`` and ``runtime``, which win over keys
    of the same name. ``drop``: keys of the node that are not constructor arguments.

    The node is instantiated as a partial then called, so that the objects passed at run
    time are used as they are (never copied) and the constructor's own errors surface
    unwrapped (a ValueError stays a ValueError)."""
    target_class(node, path)
    if drop:
        kept = {key: value for key, value in OmegaConf.to_container(node, resolve=True).items() if key not in drop}
        node = OmegaConf.create(kept)
    return instantiate(node, _partial_=True, _convert_="all")(*args, **runtime)


def named_arguments(cls: type) -> set[str]:
    """The arguments ``cls(...)`` takes by name (not ``*args``/``**kwargs``)."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
