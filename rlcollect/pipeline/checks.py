"""Config checks, before anything is built: keys (``check_keys``), value ranges
(``check_ranges``) and combinations of options (``check_combination``, ``warn_combination``);
the values of renamed keys moved to their new keys (``config.rename_keys``).

No concrete collector class is named here: each collector class checks what it can collect
for the run (``CollectorBase.check_plan``, given a ``CollectionPlan``), each learner class
says which buffer and models it takes (``Learner.replay``, ``policy_classes``).
``option_name`` gives the short option name of a class for messages and for the W&B job
type, from the schemas' ``_target_`` (a class of your own counts as the rlcollect class it
derives from).
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import logging
from pathlib import Path

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from rlcollect.buffers import (
    LazyMemmapStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RolloutBuffer,
    SliceSampler,
)
from rlcollect.collectors.base import CollectionPlan, CollectorBase
from rlcollect.collectors.options import DeviceOptions
from rlcollect.collectors.processes import check_cpu_affinity
from rlcollect.config import SCHEMAS, check_ranges, rename_keys, schema_nodes
from rlcollect.envs.backends import check_vector_entry_point
from rlcollect.envs.gym_env import import_plugins, resolve_env_id
from rlcollect.envs.sources import TORCH_ENVS
from rlcollect.errors import ConfigError
from rlcollect.pipeline.targets import RUNTIME_ARGUMENTS, named_arguments, target_callable, target_class
from rlcollect.run_files import HYDRA_DIR, REPLAY_DIR, run_files
from rlcollect.validation import check_positive_int

log = logging.getLogger(__name__)


def group_targets(group: str) -> list[tuple[str, str]]:
    """``(option name, _target_)`` of every option of ``group`` that names a class (the
    schemas' ``_target_``: config.SCHEMAS, e.g. "collector", "model", "buffer_sampler")."""
    return [(option, schema._target_) for (schema_group, option), schema in SCHEMAS.items()
            if schema_group == group and isinstance(getattr(schema, "_target_", None), str)]


@functools.lru_cache(maxsize=None)
def resolved(target: str) -> type | None:
    """The class ``target`` names; None for an extra's class that does not import here."""
    try:
        return get_class(target)
    except Exception:
        return None


@functools.lru_cache(maxsize=None)
def group_classes(group: str) -> tuple[tuple[type, str], ...]:
    """``(class, option name)`` of every option of ``group`` whose class imports here."""
    return tuple((resolved(target), option) for option, target in group_targets(group)
                 if resolved(target) is not None)


def option_name(cls: type, group: str) -> str:
    """The option of ``group`` whose class ``cls`` is or derives from most closely (its MRO
    order), else the class's own dotted name. An option whose class is ``cls`` itself is
    found among the options whose ``_target_`` ends in ``cls``'s name, without importing
    the others (a default run would import every collector's module for its job type's
    name: 0.1 s)."""
    for option, target in group_targets(group):
        if target.rpartition(".")[2] == cls.__name__ and resolved(target) is cls:
            return option
    options = dict(group_classes(group))
    for klass in cls.__mro__:
        if klass in options:
            return options[klass]
    return f"{cls.__module__}.{cls.__qualname__}"


def algo_name(cfg: DictConfig) -> str:
    """The algorithm's label (``algo.name``), else its learner class's name."""
    return cfg.algo.get("name") or target_class(cfg.algo, "algo").__name__


def collector_name(cfg: DictConfig) -> str:
    """The short name of the configured collector ("sync", "multisync", ...): the W&B job type."""
    return option_name(target_class(cfg.collector, "collector"), "collector")


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
                if not close and "make_kwargs" in known:  # the env node: gymnasium.make's own arguments
                    hint = f"; an argument of gymnasium.make goes under {prefix}make_kwargs: +{prefix}make_kwargs.{key}"
                raise ConfigError(f"Key '{key}' not in '{schema.__name__}' ({prefix}{key} is not a key of its "
                                  f"schema{where}{hint})")


def check_config(cfg: DictConfig) -> None:
    """Everything about ``cfg`` that can be known before a part is built: its keys, the
    ranges of its values and the combinations of its options (ConfigError otherwise). A key
    kept under its old name for a release (``config.renamed``: collector.num_collectors,
    collector.launcher) has its value moved to its new key here, in ``cfg``, with a warning."""
    check_keys(cfg)
    check_ranges(cfg)  # the choices of the options too (objective, env.backend, collector.reset_policy, ...)
    for message in rename_keys(cfg, command_line_keys()):
        log.warning(message)
    check_combination(cfg)


def command_line_keys() -> set[str]:
    """The config keys the command line of the Hydra job running now sets (none outside one)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return set()
    return {override.split("=", 1)[0].lstrip("+~") for override in HydraConfig.get().overrides.task}


# ---------------------------------------------------------------------------- combinations
def check_combination(cfg: DictConfig) -> None:
    """Reject config combinations that cannot train, naming the keys to change."""
    learner = target_class(cfg.algo, "algo")
    algo = algo_name(cfg)
    buffer_class = target_class(cfg.buffer, "buffer")
    wanted_buffer = ReplayBuffer if learner.replay else RolloutBuffer
    if not issubclass(buffer_class, wanted_buffer):
        raise ConfigError(f"algo={algo} trains from buffer={option_name(wanted_buffer, 'buffer')}, "
                          f"not buffer={option_name(buffer_class, 'buffer')}")
    model_class = target_class(cfg.model, "model")
    if learner.policy_classes and not issubclass(model_class, learner.policy_classes):
        wanted = " or ".join(option_name(cls, "model") for cls in learner.policy_classes)
        raise ConfigError(f"algo={algo} trains model={wanted}, not model={option_name(model_class, 'model')}")
    step = cfg.collector.get("collector_kwargs") or cfg.collector  # a hosted collector's step options are its host's
    if step.get("split_trajs"):
        raise ConfigError("collector.split_trajs=true gives padded batches; the learners need the collector "
                          "layout: keep split_trajs=false")
    collector_class = target_class(cfg.collector, "collector")
    if issubclass(collector_class, CollectorBase):
        collector_class.check_plan(collection_plan(cfg))
    check_values(cfg)


def collection_plan(cfg: DictConfig) -> CollectionPlan:
    """What the run asks of its collector, in plain values (collectors/base.py)."""
    weights_class = target_class(cfg.weight_sync, "weight_sync")
    storage = cfg.buffer.get("storage")
    return CollectionPlan(
        name=collector_name(cfg), options=OmegaConf.to_container(cfg.collector, resolve=True),
        on_policy=not target_class(cfg.algo, "algo").replay, algo=algo_name(cfg), env_backend=cfg.env.backend,
        num_envs=cfg.env.num_envs, storage_ndim=storage.get("ndim", 1) if storage is not None else None,
        trajs_per_batch=cfg.buffer.get("trajs_per_batch"), weight_sync=weights_class,
        weight_sync_name=option_name(weights_class, "weight_sync"),
        policy_device=cfg.collector.get("policy_device") or cfg.device or "cpu")


def batch_frames(cfg: DictConfig) -> int:
    """The frames of each batch the collector will collect: collector.frames_per_batch as its
    class rounds it (``CollectorBase.batch_frames``), what a size compared with a batch's
    is compared with."""
    collector_class = target_class(cfg.collector, "collector")
    if issubclass(collector_class, CollectorBase):
        return collector_class.batch_frames(collection_plan(cfg))
    return cfg.collector.frames_per_batch


def check_values(cfg: DictConfig) -> None:
    """Values that would fail later (after W&B starts, or after workers spawn), checked now:
    worker and env counts, devices this torch build has, a storage ndim the batches have."""
    frames = batch_frames(cfg)
    if "minibatch_size" in cfg.algo and cfg.algo.minibatch_size > frames:
        rounded = "" if frames == cfg.collector.frames_per_batch else f", rounded up to {frames} frames"
        raise ConfigError(f"algo.minibatch_size={cfg.algo.minibatch_size}: must be at most the frames of a batch "
                          f"(collector.frames_per_batch={cfg.collector.frames_per_batch}{rounded})")
    check_learning_starts(cfg)
    if cfg.eval.max_steps is not None and cfg.eval.max_steps < cfg.eval.episodes:
        raise ConfigError(f"eval.max_steps={cfg.eval.max_steps}: must be at least one step of each of the "
                          f"eval.episodes={cfg.eval.episodes} eval envs")
    if cfg.env.backend == "torch":
        given = [key for key in ("wrappers", "imports", "info_keys", "make_kwargs") if cfg.env[key]]
        if cfg.env.id not in TORCH_ENVS or given:
            raise ConfigError(f"env.backend=torch steps rlcollect's torch env of the task ({', '.join(TORCH_ENVS)}), "
                              f"with no gymnasium wrappers, imports, info keys or make kwargs: got env.id={cfg.env.id}"
                              + (f" and env.{', env.'.join(given)}" if given else ""))
    for index, wrapper in enumerate(cfg.env.wrappers or []):
        target_callable(wrapper, f"env.wrappers[{index}]")
    if cfg.env.backend in ("vector", "envpool") and cfg.env.wrappers:
        raise ConfigError(f"env.backend={cfg.env.backend} steps one native vector env, which takes no per-env "
                          "wrappers: use env.backend=sync or async with env.wrappers")
    if cfg.env.backend == "vector":
        import_plugins(list(cfg.env.imports))
        try:
            check_vector_entry_point(resolve_env_id(cfg.env.id))
        except ConfigError as error:
            raise ConfigError(f"env.backend=vector: {error}") from None
    check_reset_policy(cfg)
    check_solved_return(cfg.env.solved_return)
    unknown = [key for key in cfg.algo.get("terminal_keys") or [] if key not in (cfg.env.info_keys or [])]
    if unknown:
        raise ConfigError(f"algo.terminal_keys={unknown}: each must also be in env.info_keys (the flag is read "
                          "from ('next', key) of the batch), e.g. env.info_keys=[life_lost] with "
                          "rlcollect.envs.atari.LifeLoss")
    for key, frames in per_env_values("eval.every_frames", cfg.eval.every_frames):
        if frames is not None:
            check_positive_int(key, frames)
    storage = cfg.buffer.get("storage")
    for key, device in device_keys(cfg).items():
        check_device(key, device)
    check_worker_cpu_affinity(cfg)
    sampler = cfg.buffer.get("sampler")
    if cfg.algo.get("prioritized") and sampler is not None and not issubclass(
            target_class(sampler, "buffer.sampler"), (RandomSampler, PrioritizedSampler)):
        chosen = option_name(target_class(sampler, "buffer.sampler"), "buffer_sampler")
        raise ConfigError(f"algo.prioritized=true draws single transitions in proportion to their priorities: it "
                          f"replaces buffer/sampler=random, not buffer/sampler={chosen}")
    prioritized = cfg.algo.get("prioritized") or (
        sampler is not None and issubclass(target_class(sampler, "buffer.sampler"), PrioritizedSampler))
    if storage is not None and storage.get("ndim", 1) > 1 and prioritized:
        raise ConfigError(f"buffer/sampler=prioritized keeps one priority per stored transition: it needs "
                          f"buffer.storage.ndim=1, not {storage.ndim}")
    check_replay_sizes(cfg)


# the device keys of a collector node (and of a hosted collector's collector_kwargs): DeviceOptions' fields
COLLECTOR_DEVICE_KEYS = tuple(option.name for option in dataclasses.fields(DeviceOptions))


def device_keys(cfg: DictConfig) -> dict[str, object]:
    """``{full key: device}`` of every device the config sets (null ones left out): the
    training device, the collector's (and its hosts' collector_kwargs, where the hosts run on
    this machine: ``hosts_here``), the rollout buffer's and the replay storage's."""
    collector = cfg.collector
    devices = {"device": cfg.device, **{f"collector.{key}": collector.get(key) for key in COLLECTOR_DEVICE_KEYS}}
    hosted = collector.get("collector_kwargs")
    if hosted is not None and hosts_here(collector):
        devices.update({f"collector.collector_kwargs.{key}": hosted.get(key) for key in COLLECTOR_DEVICE_KEYS})
    storage = cfg.buffer.get("storage")
    devices["buffer.device"] = cfg.buffer.get("device")
    devices["buffer.storage.device"] = storage.get("device") if storage is not None else None
    return {key: device for key, device in devices.items() if device is not None}


def hosts_here(collector: DictConfig) -> bool:
    """Whether a hosted collector's hosts (its collector_kwargs' collectors) run on this
    machine, whose devices ``check_device`` can tell: a local Ray (``ray_address`` null),
    local processes (``start_workers_with=mp``) or local submitit jobs (``cluster=local``).
    The hosts of a Ray cluster or of SLURM jobs have their nodes' devices, not this one's."""
    starter = collector.get("start_workers_with")
    if starter == "mp":
        return True
    if starter == "submitit":
        return collector.get("cluster") == "local"
    return collector.get("ray_address") is None


def check_worker_cpu_affinity(cfg: DictConfig) -> None:
    """collector.worker_cpu_affinity: one non-empty list of CPU ids per worker process
    (collector.num_workers), each a CPU this process may use (``check_cpu_affinity``, what
    the collector's workers are pinned with), found before any worker starts."""
    affinity = cfg.collector.get("worker_cpu_affinity")
    if affinity is None or "num_workers" not in cfg.collector:
        return
    workers = cfg.collector.num_workers
    value = OmegaConf.to_container(affinity) if OmegaConf.is_config(affinity) else affinity
    try:
        check_cpu_affinity(value, workers)
    except (ValueError, TypeError) as error:
        reason = str(error).removeprefix("worker_cpu_affinity ")
        raise ConfigError(f"collector.worker_cpu_affinity={value} (collector.num_workers={workers}): {reason}"
                          ) from None


# ---------------------------------------------------------------------------- replay buffer sizes
def check_replay_sizes(cfg: DictConfig) -> None:
    """A replay buffer's sizes, as its storage and sampler would find them once the run is
    under way (buffers/storage.py, buffers/samplers.py), checked with the config's numbers:
    a storage keeping env rows (ndim > 1) holds ``max_size // rows`` steps of each of the
    rows of a write, at least one (an ndim=1 storage takes any write: a longer one leaves
    its last max_size steps); a sample of ``algo.batch_size`` comes from at most what the
    storage holds; and a slice sampler's own conditions (``check_slices``)."""
    storage = cfg.buffer.get("storage")
    if storage is None or not target_class(cfg.algo, "algo").replay:
        return
    max_size, ndim = storage.max_size, storage.get("ndim", 1)
    rows = 1
    if ndim > 1 and cfg.buffer.get("trajs_per_batch") is None:
        rows = write_rows(cfg)
        if max_size < rows:
            envs = f": env.num_envs={cfg.env.num_envs}" if rows == cfg.env.num_envs else ""
            raise ConfigError(f"buffer.storage.max_size={max_size}: smaller than the {rows} env rows of each write "
                              f"(buffer.storage.ndim={ndim} keeps one row per env{envs}, each of max_size // {rows} "
                              f"steps); raise buffer.storage.max_size to {rows} or more, or use buffer.storage.ndim=1")
    steps = max_size // rows  # of each row: the storage's capacity
    held = steps * rows
    batch_size = cfg.algo.get("batch_size")
    if batch_size is not None and batch_size > held:
        rounded = "" if held == max_size else (f" ({held} with buffer.storage.ndim={ndim}: {steps} steps of each "
                                               f"of the {rows} env rows)")
        raise ConfigError(f"algo.batch_size={batch_size}: must be at most buffer.storage.max_size={max_size}, the "
                          f"transitions the replay buffer holds{rounded}; lower algo.batch_size or raise "
                          "buffer.storage.max_size")
    sampler = cfg.buffer.get("sampler")
    if sampler is not None and issubclass(target_class(sampler, "buffer.sampler"), SliceSampler):
        check_slices(cfg, steps, rows)


def write_rows(cfg: DictConfig) -> int:
    """The rows of each write into a storage that keeps env rows (ndim > 1): every env of a
    batch (``CollectorBase.batch_envs``; env.num_envs for the sync collector)."""
    collector_class = target_class(cfg.collector, "collector")
    if issubclass(collector_class, CollectorBase):
        return collector_class.batch_envs(collection_plan(cfg))
    return cfg.env.num_envs or 1


def check_slices(cfg: DictConfig, steps: int, rows: int) -> None:
    """What SliceSampler (and SliceSamplerWithoutReplacement) refuse, found before the run
    starts, not at its first sample: not exactly one of slice_len and num_slices,
    pad_output with strict_length, a batch_size that is no multiple of the one given, and,
    with strict_length, slices longer than any trajectory the storage can hold (``steps``
    per row): the sampler would find none long enough."""
    sampler = cfg.buffer.sampler
    name = option_name(target_class(sampler, "buffer.sampler"), "buffer_sampler")
    slice_len, num_slices = sampler.get("slice_len"), sampler.get("num_slices")
    if (slice_len is None) == (num_slices is None):
        given = (f"buffer.sampler.slice_len={_yaml(slice_len)} and buffer.sampler.num_slices={_yaml(num_slices)}")
        advice = ("give one: slice_len, the steps of a slice, or num_slices, the slices of a sample"
                  if slice_len is None else "set the other to null")
        raise ConfigError(f"{given}: buffer/sampler={name} takes exactly one of them; {advice}")
    if sampler.get("pad_output") and sampler.get("strict_length"):
        raise ConfigError("buffer.sampler.pad_output=true and buffer.sampler.strict_length=true: pad_output pads "
                          "short slices, strict_length leaves them out; use pad_output=true only with "
                          "strict_length=false")
    batch_size = cfg.algo.get("batch_size")
    if batch_size is None:
        return
    if slice_len is not None:
        key, length = f"buffer.sampler.slice_len={slice_len}", slice_len
        if batch_size % slice_len:
            raise ConfigError(f"algo.batch_size={batch_size}: must be a multiple of {key} (buffer/sampler={name} "
                              "samples algo.batch_size // slice_len slices of slice_len steps)")
    else:
        key, length = f"buffer.sampler.num_slices={num_slices}", batch_size // num_slices
        if batch_size % num_slices:
            raise ConfigError(f"algo.batch_size={batch_size}: must be a multiple of {key} (buffer/sampler={name} "
                              "samples num_slices slices of algo.batch_size // num_slices steps)")
    if sampler.get("strict_length") and length > steps:
        per_row = f" over {rows} env rows" if rows > 1 else ""
        of = "" if slice_len is not None else f" (slices of algo.batch_size // num_slices = {length} steps)"
        raise ConfigError(f"{key}{of}: with buffer.sampler.strict_length=true every slice is {length} steps of one "
                          f"trajectory, and no trajectory the storage holds is longer than {steps} steps "
                          f"(buffer.storage.max_size={cfg.buffer.storage.max_size}{per_row}); shorten the slices or "
                          "use buffer.sampler.strict_length=false")


def _yaml(value) -> str:
    """A config value as the command line writes it (None: null)."""
    return "null" if value is None else str(value)


# the names a LazyMemmapStorage writes into its folder
MEMMAP_FILES = (LazyMemmapStorage.METADATA, LazyMemmapStorage.POSITION, LazyMemmapStorage.DATA,
                LazyMemmapStorage.SPARES)


def check_scratch_dir(scratch_dir: Path, run_dir: Path) -> None:
    """A new run's memory-mapped replay buffer (``buffer.storage.scratch_dir``) goes to a
    folder of its own: not a file, not a folder of another run (``run_files.run_files``)
    nor one inside it (its own run folder is fine), nor one holding a replay buffer's files
    already (another run's, given the same scratch_dir). Reads only."""
    key = f"buffer.storage.scratch_dir={scratch_dir}"
    if scratch_dir.exists() and not scratch_dir.is_dir():
        raise ConfigError(f"{key} is a file, not a folder: give the replay buffer's files a folder of their own")
    own = Path(run_dir).resolve()
    folder = scratch_dir.resolve()
    for outer in (folder, *folder.parents):
        if outer == own:
            break
        held = [] if outer.name == HYDRA_DIR else run_files(outer)
        if held:
            where = "is the folder of" if outer == folder else "is inside"
            raise ConfigError(f"{key} {where} another run ({outer}: its {', '.join(held)}), whose files the replay "
                              f"buffer would write among: give this run a scratch_dir outside every run's folder, or "
                              f"leave it null (the run folder's {REPLAY_DIR}/)")
    held = [name for name in MEMMAP_FILES if (scratch_dir / name).exists()]
    if held:
        raise ConfigError(f"{key} holds a replay buffer's files already ({', '.join(held)}: another run's, given the "
                          f"same scratch_dir): give each run a scratch_dir of its own, or leave it null (the run "
                          f"folder's {REPLAY_DIR}/)")


def per_env_values(key: str, value) -> list[tuple[str, object]]:
    """``[(key, value)]``, or, for a value given per env id (``{env id: value}``, e.g.
    env.solved_return, eval.every_frames), ``(key.<env id>, its value)`` for each."""
    if hasattr(value, "items"):
        return [(f"{key}.{env_id}", entry) for env_id, entry in value.items()]
    return [(key, value)]


def check_solved_return(solved) -> None:
    """env.solved_return: null, a number, or ``{env id: number or null}``."""
    for key, value in per_env_values("env.solved_return", solved):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{key}={value}: a return (a number), or null for no threshold")


def check_learning_starts(cfg: DictConfig) -> None:
    """An off-policy learner (``Learner.replay``) takes its first gradient step once
    ``algo.learning_starts`` frames are in: a run whose ``total_frames`` does not go past
    them would collect random actions and never learn, yet end as finished."""
    starts = cfg.algo.get("learning_starts")
    if target_class(cfg.algo, "algo").replay and starts is not None and starts >= cfg.total_frames:
        raise ConfigError(f"algo.learning_starts={starts}: must be less than total_frames={cfg.total_frames} "
                          f"(algo={algo_name(cfg)} collects random actions and takes no gradient step before "
                          "algo.learning_starts frames); lower algo.learning_starts or raise total_frames")


def check_device(key: str, device) -> None:
    """A device this machine and this torch build have, that a run can train on: not the
    meta device (its tensors hold no values), not a CPU with an index (``cpu``: torch has
    one CPU device), and an accelerator only where torch says it is available (its own
    ``is_available()``; for a type without one, where a tensor can be made there)."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(f"{key}={device}: not a device ({' '.join(str(error).split())})") from None
    if device.type == "meta":
        raise ConfigError(f"{key}={device}: the meta device holds tensors without values, so nothing is computed "
                          f"there and a run cannot train on it; use {key}=cpu (or an accelerator's device)")
    if device.type == "cpu":
        if device.index is not None:
            raise ConfigError(f"{key}={device}: a CPU device has no index here (torch has one CPU device); use "
                              f"{key}=cpu")
        return
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}={device}: this machine or this torch build has no CUDA "
                              f"(torch.cuda.is_available() is False); use {key}=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}={device}: there are {torch.cuda.device_count()} CUDA devices")
        return
    check_accelerator(key, device)


def check_accelerator(key: str, device: torch.device) -> None:
    """An accelerator other than CUDA (mps, xpu, mtia, hpu, xla, ...) this machine and this
    torch build have: ``torch.backends.mps.is_available()`` for mps, ``torch.<type>.is_available()``
    where torch has that module, else a tensor made there (what a plugin's device needs)."""
    backend = getattr(torch.backends, device.type, None) if device.type == "mps" else None
    module = getattr(torch, device.type, None)
    available = getattr(backend, "is_available", None) or getattr(module, "is_available", None)
    if callable(available):
        where = f"torch.{'backends.' if backend is not None else ''}{device.type}.is_available()"
        try:
            usable = bool(available())
        except Exception:  # a backend that fails to initialize: not available either
            usable = False
        if not usable:
            raise ConfigError(f"{key}={device}: this machine or this torch build has no {device.type} device "
                              f"({where} is False); use {key}=cpu")
        count = getattr(module, "device_count", None)
        if device.index is not None and callable(count) and device.index >= count():
            raise ConfigError(f"{key}={device}: there are {count()} {device.type} devices")
        return
    try:
        torch.empty(0, device=device)
    except Exception as error:
        reason = " ".join(str(error).split(". ")[0].split()) or type(error).__name__
        raise ConfigError(f"{key}={device}: this torch build cannot make tensors on the {device.type} device "
                          f"({reason}); use {key}=cpu") from None


def warn_combination(cfg: DictConfig) -> None:
    """Log the combinations that train, but not as one may expect: workers that keep their
    first weights (weight_sync=none with a collector that sends its workers weights), and an
    on-policy learner fed by a collector whose batches may come from older weights
    (``CollectorBase.lags_policy``)."""
    from rlcollect.weight_sync import NoWeightSyncScheme

    collector_class = target_class(cfg.collector, "collector")
    if (issubclass(target_class(cfg.weight_sync, "weight_sync"), NoWeightSyncScheme)
            and issubclass(collector_class, CollectorBase)
            and "weight_sync_schemes" in collector_class.accepted_arguments()):
        log.warning("weight_sync=none: the workers of collector=%s keep the policy's first weights, so every batch is "
                    "collected with them whatever %s learns; leave weight_sync at its default to send them the new "
                    "weights", collector_name(cfg), algo_name(cfg))
    if target_class(cfg.algo, "algo").replay:
        return
    if issubclass(collector_class, CollectorBase) and collector_class.lags_policy(cfg.collector):
        what = f"collector={collector_name(cfg)}" + (" with collector.sync=false" if "sync" in cfg.collector else "")
        advice = "prefer collector.sync=true" if "sync" in cfg.collector else "prefer collector=multisync"
        _warn_policy_lag(cfg, what, advice)


def _warn_policy_lag(cfg: DictConfig, what: str, advice: str) -> None:
    log.warning("%s feeds %s's on-policy updates with data collected by possibly older weights (policy lag, "
                "see ('collector', 'policy_version')); %s for it", what, algo_name(cfg), advice)


def check_reset_policy(cfg: DictConfig) -> None:
    """collector.reset_policy: "wait" pads batches (("collector", "mask") False), which PPO
    skips and a replay buffer would store; only list-stepped gymnasium envs can wait. And
    what else only they can do (docs/envs.md, "Limits"): leave a finished env unreset
    (collector.reset_when_done=false), take random steps per env (max_decorrelation_steps)."""
    backend = cfg.env.backend
    if backend != "list" and cfg.collector.get("reset_when_done", True) is False:
        raise ConfigError(f"collector.reset_when_done=false leaves finished envs unreset, which needs "
                          f"env.backend=list (got env.backend={backend}: it cannot step a finished env)")
    if backend != "list" and (cfg.collector.get("max_decorrelation_steps") or 0) > 0:
        raise ConfigError(f"collector.max_decorrelation_steps={cfg.collector.max_decorrelation_steps}: random steps "
                          f"per env need env.backend=list (got env.backend={backend}: it steps all its envs at once)")
    policy = cfg.collector.get("reset_policy", "immediate")  # one of its choices (check_ranges)
    if policy != "wait":
        return
    if target_class(cfg.algo, "algo").replay:
        raise ConfigError(f"collector.reset_policy=wait pads batches with steps that are not transitions; "
                          f"algo={algo_name(cfg)} would store them in its replay buffer: use it with an on-policy "
                          "algorithm (algo=ppo)")
    if cfg.env.backend != "list":
        raise ConfigError(f"collector.reset_policy=wait leaves finished envs unstepped, which needs env.backend=list "
                          f"(got env.backend={cfg.env.backend})")
