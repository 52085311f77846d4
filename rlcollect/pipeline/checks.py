"""Config checks, before anything is built: keys (``check_keys``) and combinations of
options (``check_combination``, ``warn_combination``).

Options are told apart by the class their ``_target_`` names (a class of your own counts
as the rlcollect class it derives from); ``option_name`` gives the short option name of
such a class for messages and for the W&B job type.
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
from typing import Iterator, Sequence

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcollect.buffers import (
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RolloutBuffer,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from rlcollect.collectors.action_server import ActionServerCollector, AlternatingCollector
from rlcollect.collectors.distributed import DistributedCollector
from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
from rlcollect.collectors.options import RESET_POLICIES
from rlcollect.collectors.pool import LAYOUTS, PoolCollector
from rlcollect.collectors.ray import RayCollector
from rlcollect.collectors.single import Collector
from rlcollect.config import OBJECTIVES, RANGE
from rlcollect.envs.backends import BACKENDS, check_vector_entry_point
from rlcollect.envs.gym_env import import_plugins, resolve_env_id
from rlcollect.envs.sources import TORCH_ENVS
from rlcollect.errors import ConfigError
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.q_network import QValuePolicy
from rlcollect.pipeline.targets import RUNTIME_ARGUMENTS, named_arguments, target_class
from rlcollect.validation import check_positive_int
from rlcollect.weight_sync import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    RayWeightSyncScheme,
    SharedMemWeightSyncScheme,
)

log = logging.getLogger(__name__)

# class -> option name (conf/<group>/<name>.yaml), subclasses before their bases
COLLECTOR_NAMES = ((AlternatingCollector, "alternating"), (ActionServerCollector, "action_server"),
                   (PoolCollector, "pool"),
                   (MultiSyncCollector, "multisync"), (MultiAsyncCollector, "multiasync"), (RayCollector, "ray"),
                   (DistributedCollector, "distributed"),
                   (Collector, "sync"))
WEIGHT_SYNC_NAMES = ((SharedMemWeightSyncScheme, "shared_mem"), (MultiProcessWeightSyncScheme, "multiprocess"),
                     (RayWeightSyncScheme, "ray"), (NoWeightSyncScheme, "none"))
BUFFER_NAMES = ((RolloutBuffer, "rollout"), (ReplayBuffer, "replay"))
MODEL_NAMES = ((RecurrentActorCritic, "recurrent_actor_critic"), (ActorCritic, "actor_critic"),
               (QValuePolicy, "q_network"))
SAMPLER_NAMES = ((SliceSamplerWithoutReplacement, "slice_without_replacement"), (SliceSampler, "slice"),
                 (PrioritizedSampler, "prioritized"), (RandomSampler, "random"))


def option_name(cls: type, names: Sequence[tuple[type, str]]) -> str:
    """The option of the first rlcollect class ``cls`` is or derives from (else its own name)."""
    for known, name in names:
        if issubclass(cls, known):
            return name
    return f"{cls.__module__}.{cls.__qualname__}"


def collector_name(cfg: DictConfig) -> str:
    """The short name of the configured collector ("sync", "multisync", ...): the W&B job type."""
    return option_name(target_class(cfg.collector, "collector"), COLLECTOR_NAMES)


# ---------------------------------------------------------------------------- keys
def check_keys(cfg: DictConfig) -> None:
    """Every key of a node that has a schema is a key of that schema: Hydra checks the keys
    it composes, but not those added with ``+``. A key outside the schema is accepted only
    on a ``_target_`` node, when it is a named argument of that class (one of your own
    taking more arguments) that the pipeline does not supply itself."""
    for path, node in schema_nodes(cfg, ""):
        schema = OmegaConf.get_type(node)
        known = {f.name for f in dataclasses.fields(schema)}
        extra = [key for key in node.keys() if key not in known]
        if not extra:
            continue
        accepted: set[str] = set()
        where = ""
        if "_target_" in node:
            accepted = named_arguments(target_class(node, path)) - RUNTIME_ARGUMENTS.get(path, frozenset())
            where = f", nor an argument of {node._target_} left to the config"
        prefix = f"{path}." if path else ""
        for key in extra:
            if key not in accepted:
                close = difflib.get_close_matches(key, sorted(known | accepted), n=1, cutoff=0.6)
                hint = f"; did you mean {prefix}{close[0]}?" if close else ""
                raise ConfigError(f"Key '{key}' not in '{schema.__name__}' ({prefix}{key} is not a key of its "
                                  f"schema{where}{hint})")


def check_ranges(cfg: DictConfig) -> None:
    """Every numeric option in the range its schema declares (``config.ranged``), each
    entry of a list of numbers too: a ConfigError naming the key and the range."""
    for path, node in schema_nodes(cfg, ""):
        prefix = f"{path}." if path else ""
        for schema_field in dataclasses.fields(OmegaConf.get_type(node)):
            allowed = schema_field.metadata.get(RANGE)
            if allowed is None or schema_field.name not in node or OmegaConf.is_missing(node, schema_field.name):
                continue
            value = node[schema_field.name]
            if isinstance(value, ListConfig):
                if any(entry not in allowed for entry in value):
                    raise ConfigError(f"{prefix}{schema_field.name}={list(value)}: every entry must be {allowed}")
            else:
                allowed.check(f"{prefix}{schema_field.name}", value)


def check_config(cfg: DictConfig) -> None:
    """Everything about ``cfg`` that can be known before a part is built: its keys, the
    ranges of its values and the combinations of its options (ConfigError otherwise)."""
    check_keys(cfg)
    check_ranges(cfg)
    if cfg.get("objective", "final_eval_return") not in OBJECTIVES:
        raise ConfigError(f"objective={cfg.objective}: choose one of {', '.join(OBJECTIVES)}")
    check_combination(cfg)


def schema_nodes(node: DictConfig, path: str) -> Iterator[tuple[str, DictConfig]]:
    """``(path, node)`` for ``node`` and the nodes under it that are typed by a schema."""
    if dataclasses.is_dataclass(OmegaConf.get_type(node)):
        yield path, node
    for key in node.keys():
        if key == "hydra" or OmegaConf.is_missing(node, key):
            continue
        child = node.get(key)
        if isinstance(child, DictConfig):
            yield from schema_nodes(child, f"{path}.{key}" if path else str(key))


# ---------------------------------------------------------------------------- combinations
def check_combination(cfg: DictConfig) -> None:
    """Reject config combinations that cannot train, naming the keys to change."""
    algo = cfg.algo.name
    buffer = option_name(target_class(cfg.buffer, "buffer"), BUFFER_NAMES)
    if (algo, buffer) not in (("ppo", "rollout"), ("dqn", "replay")):
        raise ConfigError(f"algo={algo} trains from buffer={'rollout' if algo == 'ppo' else 'replay'}, "
                          f"not buffer={buffer}")
    model_class = target_class(cfg.model, "model")
    other_algos_model = (ActorCritic, RecurrentActorCritic) if algo == "dqn" else (QValuePolicy,)
    if issubclass(model_class, other_algos_model):
        wanted = "q_network" if algo == "dqn" else "actor_critic or recurrent_actor_critic"
        raise ConfigError(f"algo={algo} trains model={wanted}, not model={option_name(model_class, MODEL_NAMES)}")
    collector_class = target_class(cfg.collector, "collector")
    collector = option_name(collector_class, COLLECTOR_NAMES)
    is_ray = issubclass(collector_class, RayCollector)
    is_distributed = issubclass(collector_class, DistributedCollector)
    step = cfg.collector.collector_kwargs if is_ray or is_distributed else cfg.collector
    if step.get("split_trajs"):
        raise ConfigError("collector.split_trajs=true gives padded batches; the learners need the collector "
                          "layout: keep split_trajs=false")
    weights_class = target_class(cfg.weight_sync, "weight_sync")
    weights = option_name(weights_class, WEIGHT_SYNC_NAMES)
    if is_ray and not issubclass(weights_class, (RayWeightSyncScheme, NoWeightSyncScheme)):
        raise ConfigError(f"collector=ray shares no memory with its actors: use weight_sync=ray (or none), not "
                          f"weight_sync={weights}")
    if is_distributed and not issubclass(weights_class, NoWeightSyncScheme):
        raise ConfigError(f"collector=distributed sends the weights over its process group itself: use "
                          f"weight_sync=none (what it selects), not weight_sync={weights}")
    if issubclass(weights_class, RayWeightSyncScheme) and not is_ray:
        raise ConfigError(f"weight_sync=ray needs collector=ray (got collector={collector})")
    if issubclass(collector_class, (ActionServerCollector, PoolCollector)) and \
            cfg.collector.get("env_device") is not None:
        raise ConfigError(f"collector.env_device={cfg.collector.env_device}: collector={collector} steps its "
                          "envs in worker processes, on the CPU; leave collector.env_device=null and set "
                          "collector.policy_device / collector.storing_device instead")
    if algo == "ppo" and issubclass(collector_class, MultiSyncCollector) and cfg.collector.get("cat_results") == -1:
        raise ConfigError("collector.cat_results=-1 concatenates workers along time; PPO's rollout buffer "
                          "needs one row per env: use cat_results=stack or 0")
    if issubclass(collector_class, PoolCollector):
        check_pool(cfg)
    check_values(cfg, collector_class)


def check_pool(cfg: DictConfig) -> None:
    """collector=pool: a layout it has, a batch_size of whole workers, the options it
    supports, and for PPO batches with one row per env."""
    node = cfg.collector
    if node.layout not in LAYOUTS:
        raise ConfigError(f"collector.layout={node.layout}: choose one of {', '.join(LAYOUTS)}")
    if cfg.algo.name == "ppo" and node.layout != "per_env":
        raise ConfigError("collector=pool with collector.layout=flat yields steps grouped by env, in unequal numbers; "
                          "PPO's rollout buffer needs one row per env: use collector.layout=per_env")
    if node.layout == "flat" and cfg.buffer.get("trajs_per_batch") is not None:
        raise ConfigError("buffer.trajs_per_batch collects whole trajectories per env row: with collector=pool use "
                          "collector.layout=per_env")
    if node.batch_size is not None:
        num_envs = node.num_workers * node.envs_per_worker
        if node.batch_size % node.envs_per_worker or node.batch_size > num_envs:
            raise ConfigError(f"collector.batch_size={node.batch_size}: collector=pool serves whole workers, so it "
                              f"must be a multiple of collector.envs_per_worker={node.envs_per_worker} and at most "
                              f"num_workers x envs_per_worker={num_envs}")
    unsupported = [f"collector.{key}={value}" for key, value in
                   (("reset_when_done", node.reset_when_done), ("set_truncated", node.set_truncated),
                    ("reset_policy", node.reset_policy), ("max_worker_restarts", node.max_worker_restarts))
                   if value != {"reset_when_done": True, "set_truncated": False, "reset_policy": "immediate",
                                "max_worker_restarts": 0}[key]]
    if unsupported:
        raise ConfigError(f"collector=pool does not support {', '.join(unsupported)} (use collector=action_server)")


def check_values(cfg: DictConfig, collector_class: type) -> None:
    """Values that would fail later (after W&B starts, or after workers spawn), checked now:
    worker and env counts, devices this torch build has, a storage ndim the batches have."""
    if cfg.algo.name == "ppo" and cfg.algo.minibatch_size > cfg.collector.frames_per_batch:
        raise ConfigError(f"algo.minibatch_size={cfg.algo.minibatch_size}: must be at most the frames of a batch "
                          f"(collector.frames_per_batch={cfg.collector.frames_per_batch})")
    if cfg.eval.max_steps is not None and cfg.eval.max_steps < cfg.eval.episodes:
        raise ConfigError(f"eval.max_steps={cfg.eval.max_steps}: must be at least one step of each of the "
                          f"eval.episodes={cfg.eval.episodes} eval envs")
    if issubclass(collector_class, AlternatingCollector) and cfg.collector.num_workers % 2:
        raise ConfigError(f"collector.num_workers={cfg.collector.num_workers}: collector=alternating splits its "
                          "workers into 2 groups of equal size: num_workers must be a multiple of 2")
    if cfg.env.backend not in (*BACKENDS, "torch"):
        raise ConfigError(f"env.backend={cfg.env.backend!r}: choose one of {', '.join(BACKENDS)} (envs/backends.py) "
                          "or torch (the task's torch env)")
    if cfg.env.backend == "torch":
        given = [key for key in ("wrappers", "imports", "info_keys", "make_kwargs") if cfg.env[key]]
        if cfg.env.id not in TORCH_ENVS or given:
            raise ConfigError(f"env.backend=torch steps rlcollect's torch env of the task ({', '.join(TORCH_ENVS)}), "
                              f"with no gymnasium wrappers, imports, info keys or make kwargs: got env.id={cfg.env.id}"
                              + (f" and env.{', env.'.join(given)}" if given else ""))
    if cfg.env.backend != "list" and cfg.env.num_envs is None and issubclass(collector_class, Collector):
        raise ConfigError(f"env.backend={cfg.env.backend} steps a batch of envs but env.num_envs is null (a single "
                          "env): set env.num_envs or env.backend=list")
    if cfg.env.backend in ("vector", "envpool") and cfg.env.wrappers:
        raise ConfigError(f"env.backend={cfg.env.backend} steps one native vector env, which takes no per-env "
                          "wrappers: use env.backend=sync or async with env.wrappers")
    if cfg.env.backend == "vector":
        import_plugins(list(cfg.env.imports))
        check_vector_entry_point(resolve_env_id(cfg.env.id))
    check_reset_policy(cfg)
    unknown = [key for key in cfg.algo.get("terminal_keys") or [] if key not in (cfg.env.info_keys or [])]
    if unknown:
        raise ConfigError(f"algo.terminal_keys={unknown}: each must also be in env.info_keys (the flag is read "
                          "from ('next', key) of the batch), e.g. env.info_keys=[life_lost] with "
                          "rlcollect.envs.atari.LifeLoss")
    every = cfg.eval.every_frames
    for env_id, frames in (every.items() if hasattr(every, "items") else [(None, every)]):
        if frames is not None:
            check_positive_int("eval.every_frames" + (f".{env_id}" if env_id else ""), frames)
    devices = {"device": cfg.device, **{f"collector.{key}": cfg.collector.get(key)
                                        for key in ("policy_device", "env_device", "storing_device")}}
    for key, device in devices.items():
        if device is not None:
            check_device(key, device)
    policy_device = cfg.collector.get("policy_device") or cfg.device
    if cfg.collector.get("cudagraph_policy") and torch.device(policy_device or "cpu").type != "cuda":
        raise ConfigError(f"collector.cudagraph_policy=true replays the policy as a CUDA graph: it needs the policy "
                          f"on cuda (device=cuda or collector.policy_device=cuda), not {policy_device or 'cpu'}")
    storage = cfg.buffer.get("storage")
    sampler = cfg.buffer.get("sampler")
    if cfg.algo.get("prioritized") and sampler is not None and not issubclass(
            target_class(sampler, "buffer.sampler"), (RandomSampler, PrioritizedSampler)):
        chosen = option_name(target_class(sampler, "buffer.sampler"), SAMPLER_NAMES)
        raise ConfigError(f"algo.prioritized=true draws single transitions in proportion to their priorities: it "
                          f"replaces buffer/sampler=random, not buffer/sampler={chosen}")
    prioritized = cfg.algo.get("prioritized") or (
        sampler is not None and issubclass(target_class(sampler, "buffer.sampler"), PrioritizedSampler))
    if storage is not None and storage.get("ndim", 1) > 1 and prioritized:
        raise ConfigError(f"buffer/sampler=prioritized keeps one priority per stored transition: it needs "
                          f"buffer.storage.ndim=1, not {storage.ndim}")
    if storage is not None and storage.get("ndim", 1) > 1:
        # a storage of ndim > 1 keeps env rows: only the single-process Collector is one writer of known shape
        dims = 1 if cfg.env.num_envs is None else 2
        if issubclass(collector_class, Collector) and storage.ndim > dims:
            raise ConfigError(f"buffer.storage.ndim={storage.ndim}: the collector's batches have {dims} batch dims "
                              f"(env.num_envs={cfg.env.num_envs}): use ndim <= {dims}")


def check_device(key: str, device) -> None:
    """A device this machine and this torch build have."""
    try:
        device = torch.device(device)
    except RuntimeError as error:
        raise ConfigError(f"{key}={device}: not a device ({error})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}={device}: this machine or this torch build has no CUDA "
                              f"(torch.cuda.is_available() is False); use {key}=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}={device}: there are {torch.cuda.device_count()} CUDA devices")


def warn_combination(cfg: DictConfig) -> None:
    """Log the combinations that train, but not as one may expect."""
    if cfg.algo.name != "ppo":
        return
    collector_class = target_class(cfg.collector, "collector")
    if issubclass(collector_class, MultiAsyncCollector):
        _warn_policy_lag("collector=multiasync", "prefer multisync")
    elif issubclass(collector_class, (RayCollector, DistributedCollector)) and not cfg.collector.sync:
        name = option_name(collector_class, COLLECTOR_NAMES)
        _warn_policy_lag(f"collector={name} with collector.sync=false", "prefer collector.sync=true")


def _warn_policy_lag(what: str, advice: str) -> None:
    log.warning("%s feeds PPO on-policy updates with data collected by possibly older weights (policy lag, "
                "see ('collector', 'policy_version')); %s for PPO", what, advice)


def check_reset_policy(cfg: DictConfig) -> None:
    """collector.reset_policy: "wait" pads batches (("collector", "mask") False), which PPO
    skips and a replay buffer would store; only list-stepped gymnasium envs can wait."""
    policy = cfg.collector.get("reset_policy", "immediate")
    if policy not in RESET_POLICIES:
        raise ConfigError(f"collector.reset_policy={policy!r}: choose one of {', '.join(RESET_POLICIES)}")
    if policy != "wait":
        return
    if cfg.algo.name != "ppo":
        raise ConfigError(f"collector.reset_policy=wait pads batches with steps that are not transitions; "
                          f"algo={cfg.algo.name} would store them in its replay buffer: use it with algo=ppo")
    if cfg.env.backend != "list":
        raise ConfigError(f"collector.reset_policy=wait leaves finished envs unstepped, which needs env.backend=list "
                          f"(got env.backend={cfg.env.backend})")
