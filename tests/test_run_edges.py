"""A run's edges, as a user meets them: the policy every run keeps, resumes that fail without
touching the run, errors said as whose they are, sweeps that list every job that did not finish."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from commands import rlcollect as cli
from commands import rlcollect_all as cli_all
from run_states import hashes

from rlcollect.checkpoint import load_checkpoint

TINY = ["total_frames=512", "collector.frames_per_batch=128", "algo.minibatch_size=64", "env.num_envs=4",
        "eval.every_frames=256", "eval.episodes=2", "algo.epochs=1", "progress=false"]

USER_ENVS = '''
import math

import gymnasium as gym
from rlcollect.testing import CountingEnv


class Seven(CountingEnv):
    """Episodes of 7 steps."""

    def __init__(self):
        super().__init__(episode_length=7)


class NaNReward(CountingEnv):
    """The env seeded 2 (env index 2 of a run seeded 0) returns a NaN reward at its third step."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.seed_given = seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        if getattr(self, "seed_given", None) == 2 and self.count == 3:
            reward = math.nan
        return observation, reward, terminated, truncated, info


class Broken(CountingEnv):
    """An env whose constructor has a bug."""

    def __init__(self):
        super().__init__(episode_length="seven" + 7)


gym.register("MySeven-v0", entry_point=Seven)
gym.register("NaNReward-v0", entry_point=NaNReward)
gym.register("Broken-v0", entry_point=Broken)
'''


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def user_envs(tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "my_envs.py").write_text(USER_ENVS)
    return tmp_path / "user"


# ---------------------------------------------------------------------------- every run keeps its policy
@pytest.mark.timeout(300)
def test_a_finished_run_keeps_its_final_checkpoint_and_its_best_policy(tmp_path):
    """512 frames, far below checkpoint_every_frames: checkpoint.pt still holds the final
    frame, and best.pt the policy of the best evaluation, with its frame and return."""
    result = cli(tmp_path, "train", *TINY, "env.solved_return=null", "logger=none", "hydra.run.dir=run")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["frames"], summary["checkpoint_frames"]) == ("finished", 512, 512)
    assert int(load_checkpoint(run / "checkpoint.pt")["frames"]) == 512
    evaluations = [(row["step"], row["eval/episode_return"]) for row in read_jsonl(run / "metrics.jsonl")
                   if "eval/episode_return" in row]
    assert [step for step, _ in evaluations] == [256, 512]
    best_step, best_return = max(evaluations, key=lambda evaluation: evaluation[1])  # the first of the best
    best = load_checkpoint(run / "best.pt")
    assert (int(best["frames"]), float(best["eval_return"])) == (best_step, best_return)
    assert summary["best_eval_return"] == best_return
    assert set(best) == {"frames", "eval_return", "policy"}


@pytest.mark.timeout(300)
def test_a_run_whose_env_fails_keeps_a_checkpoint_at_its_last_frame(tmp_path):
    crashing = tmp_path / "crashing_envs.py"
    crashing.write_text("import gymnasium as gym\nfrom rlcollect.testing import ErrorAfterEnv\n"
                        "gym.register('Crash-v0', entry_point=ErrorAfterEnv, kwargs={'error_after': 300})\n")
    result = cli(tmp_path, "train", *TINY, "env.id=crashing_envs:Crash-v0", "env.num_envs=1",
                 "env.solved_return=null", "logger=none", "hydra.run.dir=run", pythonpath=tmp_path)
    assert result.returncode == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["frames"] == 256  # two batches of 128 before step 301
    assert summary["checkpoint_frames"] == 256
    assert int(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["frames"]) == 256


# ---------------------------------------------------------------------------- a failed resume changes nothing
@pytest.mark.timeout(600)
def test_a_failed_resume_leaves_every_file_of_the_run_byte_identical(tmp_path, user_envs):
    """Four ways a resume cannot work, each found before a file of the run (metrics.jsonl,
    summary.json, checkpoints, the W&B run) changes: one line, exit 2, every hash as before."""
    base, foreign = cli_all(tmp_path, [
        (["train", *TINY, "env.id=my_envs:MySeven-v0", "env.solved_return=null", "hydra.run.dir=base"], user_envs),
        ["train", *TINY, "logger=none", "hydra.run.dir=cartpole"]])
    assert base.returncode == 0, base.stderr
    assert foreign.returncode == 0, foreign.stderr
    assert list((tmp_path / "base" / "wandb").rglob("*.wandb"))

    def foreign_checkpoint(run):
        shutil.copy(tmp_path / "cartpole" / "checkpoint.pt", run / "checkpoint.pt")

    def corrupt_checkpoint(run):
        (run / "checkpoint.pt").write_bytes(os.urandom(4096))
        (run / "checkpoint.pt.prev").unlink(missing_ok=True)

    def larger_model(run):
        config = (run / "config.yaml").read_text()
        assert "hidden_sizes:\n  - 64\n  - 64\n" in config
        (run / "config.yaml").write_text(config.replace("hidden_sizes:\n  - 64\n  - 64\n",
                                                        "hidden_sizes:\n  - 128\n  - 64\n"))

    cases = {"foreign checkpoint": (foreign_checkpoint, user_envs, "does not fit the run its config.yaml builds"),
             "missing user module": (lambda run: None, tmp_path, "cannot import 'my_envs'"),
             "corrupt checkpoint": (corrupt_checkpoint, user_envs, "is corrupt or incomplete"),
             "larger model": (larger_model, user_envs, "size mismatch")}
    before = {}
    for name, (breaks, _, _) in cases.items():
        run = tmp_path / name.replace(" ", "_")
        shutil.copytree(tmp_path / "base", run)
        breaks(run)
        before[name] = hashes(run)
    results = cli_all(tmp_path, [(["train", f"resume={tmp_path / name.replace(' ', '_')}", "total_frames=1024"],
                                  pythonpath) for name, (_, pythonpath, _) in cases.items()])
    for (name, (_, _, message)), result in zip(cases.items(), results):
        run = tmp_path / name.replace(" ", "_")
        assert result.returncode == 2, (name, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith("rlcollect train: ") and message in line, (name, line)
        assert hashes(run) == before[name], name
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["base", "cartpole", "user", *(name.replace(" ", "_") for name in cases)])  # no other folder made


@pytest.mark.timeout(300)
def test_resuming_a_finished_run_needs_a_larger_total_frames_and_a_sweep_member_resumes_by_its_folder(tmp_path):
    sweep = cli(tmp_path, "train", "--multirun", "seed=0", *TINY, "total_frames=256", "logger=none",
                "env.solved_return=null", "hydra.sweep.dir=sweep")
    assert sweep.returncode == 0, sweep.stderr
    [member] = [path for path in (tmp_path / "sweep").iterdir() if path.is_dir()]
    assert "=" in member.name and "," in member.name  # 0_algo.epochs=1,algo.minibatch_size=64,...
    before = hashes(member)
    refused = cli(tmp_path, "train", f"resume={member}")
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"rlcollect train: invalid configuration: resume={member}: the run finished at 256 frames; to train it on, "
        "resume it with total_frames > 256"]
    assert hashes(member) == before
    resumed = cli(tmp_path, "train", f"resume={member}", "total_frames=512")
    assert resumed.returncode == 0, resumed.stderr
    assert [row["step"] for row in read_jsonl(member / "metrics.jsonl")] == [128, 256, 384, 512]
    assert json.loads((member / "summary.json").read_text())["frames"] == 512
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sweep"]  # no stray outputs/


@pytest.mark.timeout(300)
def test_a_resume_drops_a_torn_last_metrics_row_and_names_a_damaged_one_without_touching_the_run(tmp_path):
    """A last metrics.jsonl row cut short (a kill or a full disk while it was written) is
    dropped as the rows past the checkpoint are, and the run goes on: every row whole, each
    frame once. A damaged row before the last is one line naming the file and the line,
    exit 2, and the run's files stay byte-identical."""
    first = cli(tmp_path, "train", *TINY, "env.solved_return=null", "logger=none", "hydra.run.dir=torn")
    assert first.returncode == 0, first.stderr
    shutil.copytree(tmp_path / "torn", tmp_path / "damaged")
    with open(tmp_path / "torn" / "metrics.jsonl", "a") as metrics:
        metrics.write('{"step": 640, "frames": 640, "ti')  # killed while writing the row after the checkpoint
    rows = (tmp_path / "damaged" / "metrics.jsonl").read_text().splitlines()
    assert rows[1].startswith('{"step": 256, "frames": 256,')
    (tmp_path / "damaged" / "metrics.jsonl").write_text("\n".join([rows[0], rows[1][:25], *rows[2:]]) + "\n")
    damaged = hashes(tmp_path / "damaged")
    torn, refused = cli_all(tmp_path, [["train", "resume=torn", "total_frames=768"],
                                       ["train", "resume=damaged", "total_frames=768"]])
    assert torn.returncode == 0, torn.stderr
    assert [row["step"] for row in read_jsonl(tmp_path / "torn" / "metrics.jsonl")] == [128, 256, 384, 512, 640, 768]
    assert json.loads((tmp_path / "torn" / "summary.json").read_text())["frames"] == 768
    assert not (tmp_path / "torn" / "error.log").exists()
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "rlcollect train: invalid configuration: resume=damaged: damaged/metrics.jsonl line 2 is not a whole JSON row "
        "(Expecting ',' delimiter: line 1 column 26 (char 25)): repair or remove that line to resume the run"]
    assert hashes(tmp_path / "damaged") == damaged


def at_write(ending: str, nth: int, action: str) -> str:
    """A sitecustomize.py that runs ``action`` (a Python statement, ``path`` the file) as the
    command opens for writing the ``nth`` file whose path ends with ``ending``: a disk that
    fills up, a folder removed, at a point of the run's own (no timing)."""
    return f"""
import resource, shutil, sys
from pathlib import Path

WRITES = []


def at_write(event, args):
    if event == "open" and str(args[0]).endswith({ending!r}) and "w" in str(args[1]):
        WRITES.append(args[0])
        if len(WRITES) == {nth}:
            path = Path(args[0])
            {action}


sys.addaudithook(at_write)
"""


def file_size_limit(size: int) -> str:
    """``at_write``'s action: the file size limit (``ulimit -f``, as a disk filling up would:
    no root needed) lowered to ``size`` bytes."""
    return f"resource.setrlimit(resource.RLIMIT_FSIZE, ({size}, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))"


# the second checkpoint write meets the limit
DISK_FILLS_UP = at_write("checkpoint.pt.partial", 2, file_size_limit(100_000))


@pytest.mark.timeout(300)
def test_a_checkpoint_the_disk_cannot_take_is_one_line_and_the_run_resumes_from_the_last_complete_one(tmp_path):
    """The second checkpoint (a 139 kB file) cannot be written: one line naming the cause and
    the folder, exit 1, status failed; the first checkpoint stays, and the run resumes from it.
    So when the second is the final one (the run trained to its end, but its end is not
    saved)."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(DISK_FILLS_UP)
    # the second one at 256 frames; or (its own checkpoints at the first batch and by time) the final one, at 512
    results = cli_all(tmp_path, [
        (["train", *TINY, "checkpoint_every_frames=128", "env.solved_return=null", "logger=none", "hydra.run.dir=run"],
         tmp_path / "hooks"),
        (["train", *TINY, "checkpoint_every_frames=null", "checkpoint_every_seconds=1e9", "env.solved_return=null",
          "logger=none", "hydra.run.dir=final"], tmp_path / "hooks")])
    for result, name, frames in zip(results, ("run", "final"), (256, 512)):
        assert result.returncode == 1
        assert result.stderr.splitlines() == [
            f"rlcollect train: the run failed: File too large: checkpoint.pt in {tmp_path / name} could not be written "
            "(the file size limit, `ulimit -f`, is 100000 bytes); its last complete checkpoint (frame 128) stays: "
            f"raise the file size limit, then continue with `rlcollect train resume={name}`"]
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert (summary["status"], summary["frames"], summary["checkpoint_frames"]) == ("failed", frames, 128)
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["error"].startswith("DiskFullError: File too large: checkpoint.pt in ")
    assert int(load_checkpoint(run / "checkpoint.pt")["frames"]) == 128
    assert not (run / "checkpoint.pt.partial").exists() and not (run / "error.log").exists()
    resumed = cli(tmp_path, "train", "resume=run")
    assert resumed.returncode == 0, resumed.stderr
    assert [row["step"] for row in read_jsonl(run / "metrics.jsonl")] == [128, 256, 384, 512]


# the resume's config.yaml (written after its cut-back metrics.jsonl) meets the limit
RESUME_DISK_FILLS_UP = at_write("config.yaml.partial", 1, file_size_limit(100))


@pytest.mark.timeout(300)
def test_a_resume_the_disk_cannot_take_leaves_every_file_as_it_was(tmp_path):
    """A resume writes the run's cut-back metrics.jsonl and its config.yaml whole, and renames
    them over the run's files only once both are written: a full disk on the way is one line,
    exit 1, and every file of the run byte-identical (no summary.json saying failed, no
    error.log, no partial file); the same command, with room, resumes it."""
    first = cli(tmp_path, "train", *TINY, "env.solved_return=null", "logger=none", "hydra.run.dir=run")
    assert first.returncode == 0, first.stderr
    before = hashes(tmp_path / "run")
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(RESUME_DISK_FILLS_UP)
    [full] = cli_all(tmp_path, [(["train", "resume=run", "total_frames=1024"], tmp_path / "hooks")])
    assert full.returncode == 1
    assert full.stderr.splitlines()[-1] == (
        "rlcollect train: the resume could not start: DiskFullError: File too large: config.yaml in run could not be "
        "written (the file size limit, `ulimit -f`, is 100 bytes); the run's files are as they were (raise the file "
        "size limit, then run the same command again)")
    assert hashes(tmp_path / "run") == before
    resumed = cli(tmp_path, "train", "resume=run", "total_frames=1024")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["frames"] == 1024


# the user removes the run's folder as its second checkpoint is about to be written
FOLDER_REMOVED = at_write("checkpoint.pt.partial", 2, "shutil.rmtree(path.parent)")


@pytest.mark.timeout(300)
def test_a_run_whose_folder_is_removed_while_it_trains_says_so_in_one_line(tmp_path):
    """Nothing of the run is left: no claim that a checkpoint stays, no traceback, nothing
    made again."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(FOLDER_REMOVED)
    [result] = cli_all(tmp_path, [(["train", *TINY, "checkpoint_every_frames=128", "env.solved_return=null",
                                    "logger=none", "hydra.run.dir=run"], tmp_path / "hooks")])
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[-1].startswith(f"rlcollect train: the run failed: its folder {tmp_path / 'run'} was removed while "
                                "it trained (") and "Traceback" not in result.stderr
    assert not any("stays" in line for line in lines)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hooks"]


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("capsh") is None or os.geteuid() != 0,
                    reason="a read-only folder binds root only without its file capabilities (capsh drops them)")
def test_a_resume_of_a_read_only_run_is_one_line_exit_2_and_changes_nothing(tmp_path):
    """A folder the user may not write into is the user's to mend, said as such: not an
    error while building the run (a bug of ours) with a traceback file."""
    first = cli(tmp_path, "train", *TINY, "logger=none", "hydra.run.dir=run")
    assert first.returncode == 0, first.stderr
    run = tmp_path / "run"
    before = hashes(run)
    paths = [run, *run.rglob("*")]
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(modes[path] & ~0o222)
    try:
        result = subprocess.run(["capsh", "--drop=cap_dac_override,cap_dac_read_search,cap_fowner", "--", "-c",
                                 f"{sys.executable} -m rlcollect.cli train resume=run total_frames=1024"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=240)
    finally:
        for path in reversed(paths):
            path.chmod(modes[path])
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"rlcollect train: invalid configuration: resume=run: the run's folder cannot be written (Permission denied: "
        f"{run / 'train.log'}): make it writable to resume the run"]
    assert hashes(run) == before


# ---------------------------------------------------------------------------- a run folder holds one run
@pytest.mark.timeout(300)
def test_a_folder_that_holds_a_run_is_never_trained_into_again(tmp_path):
    """The same command twice (README's examples write to fixed folders): the second is one
    line naming resume= and how to pick another folder, exit 2, before Hydra writes anything:
    every file, .hydra/ and the job log included, byte-identical. An empty folder is fine."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    run = ["train", *TINY, "logger=none", "hydra.run.dir=runs/run"]
    sweep = ["train", "--multirun", "seed=0,1", *TINY, "total_frames=128", "logger=none", "hydra.sweep.dir=runs/sweep"]
    results = cli_all(tmp_path, [run, sweep, ["train", *TINY, "logger=none", "hydra.run.dir=empty"]])
    assert [result.returncode for result in results] == [0, 0, 0], [result.stderr for result in results]
    before = hashes(tmp_path)
    assert {"runs/run/train.log", "runs/run/.hydra/config.yaml", "runs/run/checkpoint.pt"} <= set(before)
    again_run, again_sweep = cli_all(tmp_path, [run, sweep])
    assert again_run.returncode == again_sweep.returncode == 2
    assert again_run.stderr.splitlines() == [
        "rlcollect train: invalid configuration: hydra.run.dir=runs/run holds a run already (config.yaml, "
        "metrics.jsonl, summary.json, checkpoint.pt, checkpoint.pt.prev, best.pt, .hydra): continue it with "
        "`rlcollect train resume=runs/run`, or train a new run in another folder (hydra.run.dir=<new folder>)"]
    assert again_sweep.stderr.splitlines() == [
        "rlcollect train: invalid configuration: hydra.sweep.dir=runs/sweep holds the runs of an earlier sweep (2 run "
        "folders): continue it with `rlcollect train resume=runs/sweep` (one run: resume=runs/sweep/<its folder>), "
        "or sweep into another folder (hydra.sweep.dir=<new folder>)"]
    assert hashes(tmp_path) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["empty", "notes.txt", "runs"]
    # nor into one of a run's own folders (a folder beside them is another's)
    (tmp_path / "never" / ".hydra").mkdir(parents=True)  # what Hydra wrote before a kill -9 at start-up
    (tmp_path / "never" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "never" / "train.log").write_text("")
    before = hashes(tmp_path)
    inside = cli_all(tmp_path, [["train", *TINY, "logger=none", "hydra.run.dir=runs/run/.hydra/new"],
                                ["train", "--multirun", "seed=0", *TINY, "logger=none",
                                 "hydra.sweep.dir=runs/run/wandb/sweep"],
                                # its .hydra/ holds a config.yaml (Hydra's), but is no run of its own
                                ["train", *TINY, "logger=none", "hydra.run.dir=runs/run/.hydra"],
                                ["train", "resume=runs/run/.hydra", "total_frames=1024"],
                                # Hydra's records alone: a run killed before it wrote anything (no loop of advice)
                                ["train", *TINY, "logger=none", "hydra.run.dir=never"],
                                ["train", "resume=never"]])
    assert [(result.returncode, result.stderr.splitlines()) for result in inside] == [
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=runs/run/.hydra/new is inside the run in runs/run "
             "(its .hydra): train a new run in another folder (hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.sweep.dir=runs/run/wandb/sweep is inside the run in "
             "runs/run (its wandb): sweep into another folder (hydra.sweep.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=runs/run/.hydra is inside the run in runs/run "
             "(its .hydra): train a new run in another folder (hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: resume=runs/run/.hydra is inside the run in runs/run (its "
             ".hydra): continue that run with `rlcollect train resume=runs/run`"]),
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=never holds Hydra's records of a run that never "
             "started (.hydra/, no config.yaml): remove the folder (rm -r never) to train a new run in it, or train a "
             "new run in another folder (hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: resume=never: the run never started (the folder holds Hydra's "
             "records alone: .hydra/, no config.yaml): nothing to continue; train it anew in another folder, or "
             "remove this one (rm -r never) and train into it"])]
    # nor into a sweep's folder, nor below a run's or a sweep's (compare and resume=<sweep> would count them in)
    (tmp_path / "link").symlink_to("nowhere")
    nested = cli_all(tmp_path, [["train", *TINY, "logger=none", f"hydra.run.dir={folder}"]
                                for folder in ("runs/sweep", "runs/sweep/extra", "runs/run/sub", "notes.txt/run")]
                     + [["train", "--multirun", "seed=0", *TINY, "logger=none", "hydra.sweep.dir=runs/sweep/inner"]]
                     # nor above them (compare of the folder would read them as one), nor through a dangling link
                     + [["train", *TINY, "logger=none", "hydra.run.dir=runs"],
                        ["train", "--multirun", "seed=0", *TINY, "logger=none", "hydra.sweep.dir=runs"],
                        ["train", *TINY, "logger=none", "hydra.run.dir=link/run"]])
    assert [(result.returncode, result.stderr.splitlines()) for result in nested] == [
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=runs/sweep holds a sweep (its multirun.yaml): "
             "continue it with `rlcollect train resume=runs/sweep`, or train a new run in another folder "
             "(hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=runs/sweep/extra is inside the sweep in "
             "runs/sweep: train a new run in another folder (hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=runs/run/sub is inside the run in runs/run: train "
             "a new run in another folder (hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=notes.txt/run: notes.txt is a file, not a folder: "
             "train a new run in a folder (hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.sweep.dir=runs/sweep/inner is inside the sweep in "
             "runs/sweep: sweep into another folder (hydra.sweep.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=runs holds the run in runs/run: train a new run "
             "in a folder of its own (hydra.run.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.sweep.dir=runs holds the run in runs/run: sweep into a "
             "folder of its own (hydra.sweep.dir=<new folder>)"]),
        (2, ["rlcollect train: invalid configuration: hydra.run.dir=link/run: link is a symbolic link to nowhere, "
             "which does not exist: train a new run in a folder (hydra.run.dir=<new folder>)"])]
    assert hashes(tmp_path) == before
    assert not (tmp_path / "link").exists() and (tmp_path / "link").is_symlink()


@pytest.mark.timeout(300)
def test_a_folder_another_process_holds_is_refused_before_anything_is_read_or_written(tmp_path):
    """Two commands that start together into one folder: the one that holds it first trains,
    and the other is one line, exit 2, whatever it finds there (the folder still empty, or
    only the records Hydra writes as the first starts): nothing written, nothing removed,
    and no advice to remove a folder that another process is starting a run in."""
    import fcntl

    for name in ("empty", "starting", "resumed", "swept"):
        (tmp_path / name).mkdir()
    (tmp_path / "starting" / ".hydra").mkdir()  # what Hydra writes for the first before its run's files
    (tmp_path / "starting" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "resumed" / ".hydra").mkdir()
    (tmp_path / "resumed" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    held = []
    for name in ("empty", "starting", "resumed", "swept"):  # as the first command holds its folder
        handle = os.open(tmp_path / name, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(handle)
    before = hashes(tmp_path)
    try:
        results = cli_all(tmp_path, [["train", *TINY, "logger=none", "hydra.run.dir=empty"],
                                     ["train", *TINY, "logger=none", "hydra.run.dir=starting"],
                                     ["train", "resume=resumed", "total_frames=1024"],
                                     ["train", "--multirun", "seed=0,1", *TINY, "logger=none",
                                      "hydra.sweep.dir=swept"]])
    finally:
        for handle in held:
            os.close(handle)
    wait = "now; wait for it to end (or stop it) first"
    assert [(result.returncode, result.stderr.splitlines()) for result in results] == [
        (2, [f"rlcollect train: invalid configuration: hydra.run.dir=empty: another process is training or resuming "
             f"the run in empty {wait}"]),
        (2, [f"rlcollect train: invalid configuration: hydra.run.dir=starting: another process is training or "
             f"resuming the run in starting {wait}"]),
        (2, [f"rlcollect train: invalid configuration: resume=resumed: another process is training or resuming the "
             f"run in resumed {wait}"]),
        (2, [f"rlcollect train: invalid configuration: hydra.sweep.dir=swept: another process is training or "
             f"resuming the sweep in swept {wait}"])]
    assert hashes(tmp_path) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["empty", "resumed", "starting", "swept"]


# ---------------------------------------------------------------------------- errors said as whose they are
@pytest.mark.timeout(300)
def test_an_error_while_building_is_reported_as_what_it_is_with_its_traceback_kept(tmp_path, user_envs):
    result = cli(tmp_path, "train", *TINY, "env.id=my_envs:Broken-v0", "env.solved_return=null", "logger=none",
                 "hydra.run.dir=run", pythonpath=user_envs)
    assert result.returncode == 1
    log = tmp_path / "run" / "error.log"
    assert result.stderr.splitlines()[-1] == (
        "rlcollect train: error while building the run: TypeError: can only concatenate str (not \"int\") to str "
        f"was raised from the environment creator for Broken-v0 with kwargs ({{}}) (traceback in {log})")
    assert "invalid configuration" not in result.stderr and "Traceback" not in result.stderr
    assert 'episode_length="seven" + 7' in log.read_text()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("error while building the run: TypeError")
    full = cli(tmp_path, "train", *TINY, "env.id=my_envs:Broken-v0", "env.solved_return=null", "logger=none",
               "hydra.run.dir=run2", pythonpath=user_envs, env={"HYDRA_FULL_ERROR": "1"})
    assert full.returncode == 1 and "Traceback (most recent call last)" in full.stderr


@pytest.mark.timeout(300)
def test_a_non_finite_reward_is_named_as_the_env_s_with_its_frame_and_env_index(tmp_path, user_envs):
    result = cli(tmp_path, "train", *TINY, "env.id=my_envs:NaNReward-v0", "env.solved_return=null", "logger=none",
                 "hydra.run.dir=run", pythonpath=user_envs)
    assert result.returncode == 1
    assert ("the run failed: NonFiniteEnvError: the env returned a non-finite next/reward (next/reward = nan) at "
            "frame 11, env index 2") in result.stderr
    assert "diverged" not in result.stderr


def test_a_non_finite_observation_is_named_with_its_index_and_value():
    """The element that is not finite, with its index within the observation, not the
    observation's first element."""
    import torch
    from tensordict import TensorDict

    from rlcollect.pipeline.loop import NonFiniteEnvError, check_env_values

    observation = torch.ones(2, 3, 4)  # [envs, time, 4]
    observation[1, 2] = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    batch = TensorDict({"observation": observation, ("next", "reward"): torch.zeros(2, 3, 1)}, batch_size=[2, 3])
    with pytest.raises(NonFiniteEnvError) as raised:
        check_env_values(batch, frames=12)
    assert str(raised.value).startswith("the env returned a non-finite observation (observation[1] = nan) at frame "
                                        "12, env index 1: check the env")
    nested = TensorDict({"observation": {"position": torch.zeros(3, 2, 2)}, ("next", "reward"): torch.zeros(3, 1)},
                        batch_size=[3])
    nested["observation", "position"][0, 1, 0] = -float("inf")
    with pytest.raises(NonFiniteEnvError, match=r"non-finite observation/position \(observation/position\[1, 0\] = "
                                                r"-inf\) at frame 8, env index 0"):
        check_env_values(nested, frames=10)


def test_a_non_finite_next_observation_is_named_at_its_own_step_an_episode_s_last_one_included():
    """A step's next observation is what the env returned at that step: named at its frame,
    not at the next step's (which reads it as its observation); an episode's last one, which
    no later step reads, is checked as well (PPO's value of it would make every loss NaN)."""
    import torch
    from tensordict import TensorDict

    from rlcollect.pipeline.loop import NonFiniteEnvError, check_env_values

    def batch():  # [envs 2, time 3], frames 7..12
        return TensorDict({"observation": torch.ones(2, 3, 4), ("next", "observation"): torch.ones(2, 3, 4),
                           ("next", "reward"): torch.zeros(2, 3, 1)}, batch_size=[2, 3])

    read_next = batch()
    read_next["next", "observation"][0, 1, 3] = float("nan")  # env 0's step 1 returned it, its step 2 reads it
    read_next["observation"][0, 2, 3] = float("nan")
    with pytest.raises(NonFiniteEnvError) as raised:
        check_env_values(read_next, frames=12)
    assert str(raised.value).startswith("the env returned a non-finite next/observation (next/observation[3] = nan) "
                                        "at frame 9, env index 0: check the env")
    last = batch()
    last["next", "observation"][1, 2, 0] = float("inf")  # an episode's last observation: read by no later step
    with pytest.raises(NonFiniteEnvError, match=r"non-finite next/observation \(next/observation\[0\] = inf\) at "
                                                r"frame 12, env index 1"):
        check_env_values(last, frames=12)
    check_env_values(batch(), frames=12)  # all finite: nothing said


def test_a_missing_optional_package_is_one_line_naming_what_to_install(tmp_path):
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401
        pytest.skip("Box2D is installed")
    except ImportError:
        pass
    result = cli(tmp_path, "train", "env.id=LunarLander-v3", "env.solved_return=null", "logger=none",
                 "hydra.run.dir=run")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "rlcollect train: missing dependency: LunarLander-v3: Box2D is not installed, you can install it by run "
        '`pip install swig` followed by `pip install "gymnasium[box2d]"`']
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, line", [
    ("algo.epochs=0", "algo.epochs=0: must be >= 1"),
    ("algo.gamma=1.5", "algo.gamma=1.5: must be in (0, 1]"),
    ("algo.clip_epsilon=-1", "algo.clip_epsilon=-1.0: must be > 0"),
    ("algo.minibatch_size=512", "algo.minibatch_size=512: must be at most the frames of a batch "
                                "(collector.frames_per_batch=256)"),
    ("seed=-1", "seed=-1: must be >= 0"),
    ("torch_threads=0", "torch_threads=0: must be >= 1"),
    ("model.hidden_sizes=[64,-1]", "model.hidden_sizes=[64, -1]: every entry must be >= 1"),
    ("eval.episodes=0", "eval.episodes=0: must be >= 1"),
])
def test_a_value_out_of_range_is_one_line_naming_the_key_and_leaves_no_folder(tmp_path, override, line):
    result = cli(tmp_path, "train", override, "logger=none", "progress=false")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"rlcollect train: invalid configuration: {line}"]
    assert list(tmp_path.iterdir()) == []  # no outputs/<date>/<time>/ left behind


@pytest.mark.timeout(120)
def test_a_refused_run_removes_the_folders_it_made_and_not_an_empty_one_it_was_given(tmp_path):
    """A refused run leaves what it found: the folders it made for itself go (new/run, new),
    an empty folder the user made for it stays, as do its parents."""
    (tmp_path / "mine" / "runs").mkdir(parents=True)
    results = cli_all(tmp_path, [["train", "algo.minibatch_size=512", "logger=none", "progress=false",
                                        f"hydra.run.dir={folder}"] for folder in ("new/run", "mine/runs")])
    for result in results:
        assert result.returncode == 2
        assert result.stderr.splitlines() == ["rlcollect train: invalid configuration: algo.minibatch_size=512: must "
                                              "be at most the frames of a batch (collector.frames_per_batch=256)"]
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")) == ["mine", "mine/runs"]


# ---------------------------------------------------------------------------- sweeps
@pytest.mark.timeout(300)
def test_a_sweep_runs_every_job_and_lists_each_one_that_did_not_finish(tmp_path):
    result = cli(tmp_path, "train", "--multirun", "algo.lr=-1,0.001", "seed=0,1", *TINY, "total_frames=256",
                 "logger=none", "env.solved_return=null", "hydra.sweep.dir=sweep")
    assert result.returncode == 1
    sweep = tmp_path / "sweep"
    jobs = sorted((path for path in sweep.iterdir() if path.is_dir()), key=lambda path: int(path.name.split("_")[0]))
    assert len(jobs) == 4
    for refused in jobs[:2]:  # algo.lr=-1: a user's mistake, one summary.json and nothing else
        assert [path.name for path in refused.iterdir()] == ["summary.json"]
        summary = json.loads((refused / "summary.json").read_text())
        assert summary["status"] == "refused"
        assert summary["error"] == "invalid configuration: algo.lr=-1.0: must be > 0"
        assert "algo.lr=-1" in summary["overrides"]
    for finished in jobs[2:]:
        assert json.loads((finished / "summary.json").read_text())["status"] == "finished"
    report = result.stderr.splitlines()[-3:]
    assert report[0] == "rlcollect train: 2 of 4 sweep jobs did not finish (job folders in sweep):"
    assert report[1].startswith("  refused  job 0 (algo.lr=-1,seed=0,") and report[2].startswith(
        "  refused  job 1 (algo.lr=-1,seed=1,")
    assert all(line.endswith(": invalid configuration: algo.lr=-1.0: must be > 0") for line in report[1:])
    compared = cli(tmp_path, "compare", "sweep")
    assert compared.returncode == 0, compared.stderr
    table, _, left_out = compared.stdout.partition("left out")
    assert "refused" not in table and table.count("\n") == 4  # header, rule, the one group of 2 runs, blank
    assert left_out.count(": refused") == 2


SECOND_CTRL_C = '''
import os
import signal

import gymnasium as gym
import torch
from rlcollect.testing import CountingEnv

SENT = []
save = torch.save


def interrupted_save(state, file, *args, **kwargs):
    """Ctrl-C again while the final checkpoint is being written, half-way through."""
    if SENT and str(getattr(file, "name", file)).endswith("checkpoint.pt.partial") and state["frames"] == 384:
        file.write(b"half a checkpoint")
        os.kill(os.getpid(), signal.SIGINT)
    return save(state, file, *args, **kwargs)


torch.save = interrupted_save


class CtrlC(CountingEnv):
    """The trainer gets a Ctrl-C at the 300th step of the first env (frames 1197..1200)."""

    def __init__(self):
        super().__init__(episode_length=20)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 75 and not SENT:
            SENT.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return super().step(action)


gym.register("CtrlC-v0", entry_point=CtrlC)
'''


def test_the_resume_a_line_names_is_a_command_a_shell_takes_as_it_is():
    """A folder with spaces is quoted (pasted, ``resume=my sweep`` split in two); the usual
    folder names, sweep members' included, are written as they are."""
    import shlex

    from rlcollect.commands.jobs import resume_command

    assert resume_command("my runs/run 1") == "rlcollect train 'resume=my runs/run 1'"
    assert shlex.split(resume_command("my runs/run 1")) == ["rlcollect", "train", "resume=my runs/run 1"]
    assert resume_command("sw/0_algo.lr=0.001,seed=1") == "rlcollect train resume=sw/0_algo.lr=0.001,seed=1"


def test_a_stop_asked_while_stderr_is_a_closed_pipe_is_still_a_stop(monkeypatch):
    """SIGINT while stderr is a pipe whose reader has gone (the same Ctrl-C stopped it): the
    handler's line cannot be written, and the stop stands; the failed write is not raised
    where the loop happened to be (it failed the run, mid-update)."""
    from rlcollect.commands.jobs import stop_on_signals

    reader, writer = os.pipe()
    os.close(reader)
    stream = os.fdopen(writer, "w", buffering=1)  # each line written at once: to a closed pipe, EPIPE
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        with stop_on_signals() as stop:
            os.kill(os.getpid(), signal.SIGINT)  # its handler runs before the next line
            assert stop.is_set() and stop.signal_number == signal.SIGINT
    finally:
        try:
            stream.close()
        except OSError:
            pass


@pytest.mark.timeout(300)
def test_a_second_ctrl_c_during_the_checkpoint_save_is_one_line_and_keeps_the_last_complete_one(tmp_path):
    """The first Ctrl-C stops after the batch (frame 384), whose checkpoint a second Ctrl-C
    interrupts half-way: the one at frame 256 stays whole, and the run resumes from it."""
    (tmp_path / "ctrl_c_envs.py").write_text(SECOND_CTRL_C)
    script = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
              "from rlcollect.cli import main; sys.exit(main())")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}
    result = subprocess.run(
        [sys.executable, "-c", script, "train", *TINY, "total_frames=4096", "checkpoint_every_frames=128",
         "env.id=ctrl_c_envs:CtrlC-v0", "env.solved_return=null", "logger=none", "hydra.run.dir=run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == ("rlcollect train: interrupted at frame 384 (its last complete "
                                              "checkpoint is at frame 256); continue with "
                                              "`rlcollect train resume=run`")
    run = tmp_path / "run"
    assert int(load_checkpoint(run / "checkpoint.pt")["frames"]) == 256
    assert not (run / "checkpoint.pt.partial").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["frames"], summary["checkpoint_frames"]) == ("interrupted", 384, 256)
    # resumed from frame 256 (its env sends one Ctrl-C again, 300 steps in): every batch once
    resumed = cli(tmp_path, "train", "resume=run", pythonpath=tmp_path)
    assert resumed.returncode == 130, resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["checkpoint_frames"] == summary["frames"] == 640  # frame 256 + 75 steps x 4 envs, to the batch end
    assert [row["step"] for row in read_jsonl(run / "metrics.jsonl")] == [128, 256, 384, 512, 640]


@pytest.mark.parametrize("stop_at, status", [(128, "interrupted"), (256, "finished")])
def test_a_stop_that_comes_with_the_last_batch_leaves_the_run_finished(tmp_path, stop_at, status):
    """A stop (SIGINT, SIGTERM, a sweep's Ctrl-C) asked for while a batch is learnt from ends
    the run after that batch, interrupted; with its last batch, the run has trained all its
    frames and been evaluated: finished (compare counts it)."""
    import threading

    from train_configs import train_configs

    from rlcollect.pipeline import build, run

    [cfg] = train_configs(["total_frames=256", "collector.frames_per_batch=128", "algo.minibatch_size=64",
                           "env.num_envs=4", "logger=none", "progress=false", "eval.episodes=1"])
    pipeline = build(cfg, tmp_path / "run")
    learn, stop = pipeline.learner.learn, threading.Event()

    def learn_then_stop(batch, frames):
        if frames == stop_at:
            stop.set()
        return learn(batch, frames)

    pipeline.learner.learn = learn_then_stop
    run(pipeline, stop)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["frames"], summary["checkpoint_frames"]) == (status, stop_at, stop_at)


def test_a_run_that_fails_while_learning_its_first_batch_claims_no_speed_and_no_checkpoint(tmp_path):
    """The learner fails on the first batch: no batch was trained, so summary.json has 0
    seconds and no frames per second (not 128 frames over 1e-9 s), and the run has no
    checkpoint to resume from (that batch was not learnt from)."""
    from train_configs import train_configs

    from rlcollect.pipeline import build, run

    [cfg] = train_configs(["total_frames=512", "collector.frames_per_batch=128", "algo.minibatch_size=64",
                           "env.num_envs=4", "logger=none", "progress=false", "eval.episodes=1"])
    pipeline = build(cfg, tmp_path / "run")

    def failing_learn(batch, frames):
        raise RuntimeError("the learner's own bug")

    pipeline.learner.learn = failing_learn
    with pytest.raises(RuntimeError, match="the learner's own bug"):
        run(pipeline)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["frames"], summary["seconds"], summary["frames_per_second"],
            summary["checkpoint_frames"]) == ("failed", 128, 0, None, None)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_run_that_fails_while_learning_keeps_the_training_time_of_its_batches(tmp_path):
    """The learner fails on the second batch, after its collection row was written: the run
    failed, and summary.json's seconds are the first batch's row time (its training so far),
    not the seconds before it started. Its last checkpoint is the first batch's: the second
    was not learnt from, so a resume collects it again (a final checkpoint at 256 would
    leave it out, its row missing)."""
    from train_configs import train_configs

    from rlcollect.pipeline import build, run

    [cfg] = train_configs(["total_frames=512", "collector.frames_per_batch=128", "algo.minibatch_size=64",
                           "env.num_envs=4", "logger=none", "progress=false", "eval.episodes=1"])
    pipeline = build(cfg, tmp_path / "run")
    learn, calls = pipeline.learner.learn, []

    def failing_learn(batch, frames):
        calls.append(frames)
        if len(calls) == 2:
            raise RuntimeError("the learner's own bug")
        return learn(batch, frames)

    pipeline.learner.learn = failing_learn
    with pytest.raises(RuntimeError, match="the learner's own bug"):
        run(pipeline)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert (summary["status"], summary["frames"], [row["step"] for row in rows]) == ("failed", 256, [128, 256])
    assert summary["seconds"] == rows[0]["time"] > 0
    assert summary["checkpoint_frames"] == int(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["frames"]) == 128


SIGNAL_INSIDE_THE_STOP = """
import os, signal, threading
from rlcollect.commands.jobs import stop_on_signals
setting = threading.Condition.notify_all
def notify_all(self):  # a second signal lands while the first one's handler sets the stop (inside Event.set)
    os.kill(os.getpid(), signal.SIGTERM)
    sum(range(1000))
    return setting(self)
threading.Condition.notify_all = notify_all
with stop_on_signals() as stop:
    os.kill(os.getpid(), signal.SIGINT)
    sum(range(10 ** 6))
print("the stop was asked and nothing more:", stop.is_set())
"""


@pytest.mark.timeout(120)
def test_a_second_signal_inside_the_first_ones_handler_stops_at_once_and_never_hangs(tmp_path):
    """The first SIGINT asks the run to stop after its batch; a SIGTERM landing while that
    handler sets the stop used to call the handler again inside Event.set, which then waited
    for good on the lock its first call held (neither signal ended the run). The handlers
    before are back first, so the second signal does what they do: SIGTERM's ends the
    process."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "second_signal.py"
    script.write_text(SIGNAL_INSIDE_THE_STOP)
    ended = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                           start_new_session=True)
    assert ended.returncode == -signal.SIGTERM, (ended.returncode, ended.stdout, ended.stderr)
    assert "the stop was asked and nothing more" not in ended.stdout
