"""The one seed rule of rlcollect (docs/collectors.md, "Env sources and seeds").

Every env of a run has a global index: the envs of worker (or Ray actor) ``w`` with ``E``
envs each are ``w * E ... w * E + E - 1``, in worker order. Env ``i`` is seeded with
``seed + i`` at its first reset, whichever collector steps it, so a Collector on a batched
env of P envs, a MultiSyncCollector of W workers x P/W envs and an ActionServerCollector of
the same shape start from the same P episodes. A worker's own RNGs (torch, numpy, random:
its random actions and decorrelation steps) are seeded with the seed of its first env.
Evaluation envs are seeded from ``seed + EVAL_SEED_OFFSET`` so that they never replay a
training env's episodes. A worker replaced after a failure (``max_worker_restarts``) gets
its seeds moved by ``RESTART_SEED_OFFSET`` per restart, so that it does not replay the
episodes its predecessor played.
"""
from __future__ import annotations

from typing import Sequence, Union

EVAL_SEED_OFFSET = 10_000
RESTART_SEED_OFFSET = 1_000_000


Seeds = Union[int, Sequence[int], None]  # a run's seed, or one seed per env (the members of a batched sweep)


def env_seed(seed: Seeds, env_index: int) -> int | None:
    """The seed of the env with global index ``env_index``: ``seed + env_index``, or
    ``seed[env_index]`` when ``seed`` lists one seed per env (None: unseeded)."""
    if seed is None:
        return None
    if isinstance(seed, int):
        return seed + env_index
    return int(seed[env_index])


def member_env_seeds(seeds: Sequence[int], envs_per_member: int) -> list[int]:
    """One seed per env of a batched sweep's env, whose rows ``m * P ... m * P + P - 1``
    are member ``m``'s P envs: each member's envs seeded as its solo run seeds them."""
    return [env_seed(seed, index) for seed in seeds for index in range(envs_per_member)]


def worker_seed(seed: int | None, worker_id: int, envs_per_worker: int) -> int | None:
    """The seed of worker ``worker_id``'s first env, which also seeds the worker's RNGs."""
    return env_seed(seed, worker_id * envs_per_worker)


def eval_seed(seed: int | None) -> int | None:
    """The seed of the first evaluation env."""
    return env_seed(seed, EVAL_SEED_OFFSET)


def restart_seed(seed: int | None, restarts: int) -> int | None:
    """The seed of a worker (or env) that replaced ``restarts`` failed ones, from its
    first seed ``seed``."""
    return None if seed is None else seed + restarts * RESTART_SEED_OFFSET
