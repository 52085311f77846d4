"""MultiSyncCollector with and without preemptive_threshold on envs of uneven speed.

    .venv/bin/python scripts/bench_preemptive.py [--reps 5] [--batches 40]

Rows (2 workers x 4 envs, fork, a random policy, frames_per_batch 256, one torch thread):
  lognormal  every env's step costs log-normal(median 100 us, sigma 1): heavy-tailed
  slow-1     worker 0's envs step in 100 us, worker 1's in 300 us (one slow machine)
each without preemption and with preemptive_threshold=0.5 (the slow worker stops when the
other is done). Reported: frames/s of the frames collected (the preempted steps are not
counted), medians of interleaved reps.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from rlcollect import GymEnv, MultiSyncCollector
from rlcollect.testing import BusyEnv, LogNormalBusyEnv

WORKLOADS = {
    "lognormal": [functools.partial(GymEnv, functools.partial(LogNormalBusyEnv, 100.0, 1.0), 4, seed=w)
                  for w in range(2)],
    "slow-1": [functools.partial(GymEnv, functools.partial(BusyEnv, cost), 4) for cost in (100.0, 300.0)],
}


def measure(envs, threshold, batches: int) -> float:
    collector = MultiSyncCollector(envs, frames_per_batch=256, preemptive_threshold=threshold, start_method="fork",
                                   total_frames=-1)
    try:
        iterator = iter(collector)
        next(iterator)  # warm
        start, frames = time.perf_counter(), collector.frames
        for _ in range(batches):
            next(iterator)
        return (collector.frames - frames) / (time.perf_counter() - start)
    finally:
        collector.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [(name, threshold) for name in WORKLOADS for threshold in (None, 0.5)]
    results = {row: [] for row in rows}
    for _ in range(args.reps):
        for name, threshold in rows:
            results[(name, threshold)].append(measure(WORKLOADS[name], threshold, args.batches))
    for name in WORKLOADS:
        base, preempted = (statistics.median(results[(name, t)]) for t in (None, 0.5))
        print(f"{name:10s} no preemption {base:9,.0f} frames/s   threshold 0.5 {preempted:9,.0f} frames/s   "
              f"ratio {preempted / base:.2f}x")


if __name__ == "__main__":
    main()
