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

EVAL_SEED_OFFSET = 10_000
RESTART_SEED_OFFSET = 1_000_000


def env_seed(seed: int | None, env_index: int) -> int | None:
    """The seed of the env with global index ``env_index`` (None: unseeded)."""
    return None if seed is None else seed + env_index


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
