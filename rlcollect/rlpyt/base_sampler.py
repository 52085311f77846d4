"""BaseSampler: rlpyt's sampler interface over rlcollect's collectors (docs/rlpyt.md).

    sampler = CpuSampler(EnvCls, env_kwargs, batch_T, batch_B)
    examples = sampler.initialize(agent, seed=0)        one step's entries (zeros)
    samples, traj_infos = sampler.obtain_samples(itr)    [batch_T, batch_B], time-major
    traj_infos = sampler.evaluate_agent(itr)             completed eval episodes
    sampler.shutdown()

A sampler builds one collector (``_build_collector``: the subclasses' only difference) and
draws a batch from it per ``obtain_samples``; the per-step loop is the collector's. The
samples are the collector's ``[batch_B, batch_T]`` batch seen time-major (a transposed
view, no copy) with rlcollect's keys (docs/data-layout.md), as ``Samples``: a TensorDict
whose ``bootstrap_value`` (``[batch_B]``, no time dim) reads as a tensor. Env ``i`` of
rank ``r`` is seeded ``seed + r * batch_B + i`` and starts its episodes at a random phase
(``RandomStart``, drawn from its seed), so the samplers give the same samples from the same
seed whichever process steps the envs.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from rlcollect.collectors.devices import policy_param_device
from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.collectors.single import Collector
from rlcollect.envs.gym_env import GymEnv
from rlcollect.envs.random_start import RandomStart
from rlcollect.envs.sources import make_env
from rlcollect.rlpyt.sampler_collectors import SamplerCollector
from rlcollect.seeding import env_seed, eval_seed
from rlcollect.trajectories import EpisodeTracker, TrajectoryInfo
from rlcollect.validation import check_non_negative_int, check_positive_int

__all__ = ["AFFINITY_KEYS", "BOOTSTRAP_VALUE", "BaseSampler", "EnvFactory", "Samples", "TRAJ_INFO_KEYS"]

# rlpyt's affinity keys (rlpyt.utils.launching.affinity): the ones a sampler reads
AFFINITY_KEYS = ("master_cpus", "workers_cpus", "master_torch_threads", "worker_torch_threads", "cuda_idx",
                 "alternating", "set_affinity")
TRAJ_INFO_KEYS = {"discount": "gamma", "gamma": "gamma", "sum_keys": "sum_keys", "last_keys": "last_keys"}
BOOTSTRAP_VALUE = "bootstrap_value"


def _known_keys(given: dict | None, known, message: str) -> dict:
    """``given`` as a dict; a ValueError (``message`` formatted with the unknown keys and
    the known ones) when it has keys outside ``known``."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(message.format(unknown, list(known)))
    return given


class Samples(TensorDict):
    """The time-major samples ``[batch_T, batch_B]``. Its ``bootstrap_value`` has no time dim
    (``[batch_B]``), so it is held as a non-tensor entry; it reads as the plain tensor both
    as ``samples["bootstrap_value"]`` and as ``samples.get("bootstrap_value")``."""

    def get(self, key: NestedKey, *args, **kwargs):
        value = super().get(key, *args, **kwargs)
        return value.data if key == BOOTSTRAP_VALUE and isinstance(value, NonTensorData) else value


@dataclass(frozen=True)
class EnvFactory:
    """``EnvCls(**env_kwargs)``, one env per call as rlpyt builds its envs, wrapped in
    ``RandomStart`` when ``max_steps`` > 0 (a GymEnv's gymnasium env is wrapped inside it);
    a picklable zero-argument env source (envs/sources.py ``make_env`` batches the envs)."""

    env_cls: Callable[..., Any]
    env_kwargs: dict
    max_steps: int = 0

    def __call__(self):
        env = self.env_cls(**self.env_kwargs)
        if not self.max_steps:
            return env
        if isinstance(env, GymEnv):
            return env.wrapped(functools.partial(RandomStart, max_steps=self.max_steps))
        return RandomStart(env, self.max_steps)


class BaseSampler:
    """rlpyt's BaseSampler: ``batch_B`` envs, ``batch_T`` steps each per ``obtain_samples``.

    Args (the seed's names, kept for this compatibility front):
        EnvCls: class or factory called as ``EnvCls(**env_kwargs)`` once per env, returning
            one env: a gymnasium.Env or an unbatched GymEnv (the envs are then batched).
        env_kwargs: its keyword arguments (picklable for worker processes).
        batch_T: steps per env per batch.
        batch_B: envs.
        CollectorCls: one of rlcollect.rlpyt's collector classes (where the agent runs,
            what a finished env does: rlpyt/sampler_collectors.py).
        max_decorrelation_steps: each env's episodes start after 0..this many random steps
            (drawn from its seed), at its first and every seeded reset.
        TrajInfoCls: TrajectoryInfo or a subclass (built from TrajectoryInfo's fields).
        eval_n_envs: envs of ``evaluate_agent`` (0: no evaluation; it returns []).
        eval_CollectorCls: None (rlcollect's EvalCollector) or a subclass of it.
        eval_env_kwargs: ``EnvCls`` keyword arguments of the eval envs (None: env_kwargs).
        eval_max_steps: step budget of one evaluation, over all eval envs (None: none).
        eval_max_trajectories: stop an evaluation once this many episodes completed.
        collector_kwargs: options passed to the collector underneath (rlcollect's names,
            e.g. ``start_method``, ``exploration_type``, ``max_frames_per_traj``).
        info_keys: entries of the envs' info dicts stored in the samples as ``("next", key)``
            (GymEnv's ``info_keys``: names, or names to dtypes; each keeps the dtype of its
            first value, 0 / False where an env did not report it). Not the seed's name:
            rlpyt stores every ``env_info`` entry.
    """

    default_collector: type[SamplerCollector]
    agent_in_workers: bool  # the collector classes it takes: Cpu* (True) or Gpu* (False)
    extra_example_keys: tuple = ()  # int64 entries its collector's batches add to a Collector's

    def __init__(self, EnvCls, env_kwargs: dict | None, batch_T: int, batch_B: int,  # noqa: N803 (the seed's names)
                 CollectorCls: type[SamplerCollector] | None = None, max_decorrelation_steps: int = 100,  # noqa: N803
                 TrajInfoCls: type[TrajectoryInfo] = TrajectoryInfo, eval_n_envs: int = 0,  # noqa: N803
                 eval_CollectorCls: type[EvalCollector] | None = None, eval_env_kwargs: dict | None = None,  # noqa: N803
                 eval_max_steps: int | None = None, eval_max_trajectories: int | None = None,
                 collector_kwargs: dict | None = None, info_keys: Sequence[str] | Mapping[str, Any] = ()) -> None:
        if not callable(EnvCls):
            raise TypeError(f"EnvCls must be a class or factory returning a gymnasium.Env or a GymEnv, got {EnvCls!r}")
        self.EnvCls, self.env_kwargs = EnvCls, dict(env_kwargs or {})
        self.batch_T, self.batch_B = check_positive_int("batch_T", batch_T), check_positive_int("batch_B", batch_B)
        self.CollectorCls = self._check_collector_class(CollectorCls or self.default_collector)
        self.max_decorrelation_steps = check_non_negative_int("max_decorrelation_steps", max_decorrelation_steps)
        if not (isinstance(TrajInfoCls, type) and issubclass(TrajInfoCls, TrajectoryInfo)):
            raise TypeError(f"TrajInfoCls must be rlcollect.TrajectoryInfo or a subclass, got {TrajInfoCls!r}")
        self.TrajInfoCls = TrajInfoCls
        self.eval_n_envs = check_non_negative_int("eval_n_envs", eval_n_envs)
        if eval_CollectorCls is not None and not (isinstance(eval_CollectorCls, type)
                                                  and issubclass(eval_CollectorCls, EvalCollector)):
            raise TypeError(f"eval_CollectorCls must be None or a subclass of rlcollect.EvalCollector, got "
                            f"{eval_CollectorCls!r}")
        self.eval_CollectorCls = eval_CollectorCls or EvalCollector
        self.eval_env_kwargs = dict(self.env_kwargs if eval_env_kwargs is None else eval_env_kwargs)
        self.eval_max_steps = check_positive_int("eval_max_steps", eval_max_steps, optional=True)
        self.eval_max_trajectories = check_positive_int("eval_max_trajectories", eval_max_trajectories, optional=True)
        self.collector_kwargs = dict(collector_kwargs or {})
        self.info_keys = dict(info_keys) if isinstance(info_keys, Mapping) else list(info_keys)
        self.collector = None
        self.eval_collector: EvalCollector | None = None
        self._shut_down = False

    def _check_collector_class(self, cls) -> type[SamplerCollector]:
        name = type(self).__name__
        if not (isinstance(cls, type) and issubclass(cls, SamplerCollector)):
            raise TypeError(f"{name}: CollectorCls must be one of rlcollect.rlpyt's CpuResetCollector, "
                            f"CpuWaitResetCollector, GpuResetCollector, GpuWaitResetCollector; got {cls!r}")
        if cls.agent_in_workers != self.agent_in_workers:
            wanted = "Cpu" if self.agent_in_workers else "Gpu"
            where = "beside its envs" if self.agent_in_workers else "in this process, its envs in workers"
            raise TypeError(f"{name} runs the agent {where}: it takes {wanted}ResetCollector or "
                            f"{wanted}WaitResetCollector, not {cls.__name__}")
        return cls

    # ------------------------------------------------------------------ rlpyt's interface
    def initialize(self, agent, affinity: dict | None = None, seed: int | None = None, bootstrap_value: bool = False,
                   traj_info_kwargs: dict | None = None, rank: int = 0, world_size: int = 1) -> TensorDictBase:
        """Build the envs and the collector (worker processes start here); returns one
        step's entries, zeros, to size a replay buffer.

        ``agent``: a policy module as the collectors take (TensorDict -> TensorDict writing
        "action"); with ``bootstrap_value`` it must also give V (``state_value(td)``, or a
        "state_value" entry). ``affinity``: rlpyt's dict (``workers_cpus``: one CPU list
        per worker, whose count sets the workers; ``worker_torch_threads``;
        ``master_cpus`` / ``master_torch_threads`` for this process; ``cuda_idx``: the GPU
        of the agent in this process; ``set_affinity``: False to pin nothing).
        ``traj_info_kwargs``: ``discount`` (or ``gamma``), ``sum_keys``, ``last_keys``
        (EpisodeTracker). ``rank`` / ``world_size``: this trainer among several; its envs
        are seeded after the lower ranks' ``batch_B`` envs each.
        """
        if self.collector is not None or self._shut_down:
            raise RuntimeError(f"{type(self).__name__}.initialize() was already called")
        check_non_negative_int("rank", rank)
        if check_positive_int("world_size", world_size) <= rank:
            raise ValueError(f"rank={rank} must be less than world_size={world_size}")
        affinity = self._check_affinity(affinity)
        self.agent, self.bootstrap_value, self.rank, self.world_size = agent, bootstrap_value, rank, world_size
        self._tracker = EpisodeTracker(**self._tracker_kwargs(traj_info_kwargs))
        first_seed = env_seed(seed, rank * self.batch_B)
        self._apply_master_affinity(affinity)
        if bootstrap_value:
            self._check_value_head(agent)
        examples = self._examples(agent)
        if first_seed is not None:
            torch.manual_seed(first_seed)  # the agent's sampling in this process (a worker seeds its own)
        factory = EnvFactory(self.EnvCls, self.env_kwargs, self.max_decorrelation_steps)
        options = {"reset_policy": self.CollectorCls.reset_policy, **self.collector_kwargs}
        self.collector = self._build_collector(agent, factory, first_seed, affinity, options)
        self._batches = iter(self.collector)
        if self.eval_n_envs:
            eval_env = make_env(EnvFactory(self.EnvCls, self.eval_env_kwargs), self.eval_n_envs,
                                seed=env_seed(eval_seed(seed), rank * self.eval_n_envs))
            self.eval_collector = self.eval_CollectorCls(
                eval_env, agent, eval_n_envs=self.eval_n_envs, eval_max_steps=self.eval_max_steps,
                eval_max_trajectories=self.eval_max_trajectories, gamma=self._tracker.gamma)
        return examples

    def obtain_samples(self, itr: int) -> tuple[TensorDictBase, list[TrajectoryInfo]]:
        """One batch: ``(samples, traj_infos)``. ``samples`` is ``[batch_T, batch_B]``, a
        transposed view of the collector's ``[batch_B, batch_T]`` batch; with
        bootstrap_value, ``samples["bootstrap_value"]`` is the agent's V of each env's
        observation after the batch, ``[batch_B]``. ``traj_infos``: the episodes that ended
        in this batch (counted across batches; padding of wait-reset collectors left out)."""
        self._check_running("obtain_samples")
        batch = next(self._batches).reshape(self.batch_B, self.batch_T)
        traj_infos = self._as_traj_infos(self._tracker.infos(batch))
        transposed = batch.transpose(0, 1)
        samples = Samples(dict(transposed.items()), batch_size=transposed.batch_size, device=transposed.device)
        if self.bootstrap_value:
            samples.set_non_tensor(BOOTSTRAP_VALUE, self._value_after(batch))
        return samples, traj_infos

    def evaluate_agent(self, itr: int) -> list[TrajectoryInfo]:
        """Evaluation episodes of the agent (deterministic actions) on the eval envs:
        those completed within eval_max_steps / eval_max_trajectories (an episode cut by
        the budget is not counted); [] with eval_n_envs=0."""
        self._check_running("evaluate_agent")
        if self.eval_collector is None:
            return []
        return self._as_traj_infos(self.eval_collector.evaluate().trajectories)

    def shutdown(self) -> None:
        """Stop the workers and close the envs; idempotent."""
        self._shut_down = True
        if self.collector is not None:
            self.collector.shutdown()
        if self.eval_collector is not None:
            self.eval_collector.shutdown()

    # ------------------------------------------------------------------ what subclasses build
    def _build_collector(self, agent, factory: EnvFactory, seed: int | None, affinity: dict, options: dict):
        """The collector of ``batch_B`` envs from ``factory`` (env i seeded seed + i),
        ``batch_B * batch_T`` frames per batch."""
        raise NotImplementedError

    def _num_workers(self, affinity: dict, even: bool = False) -> int:
        """len(affinity["workers_cpus"]), else the most workers (at most this machine's CPUs,
        an even number when ``even``) that split batch_B evenly."""
        if "workers_cpus" in affinity:
            count = len(affinity["workers_cpus"])
            if self.batch_B % count or (even and count % 2):
                raise ValueError(f"affinity['workers_cpus'] lists {count} workers: {type(self).__name__} needs a "
                                 f"number{' that is even and' if even else ''} that divides batch_B={self.batch_B}")
            return count
        step = 2 if even else 1
        if self.batch_B % step:
            raise ValueError(f"{type(self).__name__} splits its envs into two alternating groups: batch_B="
                             f"{self.batch_B} must be even")
        cpus = max(os.cpu_count() or 1, step)
        return max(count for count in range(step, min(cpus, self.batch_B) + 1, step) if self.batch_B % count == 0)

    def _env_options(self) -> dict:
        """GymEnv's keyword arguments for the sampler's envs (its ``info_keys``)."""
        return {"info_keys": self.info_keys} if self.info_keys else {}

    @staticmethod
    def _worker_options(affinity: dict) -> dict:
        options = {}
        if "worker_torch_threads" in affinity:
            options["worker_torch_threads"] = affinity["worker_torch_threads"]
        if "workers_cpus" in affinity and affinity.get("set_affinity", True):
            options["worker_cpu_affinity"] = [list(cpus) for cpus in affinity["workers_cpus"]]
        return options

    @staticmethod
    def _agent_device(affinity: dict) -> dict:
        """affinity["cuda_idx"]: the agent's forward on that GPU; the samples stay on the CPU."""
        return {} if affinity.get("cuda_idx") is None else {"policy_device": f"cuda:{affinity['cuda_idx']}"}

    # ------------------------------------------------------------------ helpers
    def _check_running(self, method: str) -> None:
        if self._shut_down:
            raise RuntimeError(f"{type(self).__name__}.{method}(): the sampler was shut down")
        if self.collector is None:
            raise RuntimeError(f"{type(self).__name__}.{method}(): call initialize(agent, ...) first")

    @staticmethod
    def _check_affinity(affinity: dict | None) -> dict:
        return _known_keys(affinity, AFFINITY_KEYS, "affinity keys {} are not read by rlcollect's samplers; they "
                                                    "read {}")

    @staticmethod
    def _apply_master_affinity(affinity: dict) -> None:
        if affinity.get("master_torch_threads") is not None:
            torch.set_num_threads(int(affinity["master_torch_threads"]))
        if affinity.get("master_cpus") is not None and affinity.get("set_affinity", True):
            os.sched_setaffinity(0, affinity["master_cpus"])

    @staticmethod
    def _tracker_kwargs(traj_info_kwargs: dict | None) -> dict:
        kwargs = _known_keys(traj_info_kwargs, sorted(TRAJ_INFO_KEYS), "traj_info_kwargs keys {} are unknown; the "
                                                                      "trajectory info takes {}")
        return {TRAJ_INFO_KEYS[key]: value for key, value in kwargs.items()}

    @staticmethod
    def _check_value_head(agent) -> None:
        if not callable(getattr(agent, "state_value", None)) and not isinstance(agent, torch.nn.Module):
            raise TypeError("bootstrap_value=True needs an agent with state_value(tensordict), or one that writes "
                            f"'state_value'; got {agent!r}")

    def _examples(self, agent) -> TensorDictBase:
        """One step's entries, zeros: a one-env Collector's preallocated batch, built with
        this process's RNG state saved and restored (the samples do not depend on it)."""
        with torch.random.fork_rng(devices=[]):
            env = make_env(EnvFactory(self.EnvCls, self.env_kwargs), 1, **self._env_options())
            probe = Collector(env, agent, frames_per_batch=1, reset_policy=self.CollectorCls.reset_policy)
            try:
                examples = probe.batch[0, 0].clone().zero_()
            finally:
                probe.shutdown()
        for key in self.extra_example_keys:
            examples.set(key, torch.zeros((), dtype=torch.int64))
        return examples

    @torch.no_grad()
    def _value_after(self, batch: TensorDictBase) -> torch.Tensor:
        """V of each env's observation after the batch (its last step's next entries)."""
        last = batch[:, -1].get("next").clone()
        device = policy_param_device(self.agent)
        if device is not None:
            last = last.to(device)
        state_value = getattr(self.agent, "state_value", None)
        if callable(state_value):
            value = state_value(last)
        else:
            value = self.agent(last).get("state_value")
        return value.reshape(self.batch_B)

    def _as_traj_infos(self, infos: list[TrajectoryInfo]) -> list[TrajectoryInfo]:
        if self.TrajInfoCls is TrajectoryInfo:
            return infos
        return [self.TrajInfoCls(**{f.name: getattr(info, f.name) for f in dataclasses.fields(TrajectoryInfo)})
                for info in infos]

    def __enter__(self) -> "BaseSampler":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(batch_T={self.batch_T}, batch_B={self.batch_B}, "
                f"CollectorCls={self.CollectorCls.__name__}, collector={type(self.collector).__name__})")
