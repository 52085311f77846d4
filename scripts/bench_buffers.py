"""Replay-buffer throughput: rlcollect vs torchrl 0.14, in transitions per second.

    .venv/bin/python scripts/bench_buffers.py                  # 5 interleaved reps
    .venv/bin/python scripts/bench_buffers.py --quick          # smoke run, seconds
    .venv/bin/python scripts/bench_buffers.py --reps 9 --json out.json

Data: one seeded stream of CartPole-like transitions (observation [4] float32, action int64,
is_init, ("next", observation / reward / done / terminated / truncated),
("collector", "traj_ids")), episodes of 10 to 199 steps. Every buffer holds 100,000
transitions and is kept full (filled once before timing; extends keep cycling the stream),
so writes wrap around the ring and the slice sampler sees the write seam.

    op       what one measurement times                                  counted
    extend   extends of 1000 transitions                                 transitions written
    sample   samples of 256 (RandomSampler, or 8 slices of 32)           transitions returned
    mixed    one extend of 1000, then one sample of 256, repeated        written + returned

each on LazyTensorStorage and LazyMemmapStorage, with RandomSampler and SliceSampler
(slice_len=32, trajectories from ("collector", "traj_ids"), strict_length=False, so a
slice sample may return fewer than 256 rows: both frameworks are credited with what they
return). "sample" reads a buffer that does not change during the measurement, "mixed" one
that changes before every sample, so a cache of trajectory boundaries never helps there.

torchrl: ``TensorDictReplayBuffer`` with its ``LazyTensorStorage`` / ``LazyMemmapStorage``
and ``RandomSampler`` / ``SliceSampler(slice_len=32, traj_key=..., strict_length=False,
cache_values=True)`` (0.14's cache is dropped whenever the storage changes, like
rlcollect's). Its flags get torchrl's own trailing singleton dim (``[N, 1]``), since its
SliceSampler broadcasts a scalar ``("next", "done")`` into ``[n, n]``. torchrl 0.14 needs
tensordict<0.15, so it runs in .venv-bench through scripts/bench_buffers_torchrl.py (JSON
lines over stdin/stdout), interleaved with the in-process rlcollect rows; without
.venv-bench those rows are skipped.

Every row is warmed up once, then the rows are measured in turn, ``--reps`` times, so slow
drifts of the machine hit every row alike. Ratios are of median transitions/s; the bracket
is the range of the per-rep ratios of the two rows measured side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tensordict import TensorDict

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_PYTHON = REPO_ROOT / ".venv-bench" / "bin" / "python"
TORCHRL_WORKER = Path(__file__).resolve().with_name("bench_buffers_torchrl.py")
CAPACITY = 100_000
EXTEND_SIZE = 1000
SAMPLE_SIZE = 256
SLICE_LEN = 32
STREAM_STEPS = 2 * CAPACITY
TRAJ_KEY = ("collector", "traj_ids")
SEED = 0
TARGET_RATIO = 1.0
OPS = ("extend", "sample", "mixed")
SAMPLERS = ("random", "slice")
STORAGES = ("tensor", "memmap")


# ---------------------------------------------------------------------- data
def make_transitions(num_steps: int, seed: int = SEED, flag_dims: tuple[int, ...] = ()) -> TensorDict:
    """A seeded stream of CartPole-like transitions ``[num_steps]``; ``flag_dims=(1,)`` gives
    reward and the bool flags torchrl's trailing singleton dim."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(10, 200, (num_steps // 10 + 1,), generator=generator)
    traj_ids = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)[:num_steps]
    new_traj = torch.ones(num_steps, dtype=torch.bool)
    new_traj[1:] = traj_ids[1:] != traj_ids[:-1]
    last_step = torch.ones(num_steps, dtype=torch.bool)
    last_step[:-1] = new_traj[1:]
    observation = torch.randn(num_steps + 1, 4, generator=generator)

    def flag(values: torch.Tensor) -> torch.Tensor:
        return values.reshape(num_steps, *flag_dims).clone()

    return TensorDict({
        "observation": observation[:-1],
        "action": torch.randint(2, (num_steps,), generator=generator),
        "is_init": flag(new_traj),
        "next": {
            "observation": observation[1:],
            "reward": flag(torch.ones(num_steps)),
            "done": flag(last_step),
            "terminated": flag(last_step),
            "truncated": flag(torch.zeros(num_steps, dtype=torch.bool)),
        },
        "collector": {"traj_ids": traj_ids},
    }, batch_size=[num_steps])


# ---------------------------------------------------------------------- one buffer, measured
@dataclass(frozen=True)
class Case:
    op: str
    sampler: str
    storage: str

    @property
    def key(self) -> str:
        return f"{self.op}/{self.sampler}/{self.storage}"

    @classmethod
    def from_key(cls, key: str) -> "Case":
        op, sampler, storage = key.split("/")
        return cls(op, sampler, storage)


class BufferRunner:
    """A full buffer and the timed loops of one case; ``buffer`` has extend(td) and sample()."""

    def __init__(self, buffer, stream: TensorDict) -> None:
        self.buffer = buffer
        self.chunks = [stream[start:start + EXTEND_SIZE] for start in range(0, stream.shape[0], EXTEND_SIZE)]
        self.next_chunk = 0
        for _ in range(CAPACITY // EXTEND_SIZE):
            self._extend()

    def _extend(self) -> None:
        self.buffer.extend(self.chunks[self.next_chunk])
        self.next_chunk = (self.next_chunk + 1) % len(self.chunks)

    def measure(self, op: str, count: int) -> float:
        """Transitions per second over ``count`` repetitions of ``op``."""
        moved = 0
        if op == "extend":
            start = time.perf_counter()
            for _ in range(count):
                self._extend()
            elapsed = time.perf_counter() - start
            moved = count * EXTEND_SIZE
        elif op == "sample":
            start = time.perf_counter()
            for _ in range(count):
                moved += self.buffer.sample().shape[0]
            elapsed = time.perf_counter() - start
        elif op == "mixed":
            start = time.perf_counter()
            for _ in range(count):
                self._extend()
                moved += EXTEND_SIZE + self.buffer.sample().shape[0]
            elapsed = time.perf_counter() - start
        else:
            raise ValueError(f"op must be one of {OPS}, got {op!r}")
        return moved / elapsed


def make_rlcollect_buffer(case: Case, scratch_dir: str):
    from rlcollect.buffers import LazyMemmapStorage, LazyTensorStorage, RandomSampler, ReplayBuffer, SliceSampler

    storage = (LazyTensorStorage(CAPACITY) if case.storage == "tensor"
               else LazyMemmapStorage(CAPACITY, scratch_dir=Path(scratch_dir) / "rb"))
    sampler = RandomSampler() if case.sampler == "random" else SliceSampler(slice_len=SLICE_LEN, traj_key=TRAJ_KEY)
    return ReplayBuffer(storage, sampler, batch_size=SAMPLE_SIZE)


def configure_torch() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(SEED)


def local_versions() -> dict:
    import tensordict
    return {"python": platform.python_version(), "torch": torch.__version__,
            "tensordict": tensordict.__version__, "numpy": np.__version__}


# ---------------------------------------------------------------------- rows
@dataclass(frozen=True)
class Settings:
    extends: int  # per "extend" measurement
    samples: int  # per "sample" measurement
    mixed: int  # extend + sample pairs per "mixed" measurement
    reps: int

    def count(self, op: str) -> int:
        return {"extend": self.extends, "sample": self.samples, "mixed": self.mixed}[op]


@dataclass
class Row:
    case: Case
    framework: str  # "rlcollect" | "torchrl"
    measure: Callable[[int], float]
    results: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.framework}:{self.case.key}"


class TorchrlWorker:
    """A bench_buffers_torchrl.py process in .venv-bench, asked one measurement at a time."""

    def __init__(self, python: Path) -> None:
        self.process = subprocess.Popen([str(python), str(TORCHRL_WORKER), "--serve"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        self.versions = self._read()["versions"]

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"torchrl worker exited (code {self.process.wait()}); see its stderr above")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"torchrl worker: {reply['error']}")
        return reply

    def measure(self, case: Case, count: int) -> float:
        self.process.stdin.write(json.dumps({"case": case.key, "count": count}) + "\n")
        self.process.stdin.flush()
        return self._read()["transitions_per_s"]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def build_rows(cases: list[Case], worker: TorchrlWorker | None, scratch: str) -> list[Row]:
    stream = make_transitions(STREAM_STEPS)
    rows = []
    for case in cases:
        runner = BufferRunner(make_rlcollect_buffer(case, tempfile.mkdtemp(dir=scratch)), stream)
        rows.append(Row(case, "rlcollect", lambda count, runner=runner, op=case.op: runner.measure(op, count)))
        if worker is not None:
            rows.append(Row(case, "torchrl", lambda count, case=case: worker.measure(case, count)))
    return rows


def run_rows(rows: list[Row], settings: Settings) -> None:
    """Warm every row up once, then measure them in turn, ``settings.reps`` times."""
    for row in rows:
        row.measure(max(1, settings.count(row.case.op) // 4))
    for rep in range(settings.reps):
        for row in rows:
            row.results.append(row.measure(settings.count(row.case.op)))
        print(f"  rep {rep + 1}/{settings.reps} done", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- report
def format_report(rows: list[Row], header: list[str], skipped: str | None) -> str:
    lines = [*header, ""]
    lines.append(f"{'framework':<11}{'op':<8}{'sampler':<9}{'storage':<9}{'median tr/s':>14}{'min tr/s':>13}"
                 f"{'max tr/s':>13}")
    lines.append("-" * 77)
    for row in rows:
        lines.append(f"{row.framework:<11}{row.case.op:<8}{row.case.sampler:<9}{row.case.storage:<9}"
                     f"{statistics.median(row.results):>14,.0f}{min(row.results):>13,.0f}{max(row.results):>13,.0f}")
    if skipped:
        lines += ["", skipped]
    by_key = {row.key: row for row in rows}
    pairs = [(by_key[f"rlcollect:{row.case.key}"], row) for row in rows if row.framework == "torchrl"]
    if pairs:
        lines += ["", f"{'rlcollect / torchrl':<28}{'median':>8}  {'per-rep range':<16}target"]
        lines.append("-" * 70)
    for ours, theirs in pairs:
        ratio = statistics.median(ours.results) / statistics.median(theirs.results)
        per_rep = [a / b for a, b in zip(ours.results, theirs.results)]
        verdict = f">= {TARGET_RATIO:.1f}x: {'met' if ratio >= TARGET_RATIO else 'NOT met'}"
        lines.append(f"{ours.case.key:<28}{ratio:>7.2f}x  {f'[{min(per_rep):.2f}, {max(per_rep):.2f}]':<16}{verdict}")
    return "\n".join(lines)


def report_header(settings: Settings, machine: dict) -> list[str]:
    return [
        f"replay buffers: capacity {CAPACITY:,} (kept full), extends of {EXTEND_SIZE}, samples of {SAMPLE_SIZE} "
        f"(slice: {SAMPLE_SIZE // SLICE_LEN} x {SLICE_LEN}, strict_length=False), torch threads 1",
        f"per measurement: {settings.extends} extends | {settings.samples} samples | {settings.mixed} extend+sample; "
        f"{settings.reps} interleaved reps after 1 warm-up; tr/s = transitions per second "
        "(mixed: written + sampled)",
        f"{machine['cpus']} cpus, 1-min load average {machine['load_before']:.2f} before, "
        f"{machine['load_after']:.2f} after (other processes skew every row; the interleaving spreads that "
        "over all rows)",
        "versions: " + "; ".join(f"{where}: " + ", ".join(f"{k} {v}" for k, v in found.items())
                                 for where, found in machine["versions"].items()),
    ]


def to_json(rows: list[Row], settings: Settings, machine: dict) -> dict:
    return {
        "settings": asdict(settings),
        "machine": machine,
        "rows": {row.key: {"transitions_per_s": row.results, "median": statistics.median(row.results)} for row in rows},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extends", type=int, default=200, help="extends per 'extend' measurement (default 200)")
    parser.add_argument("--samples", type=int, default=300, help="samples per 'sample' measurement (default 300)")
    parser.add_argument("--mixed", type=int, default=100,
                        help="extend+sample pairs per 'mixed' measurement (default 100)")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 | 30 | 10 per measurement, 2 reps")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}")
    parser.add_argument("--no-torchrl", action="store_true", help="rlcollect rows only")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.extends, args.samples, args.mixed, args.reps = 20, 30, 10, 2
    unknown = [op for op in args.ops.split(",") if op not in OPS]
    if unknown:
        parser.error(f"--ops: unknown {unknown}; ops are {list(OPS)}")
    if min(args.extends, args.samples, args.mixed, args.reps) < 1:
        parser.error("--extends, --samples, --mixed and --reps must be >= 1")
    return args


def start_torchrl_worker(no_torchrl: bool) -> tuple[TorchrlWorker | None, str | None]:
    if no_torchrl:
        return None, "torchrl rows skipped: --no-torchrl"
    if not BENCH_PYTHON.exists():
        return None, f"torchrl rows skipped: {BENCH_PYTHON} is missing; `make bench-venv` creates it"
    return TorchrlWorker(BENCH_PYTHON), None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_torch()
    settings = Settings(args.extends, args.samples, args.mixed, args.reps)
    cases = [Case(op, sampler, storage) for op in args.ops.split(",") for sampler in SAMPLERS
             for storage in STORAGES if not (op == "extend" and sampler == "slice")]  # extend ignores the sampler
    worker, skipped = start_torchrl_worker(args.no_torchrl)
    machine = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
               "versions": {"main": local_versions(), **({"torchrl_venv": worker.versions} if worker else {})}}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-buffers-") as scratch:
            print(f"filling {len(cases) * (2 if worker else 1)} buffers ...", file=sys.stderr, flush=True)
            rows = build_rows(cases, worker, scratch)
            run_rows(rows, settings)
    finally:
        if worker is not None:
            worker.close()
    machine["load_after"] = os.getloadavg()[0]
    print(format_report(rows, report_header(settings, machine), skipped))
    if args.json:
        args.json.write_text(json.dumps(to_json(rows, settings, machine), indent=2))
        print(f"\nraw numbers written to {args.json}")


if __name__ == "__main__":
    main()
