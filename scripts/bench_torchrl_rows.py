"""torchrl rows of scripts/bench_collectors.py, run inside .venv-bench (torchrl 0.14 pins
tensordict<0.15, so it cannot share rlcollect's venv).

Same MLP, same sampling function and same timing helper as the main script (imported
from it); torchrl's ``Collector`` on ``GymEnv("CartPole-v1")`` (row "gym") or on
``SerialEnv(8, ...)`` (row "serial"), index-encoded actions. (torchrl 0.14 has no
``SyncDataCollector`` any more: ``torchrl.collectors.Collector`` is its single-process
collector.)

    .venv-bench/bin/python scripts/bench_torchrl_rows.py --row gym --frames 2000
        one measurement (after a warm-up), printed as one JSON line
    .venv-bench/bin/python scripts/bench_torchrl_rows.py --serve
        what bench_collectors.py runs: prints {"versions": ...}, then answers each stdin
        line {"row", "frames", "frames_per_batch"} with {"measurement": ...} or {"error": ...}
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from dataclasses import asdict
from typing import TextIO

from bench_collectors import (ENV_ID, NUM_ENVS, SEED, Measurement, MLPSamplingPolicy, build_mlp,
                              configure_torch, local_versions, time_collector)

ROWS = ("gym", "serial")


def make_env(row: str):
    from torchrl.envs import GymEnv, SerialEnv

    def single():
        return GymEnv(ENV_ID, categorical_action_encoding=True)

    env = single() if row == "gym" else SerialEnv(NUM_ENVS, single)
    env.set_seed(SEED)
    return env


def measure(row: str, frames: int, frames_per_batch: int, policy: MLPSamplingPolicy) -> Measurement:
    from torchrl.collectors import Collector

    if row not in ROWS:
        raise ValueError(f"row must be one of {ROWS}, got {row!r}")

    def make_collector(total_frames: int):
        # auto_register_policy_transforms=False: 0.14's behaviour (the env is left as
        # built) without its FutureWarning.
        return Collector(lambda: make_env(row), policy, frames_per_batch=frames_per_batch,
                         total_frames=total_frames, auto_register_policy_transforms=False)

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
            result = measure(request["row"], request["frames"], request["frames_per_batch"], policy)
            reply({"measurement": asdict(result)})
        except Exception as error:  # report to the parent, which raises it
            traceback.print_exc()
            reply({"error": f"{type(error).__name__}: {error}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="answer JSON requests on stdin (used by bench_collectors.py)")
    parser.add_argument("--row", choices=ROWS, default="gym")
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--frames-per-batch", type=int, default=200)
    args = parser.parse_args()
    configure_torch()
    # Replies own stdout; anything torchrl prints goes to stderr.
    replies, sys.stdout = sys.stdout, sys.stderr
    policy = MLPSamplingPolicy(build_mlp())
    if args.serve:
        serve(replies, policy)
        return
    measure(args.row, args.frames, args.frames_per_batch, policy)  # warm-up
    result = measure(args.row, args.frames, args.frames_per_batch, policy)
    replies.write(json.dumps({"row": args.row, "versions": versions(), "measurement": asdict(result)}) + "\n")


if __name__ == "__main__":
    main()
