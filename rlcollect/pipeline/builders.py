"""Config nodes to objects: each component is its node's ``_target_``, built with
``hydra.utils.instantiate`` (targets.build_node); this module adds the runtime arguments
(env source, policy, total_frames, device, hooks, replay buffer, seeds, run folder).

Every collector is built the same way (the collector contract, docs/collectors.md "A
collector of your own"): the env source (the gymnasium id), the policy, and of the runtime
arguments (``targets.COLLECTOR_RUNTIME_ARGUMENTS``, each with what it is) those its
constructor takes (``CollectorBase.accepted_arguments``; for a class that is no
CollectorBase, its named arguments).

Learners are built alike from ``algo._target_`` (``make_learner``).
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, read_write

from rlcollect.algos.learners import Learner
from rlcollect.buffers import LazyMemmapStorage, LazyTensorStorage, MultiStep, PrioritizedSampler
from rlcollect.collectors.base import CollectorBase
from rlcollect.config import option_node
from rlcollect.envs.sources import make_env as make_env_source
from rlcollect.envs.spaces import sample_shape, sample_shapes, torch_dtype, torch_dtypes
from rlcollect.envs.staging import StagedEnv
from rlcollect.errors import ConfigError, one_line
from rlcollect.logging.run_logger import EpisodeStatsHook, RunLogger, WandbLogger
from rlcollect.pipeline.checks import check_scratch_dir
from rlcollect.pipeline.targets import (
    COLLECTOR_RUNTIME_ARGUMENTS,
    PIPELINE_KEYS,
    build_node,
    named_arguments,
    target_class,
)
from rlcollect.primers import policy_primers
from rlcollect.run_files import REPLAY_DIR, sweep_of


# ---------------------------------------------------------------------------- envs
def env_kwargs(cfg: DictConfig) -> dict:
    """What GymEnv takes besides the id, the number of envs and the seed: the time limit,
    plugin imports, info keys, the wrappers (``_target_`` nodes, built as partials applied
    in list order) and gymnasium.make's own kwargs."""
    kwargs = dict(max_episode_steps=cfg.env.max_episode_steps, **OmegaConf.to_container(cfg.env.make_kwargs))
    if cfg.env.imports:
        kwargs["imports"] = list(cfg.env.imports)
    if cfg.env.info_keys:
        kwargs["info_keys"] = list(cfg.env.info_keys)
    if cfg.env.wrappers:
        kwargs["wrappers"] = [instantiate(wrapper, _partial_=True) for wrapper in cfg.env.wrappers]
    if cfg.env.backend != "list":
        kwargs["backend"] = cfg.env.backend
    return kwargs


def make_env(cfg: DictConfig, *, num_envs: int | None, seed: int) -> StagedEnv:
    return env_factory(cfg, num_envs=num_envs, seed=seed)()


def probe_spaces(cfg: DictConfig) -> tuple:
    """``(observation_space, action_space)`` of the configured env, from one env made and
    closed again (an unknown id or a missing package fails here, before any part is built).
    With env.backend=envpool, one of EnvPool's: it steps its own implementation of the task,
    whose spaces may differ from gymnasium's (Blackjack-v1: a Box, not a Tuple)."""
    probe = make_env(cfg, num_envs=1 if cfg.env.backend == "envpool" else None, seed=cfg.seed)
    try:
        return probe.observation_space, probe.action_space
    finally:
        probe.close()


def env_factory(cfg: DictConfig, *, num_envs: int | None, seed: int) -> functools.partial:
    """A picklable zero-argument env factory: ``num_envs`` envs, env i seeded ``seed + i``
    (a GymEnv, or the task's torch env with ``env.backend=torch``; a single env,
    ``num_envs=None``, is always a GymEnv of backend "list")."""
    kwargs = env_kwargs(cfg)
    if num_envs is None:
        kwargs.pop("backend", None)
    return functools.partial(make_env_source, cfg.env.id, num_envs, seed=seed, **kwargs)


# ---------------------------------------------------------------------------- policy, logger, weights
def make_policy(cfg: DictConfig, observation_space, action_space) -> torch.nn.Module:
    """``model``'s class on the env's spaces, on the training device."""
    return build_node(cfg.model, "model", observation_space, action_space).to(cfg.device)


def make_logger(cfg: DictConfig, run_dir: Path, *, name: str | None, group: str | None,
                job_type: str | None, run_id: str | None = None, start_frames: int = 0) -> RunLogger:
    """``logger``'s class on the run folder; a WandbLogger also gets the run's name, group,
    job type, config and (resumed) run id."""
    runtime = dict(start_frames=start_frames, gamma=discount(cfg), info_keys=list(cfg.env.info_keys))
    if issubclass(target_class(cfg.logger, "logger"), WandbLogger):
        runtime.update(name=name, group=group, job_type=job_type, config=OmegaConf.to_container(cfg, resolve=True),
                       run_id=run_id)
    return build_node(cfg.logger, "logger", run_dir, **runtime)


def make_weight_sync_scheme(cfg: DictConfig):
    return build_node(cfg.weight_sync, "weight_sync")


# ---------------------------------------------------------------------------- collector
@dataclass(frozen=True)
class AlgoCollection:
    """The collector settings the algorithm decides (the one place they are read from cfg.algo)."""

    init_random_frames: int  # the collector's first frames are random: at least algo.learning_starts
    background: bool  # algo.background: collector.start(), the loop trains as frames arrive


def algo_collection(cfg: DictConfig) -> AlgoCollection:
    step = cfg.collector.get("collector_kwargs") or cfg.collector  # a hosted collector's step options are its host's
    return AlgoCollection(
        init_random_frames=max(step.get("init_random_frames") or 0, cfg.algo.get("learning_starts", 0)),
        background=bool(cfg.algo.get("background", False)),
    )


def accepted_arguments(cls: type) -> frozenset[str]:
    """The runtime arguments a collector class takes (``CollectorBase.accepted_arguments``,
    or the named arguments of a class of another kind)."""
    if issubclass(cls, CollectorBase):
        return cls.accepted_arguments()
    return frozenset(named_arguments(cls))


def make_collector(cfg: DictConfig, policy, run_dir: Path, replay_buffer=None, **runtime_overrides) -> CollectorBase:
    """The configured collector, built with the runtime arguments of the collector contract
    it takes (module docstring). With a replay buffer it writes into it directly.
    ``runtime_overrides`` replace runtime arguments (a batched sweep's seed per env and its
    members' episode hook)."""
    node = cfg.collector
    runtime = dict(total_frames=cfg.total_frames, seed=cfg.seed, env_kwargs=env_kwargs(cfg),
                   num_envs=cfg.env.num_envs, device=cfg.device,
                   init_random_frames=algo_collection(cfg).init_random_frames,
                   post_collect_hook=EpisodeStatsHook(discount(cfg), list(cfg.env.info_keys)),
                   weight_sync_schemes={"policy": make_weight_sync_scheme(cfg)}, run_dir=str(run_dir))
    if replay_buffer is not None:
        runtime.update(replay_buffer=replay_buffer, trajs_per_batch=cfg.buffer.get("trajs_per_batch"))
    runtime.update(runtime_overrides)
    undeclared = set(runtime) - COLLECTOR_RUNTIME_ARGUMENTS
    if undeclared:  # our bug: every runtime argument is declared once, with what it is
        raise AssertionError(f"collector runtime arguments {sorted(undeclared)} are not in COLLECTOR_RUNTIME_ARGUMENTS")
    if runtime["num_envs"] is None:
        runtime["env_kwargs"].pop("backend", None)  # a single env is stepped as a list of one
    accepted = accepted_arguments(target_class(node, "collector"))
    return build_node(node, "collector", cfg.env.id, policy,
                      **{key: value for key, value in runtime.items() if key in accepted})


# ---------------------------------------------------------------------------- buffers, learner
def make_replay_buffer(cfg: DictConfig, run_dir: Path, *, reopen: bool = False):
    """``buffer``'s class on its storage and sampler (a PrioritizedSampler with
    ``algo.prioritized``), sampling ``algo.batch_size``, writing
    ``algo.n_step``-step transitions (MultiStep as its write transform) when n_step > 1; a
    memory-mapped storage lives in ``buffer.storage.scratch_dir`` (default: the run
    folder's replay/), which a resumed run (``reopen``) opens again."""
    node = cfg.buffer
    storage = make_storage(node.storage, device=cfg.device, run_dir=Path(run_dir), reopen=reopen)
    sampler_node = node.sampler
    if cfg.algo.get("prioritized") and not issubclass(target_class(sampler_node, "buffer.sampler"), PrioritizedSampler):
        sampler_node = option_node("buffer/sampler", "prioritized")  # algo.prioritized: that option as it composes
    sampler_runtime = {}
    if issubclass(target_class(sampler_node, "buffer.sampler"), PrioritizedSampler):
        sampler_runtime["max_capacity"] = node.storage.max_size  # one priority per element of the storage
    sampler = build_node(sampler_node, "buffer.sampler", **sampler_runtime)
    runtime = {}
    n_step = cfg.algo.get("n_step", 1)  # n-step transitions are made as batches are written
    if n_step > 1:
        end_keys = list(cfg.algo.get("terminal_keys") or [])
        runtime["write_transform"] = MultiStep(discount(cfg), n_step, end_keys=end_keys)
    return build_node(node, "buffer", drop=("storage", "sampler", *sorted(PIPELINE_KEYS["buffer"])), storage=storage,
                      sampler=sampler, batch_size=cfg.algo.batch_size, **runtime)


def make_storage(node: DictConfig, *, device: str, run_dir: Path, reopen: bool = False):
    """``buffer.storage``'s class: a LazyMemmapStorage in its folder (``memmap_dir``), a
    given scratch_dir checked first (``checks.check_scratch_dir``: never another run's
    folder or files), or, for a resumed run (``reopen``), opened again from it
    (``reopen_storage``); a LazyTensorStorage on the training device unless it names one."""
    cls = target_class(node, "buffer.storage")
    if issubclass(cls, LazyMemmapStorage):
        scratch_dir = memmap_dir(node, run_dir)
        if reopen:  # a resumed run continues with its files, which its checkpoint does not hold
            return reopen_storage(cls, scratch_dir, run_dir)
        if node.get("scratch_dir"):
            check_scratch_dir(scratch_dir, run_dir)
        return build_node(node, "buffer.storage", scratch_dir=str(scratch_dir))
    if issubclass(cls, LazyTensorStorage):
        return build_node(node, "buffer.storage", device=node.get("device") or device)
    return build_node(node, "buffer.storage")


def memmap_dir(node: DictConfig, run_dir: Path) -> Path:
    """Where a LazyMemmapStorage's files are: the run folder's replay/ (``scratch_dir``
    null), else ``scratch_dir``, made absolute in the config itself (config.yaml records
    the absolute path, which a resume from another working directory finds), and, for a
    job of a sweep, the job's folder path in the sweep below it (``<scratch_dir>/3_seed=1``):
    the jobs of a sweep, given one scratch_dir, never share their files (a resumed job
    finds its own again)."""
    given = node.get("scratch_dir")
    if not given:
        return Path(run_dir) / REPLAY_DIR
    scratch_dir = Path(os.path.abspath(given))
    if str(scratch_dir) != given:
        with read_write(node):
            node.scratch_dir = str(scratch_dir)
    sweep = sweep_of(run_dir)
    if sweep is not None:
        scratch_dir = scratch_dir / Path(run_dir).resolve().relative_to(sweep)
    return scratch_dir


def reopen_storage(cls: type[LazyMemmapStorage], scratch_dir: Path, run_dir: Path) -> LazyMemmapStorage:
    """A resumed run's LazyMemmapStorage opened again from ``scratch_dir``; a folder that is
    gone, empty, without its storage.json or with a data file missing or cut short is a
    ConfigError naming the run's ``resume=`` and the folder, every file left as it was."""
    storage = f"resume={run_dir}: its memory-mapped replay buffer ({scratch_dir})"
    lost = ("the checkpoint's buffer cannot be restored; put the folder back, or train the run again in a new "
            "folder")
    if not scratch_dir.is_dir():
        raise ConfigError(f"{storage} is not there (moved, or cleaned away): {lost}")
    if not (scratch_dir / cls.METADATA).is_file():
        state = "is empty" if not any(scratch_dir.iterdir()) else f"has no {cls.METADATA}"
        raise ConfigError(f"{storage} {state} (cleaned away, or never written): {lost}")
    try:
        gap = cls.missing_files(scratch_dir)
        reopened = None if gap is not None else cls.load(scratch_dir)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RuntimeError) as error:
        raise ConfigError(f"{storage} cannot be opened ({one_line(error)}): {lost}") from None
    if gap is not None:
        raise ConfigError(f"{storage}: {gap} is missing or cut short (cleaned away in part): {lost}")
    return reopened


def make_rollout_buffer(cfg: DictConfig, policy, collector: CollectorBase, observation_space, action_space):
    """``buffer``'s class sized for one batch of ``collector``: [envs, T + 1]."""
    *env_dims, time_steps = collector.batch_size
    return build_node(
        cfg.buffer, "buffer", math.prod(env_dims), time_steps, sample_shapes(observation_space),
        sample_shape(action_space), observation_dtype=torch_dtypes(observation_space),
        action_dtype=torch_dtype(action_space), device=cfg.buffer.get("device") or cfg.device,
        state_shapes={key: shape for primer in policy_primers(policy) for key, shape in primer.shapes.items()},
        extra_keys=[("next", key) for key in cfg.algo.get("terminal_keys", [])],
    )


DEFAULT_GAMMA = 0.99  # the discount of logged discounted returns for an algorithm that has none


def discount(cfg: DictConfig) -> float:
    """The run's discount (``algo.gamma``): of the logged discounted returns and n-step writes."""
    return float(cfg.algo.get("gamma", DEFAULT_GAMMA))


def learner_class(cfg: DictConfig) -> type[Learner]:
    """The learner ``algo._target_`` names."""
    return target_class(cfg.algo, "algo")


def make_learner(cfg: DictConfig, policy, collector: CollectorBase, observation_space, action_space,
                 replay_buffer=None, **runtime_overrides) -> Learner:
    """``algo``'s learner on the buffer it asks for (the replay buffer the collector writes
    into, or a rollout buffer sized for the collector's batches), with the runtime
    arguments its constructor names; the algo keys the pipeline reads itself
    (targets.PIPELINE_KEYS) go to it only when it names them too. ``runtime_overrides`` are
    passed on as they are (a batched sweep's per-member settings)."""
    cls = learner_class(cfg)
    buffer = replay_buffer if cls.replay else make_rollout_buffer(cfg, policy, collector, observation_space,
                                                                   action_space)
    runtime = dict(total_frames=cfg.total_frames, observation_space=observation_space, action_space=action_space)
    accepted = named_arguments(cls)
    drop = tuple(sorted(key for key in PIPELINE_KEYS["algo"] if key in cfg.algo and key not in accepted))
    return build_node(cfg.algo, "algo", policy, buffer, drop=drop,
                      **{key: value for key, value in runtime.items() if key in accepted}, **runtime_overrides)
