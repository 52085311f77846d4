"""Env sources: what every collector accepts where it needs envs.

A gymnasium id, a GymEnv (or any StagedEnv), or a zero-argument callable returning a
gymnasium.Env or a GymEnv. ``make_env`` turns one into a StagedEnv; collectors that build
envs in worker processes send the source itself (it must then be picklable). A callable
that returns one env, a gymnasium.Env or an unbatched GymEnv, is called once per env.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

import gymnasium as gym

from rlcollect.envs.gym_env import GymEnv
from rlcollect.envs.staging import StagedEnv
from rlcollect.envs.torch_cartpole import TorchCartPole
from rlcollect.errors import ConfigError
from rlcollect.seeding import env_seed
from rlcollect.validation import check_positive_int

EnvSource = Union[str, StagedEnv, Callable[[], Any]]
TORCH_ENVS = {"CartPole-v1": TorchCartPole}  # gymnasium id -> the torch env of the same task (backend "torch")


def make_env(source: EnvSource, num_envs: int | None = None, *, seed: int | None = None, **env_kwargs) -> StagedEnv:
    """The StagedEnv ``source`` stands for (the one env-source rule every collector
    follows): a GymEnv/StagedEnv as is; a gymnasium VectorEnv stepped as it is; a gymnasium
    id or a callable returning a gymnasium.Env as ``GymEnv(source, num_envs, seed=seed, **env_kwargs)``
    (an id with ``backend="torch"``: its torch env, ``make_torch_env``);
    a callable returning a single GymEnv (``num_envs=None``), where ``num_envs`` is given,
    called once per env and the envs batched (rlpyt's env factories build one env per call);
    a callable returning any other GymEnv, what it returns (seeded with ``seed`` if given;
    it must then hold ``num_envs`` envs, when given)."""
    if isinstance(source, StagedEnv):
        return _as_is(source, num_envs, seed, env_kwargs)
    if isinstance(source, gym.vector.VectorEnv):  # stepped as it is (its autoreset mode: envs/backends.py)
        return GymEnv(source, num_envs, seed=seed, **env_kwargs)
    if isinstance(source, str) and env_kwargs.get("backend") == "torch":
        return make_torch_env(source, num_envs, seed=seed, **env_kwargs)
    if isinstance(source, str):
        return GymEnv(source, num_envs, seed=seed, **env_kwargs)
    if not callable(source):
        raise TypeError(f"an env source must be a gymnasium id, a GymEnv, or a zero-argument callable returning a "
                        f"gymnasium.Env or a GymEnv; got {type(source).__name__}")
    first = source()
    if isinstance(first, GymEnv) and first.num_envs is None and num_envs is not None:
        return _one_per_call(source, first, num_envs, seed, env_kwargs)
    if isinstance(first, StagedEnv):
        return _as_is(first, num_envs, seed, env_kwargs)
    if not isinstance(first, gym.Env):
        raise TypeError(f"env source {source!r} returned {type(first).__name__}, not a gymnasium.Env or a GymEnv")
    pending = [first]  # the env just built is the first sub-env

    def factory() -> gym.Env:
        return pending.pop() if pending else source()

    return GymEnv(factory, num_envs, seed=seed, **env_kwargs)


def make_torch_env(env_id: str, num_envs: int | None, *, seed: int | None = None, backend: str = "torch",
                   max_episode_steps: int | None = None, **unsupported) -> StagedEnv:
    """The torch-native env rlcollect ships for the gymnasium task ``env_id`` (backend
    "torch": ``TORCH_ENVS``), ``num_envs`` of them stepped as tensors."""
    if env_id not in TORCH_ENVS:
        raise ValueError(f"backend='torch': rlcollect has no torch env for {env_id!r}; it has "
                         f"{', '.join(sorted(TORCH_ENVS))}")
    if unsupported:
        raise TypeError(f"backend='torch' takes no {sorted(unsupported)}: those apply to gymnasium envs")
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    return TORCH_ENVS[env_id](num_envs or 1, seed=seed, **kwargs)


def _one_per_call(source: Callable[[], Any], first: GymEnv, num_envs: int, seed, env_kwargs) -> GymEnv:
    """``num_envs`` envs from a callable that returned the single GymEnv ``first``, called
    once per env as rlpyt calls its env factories: ``first`` and num_envs - 1 more, batched
    in order (``GymEnv.from_envs``), then seeded as a built env is (``_as_is``)."""
    envs = [first]
    try:
        check_positive_int("num_envs", num_envs)
        _no_env_kwargs(first, env_kwargs)  # said before more envs are built
        envs += [source() for _ in range(num_envs - 1)]
        batched = GymEnv.from_envs(envs)
    except BaseException:
        for env in envs:
            if isinstance(env, GymEnv):
                env.close()
        raise
    return _as_is(batched, num_envs, seed, {})


def _as_is(env: StagedEnv, num_envs, seed, env_kwargs) -> StagedEnv:
    """A built env: ``seed`` is applied with set_seed (sub-env i gets seed + i at its next
    reset, as GymEnv's constructor does); its size and make kwargs are what they are."""
    _no_env_kwargs(env, env_kwargs)
    if num_envs == 1 and env.num_envs is None and callable(getattr(env, "as_batch", None)):
        env = env.as_batch()  # a single env, where a batch of one is asked for
    if num_envs is not None and env.num_envs != num_envs:
        raise ConfigError(f"the env source built {env!r}, expected num_envs={num_envs}")
    if seed is not None:
        env.set_seed(seed)
    return env


def _no_env_kwargs(env: StagedEnv, env_kwargs: dict) -> None:
    if env_kwargs:
        raise TypeError(f"env kwargs {sorted(env_kwargs)} apply to a gymnasium id or a callable returning a "
                        f"gymnasium.Env, not to an env already built ({env!r})")


@dataclass(frozen=True)
class EnvSpec:
    """A picklable recipe for one worker's env: ``make_env(source, num_envs, seed=seed,
    **env_kwargs)`` when called (in the worker process)."""

    source: Any
    num_envs: int | None = None
    seed: int | None = None
    env_kwargs: dict = field(default_factory=dict)

    def __call__(self) -> StagedEnv:
        return make_env(self.source, self.num_envs, seed=self.seed, **self.env_kwargs)

    @property
    def is_built(self) -> bool:
        """The source is an env already built (sent to the worker as it is)."""
        return isinstance(self.source, StagedEnv)


def worker_env_specs(create_env_fn, num_workers: int | None, envs_per_worker: int | None = None,
                     seed: int | None = None, env_kwargs: dict | None = None) -> list[EnvSpec]:
    """One EnvSpec per worker.

    ``create_env_fn`` is one env source for every worker (a gymnasium id, or a zero-argument
    callable returning a gymnasium.Env or a GymEnv): worker w then builds ``envs_per_worker``
    envs seeded from ``env_seed(seed, w * envs_per_worker)`` (rlcollect/seeding.py); or a
    list with one source per worker (then ``num_workers`` is its length, and seeds and sizes
    are each source's own).
    """
    env_kwargs = dict(env_kwargs or {})
    if isinstance(create_env_fn, (list, tuple)):
        if not create_env_fn:
            raise TypeError("create_env_fn is an empty list: give one env source per worker, or one for all")
        if num_workers is not None and num_workers != len(create_env_fn):
            raise ValueError(f"num_workers={num_workers} but create_env_fn lists {len(create_env_fn)} env sources: "
                             "give one per worker, or one source for all")
        if envs_per_worker is not None or seed is not None or env_kwargs:
            raise TypeError("envs_per_worker, seed and env_kwargs apply to one env source shared by the workers, "
                            "not to a list of per-worker sources")
        return [EnvSpec(source) for source in create_env_fn]
    if isinstance(create_env_fn, StagedEnv):
        raise TypeError(f"one built env ({create_env_fn!r}) cannot serve several workers: give a gymnasium id or a "
                        "zero-argument callable (each worker builds its own), or a list of one env per worker")
    if not isinstance(create_env_fn, str) and not callable(create_env_fn):
        raise TypeError(f"create_env_fn must be a gymnasium id, a zero-argument callable returning a gymnasium.Env "
                        f"or a GymEnv, or a list of them (one per worker); got {type(create_env_fn).__name__}")
    if num_workers is None:
        raise TypeError("num_workers is required when create_env_fn is one env source for all workers")
    check_positive_int("num_workers", num_workers)
    check_positive_int("envs_per_worker", envs_per_worker, optional=True)
    per_worker = envs_per_worker or 1
    return [EnvSpec(create_env_fn, envs_per_worker, env_seed(seed, worker * per_worker), env_kwargs)
            for worker in range(num_workers)]
