"""Replay memory for the Atari preset: bytes per transition and sampling speed, plain storage
vs ``dedup_observations=True, frame_stack=4`` (observations stored once, frame by frame).

    .venv/bin/python scripts/bench_replay_memory.py                 # 100k buffers, 7 interleaved reps
    .venv/bin/python scripts/bench_replay_memory.py --quick         # 10k buffers, 3 reps: a smoke run
    .venv/bin/python scripts/bench_replay_memory.py --json out.json

Data: a seeded stream shaped as the Atari preset writes it (conf/env/pong.yaml: uint8 [4, 84, 84]
FrameStackObservation stacks, reset frame repeated at an episode's start, the true final stack
at its end) from 8 envs, collector batches of 256 frames ([8, 32], the DQN defaults), written
with ``extend_batch`` into ndim=1 buffers (the DQN default) with ``("next", "life_lost")``
and ``("collector", "traj_ids")`` as collectors store them. Frames are drawn from a pool of
8192 random 84x84 images, episodes last 400 to 3000 steps. Both buffers get the same stream.

Bytes are counted from the storages' tensors (``storage.nbytes``), not from the process; the
1M figure of the plain storage is 10 x its 100k one (every tensor is per element), that of the
deduplicating one is read from a 1M storage allocated with ``init_from`` (allocated, not
filled; its spares are the default max_size / 16 frames).

Sampling: ``ReplayBuffer.sample(n)`` with a RandomSampler (DQN's), n = 32 and 256, on the
filled buffers; each measurement is ``--samples`` samples, the rows measured in turn (the
order reversed every other rep), ``--reps`` times, after one warm-up, so that drifts of the
machine hit both alike. torch threads 1.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from tensordict import TensorDict

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from rlcollect.buffers import LazyTensorStorage, RandomSampler, ReplayBuffer  # noqa: E402

NUM_ENVS, STEPS_PER_BATCH, STACK, SIDE = 8, 32, 4, 84
POOL = 8192
SEED = 0


class AtariLikeStream:
    """Collector batches ``[NUM_ENVS, STEPS_PER_BATCH]`` of FrameStackObservation-like stacks."""

    def __init__(self, seed: int = SEED) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.pool = torch.randint(0, 256, (POOL, SIDE, SIDE), dtype=torch.uint8, generator=self.generator)
        self.next_traj = 0
        self.envs = [self._reset() for _ in range(NUM_ENVS)]

    def _draw(self, high: int, low: int = 0) -> int:
        return int(torch.randint(low, high, (), generator=self.generator))

    def _reset(self) -> dict:
        frame = self._draw(POOL)
        self.next_traj += 1
        return {"stack": [frame] * STACK, "left": self._draw(3000, 400), "traj": self.next_traj - 1, "init": True}

    def batch(self) -> TensorDict:
        shape = (NUM_ENVS, STEPS_PER_BATCH)
        obs_ids = torch.empty(*shape, STACK, dtype=torch.int64)
        next_ids = torch.empty_like(obs_ids)
        done, is_init, traj = torch.zeros(shape, dtype=torch.bool), torch.zeros(shape, dtype=torch.bool), \
            torch.empty(shape, dtype=torch.int64)
        for e, env in enumerate(self.envs):
            for t in range(STEPS_PER_BATCH):
                obs_ids[e, t] = torch.tensor(env["stack"])
                is_init[e, t], traj[e, t] = env["init"], env["traj"]
                env["stack"] = env["stack"][1:] + [self._draw(POOL)]
                next_ids[e, t] = torch.tensor(env["stack"])
                env["left"] -= 1
                env["init"] = False
                if env["left"] == 0:
                    done[e, t] = True
                    env = self.envs[e] = self._reset()
        return TensorDict({
            "observation": self.pool[obs_ids],
            "action": torch.randint(6, shape, generator=self.generator),
            "is_init": is_init,
            "next": {"observation": self.pool[next_ids], "reward": torch.zeros(shape), "done": done,
                     "terminated": done.clone(), "truncated": torch.zeros(shape, dtype=torch.bool),
                     "life_lost": torch.zeros(shape)},
            "collector": {"traj_ids": traj},
        }, batch_size=shape)


def make_buffer(framed: bool, capacity: int) -> ReplayBuffer:
    options = {"dedup_observations": True, "frame_stack": STACK} if framed else {}
    return ReplayBuffer(LazyTensorStorage(capacity, **options), RandomSampler())


def fill(buffers: dict, capacity: int) -> dict:
    """Write the same stream into every buffer; returns seconds spent in extend_batch per buffer."""
    stream, spent = AtariLikeStream(), {name: 0.0 for name in buffers}
    for _ in range(-(-capacity // (NUM_ENVS * STEPS_PER_BATCH))):
        batch = stream.batch()
        for name, buffer in buffers.items():
            start = time.perf_counter()
            buffer.extend_batch(batch)
            spent[name] += time.perf_counter() - start
    return spent


def check_equal(buffers: dict, draws: int = 20) -> None:
    """The two buffers' samples are the same (same seed, same elements, same bits)."""
    for draw in range(draws):
        samples = []
        for buffer in buffers.values():
            torch.manual_seed(draw)
            samples.append(buffer.sample(32))
        first, second = samples
        for key in first.keys(include_nested=True, leaves_only=True):
            assert torch.equal(first[key], second[key]), key


def measure(buffer: ReplayBuffer, batch_size: int, samples: int) -> float:
    start = time.perf_counter()
    for _ in range(samples):
        buffer.sample(batch_size)
    return samples * batch_size / (time.perf_counter() - start)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=100_000, help="transitions per buffer (default 100,000)")
    parser.add_argument("--samples", type=int, default=200, help="samples per measurement (default 200)")
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions (default 7)")
    parser.add_argument("--quick", action="store_true", help="10,000 transitions, 50 samples, 3 reps")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.capacity, args.samples, args.reps = 10_000, 50, 3
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    buffers = {"plain": make_buffer(False, args.capacity), "dedup": make_buffer(True, args.capacity)}
    print(f"filling two buffers of {args.capacity:,} transitions ...", file=sys.stderr, flush=True)
    extend_seconds = fill(buffers, args.capacity)
    check_equal(buffers)
    storages = {name: buffer.storage for name, buffer in buffers.items()}
    in_use, spare_size = storages["dedup"].spares_in_use()["observation"]
    million = LazyTensorStorage(1_000_000, dedup_observations=True, frame_stack=STACK)
    million.init_from(AtariLikeStream().batch().reshape(-1))
    per_transition = {name: storage.nbytes / args.capacity for name, storage in storages.items()}
    one_million = {"plain": storages["plain"].nbytes * 1_000_000 / args.capacity, "dedup": million.nbytes}

    rows = {(name, size): [] for name in buffers for size in (32, 256)}
    for (name, size) in rows:  # warm-up
        measure(buffers[name], size, max(1, args.samples // 4))
    for rep in range(args.reps):  # in turn, the order reversed every other rep
        for (name, size), results in (list(rows.items()) if rep % 2 == 0 else list(rows.items())[::-1]):
            results.append(measure(buffers[name], size, args.samples))
        print(f"  rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)

    lines = [
        f"Atari-preset replay (uint8 [4, 84, 84] stacks), {args.capacity:,} transitions, RandomSampler, "
        f"torch threads 1, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}",
        "",
        f"{'storage':<40}{'bytes/transition':>18}{'1M transitions':>17}{'extend tr/s':>14}",
        "-" * 89,
    ]
    names = {"plain": "LazyTensorStorage (before)", "dedup": "dedup_observations, frame_stack=4 (after)"}
    for name in buffers:
        lines.append(f"{names[name]:<40}{per_transition[name]:>18,.0f}{one_million[name] / 1e9:>14.2f} GB"
                     f"{args.capacity / extend_seconds[name]:>14,.0f}")
    lines += [f"spare frames in use after the fill: {in_use:,} of {spare_size:,}", "",
              f"{'sample':<10}{'before tr/s':>14}{'after tr/s':>14}{'after/before':>14}  per-rep range", "-" * 70]
    for size in (32, 256):
        before, after = rows[("plain", size)], rows[("dedup", size)]
        ratios = [a / b for a, b in zip(after, before)]
        lines.append(f"{size:<10}{statistics.median(before):>14,.0f}{statistics.median(after):>14,.0f}"
                     f"{statistics.median(after) / statistics.median(before):>13.2f}x  "
                     f"[{min(ratios):.2f}, {max(ratios):.2f}]")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({
            "capacity": args.capacity, "bytes_per_transition": per_transition, "bytes_1m": one_million,
            "spares_in_use": [in_use, spare_size], "extend_seconds": extend_seconds,
            "sample_transitions_per_s": {f"{name}/{size}": results for (name, size), results in rows.items()},
        }, indent=2))


if __name__ == "__main__":
    main()
