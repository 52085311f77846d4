"""torchrl rows of scripts/bench_buffers.py, run inside .venv-bench (torchrl 0.14 pins
tensordict<0.15, so it cannot share rlcollect's venv).

Same data stream (with torchrl's ``[N, 1]`` flags), same timed loops (``BufferRunner``,
imported from the main script); torchrl's ``TensorDictReplayBuffer`` on its
``LazyTensorStorage`` / ``LazyMemmapStorage`` with ``RandomSampler`` /
``SliceSampler(slice_len=32, traj_key=("collector", "traj_ids"), strict_length=False,
cache_values=True)``.

    .venv-bench/bin/python scripts/bench_buffers_torchrl.py --case sample/slice/tensor --count 100
        one measurement (after a warm-up), printed as one JSON line
    .venv-bench/bin/python scripts/bench_buffers_torchrl.py --serve
        what bench_buffers.py runs: prints {"versions": ...}, then answers each stdin line
        {"case": "op/sampler/storage", "count": n} with {"transitions_per_s": x} or {"error": ...}
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TextIO

from bench_buffers import (
    CAPACITY,
    SAMPLE_SIZE,
    SLICE_LEN,
    STREAM_STEPS,
    TRAJ_KEY,
    BufferRunner,
    Case,
    configure_torch,
    local_versions,
    make_transitions,
)


def make_torchrl_buffer(case: Case, scratch_dir: str):
    from torchrl.data import LazyMemmapStorage, LazyTensorStorage, RandomSampler, SliceSampler, TensorDictReplayBuffer

    storage = (LazyTensorStorage(CAPACITY) if case.storage == "tensor"
               else LazyMemmapStorage(CAPACITY, scratch_dir=Path(scratch_dir) / "rb"))
    sampler = (RandomSampler() if case.sampler == "random" else
               SliceSampler(slice_len=SLICE_LEN, traj_key=TRAJ_KEY, strict_length=False, cache_values=True))
    return TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=SAMPLE_SIZE)


class Runners:
    """One full buffer per case, built on first use."""

    def __init__(self, scratch: str) -> None:
        self.scratch = scratch
        self.stream = make_transitions(STREAM_STEPS, flag_dims=(1,))
        self.runners: dict[str, BufferRunner] = {}

    def measure(self, key: str, count: int) -> float:
        case = Case.from_key(key)
        if key not in self.runners:
            buffer = make_torchrl_buffer(case, tempfile.mkdtemp(dir=self.scratch))
            self.runners[key] = BufferRunner(buffer, self.stream)
        return self.runners[key].measure(case.op, count)


def versions() -> dict:
    import torchrl
    return {**local_versions(), "torchrl": torchrl.__version__}


def serve(replies: TextIO, runners: Runners) -> None:
    """One JSON request per stdin line, one JSON reply per line on ``replies``."""
    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    reply({"versions": versions()})
    for line in sys.stdin:
        try:
            request = json.loads(line)
            reply({"transitions_per_s": runners.measure(request["case"], request["count"])})
        except Exception as error:  # report to the parent, which raises it
            traceback.print_exc()
            reply({"error": f"{type(error).__name__}: {error}"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="answer JSON requests on stdin (used by bench_buffers.py)")
    parser.add_argument("--case", default="sample/slice/tensor", help="op/sampler/storage")
    parser.add_argument("--count", type=int, default=100)
    args = parser.parse_args()
    configure_torch()
    # Replies own stdout; anything torchrl prints goes to stderr.
    replies, sys.stdout = sys.stdout, sys.stderr
    with tempfile.TemporaryDirectory(prefix="bench-buffers-torchrl-") as scratch:
        runners = Runners(scratch)
        if args.serve:
            serve(replies, runners)
            return
        runners.measure(args.case, args.count)  # warm-up
        result = runners.measure(args.case, args.count)
        replies.write(json.dumps({"case": args.case, "versions": versions(), "transitions_per_s": result}) + "\n")


if __name__ == "__main__":
    main()
