"""`rlcollect eval RUN... [options] [env.key=value ...]`: trained policies evaluated again.

One row per run (a sweep folder, or several runs, gives one row each), printed as each
run is done; each run's result is also written to ``<run>/eval_<checkpoint>.json`` (or
all of them to ``--out``). A run that cannot be evaluated (no checkpoint, a config that
cannot be rebuilt) is one line on stderr; the others are still evaluated, and the command
exits 2.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path

import yaml

from rlcollect.errors import ConfigError, one_line
from rlcollect.outputs import output_path, write_text_whole
from rlcollect.run_files import CONFIG_FILE, METRICS_FILE

OVERRIDE = re.compile(r"^env\.[\w.]+=")
COLUMNS = ("run", "checkpoint", "frames", "episodes", "return", "length", "env seeds")


def parse(argv: list[str]) -> tuple[argparse.Namespace, dict]:
    parser = argparse.ArgumentParser(
        prog="rlcollect eval",
        description="Evaluate trained runs again: rebuild each run's env and policy from its config.yaml and a "
                    "checkpoint, run episodes (one per eval env, env i seeded S + i), print the mean ± std return "
                    "and length and the env seeds. env.key=value arguments override the run's env settings (e.g. "
                    "env.max_episode_steps=1000).")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders, sweep folders or folders of runs")
    parser.add_argument("--checkpoint", default="last", metavar="last|best|PATH",
                        help="last: the final frame (checkpoint.pt, the default); best: the best evaluation "
                             "(best.pt); or a checkpoint file")
    parser.add_argument("--episodes", type=int, metavar="N", help="episodes (default: the run's eval.episodes)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--deterministic", dest="deterministic", action="store_true", default=True,
                      help="the policy's mode / greedy action (the default)")
    mode.add_argument("--stochastic", dest="deterministic", action="store_false",
                      help="sampled actions (epsilon-greedy for DQN)")
    parser.add_argument("--seed", type=int, metavar="S",
                        help="seed of the first eval env, env i seeded S + i, and of the sampled actions (default: "
                             "the run's own evaluation seed)")
    parser.add_argument("--as-in-training", action="store_true",
                        help="repeat the run's own evaluation exactly: its eval.episodes, env seeds, eval.max_steps "
                             "and eval.max_trajectories, deterministic actions (what summary.json's eval returns "
                             "come from; with --checkpoint best, its best_eval_return)")
    parser.add_argument("--video", action="store_true",
                        help="also render one episode to <run>/videos/eval_<checkpoint>.mp4 (the envs extra)")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    parser.add_argument("--out", metavar="FILE", help="write the results (a JSON list) here instead of each run's "
                                                      "eval_<checkpoint>.json")
    overrides = [arg for arg in argv if OVERRIDE.match(arg)]
    args = parser.parse_args([arg for arg in argv if not OVERRIDE.match(arg)])
    if args.episodes is not None and args.episodes < 1:
        parser.error(f"--episodes={args.episodes}: must be >= 1")
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed={args.seed}: must be >= 0")
    if args.as_in_training:
        given = [option for option, value in (("--episodes", args.episodes), ("--seed", args.seed),
                                              ("--stochastic", not args.deterministic), ("env.* overrides", overrides))
                 if value]
        if given:
            parser.error(f"--as-in-training repeats the run's own evaluation: it takes no {', '.join(given)}")
    return args, {key: yaml.safe_load(value) for key, value in (arg.split("=", 1) for arg in overrides)}


def run_dirs(paths: list[str]) -> tuple[list[Path], list[Path]]:
    """The run folders at or under ``paths``, once each: those that trained (a config.yaml),
    and those that never did (a sweep job refused, a run interrupted while it started)."""
    from rlcollect.logging.runs import CompareError, find_run_dirs

    trained: dict[Path, None] = {}
    untrained: dict[Path, None] = {}
    for path in paths:
        try:
            runs = find_run_dirs(path)
        except CompareError as error:
            raise ConfigError(str(error)) from None
        if not any((run / CONFIG_FILE).is_file() for run in runs):
            raise ConfigError(f"{path}: no trained run at or under it (a trained run's folder holds {CONFIG_FILE} "
                              f"and {METRICS_FILE})")
        for run in runs:
            (trained if (run / CONFIG_FILE).is_file() else untrained)[run] = None
    return list(trained), list(untrained)


def cell(mean: float | None, std: float | None) -> str:
    return "-" if mean is None else f"{mean:.2f} ± {std:.2f}"


def seed_ranges(seeds: list[int | None]) -> str:
    """The seeds as short ranges: ``10000-10009``, ``7-8,11``; ``-`` for none."""
    values = sorted({seed for seed in seeds if seed is not None})
    spans: list[list[int]] = []
    for seed in values:
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in spans) or "-"


def table_row(result: dict) -> list[str]:
    return [result["run"], result["checkpoint"], str(result["frames"]),
            f"{result['episodes']}" + (f" ({result['cut']} cut)" if result["cut"] else ""),
            cell(result["return_mean"], result["return_std"]), cell(result["length_mean"], result["length_std"]),
            seed_ranges(result["env_seeds"])]


def evaluate(argv: list[str]) -> int:
    """``rlcollect eval``: evaluate each run, print its row as it is done, write the results."""
    args, env_overrides = parse(argv)
    try:
        out = None if args.out is None else output_path("--out", args.out)  # checked before any run is evaluated
        runs, untrained = run_dirs(args.runs)
    except ConfigError as error:
        print(f"rlcollect eval: {error}", file=sys.stderr)
        return 2
    if untrained:
        print(f"rlcollect eval: left out {len(untrained)} run(s) that never trained (refused, or interrupted while "
              f"starting): {', '.join(str(run) for run in untrained)}", file=sys.stderr)
    from rlcollect.pipeline.eval_run import evaluate_run

    results, refused, failed = [], 0, 0
    widths = [max(len(str(run)) for run in runs), 10, 8, 8, 16, 16, 0]
    if args.format == "table":
        print("  ".join(column.ljust(width) for column, width in zip(COLUMNS, widths)), flush=True)
    for run in runs:
        try:
            result = evaluate_run(run, checkpoint=args.checkpoint, episodes=args.episodes,
                                  deterministic=args.deterministic, seed=args.seed, video=args.video,
                                  env_overrides=env_overrides, as_in_training=args.as_in_training)
        except ConfigError as error:
            print(f"rlcollect eval: {error}", file=sys.stderr)
            refused += 1
            continue
        except Exception as error:  # not the user's mistake: said as what it is, the traceback kept
            print(f"rlcollect eval: {run}: error while evaluating: {one_line(error)} (traceback in "
                  f"{keep_traceback()})", file=sys.stderr)
            failed += 1
            continue
        results.append(result)
        if args.format == "table":
            print("  ".join(value.ljust(width) for value, width in zip(table_row(result), widths)), flush=True)
        if not args.out:
            try:
                write_text_whole("its result", run / f"eval_{result['checkpoint']}.json", json.dumps(result, indent=2))
            except ConfigError as error:  # a read-only run folder: said, the others still evaluated
                print(f"rlcollect eval: {run}: {error}", file=sys.stderr)
                refused += 1
    if args.format == "json":
        print(json.dumps(results, indent=2))
    if out is not None and results:
        try:
            write_text_whole("--out", out, json.dumps(results, indent=2))
        except ConfigError as error:
            print(f"rlcollect eval: {error}", file=sys.stderr)
            return 2
    return 1 if failed else 2 if refused else 0


def keep_traceback() -> Path:
    """The current exception's traceback, in a file of its own (a run folder stays as it was)."""
    handle, name = tempfile.mkstemp(prefix="rlcollect-eval-", suffix=".log")
    with os.fdopen(handle, "w") as file:
        file.write(traceback.format_exc())
    return Path(name)
