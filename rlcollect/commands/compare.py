"""`rlcollect compare PATH... [options]`: the comparison of runs, printed."""
from __future__ import annotations

import argparse
import sys


def compare(argv: list[str]) -> int:
    """`rlcollect compare PATH... [options]`: print the comparison of the runs."""
    from rlcollect.analysis.api import FORMATS, STATS_MIN_RUNS, CompareError, compare_runs
    from rlcollect.analysis.plots import check_plot_path
    from rlcollect.analysis.stats import DEFAULT_REPS
    from rlcollect.errors import ConfigError
    from rlcollect.outputs import output_path

    parser = argparse.ArgumentParser(
        prog="rlcollect compare",
        description="Compare runs: one row per group of runs that differ only by seed (mean ± std), and interval "
                    "estimates (IQM, median, mean, optimality gap with stratified bootstrap 95% CIs) of the final "
                    "eval score and of the area under the learning curve. Only finished or solved runs count; the "
                    "others (failed, interrupted, still running or killed) are listed apart with their status.")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="run folders, sweep folders or folders of runs")
    parser.add_argument("--sort", default="final_eval_return", metavar="METRIC",
                        help="column to sort by (default: final_eval_return; also best_eval_return, "
                             "frames_per_second, frames_to_solve, seconds_to_solve or a logged metric)")
    parser.add_argument("--metric", action="append", default=[], metavar="METRIC",
                        help="add the final value of a logged metric (e.g. train/loss_value); repeatable")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="output format (default: table; html: one page with the tables and the figures)")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="also write the figures: learning curves (IQM, 95%% CI) to OUT.png and OUT.svg, "
                             "the performance profile to OUT-profile.png/.svg, --versus to OUT-improvement.png/.svg")
    parser.add_argument("--wandb", metavar="DIR", help="read W&B offline runs under DIR instead of run folders")
    parser.add_argument("--stats", action=argparse.BooleanOptionalAction, default=None,
                        help=f"bootstrap confidence intervals (default: on when a group has {STATS_MIN_RUNS} "
                             "or more runs)")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS,
                        help=f"bootstrap resamples (default: {DEFAULT_REPS}; seeded, the same output every time)")
    parser.add_argument("--normalize", action="append", default=[], metavar="[ENV_ID:]random=R,max=M",
                        help="reference scores: (score - R) / (M - R); without ENV_ID for every env; repeatable "
                             "(default: the env presets' env.reference_scores)")
    parser.add_argument("--group-by", metavar="KEYS",
                        help="comma-separated keys to group by (default: the settings that differ, seed aside)")
    parser.add_argument("--versus", nargs=2, action="append", default=[], metavar=("A", "B"),
                        help="probability that a run of group A scores above one of group B (a label, a setting "
                             "or its value as in collector=sync or sync, or text naming one group); repeatable")
    args = parser.parse_args(argv)
    group_by = [key.strip() for key in args.group_by.split(",") if key.strip()] if args.group_by else None
    try:
        if args.plot is not None:  # checked before any run is read
            output_path("--plot", args.plot)
            check_plot_path(args.plot)
    except (ConfigError, CompareError) as error:
        print(f"rlcollect compare: {error}", file=sys.stderr)
        return 2
    try:
        print(compare_runs(args.paths, wandb_dir=args.wandb, metrics=args.metric, sort=args.sort, fmt=args.format,
                           plot=args.plot, group_by=group_by, bootstrap=args.stats, normalize=args.normalize,
                           versus=[tuple(pair) for pair in args.versus], reps=args.reps))
    except CompareError as error:
        print(f"rlcollect compare: {error}", file=sys.stderr)
        return 2
    if args.plot:
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0


