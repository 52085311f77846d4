"""The plan of a hosted collector's hosts (a Ray actor, a torch.distributed or RPC worker,
each running one of rlcollect's collectors for a remote driver), and the collector each
host builds from it. The driver class itself, HostedCollector, is in hosted_collector.py.

    plan_hosts -> HostPlan    each host's env source, collector options and seed, the frames
                              of a host's batch and of a yielded one (host_env_sources,
                              host_collector_kwargs)
    build_hosted_collector    what a host runs: the collector_class collector, endless, its
                              trajectory ids in the host's own range (traj_start)

Host i owns the trajectory ids ``[i << 40, (i + 1) << 40)``, so that ids stay unique across
hosts and machines; the r-th replacement of a host that died (``max_worker_restarts``)
starts at ``(i << 40) + (r << 32)``.

(This module was collectors/hosted.py, a name that did not tell it from hosted_collector.py.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rlcollect.choices import HOSTED_COLLECTOR_CLASSES as COLLECTOR_CLASSES
from rlcollect.collectors.options import BatchSpec
from rlcollect.envs.sources import worker_env_specs
from rlcollect.envs.staging import StagedEnv
from rlcollect.seeding import env_seed
from rlcollect.trajectories import TrajectoryPool

TRAJ_ID_SHIFT = 40  # host i owns traj ids [i << 40, (i + 1) << 40)
LIFE_ID_SHIFT = 32  # ... and its r-th replacement starts at (i << 40) + (r << 32)
MAX_LIVES = 1 << (TRAJ_ID_SHIFT - LIFE_ID_SHIFT)  # lives of one host's id range
# what a driver of hosted collectors sets itself, never its collector_kwargs
RESERVED_COLLECTOR_KWARGS = ("frames_per_batch", "total_frames", "traj_pool", "replay_buffer", "trajs_per_batch",
                             "post_collect_hook")


def host_collector_kwargs(collector_kwargs: dict | None, *, device=None, init_random_frames: int = 0) -> dict:
    """The options of each host's collector: ``collector_kwargs`` without its None entries
    (null in a config: that collector's default), with the run's ``device`` where none is
    set and at least ``init_random_frames`` random frames (an off-policy algorithm's
    learning_starts)."""
    kwargs = {key: value for key, value in (collector_kwargs or {}).items()
              if value is not None or key in RESERVED_COLLECTOR_KWARGS}  # a reserved key is refused, even null
    if device is not None:
        kwargs.setdefault("device", device)
    if init_random_frames:
        kwargs["init_random_frames"] = max(kwargs.get("init_random_frames", 0), init_random_frames)
    return kwargs


def traj_start(host_index: int, life: int = 0) -> int:
    """The first trajectory id of host ``host_index`` in its ``life``-th life (0: the
    first; each replacement gets a fresh sub-range, so ids never repeat)."""
    return (host_index << TRAJ_ID_SHIFT) + (life << LIFE_ID_SHIFT)


def hosted_class(collector_class: str) -> type:
    """The class a host runs for ``collector_class`` ("sync": Collector, "multisync",
    "multiasync": the multi-process collectors)."""
    from rlcollect.collectors.multi import MultiAsyncCollector, MultiSyncCollector
    from rlcollect.collectors.single import Collector

    return {"sync": Collector, "multisync": MultiSyncCollector, "multiasync": MultiAsyncCollector}[collector_class]


def build_hosted_collector(collector_class: str, create_env_fn, policy, frames_per_batch: int,
                           collector_kwargs: dict, first_id: int):
    """An endless ``collector_class`` collector ("sync": Collector; "multisync",
    "multiasync": worker processes, ``create_env_fn`` one source or one per worker) whose
    trajectory ids start at ``first_id``."""
    cls = hosted_class(collector_class)
    kwargs = dict(frames_per_batch=frames_per_batch, total_frames=-1, **collector_kwargs)
    if collector_class == "sync":
        return cls(create_env_fn, policy, traj_pool=TrajectoryPool(first_id), **kwargs)
    sources = list(create_env_fn) if isinstance(create_env_fn, (list, tuple)) else create_env_fn
    collector = cls(sources, policy, **kwargs)
    # The workers share one pool; move it to this host's range (they restart their trajectories).
    collector.load_state_dict({"frames": 0, "traj_pool": {"next_id": first_id}})
    return collector


def host_env_sources(create_env_fn, num_hosts: int, collector_class: str, envs_per_worker, seed, env_kwargs: dict,
                     collector_kwargs: dict, host: str = "host",
                     count_name: str = "num_hosts") -> tuple[list, list[dict]]:
    """What each host's collector takes as create_env_fn, and the collector kwargs each adds
    (a multi-process host: its workers' size and seed). With ``envs_per_worker``, ``seed``
    or ``env_kwargs``, ``create_env_fn`` is one env source for all hosts, their envs seeded
    by the seed rule over all hosts (rlcollect/seeding.py); else one picklable callable for
    all, or a list with one per host (for a multi-process host, a list of callables, one
    per worker process)."""
    multi = collector_class != "sync"
    host_kwargs = [{}] * num_hosts

    def is_list(value) -> bool:
        return isinstance(value, Sequence) and not isinstance(value, (str, bytes))

    one_source = envs_per_worker is not None or seed is not None or env_kwargs or isinstance(create_env_fn, str)
    if one_source:
        if is_list(create_env_fn) or isinstance(create_env_fn, StagedEnv):
            raise TypeError(f"create_env_fn: envs_per_worker, seed and env_kwargs apply to one env source (a "
                            f"gymnasium id or a picklable zero-argument callable) that every {host} builds from")
        if collector_class == "sync":
            return worker_env_specs(create_env_fn, num_hosts, envs_per_worker, seed, env_kwargs), host_kwargs
        num_workers = collector_kwargs.get("num_workers")
        if num_workers is None:
            raise TypeError(f"collector_class={collector_class!r} with one env source needs "
                            f"collector_kwargs['num_workers'] (worker processes per {host})")
        envs_per_host = num_workers * (envs_per_worker or 1)
        host_kwargs = [dict(envs_per_worker=envs_per_worker, seed=env_seed(seed, index * envs_per_host),
                            env_kwargs=env_kwargs) for index in range(num_hosts)]
        return [create_env_fn] * num_hosts, host_kwargs
    if is_list(create_env_fn) and create_env_fn and (not multi or all(is_list(e) for e in create_env_fn)):
        entries = list(create_env_fn)
        if len(entries) != num_hosts:
            raise ValueError(f"create_env_fn has {len(entries)} entries for {count_name}={num_hosts}: give one per "
                             f"{host}, or one for all")
    else:
        entries = [create_env_fn] * num_hosts
    for index, entry in enumerate(entries):
        for env_fn in (entry if multi and is_list(entry) else [entry]):
            if isinstance(env_fn, StagedEnv) or not callable(env_fn):
                raise TypeError(f"create_env_fn[{index}]: {host}s build their own envs; pass a picklable "
                                "zero-argument callable returning a GymEnv (e.g. functools.partial(GymEnv, "
                                f"'CartPole-v1', 4)), got {type(env_fn).__name__}")
        if multi and not (is_list(entry) and entry):
            raise TypeError(f"create_env_fn[{index}]: collector_class={collector_class!r} runs worker processes in "
                            f"each {host}: give a non-empty list of env callables, one per worker, or one env source "
                            "with envs_per_worker and collector_kwargs['num_workers']")
    return entries, host_kwargs


@dataclass(frozen=True)
class HostPlan:
    """What each of a driver's hosts runs: its env source, its collector's kwargs, its RNG
    seed (its first env's, rlcollect/seeding.py), and the frames of one host batch
    (``host_frames``) and of a yielded batch (``frames_per_batch``)."""

    env_sources: list
    collector_kwargs: list[dict]
    seeds: list
    host_frames: int
    frames_per_batch: int


def plan_hosts(create_env_fn, num_hosts: int, *, collector_class: str, frames_per_batch: int, sync: bool,
               envs_per_worker, seed, env_kwargs: dict | None, collector_kwargs: dict | None, owner: str,
               host: str = "worker", count_name: str = "num_workers") -> HostPlan:
    """Check a driver's arguments (``owner`` names it in errors) and plan its hosts: with
    ``sync`` every yielded batch stacks one batch per host, ``frames_per_batch`` split
    across them; else a yielded batch is one host's ``frames_per_batch`` frames."""
    if collector_class not in COLLECTOR_CLASSES:
        raise ValueError(f"collector_class must be one of {COLLECTOR_CLASSES}, got {collector_class!r}")
    kwargs = dict(collector_kwargs or {})
    reserved = sorted(set(kwargs) & set(RESERVED_COLLECTOR_KWARGS))
    if reserved:
        raise ValueError(f"collector_kwargs may not set {reserved}: {owner} sets them")
    if collector_class == "multisync" and kwargs.get("cat_results", "stack") != "stack":
        raise ValueError(f"collector_kwargs['cat_results']: a multisync {host} keeps its workers stacked ('stack'), "
                         f"got {kwargs['cat_results']!r}")
    if sync and kwargs.get("split_trajs", False):
        raise ValueError(f"split_trajs=True gives each {host} a different padded shape, which sync=True cannot "
                         "stack: split the stacked batch with split_trajectories instead")
    entries, host_kwargs = host_env_sources(create_env_fn, num_hosts, collector_class, envs_per_worker, seed,
                                            dict(env_kwargs or {}), kwargs, host=host, count_name=count_name)
    host_frames = BatchSpec.split(frames_per_batch, num_hosts if sync else 1)
    envs_per_host = (envs_per_worker or 1) * (kwargs.get("num_workers", 1) if collector_class != "sync" else 1)
    seeds = [None if seed is None else env_seed(seed, index * envs_per_host) for index in range(num_hosts)]
    return HostPlan(env_sources=entries,
                    collector_kwargs=[{**kwargs, **own} for own in host_kwargs],
                    seeds=seeds,
                    host_frames=host_frames,
                    frames_per_batch=host_frames * num_hosts if sync else host_frames)
