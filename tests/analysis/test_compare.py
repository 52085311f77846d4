"""`rlcollect compare`: grouping with seeds pooled, the table's numbers, formats, curves, W&B source.

One real 2x2 sweep (algo.lr x seed) of tiny jobs is trained once for the module; the expected
numbers are recomputed here from each run's metrics.jsonl and cross-checked with summary.json.
"""
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from commands import rlcollect

from rlcollect import cli
from rlcollect.analysis.api import (
    CompareError,
    RunRecord,
    compare_table,
    group_runs,
    load_runs,
    load_wandb_runs,
    plot_curves,
    render,
)
from rlcollect.analysis.wandb_runs import parse_override_dirname
from rlcollect.logging.runs import summarize_history, wall_clock

LEARNING_RATES = ("0.001", "0.0003")
SOLVED_RETURN = 50.0  # low enough that some tiny runs may reach it (and stop early)
SWEEP = ["train", "--multirun", "seed=0,1", f"algo.lr={','.join(LEARNING_RATES)}", "collector.frames_per_batch=128",
         "algo.minibatch_size=64", "env.num_envs=4", "total_frames=512", "eval.every_frames=256", "eval.episodes=2",
         "algo.epochs=1", "progress=false", f"env.solved_return={SOLVED_RETURN}", "hydra.sweep.dir=sweep"]
COLUMNS = ("final_eval_return", "best_eval_return", "frames_per_second", "frames_to_solve", "seconds_to_solve")


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
    # The numbers are the ones summary.json holds too: the rows' time is the summary's clock, a row's time its
    # batch's work done (update and evaluation included), the last row's the summary's seconds.
    assert summary["solved_return"] == SOLVED_RETURN and summary["frames"] == rows[-1]["frames"]
    assert summary["seconds"] == rows[-1]["time"]
    for key in ("final_eval_return", "best_eval_return", "frames_per_second", "frames_to_solve", "seconds_to_solve"):
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
def test_the_compare_tool_loads_neither_torch_nor_matplotlib():
    """`rlcollect compare` answers without torch: the tool imports only rlcollect.logging.runs
    of the run records (tests/test_layering.py), and matplotlib only when it draws."""
    code = ("import sys, rlcollect.analysis.api, rlcollect.analysis.compare, rlcollect.commands.compare; "
            "assert not {'torch', 'matplotlib', 'wandb'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


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
    assert {run.status for run in wandb_runs} <= {"finished", "solved"}  # summary.json's, beside the W&B run
    assert all(run.choices["collector"] == "sync" for run in wandb_runs)

    from rlcollect.analysis.api import compare
    from rlcollect.analysis.report import render_comparison

    folders_report = render_comparison(compare(load_runs([sweep]), bootstrap=True, reps=300), "json")
    assert render_comparison(compare(wandb_runs, bootstrap=True, reps=300), "json") == folders_report


@pytest.mark.timeout(300)
def test_a_wandb_run_without_its_run_folder_takes_its_status_from_its_exit_code(sweep, tmp_path):
    run_dir = sorted(sweep.glob("*/wandb"))[0].parent
    shutil.copytree(run_dir / "wandb", tmp_path / "copy" / "wandb")
    (run,) = load_wandb_runs(tmp_path)
    assert (run.status, run.choices) == ("finished", {"collector": "sync"})  # exit code 0; the job type


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


# Interval estimates, exclusion, labels and reports, on hand-made run folders: exact values.

def write_run(root: Path, name: str, overrides: list[str], evals: list[float], *, env_id: str = "CartPole-v1",
              lr: float = 0.0003, collector: str = "sync", status: str | None = "finished", seed: int = 0) -> Path:
    """A run folder as `rlcollect train` writes it: eval returns at frames 100, 200, ..."""
    run_dir = root / name
    (run_dir / ".hydra").mkdir(parents=True)
    config = {"seed": seed, "algo": {"name": "ppo", "lr": lr},
              "collector": {"_target_": f"rlcollect.{collector.title()}Collector"},
              "env": {"id": env_id, "solved_return": None,
                      "reference_scores": {"CartPole-v1": {"random": 0.0, "max": 100.0},
                                           "Acrobot-v1": {"random": -500.0, "max": 0.0}}}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}", *overrides]))
    (run_dir / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(
        {"hydra": {"runtime": {"choices": {"collector": collector, "env": env_id.split("-")[0].lower(),
                                           "hydra/launcher": "basic"}}}}))
    rows = [{"step": 100 * i, "frames": 100 * i, "time": float(i), "eval/episode_return": value}
            for i, value in enumerate(evals, 1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if status is not None:
        (run_dir / "summary.json").write_text(json.dumps({"status": status}))
    return run_dir


@pytest.fixture
def four_seeds(tmp_path) -> Path:
    """lr=3e-4: final returns 10, 20, 30, 100 (normalised 0.1, 0.2, 0.3, 1.0; IQM 0.25, mean 0.4);
    lr=1e-3: 40, 40, 50, 60; plus one failed and one interrupted run."""
    for seed, final in enumerate([10.0, 20.0, 30.0, 100.0]):
        write_run(tmp_path, f"a{seed}", ["algo.lr=3e-4"], [0.0, final], lr=0.0003, seed=seed)
    for seed, final in enumerate([40.0, 40.0, 50.0, 60.0]):
        write_run(tmp_path, f"b{seed}", ["algo.lr=0.001"], [20.0, final], lr=0.001, seed=seed)
    write_run(tmp_path, "c_failed", ["algo.lr=0.01"], [0.0], lr=0.01, status="failed")
    write_run(tmp_path, "d_stopped", ["algo.lr=0.001"], [90.0], lr=0.001, status="interrupted", seed=9)
    return tmp_path


def test_interval_estimates_of_final_scores_and_areas_with_failed_runs_left_out(four_seeds):
    from rlcollect.analysis.api import compare

    comparison = compare(load_runs([four_seeds]))
    assert [str(item.path.name) for item in comparison.excluded] == ["c_failed", "d_stopped"]
    assert [item.reason for item in comparison.excluded] == ["failed", "interrupted"]
    assert [group.label for group in comparison.groups] == ["algo.lr=0.0003", "algo.lr=0.001"]
    assert comparison.bootstrap and comparison.normalized and comparison.gamma == 1.0
    best, other = comparison.stats  # sorted by IQM: lr=1e-3 (0.45) before lr=3e-4 (0.25)
    assert (best.group, best.runs, best.tasks) == ("algo.lr=0.001", 4, {"CartPole-v1": 4})
    # lr=3e-4: scores 0.1, 0.2, 0.3, 1.0 -> IQM mean(0.2, 0.3) = 0.25, mean = median = 0.4, gap 0.6.
    final = {name: interval.value for name, interval in other.final.items()}
    assert final == pytest.approx({"iqm": 0.25, "median": 0.4, "mean": 0.4, "optimality_gap": 0.6}, abs=1e-12)
    # Areas over frames 100-200: (0 + s) / 2 per run -> 0.05, 0.1, 0.15, 0.5: IQM 0.125, mean 0.2.
    assert other.auc["iqm"].value == pytest.approx(0.125, abs=1e-12)
    assert other.auc["mean"].value == pytest.approx(0.2, abs=1e-12)
    assert comparison.spans == {"CartPole-v1": (100.0, 200.0)}
    for interval in [*other.final.values(), *best.auc.values()]:
        assert interval.ci[0] <= interval.value <= interval.ci[1]


def test_a_run_interrupted_while_starting_is_listed_apart(four_seeds):
    """`rlcollect train` stopped before its first batch leaves summary.json and Hydra's files only."""
    from rlcollect.analysis.api import compare

    started = four_seeds / "e_starting"
    (started / ".hydra").mkdir(parents=True)
    (started / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": 5, "algo": {"lr": 0.001}}))
    (started / "summary.json").write_text(json.dumps({"status": "interrupted", "frames": 0}))
    comparison = compare(load_runs([four_seeds]))
    assert [(item.path.name, item.reason) for item in comparison.excluded] == [
        ("c_failed", "failed"), ("d_stopped", "interrupted"), ("e_starting", "interrupted")]
    assert [group.label for group in comparison.groups] == ["algo.lr=0.0003", "algo.lr=0.001"]
    with pytest.raises(CompareError, match="no run to compare: none finished or was solved"):
        compare(load_runs([started]))


def test_only_finished_or_solved_runs_count_the_others_are_listed_with_their_status(four_seeds):
    """A run killed with SIGKILL (no summary.json) or still running counts no more than a
    cleanly interrupted one: one rule, finished or solved, and each run left out says why.
    A run being resumed (its folder held by the process that trains it, its summary.json
    still saying how its last part ended) is running."""
    import fcntl

    from rlcollect.analysis.api import compare
    from rlcollect.analysis.report import render_comparison

    write_run(four_seeds, "e_killed", ["algo.lr=0.001"], [100.0], lr=0.001, status=None, seed=7)
    write_run(four_seeds, "f_running", ["algo.lr=0.0003"], [100.0], lr=0.0003, status="finished", seed=8)
    write_run(four_seeds, "g_solved", ["algo.lr=0.0003"], [0.0, 100.0], lr=0.0003, status="solved", seed=4)
    # finished at 100 frames, then resumed and killed with SIGKILL at 300: its rows are not the run it summarises
    resumed = write_run(four_seeds, "h_resume_killed", ["algo.lr=0.001"], [10.0, 90.0, 100.0], lr=0.001, seed=5)
    (resumed / "summary.json").write_text(json.dumps({"status": "finished", "frames": 100}))
    damaged = write_run(four_seeds, "i_damaged", ["algo.lr=0.001"], [100.0], lr=0.001, seed=6)
    (damaged / "summary.json").write_text("garbage{")
    assert [run.status for run in load_runs([four_seeds / "f_running"])] == ["finished"]
    holding = os.open(four_seeds / "f_running", os.O_RDONLY | os.O_DIRECTORY)  # as `rlcollect train resume=` holds it
    fcntl.flock(holding, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        comparison = compare(load_runs([four_seeds]), reps=200)
    finally:
        os.close(holding)
    assert [run.status for run in load_runs([four_seeds / "f_running"])] == ["finished"]
    assert [(group.label, sorted(run.path.name for run in group.runs)) for group in comparison.groups] == [
        ("algo.lr=0.0003", ["a0", "a1", "a2", "a3", "g_solved"]), ("algo.lr=0.001", ["b0", "b1", "b2", "b3"])]
    assert [(item.path.name, item.reason) for item in comparison.excluded] == [
        ("c_failed", "failed"), ("d_stopped", "interrupted"),
        ("h_resume_killed", "killed while resumed (metrics.jsonl goes past summary.json's frames)"),
        ("e_killed", "no status (no summary.json: still running, or killed)"), ("f_running", "running"),
        ("i_damaged", "summary.json does not read (not a JSON object)")]
    text = render_comparison(comparison, "table")
    assert "left out (6 runs)" in text and f"  {four_seeds / 'f_running'}: running" in text


def test_json_report_has_the_issues_shape_and_is_the_same_every_time(four_seeds, capsys):
    assert cli.main(["compare", str(four_seeds), "--format", "json", "--reps", "500"]) == 0
    first = capsys.readouterr().out
    assert cli.main(["compare", str(four_seeds), "--format", "json", "--reps", "500"]) == 0
    assert capsys.readouterr().out == first
    report = json.loads(first)
    assert set(report) == {"groups", "excluded", "improvements", "score", "notes"}
    group = report["groups"][1]
    assert (group["label"], group["runs"]) == ("algo.lr=0.0003", 4)
    for name in ("iqm", "median", "mean", "optimality_gap"):
        assert set(group[name]) == {"value", "ci"} and len(group[name]["ci"]) == 2
    assert group["iqm"]["value"] == pytest.approx(0.25) and group["mean"]["value"] == pytest.approx(0.4)
    assert group["summary"][0]["final_eval_return"] == {"mean": 40.0, "std": pytest.approx(35.355339059327378),
                                                        "n": 4}
    assert report["excluded"] == [{"path": str(four_seeds / "c_failed"), "reason": "failed"},
                                  {"path": str(four_seeds / "d_stopped"), "reason": "interrupted"}]
    assert report["score"]["reference_scores"] == {"CartPole-v1": {"random": 0.0, "max": 100.0}}


def test_normalize_option_overrides_the_presets_and_stats_can_be_turned_off(four_seeds, capsys):
    assert cli.main(["compare", str(four_seeds), "--format", "json", "--no-stats",
                     "--normalize", "random=0,max=200"]) == 0
    group = json.loads(capsys.readouterr().out)["groups"][1]
    assert group["iqm"] == {"value": pytest.approx(0.125), "ci": None}
    assert cli.main(["compare", str(four_seeds), "--normalize", "random=1"]) == 2
    assert "expected random=R,max=M" in capsys.readouterr().err


def test_markdown_csv_and_html_reports(four_seeds, capsys):
    from rlcollect.analysis.api import compare
    from rlcollect.analysis.report import render_comparison

    comparison = compare(load_runs([four_seeds]), reps=200, versus=[("0.0003", "0.001")])
    text = render_comparison(comparison, "markdown")
    assert "**final score**" in text and "| algo.lr=0.0003 | 4 | 0.250 [" in text
    assert "- P(algo.lr=0.0003 > algo.lr=0.001) = 0.250 [" in text  # 4 / 16, see the test below
    assert f"- {four_seeds / 'c_failed'}: failed" in text
    records = list(csv.DictReader(io.StringIO(render_comparison(comparison, "csv"))))
    assert [record["group"] for record in records] == ["algo.lr=0.001", "algo.lr=0.0003"]
    assert float(records[1]["iqm"]) == pytest.approx(0.25) and float(records[1]["final_eval_return_mean"]) == 40.0
    assert float(records[1]["iqm_low"]) <= 0.25 <= float(records[1]["iqm_high"])
    page = render_comparison(comparison, "html")
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") == 3 and page.count("<svg") == 3


def test_probability_of_improvement_by_hand(four_seeds):
    from rlcollect.analysis.api import compare

    # x = 0.1, 0.2, 0.3, 1.0 vs y = 0.4, 0.4, 0.5, 0.6: only 1.0 beats any y (all 4), no ties: 4 / 16.
    comparison = compare(load_runs([four_seeds]), reps=200, versus=[("algo.lr=0.0003", "algo.lr=0.001")])
    assert comparison.improvements[0].probability.value == 0.25
    with pytest.raises(CompareError, match="names no group"):
        compare(load_runs([four_seeds]), versus=[("lr=0.5", "lr=0.001")])


def test_the_python_example_of_docs_compare_md_runs_on_the_readme_s_sweep(tmp_path, monkeypatch, capsys):
    """docs/compare.md's "From Python" block, as written, on runs shaped as the README's sweep
    (collector=sync,multisync seed=0,1,2 in runs/sweep): ("multisync", "sync") names one group
    each, though "sync" is also part of "collector=multisync"."""
    text = (Path(__file__).parents[2] / "docs" / "compare.md").read_text()
    [example] = re.findall(r"## From Python.*?```python\n(.*?)```", text, re.S)
    for seed in range(3):
        for collector, final in (("sync", 40.0 + seed), ("multisync", 60.0 + seed)):
            write_run(tmp_path / "runs" / "sweep", f"{collector}_{seed}", [f"collector={collector}"], [0.0, final],
                      collector=collector, seed=seed)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "docs/compare.md", "exec"), {})
    assert "- P(collector=multisync > collector=sync) = 1.000 [" in capsys.readouterr().out
    assert (tmp_path / "figures" / "curves.png").is_file()


def test_plot_writes_png_and_svg_for_each_figure(four_seeds, tmp_path, capsys):
    out = tmp_path / "figures" / "curves.png"
    assert cli.main(["compare", str(four_seeds), "--reps", "200", "--plot", str(out), "--versus", "3", "0.001"]) == 0
    names = sorted(path.name for path in out.parent.iterdir())
    assert names == ["curves-improvement.png", "curves-improvement.svg", "curves-profile.png", "curves-profile.svg",
                     "curves.png", "curves.svg"]
    import matplotlib.image

    assert matplotlib.image.imread(out).shape[0] > 0
    assert (out.parent / "curves.svg").read_text().lstrip().startswith("<?xml")


def test_labels_use_group_choices_not_placeholders_and_group_by_picks_keys(tmp_path):
    write_run(tmp_path, "a", [], [1.0], collector="sync")
    write_run(tmp_path, "b", ["collector=multisync", "algo.lr=0.001"], [2.0], collector="multisync", lr=0.001)
    write_run(tmp_path, "c", ["collector=multisync"], [3.0], collector="multisync")
    runs = load_runs([tmp_path])
    assert [group.label for group in group_runs(runs)] == [
        "collector=sync, algo.lr=0.0003", "collector=multisync, algo.lr=0.001", "collector=multisync, algo.lr=0.0003"]
    assert [(group.label, len(group.runs)) for group in group_runs(runs, group_by=["collector"])] == [
        ("collector=sync", 1), ("collector=multisync", 2)]
    with pytest.raises(CompareError, match="--group-by colector: no run sets it"):  # it pooled every run
        group_runs(runs, group_by=["collector", "colector"])


def test_several_envs_pool_into_groups_with_normalised_scores(tmp_path):
    from rlcollect.analysis.api import compare

    for seed in range(2):
        write_run(tmp_path, f"cp{seed}", ["env=cartpole", "algo.lr=0.001"], [50.0 + 10 * seed], lr=0.001, seed=seed)
        write_run(tmp_path, f"ac{seed}", ["env=acrobot", "algo.lr=0.001"], [-250.0 - 50 * seed], lr=0.001,
                  env_id="Acrobot-v1", seed=seed)
        write_run(tmp_path, f"cq{seed}", ["env=cartpole", "algo.lr=0.01"], [10.0], lr=0.01, seed=seed)
        write_run(tmp_path, f"aq{seed}", ["env=acrobot", "algo.lr=0.01"], [-400.0], lr=0.01, env_id="Acrobot-v1",
                  seed=seed)
    comparison = compare(load_runs([tmp_path]), reps=200, bootstrap=True)
    assert [group.label for group in comparison.groups] == ["algo.lr=0.001", "algo.lr=0.01"]
    assert [row.label for row in comparison.rows] == [
        "algo.lr=0.001 [Acrobot-v1]", "algo.lr=0.01 [Acrobot-v1]", "algo.lr=0.001 [CartPole-v1]",
        "algo.lr=0.01 [CartPole-v1]"]
    best = comparison.stats[0]
    # CartPole 0.5, 0.6 (mean 0.55); Acrobot 0.5, 0.4 (mean 0.45): pooled IQM of 0.4, 0.5, 0.5, 0.6 = 0.5.
    assert best.tasks == {"Acrobot-v1": 2, "CartPole-v1": 2}
    assert best.final["iqm"].value == pytest.approx(0.5) and best.final["mean"].value == pytest.approx(0.5)
    assert best.final["median"].value == pytest.approx(0.5)


def test_several_envs_without_reference_scores(tmp_path, capsys):
    from rlcollect.analysis.api import compare

    for seed in range(3):
        write_run(tmp_path, f"cp{seed}", ["env=cartpole"], [50.0], seed=seed)
        write_run(tmp_path, f"pe{seed}", ["env=pendulum"], [-300.0], env_id="Pendulum-v1", seed=seed)
    runs = load_runs([tmp_path])
    with pytest.raises(CompareError, match="none for Pendulum-v1"):
        compare(runs, bootstrap=True)
    comparison = compare(runs)  # the default: the table, and a note instead of the estimates
    assert not comparison.bootstrap and "give --normalize" in comparison.notes[0]
    assert compare(runs, normalize={"Pendulum-v1": (-1200.0, 0.0)}, reps=100).stats[0].final["mean"].value == \
        pytest.approx((0.5 + 0.75) / 2)
