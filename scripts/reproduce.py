"""Measure again the figures that README.md and docs/ state, and print each beside its stated
value and tolerance.

    python scripts/reproduce.py                   # the quick tier: the CartPole headline, ~2 min
    python scripts/reproduce.py --tier medium     # the other CartPole rows, collector benchmarks, sweeps (~2 h)
    python scripts/reproduce.py --tier long       # the MuJoCo, SAC, Atari and HalfCheetah-sweep runs: hours
    python scripts/reproduce.py --tier quick medium
    python scripts/reproduce.py --only benchmarks.collectors sweeps.solve.batched   # ids or id prefixes, any tier
    python scripts/reproduce.py --list            # the registry: every figure and its command, nothing run

(``make reproduce ARGS="--tier medium"`` runs it in .venv after ``make setup``.)

The registry below has one entry per figure: its id, where it is stated (a file and a short
quote of it), the value as the file writes it, a tolerance, the command that measures it, how
its value is read from the command's output, and the command's cost tier:

    quick    the README's headline (10 CartPole runs), about 2 minutes in all
    medium   commands of a minute up to half an hour each, on the 2-core machine
    long     learning runs of an hour or more each

(--list prints each command's estimated minutes and each tier's total.)

Several figures share one command (the 10 CartPole seeds give the median and the range of
frames and seconds); it runs once. Every command is the project's own, run as a process:
``rlcollect`` (``python -m rlcollect.cli``) or a script of scripts/, in a temporary folder
that is removed at the end. A command that needs what this machine lacks (a CUDA device, Ray,
EnvPool, MuJoCo, the Atari ROMs) is skipped, saying so; a command that fails counts as a
figure outside its tolerance. Exit status 1 when any measured figure is outside its
tolerance, else 0.

Tolerances. Timings depend on the machine (its CPU, and what else runs on it), so they get
wide relative bounds: seconds and frames per second within a factor of 2 of the stated value
(3 for a row's median seconds to solve over 3 seeds, whose frames vary too); ratios of two
things measured side by side on one machine within +-30%. Frames to solve depend on the CPU
(docs/benchmarks.md says why), so they are checked as distributions: the median of 10 seeds
within the stated range, the range's ends within a factor of 2; the median of a row's 3
seeds within the range of its stated seeds widened by a factor of 1.5. Learning results
(returns) within +-40%; exact figures (bytes per frame, clean fault drills, solved seeds)
exactly.

Figures that need a GPU are registered and skipped where torch sees no CUDA device. Figures
of older commits that the docs keep as history (tables marked with the commit they were
measured at and since measured again) are not in the registry, nor those of another machine
or program that no command here reproduces (the H100 runs, cleanrl's and stable-baselines3's
own scripts).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
TIERS = ("quick", "medium", "long")
NEEDS = ("cuda", "ray", "envpool", "mujoco", "ale")
QUIET = ("logger=none", "progress=false")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile")


# -- tolerances: each turns the stated value (lo, hi; lo == hi for one number) into the interval a
#    measured value must fall in


@dataclass(frozen=True)
class Factor:
    """Within a factor of ``factor`` either way (timings)."""

    factor: float

    def bounds(self, stated: tuple[float, float]) -> tuple[float, float]:
        return stated[0] / self.factor, stated[1] * self.factor

    def __str__(self) -> str:
        return f"/{self.factor:g} to x{self.factor:g}"


@dataclass(frozen=True)
class Relative:
    """Within +-``fraction`` of the stated value (ratios measured side by side, returns)."""

    fraction: float

    def bounds(self, stated: tuple[float, float]) -> tuple[float, float]:
        return stated[0] * (1 - self.fraction), stated[1] * (1 + self.fraction)

    def __str__(self) -> str:
        return f"+-{self.fraction:.0%}"


@dataclass(frozen=True)
class Within:
    """Within a fixed interval: the median of seeds within the range the seeds were stated in."""

    low: float
    high: float
    why: str

    def bounds(self, stated: tuple[float, float]) -> tuple[float, float]:
        return self.low, self.high

    def __str__(self) -> str:
        return self.why


@dataclass(frozen=True)
class Exact:
    """Exactly the stated value."""

    def bounds(self, stated: tuple[float, float]) -> tuple[float, float]:
        return stated

    def __str__(self) -> str:
        return "exact"


Tolerance = Factor | Relative | Within | Exact


def seed_range(*frames: int, widen: float = 1.5) -> Within:
    """The median of a row's seeds: within the range of its stated seeds, widened by ``widen``."""
    return Within(min(frames) / widen, max(frames) * widen, f"seeds' range, widened x{widen:g}")


# -- commands


@dataclass(frozen=True)
class Step:
    """One process: ``rlcollect ...`` or ``scripts/<name>.py ...``; ``{dir}`` in an argument is
    the command's own folder. Its stdout is kept in ``{dir}/<stdout>``."""

    argv: tuple[str, ...]
    stdout: str

    def command_line(self, folder: Path) -> list[str]:
        args = [arg.replace("{dir}", str(folder)) for arg in self.argv]
        if args[0] == "rlcollect":
            return [sys.executable, "-m", "rlcollect.cli", *args[1:]]
        return [sys.executable, str(REPO / args[0]), *args[1:]]


@dataclass(frozen=True)
class Command:
    """What measures one or more figures: its steps, run one after the other."""

    key: str
    tier: str
    minutes: float  # estimated, on the 2-core machine of docs/benchmarks.md
    text: str  # the command as --list shows it
    steps: tuple[Step, ...]
    needs: tuple[str, ...] = ()


def train_seeds(key: str, overrides: tuple[str, ...], seeds: range, tier: str, minutes: float,
                needs: tuple[str, ...] = ()) -> Command:
    """``rlcollect train <overrides> seed=S logger=none progress=false`` for each seed, one at a time,
    each in ``{dir}/seed<S>``."""
    steps = tuple(Step(("rlcollect", "train", *overrides, f"seed={seed}", *QUIET, f"hydra.run.dir={{dir}}/seed{seed}"),
                       f"seed{seed}.out") for seed in seeds)
    seeds_text = f"S = {seeds[0]}" if len(seeds) == 1 else f"S = {seeds[0]} to {seeds[-1]}, one at a time"
    text = f"rlcollect train {' '.join((*overrides, 'seed=S', *QUIET))}  ({seeds_text})"
    return Command(key, tier, minutes, text, steps, needs)


def script(key: str, name: str, args: tuple[str, ...], tier: str, minutes: float, needs: tuple[str, ...] = (),
           json_out: bool = True) -> Command:
    """``python scripts/<name> <args>``, with ``--json {dir}/out.json`` where the script writes one."""
    argv = (f"scripts/{name}", *args)
    if json_out:
        cut = argv.index("--") if "--" in argv else len(argv)  # bench_sweeps.py: overrides after --
        argv = (*argv[:cut], "--json", "{dir}/out.json", *argv[cut:])
    text = "python " + " ".join(arg.replace("{dir}/", "") for arg in argv)
    return Command(key, tier, minutes, text, (Step(argv, "stdout.txt"),), needs)


def train(key: str, runs: dict[str, tuple[str, ...]], tier: str, minutes: float,
          needs: tuple[str, ...] = ()) -> Command:
    """One ``rlcollect train <overrides> hydra.run.dir={dir}/<name>`` per named run."""
    steps = tuple(Step(("rlcollect", "train", *overrides, f"hydra.run.dir={{dir}}/{name}"), f"{name}.out")
                  for name, overrides in runs.items())
    text = "; ".join(f"rlcollect train {' '.join(overrides)}" for overrides in runs.values())
    return Command(key, tier, minutes, text, steps, needs)


# -- reading what a command left in its folder


class Outcome:
    """A command's folder after it ran, and each step's wall-clock seconds."""

    def __init__(self, folder: Path, walls: list[float]):
        self.folder = folder
        self.walls = walls

    def summaries(self, prefix: str = "seed") -> list[dict]:
        """The summary.json of every ``<prefix><N>`` run folder, in the order of N."""
        paths = sorted(self.folder.glob(f"{prefix}*/summary.json"),
                       key=lambda path: int(path.parent.name[len(prefix):] or 0))
        if not paths:
            raise ValueError(f"no {prefix}*/summary.json in the command's folder")
        return [json.loads(path.read_text()) for path in paths]

    def summary(self, name: str) -> dict:
        return json.loads((self.folder / name / "summary.json").read_text())

    def json(self, name: str = "out.json") -> Any:
        return json.loads((self.folder / name).read_text())

    def text(self, name: str = "stdout.txt") -> str:
        return (self.folder / name).read_text()


@dataclass(frozen=True)
class Read:
    """How a figure's measured value is read: a description (for --list) and the function."""

    what: str
    fn: Callable[[Outcome], float]


def solve_values(runs: list[dict], key: str) -> list[float]:
    """``key`` (frames_to_solve or seconds_to_solve) of each run; a run that did not solve counts
    as beyond every run that did (inf)."""
    return [float("inf") if run.get(key) is None else float(run[key]) for run in runs]


STATS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "min": min, "max": max,
                                                    "mean": statistics.mean}


def over_seeds(stat: str, key: str, first: int | None = None) -> Read:
    """``stat`` of ``key`` over the seeds' summary.json (the first ``first`` seeds only)."""
    seeds = "the seeds" if first is None else f"seeds 0-{first - 1}"
    values = solve_values if key.endswith("_to_solve") else (lambda runs, k: [float(run[k]) for run in runs])
    return Read(f"{stat} of {key} over {seeds} (summary.json)",
                lambda outcome: STATS[stat](values(outcome.summaries()[:first], key)))


def solved_seeds() -> Read:
    return Read("seeds whose summary.json has status solved",
                lambda outcome: sum(run["status"] == "solved" for run in outcome.summaries()))


def summary_value(run: str, key: str) -> Read:
    return Read(f"{key} of {run}/summary.json", lambda outcome: float(outcome.summary(run)[key]))


def collector_row(row: str) -> Read:
    return Read(f"median frames/s of row {row} (bench_collectors --json)",
                lambda outcome: outcome.json()["rows"][row]["median_frames_per_s"])


def collector_ratio(numerator: str, denominator: str) -> Read:
    def ratio(outcome: Outcome) -> float:
        rows = outcome.json()["rows"]
        return rows[numerator]["median_frames_per_s"] / rows[denominator]["median_frames_per_s"]

    return Read(f"median frames/s of row {numerator} / of row {denominator} (bench_collectors --json)", ratio)


def sweep_scaling(members: str) -> Read:
    return Read(f"x solo of S = {members} (bench_sweeps --json)",
                lambda outcome: outcome.json()["members"][members]["x_solo"])


def sweep_way(way: str) -> Read:
    return Read(f"median wall-clock of '{way}' / the mean solo run (bench_sweeps --json)",
                lambda outcome: outcome.json()["ways"][way]["x_solo"])


def stdout_number(pattern: str, what: str) -> Read:
    """The number the first match of ``pattern`` (one group) finds in the command's stdout."""
    def read(outcome: Outcome) -> float:
        match = re.search(pattern, outcome.text())
        if match is None:
            raise ValueError(f"no match for {pattern!r} in its output")
        return float(match.group(1).replace(",", ""))

    return Read(what, read)


def markdown_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first markdown table in ``text``, as dicts of column -> cell."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def fault_drill_problems(collector: str) -> Read:
    def problems(outcome: Outcome) -> float:
        row = next(row for row in markdown_rows(outcome.text()) if row["collector"] == collector)
        return (int(row["hangs"]) + int(row["orphans"]) + int(row["shm leftovers"])
                + (row["status"] != "finished"))

    return Read(f"{collector}'s hangs + orphans + /dev/shm leftovers + (status != finished), fault_drill's table",
                problems)


def compare_iqm() -> Read:
    return Read("IQM of the final evaluations (rlcollect compare --format json)",
                lambda outcome: outcome.json("compare.json")["groups"][0]["iqm"]["value"])


def wall_clock(step: int = 0) -> Read:
    return Read(f"wall-clock seconds of step {step + 1} (the process, start-up included)",
                lambda outcome: outcome.walls[step])


def vector_collect_speedup() -> Read:
    def speedup(outcome: Outcome) -> float:
        return outcome.summary("list")["seconds_collect"] / outcome.summary("vector")["seconds_collect"]

    return Read("seconds_collect of the list run / of the vector run (summary.json)", speedup)


# -- the figures


@dataclass(frozen=True)
class Figure:
    """One figure a file states, and how to measure it again."""

    id: str
    file: str  # relative to the repository root
    quote: str  # a short passage of the file, verbatim up to line breaks; holds ``stated``
    stated: str  # the figure as the file writes it
    tolerance: Tolerance
    command: Command
    read: Read
    value: float | None = None  # the stated number, where ``stated`` is not one (e.g. "finished")

    @property
    def tier(self) -> str:
        return self.command.tier

    def stated_value(self) -> tuple[float, float]:
        """The stated number, or the two ends of a stated range such as "1.65-1.90x"."""
        if self.value is not None:
            return self.value, self.value
        numbers = [float(number.replace(",", "")) for number in NUMBER.findall(self.stated)]
        if len(numbers) not in (1, 2):
            raise ValueError(f"{self.id}: stated {self.stated!r} is not one number or a range of two")
        return numbers[0], numbers[-1]

    def bounds(self) -> tuple[float, float]:
        return self.tolerance.bounds(self.stated_value())


CARTPOLE = train_seeds("cartpole", (), range(10), "quick", 1.5)
README, BENCHMARKS, SWEEPS = "README.md", "docs/benchmarks.md", "docs/sweeps.md"
FIGURES: list[Figure] = []


def figure(id: str, file: str, quote: str, stated: str, tolerance: Tolerance, command: Command, read: Read,
           value: float | None = None) -> None:
    FIGURES.append(Figure(id, file, quote, stated, tolerance, command, read, value))


# README.md: the CartPole headline and the batched sweeps
figure("readme.cartpole.frames_median", README, "a median of 10,752 frames", "10,752",
       Within(5120, 19456, "stated range"), CARTPOLE, over_seeds("median", "frames_to_solve"))
figure("readme.cartpole.frames_min", README, "ranges 5,120-19,456 frames", "5,120", Factor(2), CARTPOLE,
       over_seeds("min", "frames_to_solve"))
figure("readme.cartpole.frames_max", README, "ranges 5,120-19,456 frames", "19,456", Factor(2), CARTPOLE,
       over_seeds("max", "frames_to_solve"))
figure("readme.cartpole.seconds_median", README, "2.7 s of training over seeds 0-9", "2.7", Factor(2), CARTPOLE,
       over_seeds("median", "seconds_to_solve"))
figure("readme.cartpole.seconds_min", README, "1.2-4.5 s", "1.2", Factor(2), CARTPOLE,
       over_seeds("min", "seconds_to_solve"))
figure("readme.cartpole.seconds_max", README, "1.2-4.5 s", "4.5", Factor(2), CARTPOLE,
       over_seeds("max", "seconds_to_solve"))

SWEEP_SOLVE = script("sweeps.solve", "bench_sweeps.py",
                     ("solve", "--seeds", "8", "--repeats", "3", "--ways", "batched,batched2", "--",
                      "env.backend=vector"), "medium", 8)
SWEEP_LAUNCHERS = script("sweeps.launchers", "bench_sweeps.py",
                         ("solve", "--seeds", "8", "--repeats", "2", "--ways", "batched2,basic,joblib", "--",
                          "env.backend=vector"), "medium", 7)
SWEEP_GPU = script("sweeps.gpu256", "bench_sweeps.py",
                   ("solve", "--seeds", "256", "--ways", "batched", "--solo", "1", "--", "env=cartpole_torch",
                    "device=cuda"), "medium", 6, needs=("cuda",))
SWEEP_SOLVE_LIST = script("sweeps.solve_list", "bench_sweeps.py",
                          ("solve", "--seeds", "8", "--repeats", "3", "--solo", "8", "--ways", "batched2,batched"),
                          "medium", 5)  # the default list backend
figure("readme.sweeps.batched2", README, "2.1x one run's wall-clock", "2.1x", Relative(0.3),
       SWEEP_SOLVE_LIST, sweep_way("batched2"))
figure("readme.sweeps.batched", README, "(2.2x in one process", "2.2x", Relative(0.3), SWEEP_SOLVE_LIST,
       sweep_way("batched"))
figure("readme.sweeps.gpu256", README, "256 seeds of the torch CartPole in 5.8x one run", "5.8x", Relative(0.3),
       SWEEP_GPU, sweep_way("batched"))

# docs/benchmarks.md: the CartPole headline
HEADLINE_FRAMES = "| frames to solve | **10,752** | 5,120-19,456 |"
HEADLINE_SECONDS = "| seconds to solve | **2.7** | 1.2-4.5 |"
figure("benchmarks.cartpole.frames_median", BENCHMARKS, HEADLINE_FRAMES, "10,752", Within(5120, 19456, "stated range"),
       CARTPOLE, over_seeds("median", "frames_to_solve"))
figure("benchmarks.cartpole.frames_min", BENCHMARKS, HEADLINE_FRAMES, "5,120", Factor(2), CARTPOLE,
       over_seeds("min", "frames_to_solve"))
figure("benchmarks.cartpole.frames_max", BENCHMARKS, HEADLINE_FRAMES, "19,456", Factor(2), CARTPOLE,
       over_seeds("max", "frames_to_solve"))
figure("benchmarks.cartpole.seconds_median", BENCHMARKS, HEADLINE_SECONDS, "2.7", Factor(2), CARTPOLE,
       over_seeds("median", "seconds_to_solve"))
figure("benchmarks.cartpole.seconds_min", BENCHMARKS, HEADLINE_SECONDS, "1.2", Factor(2), CARTPOLE,
       over_seeds("min", "seconds_to_solve"))
figure("benchmarks.cartpole.seconds_max", BENCHMARKS, HEADLINE_SECONDS, "4.5", Factor(2), CARTPOLE,
       over_seeds("max", "seconds_to_solve"))
figure("benchmarks.cartpole.solved", BENCHMARKS, "all 10 seeds solve", "all 10 seeds solve", Exact(), CARTPOLE,
       solved_seeds(), value=10)


# docs/benchmarks.md: the other CartPole rows, 3 seeds each (frames median, seconds median)
def cartpole_row(name: str, overrides: tuple[str, ...], seeds: tuple[int, int, int], cells: str, minutes: float,
                 needs: tuple[str, ...] = (), command: Command | None = None) -> None:
    """A row of 3 seeds: ``cells`` is its last four cells, "| seed 0 | seed 1 | seed 2 | <frames>, <seconds> |"."""
    command = command or train_seeds(f"cartpole.{name}", overrides, range(3), "medium", minutes, needs)
    frames, seconds = cells.strip(" |").split(" | ")[-1].split(", ")
    figure(f"benchmarks.{name}.frames_median", BENCHMARKS, cells, frames, seed_range(*seeds), command,
           over_seeds("median", "frames_to_solve", first=3))
    figure(f"benchmarks.{name}.seconds_median", BENCHMARKS, cells, seconds, Factor(3), command,
           over_seeds("median", "seconds_to_solve", first=3))


GRU = train_seeds("cartpole.gru", ("experiment=cartpole_novel_gru",), range(10), "medium", 5)
DQN = ("algo=dqn", "collector=multiasync")
for name, overrides, seeds, cells, minutes, needs in (
        ("multisync", ("collector=multisync",), (20480, 24576, 11264),
         "| 20,480 / 7.8 s | 24,576 / 9.9 s | 11,264 / 4.7 s | 20,480 frames, 7.8 s |", 1.5, ()),
        ("ray", ("collector=ray",), (20480, 24576, 11264),
         "| 20,480 / 9.3 s | 24,576 / 9.8 s | 11,264 / 5.4 s | 20,480 frames, 9.3 s |", 2.5, ("ray",)),
        ("cartpole_torch", ("env=cartpole_torch",), (22528, 12288, 10240),
         "| 22,528 / 9.4 s | 12,288 / 4.9 s | 10,240 / 4.5 s | 12,288 frames, 4.9 s |", 1, ()),
        ("distributed", ("collector=distributed",), (20480, 24576, 11264),
         "| 20,480 / 11.2 s | 24,576 / 13.1 s | 11,264 / 6.4 s | 20,480 frames, 11.2 s |", 2, ()),
        ("action_server", ("collector=action_server",), (15360, 19456, 8192),
         "| 15,360 / 6.2 s | 19,456 / 8.0 s | 8,192 / 3.3 s | 15,360 frames, 6.2 s |", 1.5, ()),
        ("alternating", ("collector=alternating",), (15360, 19456, 8192),
         "| 15,360 / 6.7 s | 19,456 / 8.7 s | 8,192 / 3.8 s | 15,360 frames, 6.7 s |", 1.5, ()),
        ("wait_reset", ("collector.reset_policy=wait",), (11264, 18432, 17408),
         "| 11,264 / 4.2 s | 18,432 / 6.5 s | 17,408 / 6.6 s | 17,408 frames, 6.5 s |", 1, ()),
        ("gru_pool", ("experiment=cartpole_novel_gru", "collector=pool", "collector.num_workers=2",
                      "collector.envs_per_worker=4", "collector.start_method=fork"), (31744, 98304, 11264),
         "| 31,744 / 30.8 s | 98,304 / 97.6 s | 11,264 / 9.1 s | 31,744 frames, 30.8 s |", 4, ()),
        ("dqn", DQN, (23552, 26624, 18432),
         "| 23,552 / 59.0 s | 26,624 / 75.4 s | 18,432 / 47.3 s | 23,552 frames, 59.0 s |", 4, ()),
        ("dqn_nstep", (*DQN, "algo.n_step=3"), (15360, 8192, 13312),
         "| 15,360 / 41.3 s | 8,192 / 20.1 s | 13,312 / 32.9 s | 13,312 frames, 32.9 s |", 3, ()),
        ("dqn_prioritized", (*DQN, "buffer/sampler=prioritized"), (12288, 14336, 15360),
         "| 12,288 / 39.8 s | 14,336 / 45.5 s | 15,360 / 42.0 s | 14,336 frames, 42.0 s |", 3, ()),
        ("dqn_nstep_prioritized", (*DQN, "algo.n_step=3", "buffer/sampler=prioritized"), (3072, 3072, 3072),
         "| 3,072 / 7.9 s | 3,072 / 6.8 s | 3,072 / 6.2 s | 3,072 frames, 6.8 s |", 1, ())):
    cartpole_row(name, overrides, seeds, cells, minutes, needs)
# the GRU row's seeds are the first 3 of the 10 that the text below the table states
cartpole_row("gru", (), (10240, 47104, 11264),
             "| 10,240 / 7.5 s | 47,104 / 37.3 s | 11,264 / 8.9 s | 11,264 frames, 8.9 s |", 0, command=GRU)
figure("benchmarks.gru.frames_median_10_seeds", BENCHMARKS, "(median 20,992)", "20,992",
       Within(5120, 48128, "stated seeds' range"), GRU, over_seeds("median", "frames_to_solve"))
figure("benchmarks.gru.solved_10_seeds", BENCHMARKS, "With them seeds 0-9 all solve", "seeds 0-9 all solve", Exact(),
       GRU, solved_seeds(), value=10)
figure("benchmarks.gru_feedforward.best_eval", BENCHMARKS, "no run above 52 in 100k frames", "no run above 52",
       Within(0, 104, "at most x2"),
       train_seeds("cartpole.gru_feedforward", ("experiment=cartpole_novel_gru", "model=actor_critic"), range(3),
                   "medium", 4),
       over_seeds("max", "best_eval_return"))

# docs/benchmarks.md: MuJoCo (PPO, SAC) and Atari learning runs
HALFCHEETAH = train_seeds("mujoco.halfcheetah", ("experiment=mujoco_ppo", "env=halfcheetah"), range(3), "long", 60,
                          needs=("mujoco",))
HOPPER = train_seeds("mujoco.hopper", ("experiment=mujoco_ppo", "env=hopper"), range(3), "long", 65, needs=("mujoco",))
figure("benchmarks.halfcheetah.final_eval_mean", BENCHMARKS,
       "| HalfCheetah: final eval | 1,844 | 1,789 | 2,033 | 1,889 +- 128 |", "1,889", Relative(0.4), HALFCHEETAH,
       over_seeds("mean", "final_eval_return"))
figure("benchmarks.halfcheetah.seconds_mean", BENCHMARKS, "| HalfCheetah: seconds | 1,100 | 1,051 | 1,076 | 1,076 |",
       "1,076", Factor(2), HALFCHEETAH, over_seeds("mean", "seconds"))
figure("benchmarks.hopper.final_eval_mean", BENCHMARKS,
       "| Hopper: final eval | 3,437 | 3,247 | 1,731 | 2,805 +- 935 |", "2,805", Relative(0.4), HOPPER,
       over_seeds("mean", "final_eval_return"))
figure("benchmarks.hopper.seconds_mean", BENCHMARKS, "| Hopper: seconds | 1,297 | 1,256 | 1,122 | 1,225 |",
       "1,225", Factor(2), HOPPER, over_seeds("mean", "seconds"))
SAC = train_seeds("mujoco.sac", ("experiment=mujoco_sac", "env=halfcheetah", "total_frames=300000"), range(3), "long",
                  270, needs=("mujoco",))
figure("benchmarks.sac.final_eval_mean", BENCHMARKS, "| final eval | 9,719 | 9,961 | 8,799 | 9,493 +- 613 |", "9,493",
       Relative(0.4), SAC, over_seeds("mean", "final_eval_return"))
figure("benchmarks.sac.seconds_seed0", BENCHMARKS, "| seconds (collect / train / eval) | 5,635 (207 / 5,413 / 14) |",
       "5,635", Factor(2), SAC, summary_value("seed0", "seconds"))
ATARI = train_seeds("atari.breakout", ("experiment=atari_ppo", "total_frames=250000"), range(1), "long", 40,
                    needs=("ale",))
figure("benchmarks.atari.seconds", BENCHMARKS, "2,166 s on the 2-core CPU machine", "2,166 s", Factor(2), ATARI,
       summary_value("seed0", "seconds"))
figure("benchmarks.atari.final_eval", BENCHMARKS, "8.6 at 250,880", "8.6", Factor(2), ATARI,
       summary_value("seed0", "final_eval_return"))
ATARI_RATES = train("atari.rates", {"run": ("experiment=atari_ppo", "total_frames=20480", "seed=0", *QUIET)}, "medium",
                    4, needs=("ale",))
figure("benchmarks.atari.collect_seconds", BENCHMARKS, "`time/collect` 31.8 s", "31.8 s", Factor(2), ATARI_RATES,
       summary_value("run", "seconds_collect"))
figure("benchmarks.atari.train_seconds", BENCHMARKS, "`time/train` 139.9 s for 20,480 frames", "139.9 s", Factor(2),
       ATARI_RATES, summary_value("run", "seconds_train"))

# docs/benchmarks.md: the fault drill
FAULT_DRILL = script("fault_drill", "fault_drill.py", ("--kills", "8", "--seed", "3"), "medium", 8, needs=("ray",),
                     json_out=False)
for collector, row in (("multisync", "| multisync | 8 | 12 | 4 | 256 | 1,536 | 0 | 0 | 0 | finished |"),
                       ("multiasync", "| multiasync | 8 | 8 | 0 | 512 | 1,024 | 0 | 0 | 0 | finished |"),
                       ("action_server", "| action_server | 8 | 10 | 2 | 256 | 368 | 0 | 0 | 0 | finished |"),
                       ("alternating", "| alternating | 8 | 8 | 0 | 256 | 44 | 0 | 0 | 0 | finished |"),
                       ("ray", "| ray | 8 | 9 | 1 | 256 | 1,152 | 0 | 0 | 0 | finished |")):
    figure(f"benchmarks.fault_drill.{collector}", BENCHMARKS, row, "0 | 0 | 0 | finished", Exact(), FAULT_DRILL,
           fault_drill_problems(collector), value=0)


# docs/benchmarks.md: the collector benchmarks, each table row's rows measured side by side
def bench(key: str, rows: str, minutes: float, needs: tuple[str, ...] = (), reps: int = 5,
          frames: int | None = None) -> Command:
    """``scripts/bench_collectors.py --rows <rows> --reps 5``: the rows of one table row, interleaved."""
    args = ("--rows", rows, "--reps", str(reps), *(("--frames", str(frames)) if frames else ()))
    return script(f"bench_collectors.{key}", "bench_collectors.py", args, "medium", minutes, needs)


def ratio(id: str, quote: str, stated: str, command: Command, numerator: str, denominator: str,
          file: str = BENCHMARKS) -> None:
    figure(id, file, quote, stated, Relative(0.3), command, collector_ratio(numerator, denominator))


def rate(id: str, quote: str, stated: str, command: Command, row: str) -> None:
    figure(id, BENCHMARKS, quote, stated, Factor(2), command, collector_row(row))


ONE_ENV = bench("c_a", "a,c", 1)
ONE_ENV_ROW = "| Collector, 1 env (c) vs hand-written loop (a) |"
ratio("benchmarks.collectors.c_vs_a", f"{ONE_ENV_ROW} 6,226 | 7,846 | 0.79x", "0.79x", ONE_ENV, "c", "a")
rate("benchmarks.collectors.c", f"{ONE_ENV_ROW} 6,226 |", "6,226", ONE_ENV, "c")
ratio("benchmarks.collectors.c_vs_a_2026_11_26", f"{ONE_ENV_ROW} 6,426 | 8,215 | 0.78x", "0.78x", ONE_ENV, "c", "a")
EIGHT_ENVS = bench("d_b", "b,d", 1)
ratio("benchmarks.collectors.d_vs_b", "| Collector, 8 envs (d) vs SyncVectorEnv loop (b) | 30,478 | 29,189 | 1.04x |",
      "1.04x", EIGHT_ENVS, "d", "b")
rate("benchmarks.collectors.d", "| Collector, 8 envs (d) vs SyncVectorEnv loop (b) | 30,478 |", "30,478", EIGHT_ENVS,
     "d")
GRU_ROWS = bench("n", "n1,n2", 1)
ratio("benchmarks.collectors.n2_vs_n1",
      "| Collector, 8 envs, GRU policy (n2) vs hand loop carrying h (n1) | 17,324 | 20,949 | 0.83x |", "0.83x",
      GRU_ROWS, "n2", "n1")
MULTI = bench("d_f_g", "d,f,g", 1.5)
MULTI_QUOTE = ("| MultiSync 2x4 (f) / MultiAsync (g) vs Collector 8 envs (d) | 32,005 / 37,000 | 30,478 | "
               "1.05x / 1.21x |")
ratio("benchmarks.collectors.f_vs_d", MULTI_QUOTE, "1.05x", MULTI, "f", "d")
ratio("benchmarks.collectors.g_vs_d", MULTI_QUOTE, "1.21x", MULTI, "g", "d")
BUSY = bench("k", "k1,k2,k3,k4", 2)
ratio("benchmarks.collectors.k2_vs_k1", "| BusyEnv 200 us: MultiSync (k2) vs 1-process (k1) | 7,962 | 4,486 | 1.77x |",
      "1.77x", BUSY, "k2", "k1")
BUSY_QUOTE = ("| BusyEnv 200 us: ActionServer (k3) / Alternating (k4) vs MultiSync (k2) | 6,859 / 6,802 | 7,962 | "
              "0.86x / 0.85x |")
ratio("benchmarks.collectors.k3_vs_k2", BUSY_QUOTE, "0.86x", BUSY, "k3", "k2")
ratio("benchmarks.collectors.k4_vs_k2", BUSY_QUOTE, "0.85x", BUSY, "k4", "k2")
SERVER = bench("f_l", "f,l1,l2", 1.5)
SERVER_QUOTE = ("| CartPole: ActionServer (l1) / Alternating (l2) vs MultiSync (f) | 24,068 / 24,165 | 32,005 | "
                "0.75x / 0.76x |")
ratio("benchmarks.collectors.l1_vs_f", SERVER_QUOTE, "0.75x", SERVER, "l1", "f")
ratio("benchmarks.collectors.l2_vs_f", SERVER_QUOTE, "0.76x", SERVER, "l2", "f")
HEAVY = bench("m", "m1,m2,m3,m4", 2)
ratio("benchmarks.collectors.m4_vs_m3",
      "| 512x512 MLP + BusyEnv 50 us: Alternating (m4) vs ActionServer (m3) | 15,136 | 12,808 | 1.18x |", "1.18x",
      HEAVY, "m4", "m3")
ratio("benchmarks.collectors.m2_vs_m1", "| same: MultiSync (m2) vs 1-process Collector (m1) | 16,544 | 11,287 | "
      "1.47x |", "1.47x", HEAVY, "m2", "m1")
RAY = bench("r", "f,g,r1,r2", 2, needs=("ray",))
RAY_QUOTE = "| 32,199 / 34,992 | 32,005 / 37,000 | 1.01x / 0.95x |"
ratio("benchmarks.collectors.r1_vs_f", RAY_QUOTE, "1.01x", RAY, "r1", "f")
ratio("benchmarks.collectors.r2_vs_g", RAY_QUOTE, "0.95x", RAY, "r2", "g")
VECTOR = bench("v", "v1,v2", 1)
ratio("benchmarks.collectors.v2_vs_v1", "| 1,072,910 | 1,175,095 | 0.91x", "0.91x", VECTOR, "v2", "v1")
ENVPOOL = bench("v_envpool", "v1,v3", 1, needs=("envpool",))
ratio("benchmarks.collectors.v3_vs_v1", "| 405,379 | 1,152,579 | 0.35x |", "0.35x", ENVPOOL, "v3", "v1")
TORCH_ENV = bench("t", "t1,t2", 1)
ratio("benchmarks.collectors.t2_vs_t1", "| 1,336,127 | 1,431,308 | 0.93x", "0.93x", TORCH_ENV, "t2", "t1")
DISTRIBUTED = bench("x", "f,g,x1,x2", 2)
DISTRIBUTED_QUOTE = "| 33,398 / 35,033 | 37,609 / 38,745 | 0.89x / 0.90x"
ratio("benchmarks.collectors.x1_vs_f", DISTRIBUTED_QUOTE, "0.89x", DISTRIBUTED, "x1", "f")
ratio("benchmarks.collectors.x2_vs_g", DISTRIBUTED_QUOTE, "0.90x", DISTRIBUTED, "x2", "g")
POOL = bench("p", "p1,p2,p3,p4", 2)
POOL_QUOTE = "| 7,068 | 7,098 / 4,571 | 1.00x / 1.55x"
ratio("benchmarks.collectors.p1_vs_p2", POOL_QUOTE, "1.00x", POOL, "p1", "p2")
ratio("benchmarks.collectors.p1_vs_p3", POOL_QUOTE, "1.55x", POOL, "p1", "p3")
ratio("collectors.pool.p1_vs_p2", "pool / action server 1.00x", "1.00x", POOL, "p1", "p2", file="docs/collectors.md")
ratio("collectors.pool.p1_vs_p3", "pool / AsyncVectorEnv 1.55x", "1.55x", POOL, "p1", "p3", file="docs/collectors.md")
CUDA_ROWS = bench("t_cuda", "t3,t4,t5", 3, needs=("cuda",), reps=7, frames=100000)
ratio("benchmarks.collectors.t4_vs_t3", "7,289,829 for the hand-written loop on the same GPU (0.79x", "0.79x",
      CUDA_ROWS, "t4", "t3")
ratio("benchmarks.collectors.t5_vs_t3", "(0.97x the loop, 1.20x the eager collector)", "0.97x", CUDA_ROWS, "t5", "t3")
ratio("benchmarks.collectors.t5_vs_t4", "(0.97x the loop, 1.20x the eager collector)", "1.20x", CUDA_ROWS, "t5", "t4")

WEIGHT_SYNC = script("bench_weight_sync", "bench_weight_sync.py", ("--updates", "20"), "medium", 2, needs=("ray",))
WEIGHT_SYNC_QUOTE = "shared memory 0.54 ms, Ray 4.3 ms, DistributedCollector over gloo 6.1 ms"
for scheme, stated in (("shared memory", "0.54 ms"), ("ray", "4.3 ms"), ("torch.distributed", "6.1 ms")):
    figure(f"benchmarks.weight_sync.{scheme.replace(' ', '_').replace('.', '_')}", BENCHMARKS, WEIGHT_SYNC_QUOTE,
           stated, Factor(2), WEIGHT_SYNC,
           Read(f"median update ms of '{scheme}' (bench_weight_sync --json)",
                lambda outcome, scheme=scheme: outcome.json()["schemes"][scheme]["median_update_ms"]))

ATARI_BENCH = script("bench_atari", "bench_atari.py", (), "medium", 2, needs=("ale",), json_out=False)
figure("benchmarks.bench_atari.ratio", BENCHMARKS, "and policy (1.00x)", "1.00x", Relative(0.3), ATARI_BENCH,
       stdout_number(r"ratio ([\d.]+)x", "the ratio bench_atari.py prints"))
figure("benchmarks.bench_atari.rlcollect", BENCHMARKS, "Collector 697 frames/s vs 693", "697", Factor(2), ATARI_BENCH,
       stdout_number(r"rlcollect Collector\s+([\d,]+) frames/s", "rlcollect's median frames/s, bench_atari.py"))
figure("benchmarks.bench_atari.bytes_per_frame", BENCHMARKS, "a batch costs 56,480 bytes per frame", "56,480", Exact(),
       ATARI_BENCH, stdout_number(r"costs ([\d,]+) bytes per frame", "the bytes per frame bench_atari.py prints"))

PPO_VECTOR = ("seed=0", "env.num_envs=1024", "collector.frames_per_batch=16384", "algo.epochs=4",
              "algo.minibatch_size=4096", "total_frames=491520", "env.solved_return=null", "eval.every_frames=491520",
              *QUIET)
END_TO_END = train("ppo_vector",
                   {"vector": ("env.backend=vector", *PPO_VECTOR), "list": ("env.backend=list", *PPO_VECTOR)},
                   "medium", 1)
figure("benchmarks.ppo_vector.frames_per_second", BENCHMARKS, "60,174 frames/s overall", "60,174", Factor(2),
       END_TO_END, summary_value("vector", "frames_per_second"))
figure("benchmarks.ppo_vector.collect_seconds", BENCHMARKS, "collection 1.42 s and training 6.65 s", "1.42 s",
       Factor(2), END_TO_END, summary_value("vector", "seconds_collect"))
figure("benchmarks.ppo_list.frames_per_second", BENCHMARKS, "against 37,135 frames/s with `env.backend=list`", "37,135",
       Factor(2), END_TO_END, summary_value("list", "frames_per_second"))
figure("envs.vector.collect_speedup", "docs/envs.md", "CartPoles collects ~4.7x faster than with `list`", "4.7x",
       Relative(0.3), END_TO_END, vector_collect_speedup())

# docs/sweeps.md
SCALING = script("sweeps.scaling", "bench_sweeps.py", ("scaling", "--members", "1,2,4,8,16,32", "--frames", "20480"),
                 "medium", 5)
figure("sweeps.scaling.solo_wall", SWEEPS, "| solo run | 16.3 | 1,259 | 1.00 | 344 |", "16.3", Factor(2), SCALING,
       Read("wall-clock s of the solo run (bench_sweeps --json)", lambda outcome: outcome.json()["solo"]["wall_s"]))
for members, row, stated in (("1", "| 1 (a solo run, through the launcher) | 15.2 | 1,347 | 1.07 | 345 |", "1.07"),
                             ("2", "| 2 | 15.2 | 2,689 | 2.14 | 347 |", "2.14"),
                             ("4", "| 4 | 19.1 | 4,296 | 3.41 | 351 |", "3.41"),
                             ("8", "| 8 | 22.5 | 7,282 | 5.78 | 359 |", "5.78"),
                             ("16", "| 16 | 44.1 | 7,424 | 5.89 | 372 |", "5.89"),
                             ("32", "| 32 | 82.9 | 7,906 | 6.28 | 404 |", "6.28")):
    figure(f"sweeps.scaling.x_solo_{members}", SWEEPS, row, stated, Relative(0.3), SCALING, sweep_scaling(members))
SCALING_MUJOCO = script("sweeps.scaling_halfcheetah", "bench_sweeps.py",
                        ("scaling", "--members", "1,2,4,8,16", "--frames", "20480", "--", "experiment=mujoco_ppo",
                         "env=halfcheetah", "eval.episodes=2"), "medium", 8, needs=("mujoco",))
for members, row, stated in (("2", "| 2 | 37.3 | 1,099 | 1.38 | 403 |", "1.38"),
                             ("4", "| 4 | 40.0 | 2,046 | 2.56 | 418 |", "2.56"),
                             ("8", "| 8 | 60.4 | 2,711 | 3.39 | 447 |", "3.39"),
                             ("16", "| 16 | 99.9 | 3,282 | 4.11 | 519 |", "4.11")):
    figure(f"sweeps.scaling_halfcheetah.x_solo_{members}", SWEEPS, row, stated, Relative(0.3), SCALING_MUJOCO,
           sweep_scaling(members))
figure("sweeps.solve.batched", SWEEPS, "| batched, one process | 25.3 (23.4 / 25.3 / 26.7) | 2.47 |", "2.47",
       Relative(0.3), SWEEP_SOLVE, sweep_way("batched"))
figure("sweeps.solve.batched2", SWEEPS, "| batched, 2 processes | 16.9 (17.6 / 16.9 / 16.2) | 1.65 |", "1.65",
       Relative(0.3), SWEEP_SOLVE, sweep_way("batched2"))
figure("sweeps.launchers.batched2", SWEEPS, "| batched, 2 processes | 20.9 (20.6 / 21.3) | 1.90 |", "1.90",
       Relative(0.3), SWEEP_LAUNCHERS, sweep_way("batched2"))
figure("sweeps.launchers.basic", SWEEPS, "| one by one (basic launcher) | 43.4 (47.2 / 39.6) | 3.94 |", "3.94",
       Relative(0.3), SWEEP_LAUNCHERS, sweep_way("basic"))
figure("sweeps.launchers.joblib", SWEEPS, "| joblib, 2 workers | 26.1 (27.3 / 24.8) | 2.37 |", "2.37",
       Relative(0.3), SWEEP_LAUNCHERS, sweep_way("joblib"))
SWEEP_DQN = script("sweeps.dqn8", "bench_sweeps.py",
                   ("solve", "--seeds", "8", "--repeats", "1", "--ways", "batched,batched2", "--solo", "1", "--",
                    "algo=dqn", "total_frames=50000", "env.solved_return=null"), "long", 10)
SWEEP_GRU = script("sweeps.gru8", "bench_sweeps.py",
                   ("solve", "--seeds", "8", "--repeats", "1", "--ways", "batched,batched2", "--solo", "1", "--",
                    "experiment=cartpole_novel_gru", "total_frames=50000", "env.solved_return=null"), "long", 8)
SWEEP_SAC = script("sweeps.sac8", "bench_sweeps.py",
                   ("solve", "--seeds", "8", "--repeats", "1", "--ways", "batched2,joblib", "--solo", "1", "--",
                    "algo=sac", "env=pendulum", "total_frames=20000", "env.solved_return=null"), "long", 30)
figure("sweeps.sac8.batched2", SWEEPS, "| 177.8 | 507.6 s (2.85x) | 696.4 s (3.92x) |", "2.85x", Relative(0.3),
       SWEEP_SAC, sweep_way("batched2"))
figure("sweeps.sac8.joblib", SWEEPS, "| 177.8 | 507.6 s (2.85x) | 696.4 s (3.92x) |", "3.92x", Relative(0.3),
       SWEEP_SAC, sweep_way("joblib"))
figure("sweeps.dqn8.batched", SWEEPS, "| 78.6 | 260.4 s (3.31x; 4.20x) | 148.5 s (1.89x; 2.40x) |", "3.31x",
       Relative(0.3), SWEEP_DQN, sweep_way("batched"))
figure("sweeps.dqn8.batched2", SWEEPS, "| 78.6 | 260.4 s (3.31x; 4.20x) | 148.5 s (1.89x; 2.40x) |", "1.89x",
       Relative(0.3), SWEEP_DQN, sweep_way("batched2"))
figure("sweeps.gru8.batched", SWEEPS, "| 35.3 | 114.1 s (3.23x) | 65.4 s (1.85x) |", "3.23x", Relative(0.3),
       SWEEP_GRU, sweep_way("batched"))
figure("sweeps.gru8.batched2", SWEEPS, "| 35.3 | 114.1 s (3.23x) | 65.4 s (1.85x) |", "1.85x", Relative(0.3),
       SWEEP_GRU, sweep_way("batched2"))
figure("sweeps.gpu256.x_solo", SWEEPS, "and 256 seeds 5.8x", "5.8x", Relative(0.3), SWEEP_GPU, sweep_way("batched"))
HALFCHEETAH_SWEEP = Command(
    "sweeps.halfcheetah8", "long", 50,
    "rlcollect train --multirun experiment=mujoco_ppo env=halfcheetah seed=0,1,2,3,4,5,6,7 hydra/launcher=batched "
    "logger=none progress=false; rlcollect compare <sweep> --format json",
    (Step(("rlcollect", "train", "--multirun", "experiment=mujoco_ppo", "env=halfcheetah", "seed=0,1,2,3,4,5,6,7",
           "hydra/launcher=batched", *QUIET, "hydra.sweep.dir={dir}/sweep"), "sweep.out"),
     Step(("rlcollect", "compare", "{dir}/sweep", "--format", "json"), "compare.json")),
    needs=("mujoco",))
figure("sweeps.halfcheetah8.wall", SWEEPS, "2,592 s (43 min)", "2,592 s", Factor(2), HALFCHEETAH_SWEEP, wall_clock(0))
figure("sweeps.halfcheetah8.iqm", SWEEPS,
       "| IQM, 95% bootstrap CI (`rlcollect compare --stats`) | 2,352 [1,768, 3,916] |", "2,352", Relative(0.4),
       HALFCHEETAH_SWEEP, compare_iqm())


# -- running


def machine() -> str:
    """One line naming this machine: the CPU /proc/cpuinfo names, cores, Python, torch, date, commit."""
    cpu = platform.processor() or platform.machine()
    try:
        info = Path("/proc/cpuinfo").read_text()
        field = lambda name: re.search(rf"^{name}\s*:\s*(.*)$", info, re.M)
        name, family, model, flags = field("model name"), field("cpu family"), field("model"), field("flags")
        if name:
            cpu = name.group(1) + (f" (family {family.group(1)}, model {model.group(1)})" if family and model else "")
        if flags:  # the instruction sets torch's CPU kernels dispatch on: where they differ, frames differ
            isa = [flag for flag in ISA_FLAGS if flag in flags.group(1).split()]
            cpu += f", {' '.join(isa) or 'no AVX2'}"
    except OSError:
        pass
    try:
        torch_version = importlib.metadata.version("torch")
        check = "import torch; print(torch.backends.cpu.get_cpu_capability())"  # what ATen's CPU kernels dispatch on
        capability = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True).stdout.strip()
        torch_version += f" (CPU capability {capability or 'unknown'})"
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "unknown"
    except OSError:  # no git
        commit = "unknown"
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, torch {torch_version}; "
            f"{today}, commit {commit}")


def available(need: str) -> bool:
    if need == "cuda":
        check = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
        return subprocess.run([sys.executable, "-c", check], capture_output=True).returncode == 0
    module = {"ray": "ray", "envpool": "envpool", "mujoco": "mujoco", "ale": "ale_py"}[need]
    return importlib.util.find_spec(module) is not None


def run_result(step: Step, folder: Path) -> str:
    """What a ``rlcollect train`` step's summary.json says, for the progress line ("" for other steps)."""
    run_dir = next((arg.split("=", 1)[1] for arg in step.argv if arg.startswith("hydra.run.dir=")), None)
    path = Path(run_dir.replace("{dir}", str(folder))) / "summary.json" if run_dir else None
    if path is None or not path.is_file():
        return ""
    summary = json.loads(path.read_text())
    solved = (f", frames to solve {summary['frames_to_solve']:,} in {summary['seconds_to_solve']:.1f} s"
              if summary.get("frames_to_solve") is not None else "")
    return f": {summary.get('status')}{solved}"


def run_command(command: Command, folder: Path, number: str) -> Outcome:
    """Run ``command``'s steps in ``folder``, one after the other; raise on a failed step."""
    folder.mkdir(parents=True)
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    walls = []
    for index, step in enumerate(command.steps):
        line = step.command_line(folder)
        shown = " ".join(arg.replace("{dir}/", "") for arg in step.argv)
        print(f"{number} {command.key}: step {index + 1}/{len(command.steps)}: {shown}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        with open(folder / step.stdout, "w") as stdout, open(folder / f"{step.stdout}.err", "w") as stderr:
            status = subprocess.run(line, cwd=folder, env=environment, stdout=stdout, stderr=stderr).returncode
        walls.append(time.perf_counter() - start)
        print(f"{number} {command.key}: step {index + 1} done in {walls[-1]:.1f} s{run_result(step, folder)}",
              file=sys.stderr, flush=True)
        if status != 0:
            tail = "\n".join((folder / f"{step.stdout}.err").read_text().strip().splitlines()[-15:])
            raise RuntimeError(f"{shown} exited {status}:\n{tail}")
    return Outcome(folder, walls)


def fmt(value: float, like: str) -> str:
    """``value`` with as many decimals as the first number of ``like``, thousands separated."""
    if value == float("inf"):
        return "not solved"
    first = NUMBER.search(like)
    decimals = len(first.group().partition(".")[2]) if first else 2
    return f"{value:,.{decimals}f}"


def tolerance_text(item: Figure) -> str:
    low, high = item.bounds()
    like = item.stated if item.value is None else str(item.value)
    interval = fmt(low, like) if low == high else f"{fmt(low, like)}-{fmt(high, like)}"
    return f"{item.tolerance}: {interval}"


def print_table(rows: list[tuple[str, ...]]) -> None:
    header = ("figure", "stated", "tolerance", "measured", "within")
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    for row in [header, tuple("-" * width for width in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def select(tiers: list[str], only: list[str] | None) -> list[Figure]:
    """The figures of ``tiers``; with ``only``, the figures it names (ids or id prefixes), whatever their tier."""
    if not only:
        return [item for item in FIGURES if item.tier in tiers]
    matches = lambda item, name: item.id == name or item.id.startswith(name.rstrip(".") + ".")
    unknown = [name for name in only if not any(matches(item, name) for item in FIGURES)]
    if unknown:
        raise SystemExit(f"--only: no figure {', '.join(unknown)}; --list shows them")
    return [item for item in FIGURES if any(matches(item, name) for name in only)]


def list_registry(figures: list[Figure]) -> None:
    commands = list(dict.fromkeys(item.command for item in figures))
    for tier in TIERS:
        in_tier = [command for command in commands if command.tier == tier]
        if not in_tier:
            continue
        print(f"== {tier}: {len(in_tier)} commands, about {sum(c.minutes for c in in_tier):g} min in all")
        for command in in_tier:
            needs = f", needs {', '.join(command.needs)}" if command.needs else ""
            print(f"\n{command.key} (~{command.minutes:g} min{needs})\n  $ {command.text}")
            for item in figures:
                if item.command == command:
                    print(f"  - {item.id}: stated {item.stated!r} in {item.file}: \"{item.quote}\"\n"
                          f"      tolerance {tolerance_text(item)}; reads the {item.read.what}")
        print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", nargs="+", choices=TIERS, default=["quick"],
                        help="which tiers to run (default: quick); several may be given")
    parser.add_argument("--only", nargs="+", metavar="ID",
                        help="these figures only, whatever their tier (an id, or a prefix such as "
                             "benchmarks.collectors)")
    parser.add_argument("--list", action="store_true", help="print the registry (every tier) and run nothing")
    args = parser.parse_args(argv)
    if args.list:
        list_registry(select(list(TIERS), args.only))
        return 0
    figures = select(args.tier, args.only)
    commands = list(dict.fromkeys(item.command for item in figures))
    have = {need: available(need) for need in {need for command in commands for need in command.needs}}
    runnable = [command for command in commands if all(have[need] for need in command.needs)]
    load_before = os.getloadavg()[0]
    if load_before > (os.cpu_count() or 1):
        print(f"note: the 1-min load average is {load_before:.1f} on {os.cpu_count()} cores; other processes share "
              "this machine, so its timings will read slow", file=sys.stderr, flush=True)
    minutes = sum(command.minutes for command in runnable)
    print(f"measuring {len(figures)} figures with {len(runnable)} commands (about {minutes:g} min on the 2-core "
          f"machine); {len(commands) - len(runnable)} skipped for what this machine lacks", file=sys.stderr, flush=True)
    measured: dict[str, float] = {}
    failed: dict[Command, str] = {}
    with tempfile.TemporaryDirectory(prefix="rlcollect-reproduce-") as root:
        for index, command in enumerate(runnable):
            number = f"[{index + 1}/{len(runnable)}]"
            try:
                outcome = run_command(command, Path(root) / command.key, number)
            except RuntimeError as error:
                failed[command] = "command failed"
                print(f"{number} {command.key} failed: {error}", file=sys.stderr, flush=True)
                continue
            for item in figures:
                if item.command == command:
                    try:
                        measured[item.id] = float(item.read.fn(outcome))
                    except Exception as error:  # a figure that cannot be read counts as outside
                        print(f"{item.id}: could not read the {item.read.what}: {error!r}", file=sys.stderr)
    rows, outside = [], 0
    for item in figures:
        if item.command in failed:
            value_text, verdict = failed[item.command], "no"
        elif not all(have[need] for need in item.command.needs):
            lacking = [need for need in item.command.needs if not have[need]]
            value_text, verdict = "-", f"skipped (needs {', '.join(lacking)})"
        elif item.id not in measured:
            value_text, verdict = "not read", "no"
        else:
            value = measured[item.id]
            low, high = item.bounds()
            value_text = fmt(value, item.stated if item.value is None else str(item.value))
            verdict = "yes" if low <= value <= high else "no"
        outside += verdict == "no"
        rows.append((item.id, item.stated, tolerance_text(item), value_text, verdict))
    print(f"machine: {machine()}; 1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print_table(rows)
    print(f"\n{len(rows) - outside} of {len(rows)} figures within tolerance or skipped; {outside} outside"
          + (" (or not measured: a command failed)" if failed else ""))
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
