"""`rlcollect compare`: grouping with seeds pooled, the table's numbers, formats, curves, W&B source.

One real 2x2 sweep (algo.lr x seed) of tiny jobs is trained once for the module; the expected
numbers are recomputed here from each run's metrics.jsonl and cross-checked with summary.json.
"""
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlcollect import cli
from rlcollect.logging.compare import (
    CompareError,
    RunRecord,
    compare_table,
    group_runs,
    load_runs,
    load_wandb_runs,
    plot_curves,
    render,
)
from rlcollect.logging.runs import parse_override_dirname, summarize_history, wall_clock

LEARNING_RATES = ("0.001", "0.0003")
SOLVED_RETURN = 50.0  # low enough that some tiny runs may reach it (and stop early)
SWEEP = ["train", "--multirun", "seed=0,1", f"algo.lr={','.join(LEARNING_RATES)}", "collector.frames_per_batch=128",
         "env.num_envs=4", "total_frames=512", "eval.every_frames=256", "eval.episodes=2", "algo.epochs=1",
         "progress=false", f"env.solved_return={SOLVED_RETURN}", "hydra.sweep.dir=sweep"]
COLUMNS = ("final_eval_return", "best_eval_return", "frames_per_second", "frames_to_solve", "seconds_to_solve")


def rlcollect(cwd, *args):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "rlcollect.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=280)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("compare")
    result = rlcollect(cwd, *SWEEP)
    assert result.returncode == 0, result.stderr
    return cwd / "sweep"


def expected_numbers(run_dir: Path) -> dict:
    """The run's summary numbers recomputed from its files, independently of rlcollect."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = [row for row in rows if row.get("eval/episode_return") is not None]
    solved = [row for row in evals if row["eval/episode_return"] >= SOLVED_RETURN]
    numbers = {
        "final_eval_return": evals[-1]["eval/episode_return"],
        "best_eval_return": max(row["eval/episode_return"] for row in evals),
        "frames_per_second": rows[-1]["frames"] / rows[-1]["time"],
        "frames_to_solve": solved[0]["step"] if solved else None,
        "seconds_to_solve": solved[0]["time"] if solved else None,
        "train/loss_value": rows[-1]["train/loss_value"],
    }
    # The frame-based numbers are the ones summary.json holds too (its seconds use another clock).
    assert summary["solved_return"] == SOLVED_RETURN and summary["frames"] == rows[-1]["frames"]
    for key in ("final_eval_return", "best_eval_return", "frames_to_solve"):
        assert numbers[key] == summary[key], (run_dir, key)
    return numbers


def mean_std(values):
    values = [value for value in values if value is not None]
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    return mean, math.sqrt(math.fsum((value - mean) ** 2 for value in values) / len(values))


def lr_of(run_dir: Path) -> str:
    overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    return next(item.split("=", 1)[1] for item in overrides if item.startswith("algo.lr="))


@pytest.mark.timeout(300)
def test_two_groups_pool_two_seeds_each(sweep):
    runs = load_runs([sweep])
    assert len(runs) == 4
    groups = group_runs(runs)
    assert sorted(group.label for group in groups) == sorted(f"algo.lr={lr}" for lr in LEARNING_RATES)
    for group in groups:
        assert sorted(run.config["seed"] for run in group.runs) == [0, 1]
        assert {lr_of(run.path) for run in group.runs} == {group.settings["algo.lr"]}


@pytest.mark.timeout(300)
def test_table_numbers_equal_those_recomputed_from_the_run_files(sweep):
    rows = compare_table(group_runs(load_runs([sweep])), metrics=["train/loss_value"])
    by_lr: dict[str, list[dict]] = {}
    for run_dir in sorted(path.parent for path in sweep.glob("*/metrics.jsonl")):
        by_lr.setdefault(lr_of(run_dir), []).append(expected_numbers(run_dir))
    assert {row.group for row in rows} == {f"algo.lr={lr}" for lr in by_lr}
    for row in rows:
        runs = by_lr[row.settings["algo.lr"]]
        assert row.runs == len(runs) == 2
        for column in (*COLUMNS, "train/loss_value"):
            values = [numbers[column] for numbers in runs]
            mean, std = mean_std(values)
            stat = row.stats[column]
            assert (stat.count, stat.runs) == (sum(value is not None for value in values), 2), column
            assert stat.mean == mean, column
            assert stat.std == pytest.approx(std, rel=1e-12, abs=1e-12) if std is not None else stat.std is None
    finals = [row.stats["final_eval_return"].mean for row in rows]
    assert finals == sorted(finals, reverse=True)  # default sort: final eval return, best first


@pytest.mark.timeout(300)
def test_cli_prints_the_api_table_and_writes_a_png(sweep):
    result = rlcollect(sweep.parent, "compare", "sweep", "--metric", "train/loss_value", "--plot", "out/curves.png")
    assert result.returncode == 0, result.stderr
    expected = render(compare_table(group_runs(load_runs([sweep])), metrics=["train/loss_value"]), "table")
    assert result.stdout.strip() == expected
    header, rule, *rows = result.stdout.strip().splitlines()
    assert header.split()[:2] == ["group", "runs"] and set(rule) <= {"-", " "} and len(rows) == 2
    assert all(row.split()[1] == "2" and "(" in row for row in rows)  # to-threshold "k/2" counts shown

    import matplotlib.image

    image = matplotlib.image.imread(sweep.parent / "out" / "curves.png")
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0


@pytest.mark.timeout(300)
def test_markdown_csv_and_json_parse(sweep):
    rows = compare_table(group_runs(load_runs([sweep])), sort="frames_per_second")
    assert [row.stats["frames_per_second"].mean for row in rows] == sorted(
        (row.stats["frames_per_second"].mean for row in rows), reverse=True)

    lines = render(rows, "markdown").splitlines()
    assert len(lines) == 2 + len(rows)
    assert [cell.strip() for cell in lines[0].strip("|").split("|")][:3] == ["group", "runs", "final eval return"]
    assert set(lines[1].replace("|", "").split()) <= {"---", "---:"}
    assert [line.split("|")[1].strip() for line in lines[2:]] == [row.group for row in rows]

    records = list(csv.DictReader(io.StringIO(render(rows, "csv"))))
    assert [record["group"] for record in records] == [row.group for row in rows]
    for record, row in zip(records, rows):
        assert int(record["runs"]) == 2
        assert float(record["frames_per_second_mean"]) == row.stats["frames_per_second"].mean
        assert int(record["frames_to_solve_n"]) == row.stats["frames_to_solve"].count

    groups = json.loads(render(rows, "json"))
    assert [group["group"] for group in groups] == [row.group for row in rows]
    for group, row in zip(groups, rows):
        assert group["runs"] == 2 and group["settings"] == row.settings
        for column in COLUMNS:
            stat = row.stats[column]
            assert group[column] == {"mean": stat.mean, "std": stat.std, "n": stat.count}


@pytest.mark.timeout(300)
def test_wandb_offline_runs_give_the_same_table(sweep):
    from_folders = compare_table(group_runs(load_runs([sweep])), metrics=["train/loss_value"])
    wandb_runs = load_wandb_runs(sweep)
    assert [run.path for run in wandb_runs] == [run.path for run in load_runs([sweep])]
    from_wandb = compare_table(group_runs(wandb_runs), metrics=["train/loss_value"])
    assert render(from_wandb, "json") == render(from_folders, "json")
    assert render(from_wandb, "table") == render(from_folders, "table")


@pytest.mark.timeout(300)
def test_without_overrides_files_groups_by_differing_config_keys(sweep, tmp_path):
    for run_dir in sweep.glob("*/metrics.jsonl"):
        copy = tmp_path / run_dir.parent.name
        copy.mkdir()
        for name in ("config.yaml", "metrics.jsonl", "summary.json"):
            shutil.copy(run_dir.parent / name, copy / name)
    runs = load_runs([tmp_path])
    assert all(run.overrides is None for run in runs)
    assert render(compare_table(group_runs(runs)), "json") == render(compare_table(group_runs(load_runs([sweep]))),
                                                                   "json")


@pytest.mark.timeout(300)
def test_plot_curves_writes_an_image(sweep, tmp_path):
    path = plot_curves(group_runs(load_runs([sweep])), tmp_path / "curves.png")
    import matplotlib.image

    assert path.stat().st_size > 0 and matplotlib.image.imread(path).shape[0] > 0


@pytest.mark.timeout(300)
def test_unknown_metric_and_sort_fail_clearly(sweep, capsys):
    assert cli.main(["compare", str(sweep), "--metric", "train/no_such_loss"]) == 2
    error = capsys.readouterr().err
    assert "unknown metric 'train/no_such_loss'" in error and "Traceback" not in error
    with pytest.raises(CompareError, match="unknown sort metric 'nope'"):
        compare_table(group_runs(load_runs([sweep])), sort="nope")


def test_a_path_without_runs_fails_clearly(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["compare", str(tmp_path / "empty")]) == 2
    error = capsys.readouterr().err
    assert f"no runs (folders with metrics.jsonl and config.yaml) under {tmp_path / 'empty'}" in error
    assert cli.main(["compare", str(tmp_path / "missing")]) == 2
    assert f"no such file or directory: {tmp_path / 'missing'}" in capsys.readouterr().err
    assert cli.main(["compare", "--wandb", str(tmp_path / "empty")]) == 2
    assert "no W&B offline runs" in capsys.readouterr().err


# Unit tests on hand-made records: exact values, no training.

def record(name, overrides, lr, seed, evals, solved_return=50.0):
    """A run whose eval returns at steps 100, 200, ... are ``evals``, one second per 100 frames."""
    history = [{"step": 100 * i, "frames": 100 * i, "time": float(i), "eval/episode_return": value}
               for i, value in enumerate(evals, 1)]
    config = {"seed": seed, "algo": {"lr": lr}, "env": {"solved_return": solved_return}}
    return RunRecord(path=Path(name), overrides=overrides, config=config,
                     summary=summarize_history(history, solved_return), history=history)


def test_summary_takes_the_first_evaluation_that_reaches_the_threshold():
    history = [{"step": 100, "frames": 100, "time": 2.0, "eval/episode_return": None},
               {"step": 200, "frames": 200, "time": 4.0, "eval/episode_return": 60.0},
               {"step": 300, "frames": 300, "time": 5.0, "eval/episode_return": 70.0},
               {"step": 400, "frames": 400, "time": 8.0, "eval/episode_return": 40.0}]
    assert summarize_history(history, 50.0) == {
        "frames": 400, "seconds": 8.0, "frames_per_second": 50.0, "solved_return": 50.0, "frames_to_solve": 200,
        "seconds_to_solve": 4.0, "final_eval_return": 40.0, "best_eval_return": 70.0}


def test_a_resumed_runs_clock_continues_where_it_stopped():
    """A resumed run's logger restarts its clock at 0; seconds keep counting across the resume."""
    history = [{"step": 100, "frames": 100, "time": 1.0}, {"step": 200, "frames": 200, "time": 2.0},
               {"step": 300, "frames": 300, "time": 0.5, "eval/episode_return": 60.0},
               {"step": 400, "frames": 400, "time": 1.5}]
    assert wall_clock(history) == [1.0, 2.0, 2.5, 3.5]
    summary = summarize_history(history, 50.0)
    assert (summary["seconds"], summary["seconds_to_solve"], summary["frames_per_second"]) == (3.5, 2.5, 400 / 3.5)


def test_to_threshold_columns_average_the_runs_that_reached_it_and_count_them():
    runs = [record("a0", ["seed=0", "algo.lr=3e-4"], 0.0003, 0, [10.0, 60.0]),
            record("a1", ["seed=1", "algo.lr=0.0003"], 0.0003, 1, [60.0]),  # same setting, spelled otherwise
            record("a2", ["seed=2", "algo.lr=0.0003"], 0.0003, 2, [10.0, 20.0]),
            record("b0", ["seed=0", "algo.lr=0.001"], 0.001, 0, [10.0, 20.0, 55.0])]
    groups = group_runs(runs)
    assert [(group.label, len(group.runs)) for group in groups] == [("algo.lr=0.0003", 3), ("algo.lr=0.001", 1)]
    rows = compare_table(groups, sort="frames_to_solve")
    assert [row.group for row in rows] == ["algo.lr=0.001", "algo.lr=0.0003"]  # 1/1 reached before 2/3
    stat = rows[1].stats["frames_to_solve"]
    assert (stat.mean, stat.std, stat.count, stat.runs) == (150.0, 50.0, 2, 3)
    assert "150 ± 50 (2/3)" in render(rows, "table")
    assert render(rows, "table").splitlines()[2].split()[:2] == ["algo.lr=0.001", "1"]


def test_an_override_only_some_runs_set_takes_the_others_config_value():
    runs = [record("a", ["seed=0"], 0.0003, 0, [1.0]), record("b", ["seed=0", "algo.lr=0.001"], 0.001, 0, [2.0]),
            record("c", ["seed=1"], 0.0003, 1, [3.0])]
    assert [(group.label, [run.path.name for run in group.runs]) for group in group_runs(runs)] == [
        ("algo.lr=0.0003", ["a", "c"]), ("algo.lr=0.001", ["b"])]
    assert [group.label for group in group_runs(runs[:1])] == ["default"]


def test_wandb_run_names_split_into_overrides():
    assert parse_override_dirname("algo.lr=0.001,model.sizes=[64,64],seed=1,+extra=a") == [
        "algo.lr=0.001", "model.sizes=[64,64]", "seed=1", "+extra=a"]
    assert parse_override_dirname(None) is None and parse_override_dirname("curious-fox-7") is None
