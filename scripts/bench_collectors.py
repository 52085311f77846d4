"""Collector throughput: rlcollect vs a hand-written gymnasium loop vs torchrl.

Run it with ``make bench`` (sets up .venv and .venv-bench first; pass flags with
``make bench ARGS="--quick"``), or directly:

    .venv/bin/python scripts/bench_collectors.py                 # 20,000 frames x 5 reps
    .venv/bin/python scripts/bench_collectors.py --quick         # smoke run, seconds
    .venv/bin/python scripts/bench_collectors.py --rows a,c --reps 9 --json out.json

What it measures: frames per second on CartPole-v1 with the same policy everywhere,
a 64x64 tanh MLP (obs 4 -> 64 -> 64 -> 2 logits, weights from one seed) followed by
rlcollect's Gumbel-max ``categorical_sample``, torch.set_num_threads(1) in every process.

    a   hand-written loop, 1 gymnasium env: from_numpy, forward, sample, step, reset
    b   hand-written loop, SyncVectorEnv of 8 envs, one batched forward per step
    c   rlcollect Collector on GymEnv(CartPole-v1)
    d   rlcollect Collector on GymEnv(CartPole-v1, num_envs=8)
    e1  torchrl Collector on GymEnv(CartPole-v1)              } in .venv-bench, through
    e2  torchrl Collector on SerialEnv(8, GymEnv(CartPole-v1)) } scripts/bench_torchrl_rows.py

Every row is warmed up once, then the rows are measured in turn, ``--reps`` times
(rep 1: a, b, c, ...; rep 2: a, b, c, ...), so slow drifts of the machine hit every row
alike. One measurement collects ``--frames`` frames (env transitions, summed over the
envs of a batched row); time.perf_counter brackets that collection only. For the
collector rows, a measurement builds a fresh collector with ``total_frames =
frames_per_batch + frames``; the following ``frames`` frames, after the first batch,
are the ones timed. Reported on their own: "build ms", env + collector construction, and
"1st batch ms", from the start of construction to the first batch (so it includes
collecting ``frames_per_batch`` frames).

The hand-written vector loop (b) uses autoreset_mode=SAME_STEP: like the collectors, a
finished env is reset within the step that finished it, so every frame is a transition.

torchrl 0.14 needs tensordict<0.15, which rlcollect cannot share a venv with, so the
torchrl rows run in .venv-bench (``make bench-venv``); this script keeps one worker
process there (scripts/bench_torchrl_rows.py, JSON lines over stdin/stdout) and
interleaves its measurements with the in-process rows. Without .venv-bench those rows
are skipped. Ratios are of median frames/s; the bracket is the range of the per-rep
ratios of the two rows measured side by side.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_PYTHON = REPO_ROOT / ".venv-bench" / "bin" / "python"
TORCHRL_WORKER = Path(__file__).resolve().with_name("bench_torchrl_rows.py")
ENV_ID = "CartPole-v1"
NUM_ENVS = 8
HIDDEN = 64
SEED = 0
TARGET_RATIO = 0.8


# ---------------------------------------------------------------------- the policy
def _load_categorical_sample() -> Callable[[torch.Tensor], torch.Tensor]:
    """rlcollect's Gumbel-max sampler, loaded from its source file rather than through
    the ``rlcollect`` package, so that the torchrl venv (which cannot install rlcollect)
    runs the very same function."""
    path = REPO_ROOT / "rlcollect" / "modules" / "distributions.py"
    spec = importlib.util.spec_from_file_location("_bench_distributions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.categorical_sample


categorical_sample = _load_categorical_sample()


def sample_action(logits: torch.Tensor) -> torch.Tensor:
    """The one action-sampling function of every row: Gumbel-max on the logits."""
    return categorical_sample(logits)


def build_mlp() -> nn.Sequential:
    """obs 4 -> 64 -> 64 -> 2 logits, tanh; the same weights in every process."""
    torch.manual_seed(SEED)
    return nn.Sequential(
        nn.Linear(4, HIDDEN), nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
        nn.Linear(HIDDEN, 2),
    )


class MLPSamplingPolicy(TensorDictModuleBase):
    """"observation" -> MLP -> sample_action -> "action"; the policy of every collector row
    (rlcollect's and torchrl's), so both frameworks call exactly the same module.

    Not a ``TensorDictModule(nn_module, in_keys, out_keys)``: its key handling costs per
    call about 15 us more under tensordict 0.15 and about 120 us more under 0.14 (the
    torchrl venv's), which would measure the wrapper rather than the collectors."""

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set("action", sample_action(self.mlp(tensordict.get("observation"))))
        return tensordict


def configure_torch() -> None:
    torch.set_num_threads(1)


# ---------------------------------------------------------------------- timing
@dataclass
class Measurement:
    frames_per_s: float
    construct_ms: float | None = None  # collector rows: env + collector construction
    startup_ms: float | None = None  # collector rows: construction + first batch


def time_collector(make_collector: Callable[[int], Iterable], frames: int, frames_per_batch: int) -> Measurement:
    """Build a collector of ``frames_per_batch + frames`` total frames (``make_collector``
    gets that total), time construction to first batch, then the remaining ``frames``."""
    start = time.perf_counter()
    collector = make_collector(frames_per_batch + frames)
    constructed = time.perf_counter()
    batches = iter(collector)
    next(batches)
    first_batch = time.perf_counter()
    collected = 0
    for batch in batches:
        collected += batch.numel()
    end = time.perf_counter()
    collector.shutdown()
    if collected != frames:
        raise RuntimeError(f"expected {frames} frames after the first batch, got {collected}")
    return Measurement(frames / (end - first_batch), 1e3 * (constructed - start), 1e3 * (first_batch - start))


# ---------------------------------------------------------------------- row registry
@dataclass(frozen=True)
class Settings:
    frames: int  # per measurement
    frames_per_batch: int  # collector rows
    reps: int

    @property
    def warmup_frames(self) -> int:
        """A quarter of a measurement (whole batches, at least two)."""
        return self.frames_per_batch * max(2, self.frames // 4 // self.frames_per_batch)


Measure = Callable[[int], Measurement]


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    num_envs: int
    make: Callable[[Settings, "TorchrlWorker | None"], Measure]
    needs_torchrl: bool = False


ROWS: dict[str, Row] = {}


def register(key: str, label: str, num_envs: int = 1, needs_torchrl: bool = False):
    """Add a row: the decorated factory returns ``measure(frames) -> Measurement``."""
    def decorate(make):
        ROWS[key] = Row(key, label, num_envs, make, needs_torchrl)
        return make
    return decorate


# ---------------------------------------------------------------------- a, b: by hand
class HandSingleLoop:
    """One gymnasium env, one forward per step; the episode carries over between calls."""

    def __init__(self) -> None:
        self.env = gym.make(ENV_ID)
        self.mlp = build_mlp()
        self.obs, _ = self.env.reset(seed=SEED)

    def __call__(self, frames: int) -> Measurement:
        env, mlp, obs = self.env, self.mlp, self.obs
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(frames):
                action = sample_action(mlp(torch.from_numpy(obs)))
                obs, reward, terminated, truncated, _ = env.step(int(action))
                if terminated or truncated:
                    obs, _ = env.reset()
            elapsed = time.perf_counter() - start
        self.obs = obs
        return Measurement(frames / elapsed)


class HandVectorLoop:
    """SyncVectorEnv of NUM_ENVS envs (same-step autoreset), one batched forward per step."""

    def __init__(self) -> None:
        self.env = gym.vector.SyncVectorEnv(
            [lambda: gym.make(ENV_ID) for _ in range(NUM_ENVS)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        self.mlp = build_mlp()
        self.obs, _ = self.env.reset(seed=SEED)

    def __call__(self, frames: int) -> Measurement:
        env, mlp, obs = self.env, self.mlp, self.obs
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(frames // NUM_ENVS):
                action = sample_action(mlp(torch.from_numpy(obs)))
                obs, reward, terminated, truncated, _ = env.step(action.numpy())
            elapsed = time.perf_counter() - start
        self.obs = obs
        return Measurement(frames / elapsed)


@register("a", "hand-written loop, gymnasium env")
def hand_single(settings: Settings, worker) -> Measure:
    return HandSingleLoop()


@register("b", f"hand-written loop, SyncVectorEnv({NUM_ENVS})", num_envs=NUM_ENVS)
def hand_vector(settings: Settings, worker) -> Measure:
    return HandVectorLoop()


# ---------------------------------------------------------------------- c, d: rlcollect
def rlcollect_measure(settings: Settings, num_envs: int | None) -> Measure:
    from rlcollect.collectors import Collector
    from rlcollect.envs import GymEnv

    policy = MLPSamplingPolicy(build_mlp())

    def make_collector(total_frames: int):
        return Collector(lambda: GymEnv(ENV_ID, num_envs=num_envs, seed=SEED), policy,
                         frames_per_batch=settings.frames_per_batch, total_frames=total_frames)

    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


@register("c", "rlcollect Collector, GymEnv")
def rlcollect_single(settings: Settings, worker) -> Measure:
    return rlcollect_measure(settings, num_envs=None)


@register("d", f"rlcollect Collector, GymEnv(num_envs={NUM_ENVS})", num_envs=NUM_ENVS)
def rlcollect_batched(settings: Settings, worker) -> Measure:
    return rlcollect_measure(settings, num_envs=NUM_ENVS)


# ---------------------------------------------------------------------- e: torchrl
class TorchrlWorker:
    """A bench_torchrl_rows.py process in .venv-bench, asked one measurement at a time."""

    def __init__(self, python: Path) -> None:
        self.process = subprocess.Popen(
            [str(python), str(TORCHRL_WORKER), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        )
        self.versions = self._read()["versions"]

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"torchrl worker exited (code {self.process.wait()}); see its stderr above")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"torchrl worker: {reply['error']}")
        return reply

    def measure(self, row: str, frames: int, frames_per_batch: int) -> Measurement:
        request = {"row": row, "frames": frames, "frames_per_batch": frames_per_batch}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return Measurement(**self._read()["measurement"])

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def torchrl_measure(settings: Settings, worker: TorchrlWorker, row: str) -> Measure:
    return lambda frames: worker.measure(row, frames, settings.frames_per_batch)


@register("e1", "torchrl Collector, GymEnv", needs_torchrl=True)
def torchrl_single(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "gym")


@register("e2", f"torchrl Collector, SerialEnv({NUM_ENVS})", num_envs=NUM_ENVS, needs_torchrl=True)
def torchrl_serial(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "serial")


# (numerator, denominator, what, target)
COMPARISONS = (
    ("c", "a", "rlcollect / hand-written, 1 env", TARGET_RATIO),
    ("d", "b", f"rlcollect / hand-written, {NUM_ENVS} envs", TARGET_RATIO),
    ("e1", "a", "torchrl / hand-written, 1 env", None),
    ("e2", "b", f"torchrl / hand-written, {NUM_ENVS} envs", None),
    ("c", "e1", "rlcollect / torchrl, 1 env", None),
    ("d", "e2", f"rlcollect / torchrl, {NUM_ENVS} envs", None),
)


# ---------------------------------------------------------------------- running
@dataclass
class RowResult:
    row: Row
    measurements: list[Measurement] = field(default_factory=list)

    @property
    def fps(self) -> list[float]:
        return [m.frames_per_s for m in self.measurements]

    @property
    def construct_ms(self) -> list[float]:
        return [m.construct_ms for m in self.measurements if m.construct_ms is not None]

    @property
    def startup_ms(self) -> list[float]:
        return [m.startup_ms for m in self.measurements if m.startup_ms is not None]


def run_rows(rows: list[Row], settings: Settings, worker: TorchrlWorker | None) -> dict[str, RowResult]:
    """Warm every row up once, then measure them in turn, ``settings.reps`` times."""
    measures = {row.key: row.make(settings, worker) for row in rows}
    for row in rows:
        measures[row.key](settings.warmup_frames)
    results = {row.key: RowResult(row) for row in rows}
    for rep in range(settings.reps):
        for row in rows:
            results[row.key].measurements.append(measures[row.key](settings.frames))
        print(f"  rep {rep + 1}/{settings.reps}: " + "  ".join(
            f"{key} {result.fps[-1]:,.0f}" for key, result in results.items()), file=sys.stderr, flush=True)
    return results


def paired_ratios(results: dict[str, RowResult], numerator: str, denominator: str) -> list[float]:
    return [n / d for n, d in zip(results[numerator].fps, results[denominator].fps)]


def format_report(results: dict[str, RowResult], header: list[str], skipped: str | None) -> str:
    lines = [*header, ""]
    lines.append(f"{'row':<4}{'what':<42}{'envs':>5}{'median f/s':>12}{'min f/s':>10}{'max f/s':>10}"
                 f"{'build ms':>10}{'1st batch ms':>14}")
    lines.append("-" * 107)
    for key, result in results.items():
        build = f"{statistics.median(result.construct_ms):,.1f}" if result.construct_ms else "-"
        startup = f"{statistics.median(result.startup_ms):,.1f}" if result.startup_ms else "-"
        lines.append(f"{key:<4}{result.row.label:<42}{result.row.num_envs:>5}"
                     f"{statistics.median(result.fps):>12,.0f}{min(result.fps):>10,.0f}{max(result.fps):>10,.0f}"
                     f"{build:>10}{startup:>14}")
    if skipped:
        lines += ["", skipped]
    comparisons = [c for c in COMPARISONS if c[0] in results and c[1] in results]
    if comparisons:
        lines += ["", f"{'ratio':<10}{'what':<34}{'median':>8}  {'per-rep range':<15}target"]
        lines.append("-" * 80)
    for numerator, denominator, what, target in comparisons:
        ratio = statistics.median(results[numerator].fps) / statistics.median(results[denominator].fps)
        per_rep = paired_ratios(results, numerator, denominator)
        verdict = "" if target is None else f">= {target:.2f}x: {'met' if ratio >= target else 'NOT met'}"
        lines.append(f"{f'({numerator})/({denominator})':<10}{what:<34}{ratio:>7.2f}x  "
                     f"{f'[{min(per_rep):.2f}, {max(per_rep):.2f}]':<15}{verdict}".rstrip())
    return "\n".join(lines)


def report_header(settings: Settings, machine: dict) -> list[str]:
    return [
        f"{ENV_ID}, {HIDDEN}x{HIDDEN} tanh MLP + Gumbel-max categorical_sample, torch threads 1",
        f"{settings.frames:,} frames per measurement, {settings.reps} interleaved reps after 1 warm-up; "
        f"collectors: frames_per_batch={settings.frames_per_batch}",
        "build ms: env + collector construction; 1st batch ms: from the start of construction to the first batch "
        "(medians)",
        f"{machine['cpus']} cpus, 1-min load average {machine['load_before']:.2f} before, "
        f"{machine['load_after']:.2f} after (other processes skew every row; the interleaving spreads that over all rows)",
        "versions: " + "; ".join(f"{where}: " + ", ".join(f"{k} {v}" for k, v in found.items())
                                 for where, found in machine["versions"].items()),
    ]


def to_json(results: dict[str, RowResult], settings: Settings, machine: dict) -> dict:
    return {
        "settings": {**asdict(settings), "env": ENV_ID, "num_envs": NUM_ENVS, "hidden": HIDDEN},
        "machine": machine,
        "rows": {
            key: {
                "label": result.row.label,
                "num_envs": result.row.num_envs,
                "frames_per_s": result.fps,
                "construct_ms": result.construct_ms,
                "startup_ms": result.startup_ms,
                "median_frames_per_s": statistics.median(result.fps),
            }
            for key, result in results.items()
        },
        "ratios": {
            f"{n}/{d}": statistics.median(results[n].fps) / statistics.median(results[d].fps)
            for n, d, _, _ in COMPARISONS if n in results and d in results
        },
    }


def local_versions() -> dict:
    import tensordict
    return {"python": platform.python_version(), "torch": torch.__version__, "tensordict": tensordict.__version__,
            "gymnasium": gym.__version__, "numpy": np.__version__}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20_000, help="frames per measurement, every row (default 20000)")
    parser.add_argument("--frames-per-batch", type=int, default=1000,
                        help=f"collector batch size, a divisor of --frames and a multiple of {NUM_ENVS} (default 1000)")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2000 frames, batches of 200, 2 reps")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.frames, args.frames_per_batch, args.reps = 2000, 200, 2
    unknown = [key for key in args.rows.split(",") if key not in ROWS]
    if unknown:
        parser.error(f"--rows: unknown {unknown}; rows are {list(ROWS)}")
    if args.frames_per_batch % NUM_ENVS or args.frames % args.frames_per_batch or args.frames < 1:
        parser.error(f"--frames ({args.frames}) must be a positive multiple of --frames-per-batch "
                     f"({args.frames_per_batch}), itself a multiple of {NUM_ENVS}")
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    return args


def start_torchrl_worker(rows: list[Row]) -> tuple[TorchrlWorker | None, str | None]:
    """The worker when a torchrl row is asked for and .venv-bench exists; else why not."""
    if not any(row.needs_torchrl for row in rows):
        return None, None
    if not BENCH_PYTHON.exists():
        return None, f"torchrl rows skipped: {BENCH_PYTHON} is missing; `make bench` (or `make bench-venv`) creates it"
    return TorchrlWorker(BENCH_PYTHON), None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_torch()
    settings = Settings(args.frames, args.frames_per_batch, args.reps)
    rows = [ROWS[key] for key in args.rows.split(",")]
    worker, skipped = start_torchrl_worker(rows)
    if skipped:
        rows = [row for row in rows if not row.needs_torchrl]
    machine = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
               "versions": {"main": local_versions(), **({"torchrl_venv": worker.versions} if worker else {})}}
    try:
        print(f"benchmarking rows {','.join(row.key for row in rows)} ...", file=sys.stderr, flush=True)
        results = run_rows(rows, settings, worker)
    finally:
        if worker is not None:
            worker.close()
    machine["load_after"] = os.getloadavg()[0]
    print(format_report(results, report_header(settings, machine), skipped))
    if args.json:
        args.json.write_text(json.dumps(to_json(results, settings, machine), indent=2))
        print(f"\nraw numbers written to {args.json}")


if __name__ == "__main__":
    main()
