"""Batched sweeps against one run at a time (docs/sweeps.md, "Figures").

    python scripts/bench_sweeps.py scaling --members 1,2,4,8 --frames 20480
        one batched sweep of S seeds per S (S members x --frames each), beside one solo run
        of --frames: wall-clock, frames per second over all members, peak RSS
    python scripts/bench_sweeps.py solve --seeds 8
        S seeds of CartPole to solve: each seed's solo run (a process each), then the batched
        sweep (one process; two processes of S/2 members), the basic launcher (one job after
        the other, one process) and joblib with 2 workers, --repeats rounds; wall-clock (x the
        mean solo run) and every job's frames to solve. --ways picks some of them (batched,
        batched2, basic, joblib) and --solo N runs the solo runs of the first N seeds only:
            python scripts/bench_sweeps.py solve --seeds 256 --ways batched --solo 3 \
                -- env=cartpole_torch device=cuda

Every command runs ``rlcollect train`` in a process of its own (logger=none, progress off),
in a temporary folder; extra overrides follow ``--`` (e.g. ``-- experiment=mujoco_ppo
env=halfcheetah``). Wall-clock is the process's, start-up included. ``--json FILE`` also writes the figures
printed, for scripts/reproduce.py.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUIET = ["logger=none", "progress=false"]
PHASES = ("seconds", "seconds_collect", "seconds_train", "seconds_eval")  # a run's summary.json
# --ways name: (the label printed, the launcher overrides)
WAYS = {"batched": ("batched", ["hydra/launcher=batched"]),
        "batched2": ("batched, 2 processes", ["hydra/launcher=batched", "hydra.launcher.processes=2"]),
        "basic": ("one by one", []), "joblib": ("joblib x2", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])}


def run(args: list[str], cwd: Path) -> tuple[float, float]:
    """Wall-clock seconds and peak RSS (MB) of ``rlcollect train <args>``."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "rlcollect.cli", "train", *args], cwd=cwd,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    stderr = process.stderr.read()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"rlcollect train {' '.join(args)} failed:\n{stderr[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def summaries(sweep_dir: Path) -> list[dict]:
    jobs = sorted(sweep_dir.glob("*/summary.json"), key=lambda path: int(path.parent.name.split("_")[0]))
    return [json.loads(path.read_text()) for path in jobs]


def write_json(options, figures: dict) -> None:
    if options.json is not None:
        options.json.write_text(json.dumps(figures, indent=2))


def scaling(options, extra: list[str]) -> None:
    frames = [f"total_frames={options.frames}", "eval.every_frames=100000000"]
    figures: dict = {"frames": options.frames, "members": {}}
    print("| members S | wall s | frames/s (all members) | x solo frames/s | peak RSS MB |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        solo_wall, solo_rss = run([*frames, *QUIET, *extra, "hydra.run.dir=solo"], cwd)
        solo_fps = options.frames / solo_wall
        print(f"| solo | {solo_wall:.1f} | {solo_fps:,.0f} | 1.00 | {solo_rss:.0f} |", flush=True)
        figures["solo"] = {"wall_s": solo_wall, "frames_per_s": solo_fps, "peak_rss_mb": solo_rss}
        for members in options.members:
            seeds = ",".join(str(seed) for seed in range(members))
            wall, rss = run(["--multirun", f"seed={seeds}", "hydra/launcher=batched", *frames, *QUIET, *extra,
                             f"hydra.sweep.dir=batched{members}"], cwd)
            fps = members * options.frames / wall
            print(f"| {members} | {wall:.1f} | {fps:,.0f} | {fps / solo_fps:.2f} | {rss:.0f} |", flush=True)
            figures["members"][str(members)] = {"wall_s": wall, "frames_per_s": fps, "x_solo": fps / solo_fps,
                                                "peak_rss_mb": rss}
    write_json(options, figures)


def solve(options, extra: list[str]) -> None:
    seeds = list(range(options.seeds))
    ways = [way for way in WAYS if way in options.ways]
    walls: dict[str, list[float]] = {way: [] for way in ways}
    solved: dict[str, list] = {way: [] for way in ways}
    solo_walls: list[float] = []
    solo_solved: list = []
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        for repeat in range(options.repeats):  # interleaved: each way once per round
            for seed in seeds[:options.solo]:  # one solo run per seed, each a process of its own
                wall, _ = run([f"seed={seed}", *QUIET, *extra, f"hydra.run.dir=solo{repeat}_{seed}"], cwd)
                solo_walls.append(wall)
                solo_solved.append(json.loads((cwd / f"solo{repeat}_{seed}" / "summary.json").read_text())
                                   .get("frames_to_solve"))
            print(f"round {repeat}: solo runs: {solo_walls[-len(seeds[:options.solo]):]} s", flush=True)
            for way in ways:
                label, launcher = WAYS[way]
                sweep = f"{way}{repeat}"
                wall, _ = run(["--multirun", f"seed={','.join(map(str, seeds))}", *launcher, *QUIET, *extra,
                               f"hydra.sweep.dir={sweep}"], cwd)
                walls[way].append(wall)
                jobs = summaries(cwd / sweep)
                solved[way].append([summary.get("frames_to_solve") for summary in jobs])
                slowest = max(jobs, key=lambda summary: summary["seconds"])
                print(f"round {repeat}: {label}: the slowest job's run: " + ", ".join(
                    f"{key} {slowest.get(key, 0):.1f} s" for key in PHASES), flush=True)
                print(f"round {repeat}: {label}: {wall:.1f} s, frames to solve {solved[way][-1]}",
                      flush=True)
    solo = statistics.mean(solo_walls)
    print(f"\none solo run: mean {solo:.1f} s over {len(solo_walls)} (seeds {seeds[0]}..{seeds[:options.solo][-1]}); "
          f"frames to solve {solo_solved}")
    print(f"| {options.seeds} seeds | median wall s | x one solo run | solved | frames to solve: median, max |")
    print("|---|---|---|---|---|")
    for way in ways:
        wall = statistics.median(walls[way])
        frames = sorted(value for value in solved[way][0] if value is not None)
        spread = f"{statistics.median(frames):,.0f}, {frames[-1]:,}" if frames else "-"
        print(f"| {WAYS[way][0]} | {wall:.1f} | {wall / solo:.2f} | {len(frames)} of {len(solved[way][0])} "
              f"| {spread} |")
    for way in ways:
        print(f"{WAYS[way][0]}: frames to solve (every job, round 0): {solved[way][0]}")
    write_json(options, {
        "seeds": seeds, "solo": {"walls_s": solo_walls, "mean_wall_s": solo, "frames_to_solve": solo_solved},
        "ways": {way: {"label": WAYS[way][0], "walls_s": walls[way], "median_wall_s": statistics.median(walls[way]),
                       "x_solo": statistics.median(walls[way]) / solo, "frames_to_solve": solved[way]}
                 for way in ways}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    commands = parser.add_subparsers(dest="command", required=True)
    scale = commands.add_parser("scaling", parents=[common])
    scale.add_argument("--members", type=lambda text: [int(part) for part in text.split(",")], default=[1, 2, 4, 8])
    scale.add_argument("--frames", type=int, default=20480)
    solving = commands.add_parser("solve", parents=[common])
    solving.add_argument("--seeds", type=int, default=8)
    solving.add_argument("--repeats", type=int, default=1)
    solving.add_argument("--ways", type=lambda text: text.split(","), default=list(WAYS),
                         help=f"comma-separated, of {', '.join(WAYS)}")
    solving.add_argument("--solo", type=int, default=None, help="solo runs of the first N seeds (default: all)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    options = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    unknown = [way for way in getattr(options, "ways", []) if way not in WAYS]
    if unknown:
        parser.error(f"--ways: unknown {', '.join(unknown)}; the ways are {', '.join(WAYS)}")
    (scaling if options.command == "scaling" else solve)(options, extra)


if __name__ == "__main__":
    main()
