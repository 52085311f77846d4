"""torchrl rows of scripts/bench_collectors.py, run inside .venv-bench (torchrl 0.14 pins
tensordict<0.15, so it cannot share rlcollect's venv).

Same policy (scripts/bench_policy.py) and same timing helpers as the main script
(imported from it), index-encoded actions:

    gym                 Collector on GymEnv("CartPole-v1")
    serial              Collector on SerialEnv(8, GymEnv)
    multisync           MultiSyncCollector, 2 workers x SerialEnv(4, GymEnv), cat_results="stack"
    multiasync          MultiAsyncCollector, 2 workers x SerialEnv(4, GymEnv)
    multisync-startup   as multisync, timing construction, first batch and shutdown only

(torchrl 0.14 has no ``SyncDataCollector`` / ``MultiSyncDataCollector`` /
``MultiaSyncDataCollector`` any more: ``torchrl.collectors.Collector``,
``MultiSyncCollector`` and ``MultiAsyncCollector`` are their names.) torchrl's
multi-process collectors take their start method from the global multiprocessing
setting (``import torchrl`` sets spawn), so a request's ``start_method`` is set globally,
with force, before the collector is built.

    .venv-bench/bin/python scripts/bench_torchrl_rows.py --row gym --frames 2000
        one measurement (after a warm-up), printed as one JSON line
    .venv-bench/bin/python scripts/bench_torchrl_rows.py --serve
        what bench_collectors.py runs: prints {"versions": ...}, then answers each stdin
        line {"row", "frames", "frames_per_batch", "start_method"} with
        {"measurement": ...} or {"error": ...}
"""
from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import sys
import traceback
from dataclasses import asdict
from typing import TextIO

from bench_collectors import (
    ENV_ID,
    ENVS_PER_WORKER,
    NUM_ENVS,
    NUM_WORKERS,
    Measurement,
    local_versions,
    time_collector,
    time_startup,
)
from bench_policy import SEED, MLPSamplingPolicy, build_mlp, configure_torch

ROWS = ("gym", "serial", "multisync", "multiasync", "multisync-startup")
START_METHODS = ("fork", "spawn", "forkserver")


def make_gym_env():
    from torchrl.envs import GymEnv
    return GymEnv(ENV_ID, categorical_action_encoding=True)


def make_serial_env(num_envs: int, seed: int):
    """SerialEnv(num_envs, GymEnv), seeded; module-level, so spawn workers can unpickle it."""
    from torchrl.envs import SerialEnv
    env = SerialEnv(num_envs, make_gym_env)
    env.set_seed(seed)
    return env


def make_env(row: str):
    """The env of a single-process row: GymEnv ("gym") or SerialEnv(8, GymEnv) ("serial")."""
    if row == "serial":
        return make_serial_env(NUM_ENVS, SEED)
    env = make_gym_env()
    env.set_seed(SEED)
    return env


def make_collector_factory(row: str, frames_per_batch: int, policy: MLPSamplingPolicy, start_method: str | None):
    """``total_frames -> collector`` for ``row``."""
    from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector

    if row in ("gym", "serial"):
        # auto_register_policy_transforms=False: 0.14's behaviour (the env is left as
        # built) without its FutureWarning.
        return lambda total_frames: Collector(lambda: make_env(row), policy, frames_per_batch=frames_per_batch,
                                              total_frames=total_frames, auto_register_policy_transforms=False)
    if start_method not in START_METHODS:
        raise ValueError(f"row {row!r} needs start_method in {START_METHODS}, got {start_method!r}")
    # Worker w's envs get seeds SEED + ENVS_PER_WORKER * w + i, like rlcollect's multi rows.
    env_fns = [functools.partial(make_serial_env, ENVS_PER_WORKER, SEED + ENVS_PER_WORKER * worker_id)
               for worker_id in range(NUM_WORKERS)]
    collector_cls, layout = ((MultiAsyncCollector, {}) if row == "multiasync"
                             else (MultiSyncCollector, {"cat_results": "stack"}))

    def make_collector(total_frames: int):
        mp.set_start_method(start_method, force=True)
        return collector_cls(env_fns, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                             auto_register_policy_transforms=False, **layout)

    return make_collector


def measure(row: str, frames: int, frames_per_batch: int, policy: MLPSamplingPolicy,
            start_method: str | None = None) -> Measurement:
    if row not in ROWS:
        raise ValueError(f"row must be one of {ROWS}, got {row!r}")
    make_collector = make_collector_factory(row.removesuffix("-startup"), frames_per_batch, policy, start_method)
    if row.endswith("-startup"):
        return time_startup(make_collector, frames_per_batch)
    return time_collector(make_collector, frames, frames_per_batch)


def versions() -> dict:
    import torchrl
    return {**local_versions(), "torchrl": torchrl.__version__}


def serve(replies: TextIO, policy: MLPSamplingPolicy) -> None:
    """One JSON request per stdin line, one JSON reply per line on ``replies``."""
    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    reply({"versions": versions()})
    for line in sys.stdin:
        try:
            request = json.loads(line)
            result = measure(request["row"], request["frames"], request["frames_per_batch"], policy,
                             request.get("start_method"))
            reply({"measurement": asdict(result)})
        except Exception as error:  # report to the parent, which raises it
            traceback.print_exc()
            reply({"error": f"{type(error).__name__}: {error}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true",
                        help="answer JSON requests on stdin (used by bench_collectors.py)")
    parser.add_argument("--row", choices=ROWS, default="gym")
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--frames-per-batch", type=int, default=200)
    parser.add_argument("--start-method", choices=START_METHODS, default="fork", help="multi-process rows")
    args = parser.parse_args()
    configure_torch()
    # Replies own stdout; anything torchrl prints goes to stderr.
    replies, sys.stdout = sys.stdout, sys.stderr
    policy = MLPSamplingPolicy(build_mlp())
    if args.serve:
        serve(replies, policy)
        return
    measure(args.row, args.frames, args.frames_per_batch, policy, args.start_method)  # warm-up
    result = measure(args.row, args.frames, args.frames_per_batch, policy, args.start_method)
    replies.write(json.dumps({"row": args.row, "versions": versions(), "measurement": asdict(result)}) + "\n")


if __name__ == "__main__":
    main()
