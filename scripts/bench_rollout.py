"""The PPO rollout path: collector batch + RolloutBuffer.add (a copy) vs
Collector.collect(num_steps, rollout=buffer.start_rollout()) (written in place).

    .venv/bin/python scripts/bench_rollout.py [--envs 8] [--steps 32] [--rollouts 200] [--reps 5]

Both rows run PPO's ActorCritic (64x64 tanh MLP) on GymEnv(CartPole-v1, envs), one torch
thread, and time ``--rollouts`` rollouts of envs x steps frames each (collection and the
hand-over to the buffer, no training), rows interleaved rep by rep; medians of frames/s.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlcollect import ActorCritic, Collector, GymEnv, RolloutBuffer


def make(envs: int, steps: int):
    env = GymEnv("CartPole-v1", envs, seed=0)
    torch.manual_seed(0)
    policy = ActorCritic(env.observation_space, env.action_space)
    buffer = RolloutBuffer(envs, steps, 4)
    return Collector(env, policy, frames_per_batch=envs * steps), buffer


def batch_then_add(envs: int, steps: int, rollouts: int) -> float:
    collector, buffer = make(envs, steps)
    batches = iter(collector)
    start = time.perf_counter()
    for _ in range(rollouts):
        buffer.add(next(batches))
        buffer.get(flatten=False)
    return envs * steps * rollouts / (time.perf_counter() - start)


def collect_into_rollout(envs: int, steps: int, rollouts: int) -> float:
    collector, buffer = make(envs, steps)
    start = time.perf_counter()
    for _ in range(rollouts):
        buffer.add(collector.collect(num_steps=steps, rollout=buffer.start_rollout()))
        buffer.get(flatten=False)
    return envs * steps * rollouts / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {"batch + RolloutBuffer.add (copy)": batch_then_add, "collect(rollout=...) (in place)": collect_into_rollout}
    results = {name: [] for name in rows}
    for row in rows.values():  # warm-up
        row(args.envs, args.steps, 10)
    for _ in range(args.reps):
        for name, row in rows.items():
            results[name].append(row(args.envs, args.steps, args.rollouts))
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, values in results.items():
        print(f"{name:36s} {medians[name]:10,.0f} frames/s  (reps: {', '.join(f'{v:,.0f}' for v in values)})")
    first, second = medians.values()
    print(f"ratio in place / copy: {second / first:.3f}x")


if __name__ == "__main__":
    main()
