"""Checkpoint and resume: a run killed with SIGKILL continues without gap or duplicate."""
import json
import shutil
import signal
import subprocess
import time

import pytest
import torch
from commands import rlcollect, rlcollect_all, start_rlcollect

from rlcollect.analysis.wandb_runs import load_wandb_runs, resumed_history
from rlcollect.checkpoint import CHECKPOINT_FILE, load_checkpoint
from rlcollect.logging.runs import load_run_dir
from rlcollect.logging.wandb_offline import find_offline_runs, read_offline_run

RUN = ["total_frames=12288", "collector.frames_per_batch=256", "checkpoint_every_frames=2048",
       "env.solved_return=1000000", "eval.every_frames=1024", "eval.episodes=2", "progress=false"]


def steps(run_dir):
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(300)
def test_kill_9_then_resume_continues_frames_and_metrics_without_gap_or_duplicate(tmp_path):
    run_dir = tmp_path / "run"
    process = start_rlcollect(tmp_path, "train", *RUN, "hydra.run.dir=run", stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not ((run_dir / CHECKPOINT_FILE).exists() and len(steps(run_dir)) * 256 > 2048 + 256):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.05)
    assert process.poll() is None  # killed mid-way, past a checkpoint
    process.send_signal(signal.SIGKILL)
    process.wait()
    checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE)  # weights_only: no arbitrary pickle
    checkpointed = int(checkpoint["frames"])
    assert checkpointed % 2048 == 0 and 0 < checkpointed < 12288
    assert max(steps(run_dir)) > checkpointed  # rows past the checkpoint exist and must not be doubled

    result = rlcollect(tmp_path, "train", f"resume={run_dir}", timeout=240)
    assert result.returncode == 0, result.stderr
    assert steps(run_dir) == list(range(256, 12288 + 1, 256))  # every batch exactly once
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["frames"] == 12288
    wandb_runs = [read_offline_run(path) for path in find_offline_runs(run_dir)]
    assert len(wandb_runs) == 2 and len({run.run_id for run in wandb_runs}) == 1  # the same W&B run, continued
    # the resumed part: from the row after the last one the killed part's W&B writer had written
    resumed = next(run for run in wandb_runs if run.history and run.history[-1]["_step"] == 12288)
    assert resumed.history[0]["_step"] <= checkpointed + 256
    # the resumed part keeps the run's name, group and job type (a part killed before W&B flushed
    # its file has no records), and no other run folder was made
    assert {(run.name, run.group, run.job_type) for run in wandb_runs if run.history} == {
        (wandb_runs[0].name or resumed.name, None, "sync")} and resumed.name.startswith("checkpoint_every_frames=")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]
    # read back from W&B, the parts are one run whose steps never go back, ending as the run folder does
    [from_wandb] = load_wandb_runs(run_dir)
    wandb_steps = [row["step"] for row in from_wandb.history]
    assert wandb_steps == steps(run_dir)  # every row, once
    from_folder = load_run_dir(run_dir)
    for key in ("frames", "final_eval_return"):
        assert from_wandb.summary[key] == from_folder.summary[key]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lost", ["rows", "folder", "replaced"])
def test_a_resumed_wandb_run_gets_the_rows_its_killed_writer_had_not_written(tmp_path, lost):
    """W&B writes its rows a little after metrics.jsonl: a run killed with SIGKILL can leave
    its W&B file short of rows the checkpoint counts. Here the file is cut back (as the kill
    would leave it) to the rows up to 2,048 of a run checkpointed at 4,096; the resume logs
    the rows after 2,048 from metrics.jsonl, so the W&B run read back holds every row of the
    folder, with its values. A run whose wandb/ folder was deleted gets every row again, an
    event row as its count. Rows that a later part wrote again (it resumed from an earlier
    checkpoint and was killed before its W&B writer wrote them) are logged again from the
    first that W&B holds with other values."""
    run_dir = tmp_path / "run"
    options = [*RUN[1:], "hydra.run.dir=run"]
    result = rlcollect(tmp_path, "train", "total_frames=4096", *options, timeout=240)
    assert result.returncode == 0, result.stderr
    [part] = find_offline_runs(run_dir)
    if lost == "folder":
        shutil.rmtree(run_dir / "wandb")
        lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
        event = {"step": 1024, "event": "worker_restart", "worker": 0, "cause": "exit code -9", "frames_lost": 0}
        lines.insert(4, json.dumps(event) + "\n")  # after the row of 1,024, as the collector's restart writes it
        (run_dir / "metrics.jsonl").write_text("".join(lines))
        result = rlcollect(tmp_path, "train", "resume=run", "total_frames=6144", timeout=240)
        assert result.returncode == 0, result.stderr
        [from_wandb] = load_wandb_runs(run_dir)
        assert [row["step"] for row in from_wandb.history] == list(range(256, 6144 + 1, 256))
        [at_1024] = [row for row in from_wandb.history if row["step"] == 1024]
        assert at_1024["event/worker_restart"] == 1 and "event" not in at_1024 and "worker" not in at_1024
        return
    if lost == "replaced":  # a part resumed from 2,048 wrote these rows again, its W&B file empty
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            if row["step"] > 2048:
                row["train/loss_value"] += 1.0
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        result = rlcollect(tmp_path, "train", "resume=run", "total_frames=6144", timeout=240)
        assert result.returncode == 0, result.stderr
        folder_rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        [from_wandb] = load_wandb_runs(run_dir)
        assert [row["step"] for row in from_wandb.history] == [row["step"] for row in folder_rows]
        for wandb_row, row in zip(from_wandb.history, folder_rows):
            assert {key: wandb_row[key] for key in row} == row
        assert read_offline_run(find_offline_runs(run_dir)[-1]).history[0]["_step"] == 2048 + 256
        return
    data = part.read_bytes()
    low, high = 0, len(data)  # the longest prefix whose rows end at 2,048 (a later record cut short is not read)
    while low < high:
        middle = (low + high + 1) // 2
        part.write_bytes(data[:middle])
        if max((row["_step"] for row in read_offline_run(part).history), default=0) <= 2048:
            low = middle
        else:
            high = middle - 1
    part.write_bytes(data[:low])
    assert [row["step"] for row in load_wandb_runs(run_dir)[0].history] == list(range(256, 2048 + 1, 256))

    result = rlcollect(tmp_path, "train", "resume=run", "total_frames=6144", timeout=240)
    assert result.returncode == 0, result.stderr
    folder_rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in folder_rows] == list(range(256, 6144 + 1, 256))
    [from_wandb] = load_wandb_runs(run_dir)
    assert [row["step"] for row in from_wandb.history] == [row["step"] for row in folder_rows]
    for wandb_row, row in zip(from_wandb.history, folder_rows):
        assert {key: wandb_row[key] for key in row} == row
    # the resumed part holds the rows after 2,048 and none before
    resumed = read_offline_run(find_offline_runs(run_dir)[-1])
    assert resumed.history[0]["_step"] == 2048 + 256 and resumed.history[-1]["_step"] == 6144


@pytest.mark.timeout(300)
def test_a_run_killed_before_its_first_periodic_checkpoint_resumes_from_its_first_batch(tmp_path):
    """checkpoint_every_frames=20000 (the default) is far off, but the run checkpoints after
    its first batch (and every checkpoint_every_seconds): killed a few batches in, it resumes."""
    run_dir = tmp_path / "run"
    process = start_rlcollect(tmp_path, "train", "total_frames=10000000", "collector.frames_per_batch=256",
                              "env.solved_return=1000000", "eval.every_frames=1000000", "logger=none", "progress=false",
                              "hydra.run.dir=run", stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not ((run_dir / "metrics.jsonl").exists() and len(steps(run_dir)) >= 3):  # the first checkpoint is whole
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    checkpointed = int(load_checkpoint(run_dir / CHECKPOINT_FILE)["frames"])
    assert checkpointed < 20000 and checkpointed % 256 == 0
    result = rlcollect(tmp_path, "train", "resume=run", f"total_frames={checkpointed + 512}", timeout=240)
    assert result.returncode == 0, result.stderr
    assert steps(run_dir) == list(range(256, checkpointed + 512 + 1, 256))


def checkpoints_saved(monkeypatch) -> dict[str, list[int]]:
    """``{run folder name: [frames of each checkpoint it wrote]}``, from now on."""
    from rlcollect.pipeline.lifecycle import Pipeline

    saved: dict[str, list[int]] = {}
    save = Pipeline.save_checkpoint

    def recorded(pipeline, *args, **kwargs):
        saved.setdefault(pipeline.run_dir.name, []).append(pipeline.collector.frames)
        save(pipeline, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "save_checkpoint", recorded)
    return saved


@pytest.mark.timeout(120)
def test_checkpoints_come_after_the_first_batch_then_every_checkpoint_every_seconds_in_runs_and_sweep_members(
        tmp_path, monkeypatch):
    """checkpoint_every_seconds: the first batch's checkpoint, then one whenever that many
    seconds passed (1e-9: every batch); null: none by time. Alike for the members of a
    batched sweep, whose sessions are the solo run's."""
    from hydra import compose, initialize_config_module

    from rlcollect import pipeline
    from rlcollect.config import register_configs
    from rlcollect.sweeps.run import build_sweep

    tiny = ["total_frames=1024", "collector.frames_per_batch=256", "eval.every_frames=1024", "eval.episodes=1",
            "env.solved_return=null", "algo.epochs=1", "checkpoint_every_frames=null", "logger=none", "progress=false"]
    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        cfgs = {folder: compose("train", overrides=[*tiny, *overrides]) for folder, overrides in {
            "every_batch": ["checkpoint_every_seconds=1e-9"], "first_batch": ["checkpoint_every_seconds=1e9"],
            "not_by_time": ["checkpoint_every_seconds=null"],
            "frames_and_time": ["checkpoint_every_seconds=1e9", "checkpoint_every_frames=512"]}.items()}
        members = [compose("train", overrides=[*tiny, f"seed={seed}", "checkpoint_every_seconds=1e-9"])
                   for seed in (0, 1)]
    saved = checkpoints_saved(monkeypatch)
    for folder, cfg in cfgs.items():
        pipeline.run(pipeline.build(cfg, tmp_path / folder))
    names = dict(name=None, group=None, job_type=None)
    build_sweep(members, [tmp_path / "member0", tmp_path / "member1"], [names, names]).run()
    assert saved == {"every_batch": [256, 512, 768, 1024], "first_batch": [256, 1024], "not_by_time": [1024],
                     "frames_and_time": [256, 512, 1024], "member0": [256, 512, 768, 1024],
                     "member1": [256, 512, 768, 1024]}


def test_a_resume_without_a_checkpoint_says_what_the_run_folder_holds(tmp_path):
    from rlcollect import pipeline
    from rlcollect.errors import ConfigError

    (tmp_path / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(ConfigError) as nothing:
        pipeline.resume(tmp_path)
    assert str(nothing.value) == (f"resume={tmp_path}: no checkpoint.pt to continue from: the run stopped before its "
                                  "first batch (its metrics.jsonl has no rows); train it again in a new folder")
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": step}) + "\n" for step in (256, 512)))
    with pytest.raises(ConfigError) as rows:
        pipeline.resume(tmp_path)
    assert str(rows.value) == (f"resume={tmp_path}: no checkpoint.pt to continue from: the run stopped before its "
                               "first checkpoint (its metrics.jsonl has 2 rows, to frame 512); train it again in a "
                               "new folder")


def test_the_parts_of_a_resumed_wandb_run_are_read_as_one_history():
    killed = [{"_step": step, "x": "killed"} for step in (256, 512, 768, 1024)]  # checkpointed at 512
    resumed = [{"_step": step, "x": "resumed"} for step in (768, 1024, 1280)]
    assert resumed_history([killed, resumed]) == [*killed[:2], *resumed]
    assert resumed_history([[], resumed]) == resumed and resumed_history([killed, []]) == killed


@pytest.mark.timeout(180)
def test_a_resumed_run_takes_a_longer_total_frames_and_refuses_other_changes(tmp_path):
    def train(*overrides):
        return rlcollect(tmp_path, "train", *overrides, timeout=120)

    first = train("total_frames=512", "collector.frames_per_batch=256", "checkpoint_every_frames=256",
                  "eval.every_frames=256", "eval.episodes=1", "env.solved_return=1000000", "logger=none",
                  "progress=false", "hydra.run.dir=run")
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "run"
    refusals = [(["collector=multisync"], "collector cannot change on resume"),
                (["algo.lr=0.1"], "algo.lr cannot change on resume"),
                # a key of another collector's config: said so, not as a key the default collector lacks
                (["collector.num_workers=3"], "collector.num_workers cannot change on resume"),
                (["total_frames=512"], f"total_frames=512: the run in {run_dir} has 512 frames already; resume it "
                                       "with total_frames > 512"),
                (["torch_threads=0", "total_frames=1024"], "torch_threads=0: must be >= 1"),  # was a build error
                (["checkpoint_every_frames=-5", "total_frames=1024"], "checkpoint_every_frames=-5: must be >= 1")]
    # one after the other: a resume holds its run from before its checks (docs/errors.md), so two at once
    # would meet each other, not their own refusals
    results = [rlcollect(tmp_path, "train", f"resume={run_dir}", *overrides, timeout=120) for overrides, _ in refusals]
    for (_, message), result in zip(refusals, results):
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert steps(run_dir) == [256, 512]  # untouched by the refused resumes
    result = train(f"resume={run_dir}", "total_frames=1024")
    assert result.returncode == 0, result.stderr
    assert steps(run_dir) == [256, 512, 768, 1024]
    assert json.loads((run_dir / "summary.json").read_text())["frames"] == 1024
    assert "total_frames: 1024" in (run_dir / "config.yaml").read_text()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]


@pytest.mark.timeout(300)
def test_a_run_is_never_trained_by_two_processes_at_once(tmp_path):
    """A resume of a run that another process trains now (or resumes now) is one line, exit
    2, and writes nothing: the run goes on and ends with every row once; once its process
    has ended, the same resume continues it."""
    run_dir = tmp_path / "run"
    process = start_rlcollect(tmp_path, "train", "total_frames=10000000", "collector.frames_per_batch=256",
                              "checkpoint_every_frames=256", "env.solved_return=1000000", "eval.every_frames=100000",
                              "logger=none", "progress=false", "hydra.run.dir=run", stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not ((run_dir / CHECKPOINT_FILE).exists() and len(steps(run_dir)) >= 2):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.05)
    second = rlcollect(tmp_path, "train", "resume=run", "total_frames=20000000", timeout=120)
    assert process.poll() is None  # still training: the refusal above met it
    assert (second.returncode, second.stderr.splitlines()) == (2, [
        "rlcollect train: invalid configuration: resume=run: another process is training or resuming the run in run "
        "now; wait for it to end (or stop it) first"])
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    frames = json.loads((run_dir / "summary.json").read_text())["frames"]
    assert steps(run_dir) == list(range(256, frames + 1, 256))  # every row once: the refused resume wrote none
    resumed = rlcollect(tmp_path, "train", "resume=run", f"total_frames={frames + 256}", timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert steps(run_dir) == list(range(256, frames + 257, 256))


def test_a_run_folder_is_held_by_its_process_alone_not_by_the_processes_it_forks(tmp_path):
    """A collector's forked worker does not keep its trainer's run folder locked: once the
    trainer lets it go (its job ended, or it died), the folder is free though the worker
    lives on."""
    import fcntl
    import multiprocessing
    import os

    from rlcollect.commands.run_folders import hold_run_folder, release_run_folder

    def lock_taken() -> bool:
        handle = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(handle)  # (a lock this test took ends with it)

    context = multiprocessing.get_context("fork")
    started, go = context.Event(), context.Event()

    def work() -> None:  # (its fork's hooks have run by now)
        started.set()
        go.wait(60)

    try:
        hold_run_folder(tmp_path, "resume=run")
        assert lock_taken()
        worker = context.Process(target=work)
        worker.start()
        assert started.wait(60)
        release_run_folder(tmp_path)
        assert worker.is_alive() and not lock_taken()
    finally:
        release_run_folder(tmp_path)
        go.set()
    worker.join(60)
    assert worker.exitcode == 0


def test_a_solved_run_resumed_with_more_frames_trains_on_and_keeps_its_first_solve(tmp_path):
    """The threshold stops a run the first time it is reached; a resume that asks for more
    frames gets them, and frames_to_solve stays that first frame. The seconds of each phase
    go on from the first part's."""
    def train(*overrides):
        return rlcollect(tmp_path, "train", *overrides, timeout=120)

    first = train("total_frames=1024", "collector.frames_per_batch=256", "eval.every_frames=256",
                  "eval.episodes=1", "env.solved_return=1", "logger=none", "progress=false", "hydra.run.dir=run")
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "run"
    solved = json.loads((run_dir / "summary.json").read_text())
    assert (solved["status"], solved["frames"], solved["frames_to_solve"]) == ("solved", 256, 256)
    result = train(f"resume={run_dir}", "total_frames=768")
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["frames"], summary["frames_to_solve"]) == ("finished", 768, 256)
    assert summary["seconds_to_solve"] == solved["seconds_to_solve"]
    assert steps(run_dir) == [256, 512, 768]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for phase in ("collect", "train", "eval"):  # seconds over the whole run: the resume's added to the first part's
        seconds = [row[f"time/{phase}"] for row in rows]
        assert seconds == sorted(seconds) and seconds[1] >= solved[f"seconds_{phase}"] == seconds[0]
        assert summary[f"seconds_{phase}"] == seconds[-1]
    assert load_run_dir(run_dir).summary["frames_to_solve"] == 256  # what compare reads


def test_a_run_resumed_from_a_checkpoint_older_than_its_best_pt_gets_back_the_best_up_to_the_checkpoint(tmp_path):
    """best.pt saved after the last checkpoint (a kill -9, a second Ctrl-C): the resume
    replays that part, so best.pt goes back to the best up to the checkpoint, which the
    checkpoint keeps (its frames, return and policy), not lost."""
    from rlcollect.pipeline import resume

    first = rlcollect(tmp_path, "train", "total_frames=256", "collector.frames_per_batch=128", "algo.minibatch_size=64",
                      "eval.every_frames=128", "eval.episodes=2", "env.solved_return=null", "logger=none",
                      "progress=false", "hydra.run.dir=run")
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "run"
    checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE)
    best = load_checkpoint(run_dir / "best.pt")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert checkpoint["best"]["frames"] == best["frames"] in (128, 256)
    assert checkpoint["best"]["eval_return"] == best["eval_return"] == summary["best_eval_return"]
    later = {"frames": 384, "eval_return": 1e6, "policy": checkpoint["policy"]}  # saved past the checkpoint
    torch.save(later, run_dir / "best.pt")
    pipeline = resume(run_dir, {"total_frames": 512})
    try:
        pipeline.open()
    finally:
        pipeline.close()
    restored = load_checkpoint(run_dir / "best.pt")
    assert (restored["frames"], restored["eval_return"]) == (best["frames"], best["eval_return"])
    assert restored["policy"].keys() == best["policy"].keys()
    assert all(torch.equal(restored["policy"][key], value) for key, value in best["policy"].items())


def test_resume_errors_are_clear_and_leave_no_folder_behind(tmp_path):
    """A folder that is not a run, one that is not there, an empty resume=, and a resume told
    to write elsewhere: one line each, exit 2, and nothing made (Hydra made the folder it was
    told to run in; an empty resume= trained a new run into the current folder; hydra.run.dir
    got Hydra's records of the resume, another run's overwritten)."""
    (tmp_path / "notes").mkdir()
    results = rlcollect_all(tmp_path, [["train", f"resume={name}", "logger=none"] for name in ("notes", "gone", "")]
                            + [["train", "resume=notes", "hydra.run.dir=elsewhere"],
                               ["train", "--multirun", "resume=a,b"],
                               ["train", "--multirun", "resume=notes", "total_frames=4096,8192"]])
    assert [(result.returncode, result.stderr.splitlines()) for result in results] == [
        (2, ["rlcollect train: invalid configuration: resume=notes: not a run folder (no config.yaml)"]),
        (2, ["rlcollect train: invalid configuration: resume=gone: no such folder"]),
        (2, ["rlcollect train: invalid configuration: resume=: name the run folder to continue (resume=<folder>)"]),
        # Hydra would write its records there (another run's, or a new folder)
        (2, ["rlcollect train: invalid configuration: resume=notes: hydra.run.dir=elsewhere: a resumed run continues "
             "in its own folder; leave hydra.run.dir out"]),
        # --multirun: resumed in place (one folder, a run's or a sweep's), no new sweep folder
        (2, ["rlcollect train: invalid configuration: resume=a,b: no such folder"]),
        # values to sweep over (Hydra's line told to add the --multirun that was there)
        (2, ["rlcollect train: invalid configuration: total_frames=4096,8192: a resume continues a run (or a sweep) "
             "with one value per key; to train several values, sweep them into a new folder"])]
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["notes"]


def test_checkpoint_holds_only_weights_only_loadable_state(tmp_path):
    from hydra import compose, initialize_config_module

    from rlcollect import pipeline
    from rlcollect.config import register_configs

    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        cfg = compose("train", overrides=["algo=dqn", "algo.learning_starts=0", "algo.gradient_steps_per_batch=1",
                                          "total_frames=512", "checkpoint_every_frames=256", "logger=none",
                                          "progress=false", "eval.episodes=1", "eval.max_steps=10"])
    pipeline.run(pipeline.build(cfg, tmp_path))
    state = torch.load(tmp_path / CHECKPOINT_FILE, weights_only=True)
    assert state["frames"] == 512
    storage = state["learner"]["replay_buffer"]["storage"]
    assert storage["write_count"] == 512  # the buffer position
    # of the 100,000 steps the buffer holds, the 512 written
    assert storage["data_shape"] == [100_000] and storage["data"]["action"].shape == (512,)
    assert set(state["rng"]) == {"torch", "numpy", "python"}
    assert state["collector"]["traj_pool"]["next_id"] > 0
    # the resumed run's buffer holds those steps, and writes on after them
    pipeline.run(pipeline.resume(tmp_path, overrides={"total_frames": 768}))
    resumed = torch.load(tmp_path / CHECKPOINT_FILE, weights_only=True)["learner"]["replay_buffer"]["storage"]
    assert resumed["write_count"] == 768 and resumed["data"]["action"].shape == (768,)
    for key in ("action", "observation"):
        assert torch.equal(resumed["data"][key][:512], storage["data"][key])


def test_a_resume_that_trains_no_batch_keeps_the_seconds_of_the_last_row(tmp_path):
    """A run interrupted at its total_frames (as a stop in its last batch left it before such
    a stop left it finished), then resumed: the resume trains no batch and writes no row, and
    summary.json's seconds stay the last row's time (the training clock, which the checkpoint
    carries), as compare reads them."""
    import threading

    from train_configs import train_configs

    from rlcollect.pipeline import build, resume, run

    [cfg] = train_configs(["total_frames=128", "collector.frames_per_batch=128", "algo.minibatch_size=64",
                           "env.num_envs=4", "logger=none", "progress=false", "eval.episodes=1"])
    stop = threading.Event()
    stop.set()  # the batch under way is the last: with it the run has trained all its frames
    run(build(cfg, tmp_path / "run"), stop=stop)
    stopped = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (stopped["status"], stopped["frames"]) == ("finished", 128)
    (tmp_path / "run" / "summary.json").write_text(json.dumps({**stopped, "status": "interrupted"}))
    run(resume(tmp_path / "run"))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert (summary["status"], summary["frames"], len(rows)) == ("finished", 128, 1)
    assert summary["seconds"] == rows[-1]["time"] == stopped["seconds"]


def test_a_memmap_replay_run_resumes_with_its_files_and_refuses_without_them(tmp_path):
    """DQN on a memory-mapped replay buffer (its transitions in the run's replay/, not in its
    checkpoint): resumed, it goes on with them; with replay/ gone (moved, a scratch folder
    cleaned), the resume is a ConfigError and every file stays as it was, where it trained
    on a buffer of zeros at the checkpoint's position."""
    import shutil

    from run_states import hashes
    from train_configs import train_configs

    from rlcollect.errors import ConfigError
    from rlcollect.pipeline import build, resume, run

    [cfg] = train_configs(["algo=dqn", "buffer/storage=memmap", "algo.learning_starts=64", "total_frames=256",
                           "collector.frames_per_batch=64", "env.num_envs=2", "logger=none", "progress=false",
                           "eval.episodes=1", "env.solved_return=null"])
    run(build(cfg, tmp_path / "run"))
    shutil.copytree(tmp_path / "run", tmp_path / "gone")
    shutil.rmtree(tmp_path / "gone" / "replay")
    before = hashes(tmp_path / "gone")
    with pytest.raises(ConfigError, match=r"resume=.*gone: its memory-mapped replay buffer \(.*gone/replay\) is not "
                                          r"there \(moved, or cleaned away\)"):
        resume(tmp_path / "gone", overrides={"total_frames": 384})
    assert hashes(tmp_path / "gone") == before
    resumed = resume(tmp_path / "run", overrides={"total_frames": 384})
    assert len(resumed.learner.replay_buffer) == 256  # its 256 transitions, from replay/
    run(resumed)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["frames"] == 384


@pytest.mark.timeout(300)
def test_a_resume_checkpoints_at_the_cadence_it_is_given(tmp_path):
    """Its next frame checkpoint is the earlier of the one its checkpoint scheduled and the new
    cadence's: a resume that checkpoints more often does so from its first frames."""
    from rlcollect.checkpoint import previous_path
    from rlcollect.pipeline.progress import Progress

    tiny = ["collector.frames_per_batch=256", "eval.every_frames=256", "eval.episodes=1",
            "env.solved_return=1000000", "logger=none", "progress=false"]
    first = rlcollect(tmp_path, "train", "total_frames=512", "checkpoint_every_frames=100000", *tiny,
                      "hydra.run.dir=run", timeout=120)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "run"
    result = rlcollect(tmp_path, "train", f"resume={run_dir}", "total_frames=1280", "checkpoint_every_frames=256",
                       timeout=120)
    assert result.returncode == 0, result.stderr
    # checkpoints at 768, 1024 and the final one at 1280 (before: none between 512 and the final one)
    assert int(load_checkpoint(previous_path(run_dir / CHECKPOINT_FILE))["frames"]) == 1024
    assert int(load_checkpoint(run_dir / CHECKPOINT_FILE)["frames"]) == 1280
    progress = Progress.start(env_id="CartPole-v1", solved_return=None, eval_every_frames=1024,
                              checkpoint_every_frames=100_000)
    for every, expected in ((256, 2048 + 256), (200_000, 100_000), (None, None)):
        progress.next_checkpoint = 100_000
        progress.checkpoint_every(2048, every)
        assert progress.next_checkpoint == expected
    progress.next_checkpoint = None  # the run checkpointed by seconds alone
    progress.checkpoint_every(2048, 512)
    assert progress.next_checkpoint == 2560


def test_a_resumed_run_goes_on_without_the_error_that_ended_its_earlier_part():
    """A run that failed after a checkpoint was written (its envs' processes died, say) and is
    resumed is not failed: its progress comes back without the earlier part's error, so a
    resume that finishes does not leave summary.json saying finished and an error at once.
    Everything else of the summary comes back as it was saved."""
    from rlcollect.pipeline.progress import Progress

    progress = Progress.start(env_id="CartPole-v1", solved_return=475.0, eval_every_frames=1024,
                              checkpoint_every_frames=None)
    progress.summary.update({"frames": 2048, "status": "failed", "error": "BrokenPipeError: [Errno 32] Broken pipe"})
    back = Progress.from_state_dict(progress.state_dict())
    assert "error" not in back.summary
    assert back.summary == {key: value for key, value in progress.summary.items() if key != "error"}
    assert (back.next_eval, back.next_checkpoint) == (1024, None)


@pytest.mark.timeout(300)
def test_a_background_run_resumed_for_more_frames_logs_each_new_batch_once(tmp_path):
    """algo.background=true learns one batch's worth at a time from the replay buffer the
    collector fills; resumed for more frames, it counts from its checkpoint's frame (it
    counted from 0 again, logging every batch of the first part a second time)."""
    common = ["algo=dqn", "algo.background=true", "algo.gradient_steps_per_batch=4", "algo.learning_starts=256",
              "logger=none", "progress=false", "eval.episodes=2", "env.solved_return=null"]
    first = rlcollect(tmp_path, "train", *common, "total_frames=1024", "hydra.run.dir=run")
    assert first.returncode == 0, first.stderr
    resumed = rlcollect(tmp_path, "train", "resume=run", "total_frames=1536")
    assert resumed.returncode == 0, resumed.stderr
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(256, 1536 + 1, 256))


MULTIASYNC = ["collector=multiasync", "collector.start_method=fork"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("collection", [MULTIASYNC, ["algo.background=true"], [*MULTIASYNC, "algo.background=true"]],
                         ids=["multiasync", "background", "multiasync_background"])
def test_a_replay_run_stopped_and_resumed_says_its_checkpoint_s_frame_and_logs_every_batch_once(tmp_path, collection):
    """A collector that writes the replay buffer ahead of the learner: a MultiAsyncCollector's
    checkpoint waits for the batches in flight (their frames in its state, their steps in the
    buffer), a background one collects on while the learner learns. A checkpoint is at the
    learner's frame, summary.json's checkpoint_frames says that frame (it said the
    collector's), and the resume learns from the frames past it first: every batch has its
    row once (a multiasync run's rows had a gap, a background run's restarted from 256)."""
    import signal as signals

    from processes import wait_for

    process = start_rlcollect(tmp_path, "train", "algo=dqn", *collection,
                              "algo.gradient_steps_per_batch=16", "total_frames=6144", "logger=none",
                              "progress=false", "eval.episodes=2", "env.solved_return=null", "hydra.run.dir=run")
    metrics = tmp_path / "run" / "metrics.jsonl"
    wait_for(lambda: process.poll() is not None or (metrics.exists() and metrics.read_text().count("\n") >= 8),
             timeout=120)
    process.send_signal(signals.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode in (0, 130), stderr  # 0: it had finished before the signal
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["checkpoint_frames"] == int(load_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)["frames"])
    resumed = rlcollect(tmp_path, "train", "resume=run", "total_frames=6144" if process.returncode else
                        "total_frames=6400")
    assert resumed.returncode == 0, resumed.stderr
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(steps[0], steps[-1] + 1, steps[0])) and steps[-1] >= 6144, steps
