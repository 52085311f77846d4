"""The `rlcollect` command: `rlcollect train [hydra overrides]`, `rlcollect compare PATH...`."""
from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf

from rlcollect.config import register_configs

USAGE = """usage: rlcollect <command> [args]

commands:
  train [overrides]   train with the Hydra config tree (conf/train.yaml); e.g.
                        rlcollect train collector.frames_per_batch=512 seed=1
                        rlcollect train --multirun seed=0,1,2
                        rlcollect train resume=outputs/<date>/<time>   (continue a run)
                      `rlcollect train --help` lists the config groups and options.
  compare PATH...     compare run folders, sweeps or folders of runs (seeds pooled); e.g.
                        rlcollect compare multirun/2026-01-01/12-00-00 --plot curves.png
                        rlcollect compare --wandb multirun --format markdown
                      `rlcollect compare --help` lists the options.
"""

register_configs()
ERROR_LOG = "error.log"


class StopRequest(threading.Event):
    """Set by SIGINT or SIGTERM: the training loop finishes its batch, checkpoints and stops."""

    signal_number = signal.SIGINT


@contextlib.contextmanager
def stop_on_signals():
    """The first SIGINT (Ctrl-C) or SIGTERM asks the loop to stop after its batch; a second
    one stops at once (the default handlers are back)."""
    stop = StopRequest()
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}

    def request(number, frame) -> None:
        stop.signal_number = number
        stop.set()
        for restored, handler in previous.items():
            signal.signal(restored, handler)
        print(f"\nrlcollect train: {signal.Signals(number).name}: stopping after this batch (again to stop now)",
              file=sys.stderr)

    for number in previous:
        signal.signal(number, request)
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class SweepJobError(RuntimeError):
    """A sweep job that failed, in one line (Hydra reports it with the job's overrides and
    runs the other jobs)."""


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def train(cfg: DictConfig) -> float | None:
    """One training job: build the pipeline from ``cfg`` and run it in the Hydra run folder."""
    from rlcollect import pipeline

    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    multirun = hydra_cfg.mode.name == "MULTIRUN"
    name = hydra_cfg.job.override_dirname or None
    group = hydra_cfg.sweep.dir.rstrip("/").split("/")[-1] if multirun else None
    try:
        if cfg.resume:
            built = pipeline.resume(cfg.resume, overrides=resume_overrides(hydra_cfg.overrides.task, cfg))
            run_dir = cfg.resume
        else:
            built = pipeline.build(cfg, run_dir, name=name, group=group, job_type=pipeline.collector_name(cfg))
    except (ValueError, TypeError, FileNotFoundError, ImportError) as error:
        what = "missing dependency" if isinstance(error, ImportError) else "invalid configuration"
        if multirun:  # Hydra reports the job with its overrides and runs the others
            raise SweepJobError(f"{what}: {error}") from None
        print(f"rlcollect train: {what}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # Ctrl-C while the envs, workers or logger start: one line, no traceback
        if not cfg.resume:  # a resumed run's record is its earlier part's: keep it
            (Path(run_dir) / pipeline.SUMMARY_FILE).write_text(json.dumps({"status": "interrupted", "frames": 0}))
        print("rlcollect train: interrupted while starting, before the first batch", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    with stop_on_signals() as stop:
        try:
            summary = pipeline.run(built, stop=stop)
        except Exception as error:  # a worker, env or policy failed: one short block, the traceback in a file
            log = Path(run_dir) / ERROR_LOG
            log.write_text(traceback.format_exc())
            print(f"rlcollect train: the run failed: {pipeline.one_line(error)}\n"
                  f"  full traceback: {log}\n  run status: failed (summary.json)", file=sys.stderr)
            if multirun:
                raise SweepJobError(pipeline.one_line(error)) from None
            raise SystemExit(1) from None
    if summary["status"] == "interrupted":
        print(f"rlcollect train: interrupted at frame {summary['frames']}; continue with "
              f"`rlcollect train resume={run_dir}`", file=sys.stderr)
        raise SystemExit(128 + stop.signal_number)
    threshold = summary.get("solved_return")
    target = (f"eval return >= {threshold} on {summary.get('env_id')}" if threshold is not None
              else f"no threshold for {summary.get('env_id')}")
    print(f"run folder: {run_dir}\n"
          f"frames: {summary['frames']}  seconds: {summary['seconds']:.1f}  "
          f"final eval return: {summary['final_eval_return']}  "
          f"frames to solve: {summary['frames_to_solve']} ({target})  seconds to solve: "
          f"{'-' if summary['seconds_to_solve'] is None else format(summary['seconds_to_solve'], '.1f')}")
    return summary["final_eval_return"]


def resume_overrides(task_overrides, cfg: DictConfig) -> dict:
    """``{key: value}`` of the config keys given on a ``resume=`` command line (besides
    ``resume`` and Hydra's own), their values as composed."""
    keys = [override.split("=", 1)[0].lstrip("+~") for override in task_overrides]
    return {key: OmegaConf.select(cfg, key) for key in keys if key != "resume" and not key.startswith("hydra.")}


def in_resumed_run_folder(args: list[str]) -> list[str]:
    """A ``resume=<run>`` command line runs in that run folder, not a new outputs/<date>/<time>/
    (and leaves its .hydra/ as the first part wrote it)."""
    resume = [arg.split("=", 1)[1] for arg in args if arg.startswith("resume=")]
    if not resume or not Path(resume[-1]).is_dir() or any(arg.startswith("hydra.run.dir=") for arg in args):
        return args  # a path that is no folder: the resume's own error says so
    return [*args, f"hydra.run.dir={resume[-1]}", "hydra.output_subdir=null"]


def compare(argv: list[str]) -> int:
    """`rlcollect compare PATH... [options]`: print the comparison of the runs."""
    from rlcollect.logging.compare import FORMATS, STATS_MIN_RUNS, CompareError, compare_runs
    from rlcollect.logging.stats import DEFAULT_REPS

    parser = argparse.ArgumentParser(
        prog="rlcollect compare",
        description="Compare runs: one row per group of runs that differ only by seed (mean ± std), and interval "
                    "estimates (IQM, median, mean, optimality gap with stratified bootstrap 95% CIs) of the final "
                    "eval score and of the area under the learning curve. Failed or interrupted runs are left out "
                    "and listed.")
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
                        help="probability that a run of group A scores above one of group B (a label, or text "
                             "naming one group); repeatable")
    args = parser.parse_args(argv)
    group_by = [key.strip() for key in args.group_by.split(",") if key.strip()] if args.group_by else None
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


def run_train(args: list[str]) -> int:
    """``rlcollect train``: Hydra composes the config and runs :func:`train`. An override
    Hydra cannot apply (an unknown key, a value of the wrong type, a missing option, bad
    syntax) is told in one line, exit 2, unless HYDRA_FULL_ERROR=1 asks for Hydra's own report."""
    sys.argv = ["rlcollect train", *in_resumed_run_folder(args)]
    previous = os.environ.get("HYDRA_FULL_ERROR")
    if previous == "1":
        train()
        return 0
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises instead of printing its multi-line report
    try:
        train()
    except (ConfigCompositionException, OverrideParseException) as error:
        print(f"rlcollect train: {override_error_line(error)}", file=sys.stderr)
        return 2
    except SweepJobError as error:  # Hydra has logged the job's overrides
        print(f"rlcollect train: a sweep job failed: {error}", file=sys.stderr)
        return 1
    finally:
        if previous is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
    return 0


def override_error_line(error: Exception) -> str:
    """One line for an override Hydra could not apply, naming it, with the options or the
    closest keys where there are some."""
    if isinstance(error, MissingConfigException):
        first = str(error).splitlines()[0].split(": ", 1)[-1]  # "In 'train': Could not find 'collector/x'"
        return f"invalid override: {first}" + (f" (options: {', '.join(error.options)})" if error.options else "")
    if isinstance(error, OverrideParseException):
        return f"invalid override {error.override!r}: {str(error).splitlines()[0]}"
    cause = error.__cause__
    full_key = getattr(cause, "full_key", None)
    if cause is None or full_key is None:
        return f"invalid override: {' '.join(str(error).split())}"
    line = f"invalid override {full_key}: {str(cause).splitlines()[0]}"
    if "not in" not in line:
        return line
    similar = similar_keys(getattr(cause, "parent_node", None), full_key)  # an unknown key: what it may have meant
    hint = f"did you mean {' or '.join(similar)}?" if similar else "`rlcollect train --cfg job` lists the keys"
    return f"{line} ({hint})"


def similar_keys(node, full_key: str) -> list[str]:
    """Keys of the config ``node`` belongs to that ``full_key`` may have meant: the same name
    elsewhere in the config, else close spellings beside it."""
    if not isinstance(node, DictConfig):
        return []
    root = node._get_root() if hasattr(node, "_get_root") else node  # omegaconf 2.3 gives no public accessor
    paths = []

    def walk(config: dict, prefix: str) -> None:
        for key, value in config.items():
            paths.append(f"{prefix}{key}")
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")

    walk({key: value for key, value in OmegaConf.to_container(root, resolve=False).items() if key != "hydra"}, "")
    parent, _, name = full_key.rpartition(".")
    same_name = [path for path in paths if path.rpartition(".")[2] == name]
    siblings = {path.rpartition(".")[2]: path for path in paths if path.rpartition(".")[0] == parent}
    return same_name[:2] or [siblings[key] for key in difflib.get_close_matches(name, siblings, n=2, cutoff=0.6)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        return run_train(rest)
    if command == "compare":
        return compare(rest)
    print(f"rlcollect: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
