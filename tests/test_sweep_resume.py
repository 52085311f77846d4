"""A batched sweep resumed as one batched model (docs/sweeps.md, "Resuming a sweep"): each
member's checkpoint loaded into its rows of the stacked parts (or its solo parts, in
lockstep), the inverse of what its checkpoints save."""
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from commands import rlcollect as cli
from commands import start_rlcollect
from omegaconf import OmegaConf
from processes import ctrl_c_group_when, descendants, wait_for
from run_states import assert_equal_states, assert_same_summary_and_checkpoint, hashes, job_dirs, metric_rows
from train_configs import train_configs as configs

from rlcollect.checkpoint import load_checkpoint
from rlcollect.commands.run_folders import hold_run_folder, release_run_folder
from rlcollect.errors import ConfigError
from rlcollect.logging.wandb_offline import read_offline_run
from rlcollect.pipeline import build, resume, run
from rlcollect.sweeps.run import build_sweep

NAMES = dict(name=None, group=None, job_type=None)
QUIET = ["progress=false", "logger=none", "eval.max_time_share=null", "eval.episodes=2", "env.num_envs=2",
         "total_frames=256", "collector.frames_per_batch=64", "eval.every_frames=128", "env.solved_return=null"]
REPLAY = ["algo.learning_starts=64", "algo.gradient_steps_per_batch=2", "algo.batch_size=16",
          "buffer.storage.max_size=1024"]
KINDS = {  # each kind of batched model: its overrides
    "ppo": ["algo.minibatch_size=32", "algo.epochs=2", "algo.normalize_reward=true"],
    "recurrent_ppo": ["experiment=cartpole_novel_gru", "algo.minibatch_size=32", "algo.epochs=2",
                      "algo.sequence_length=8", "model.hidden_size=16"],
    "dqn": ["algo=dqn", *REPLAY, "model.hidden_sizes=[16]"],
    "sac": ["algo=sac", "env=pendulum", *REPLAY, "model.hidden_sizes=[16]", "algo.critic_hidden_sizes=[16]"],
    "lockstep": ["algo=dqn", "model._target_=lockstep_models.OwnQValuePolicy", *REPLAY, "model.hidden_sizes=[16]"],
}


def complete_rows(run_dir: Path) -> int:
    """The rows of metrics.jsonl written whole so far (a run writing it: its last line may be cut)."""
    return (run_dir / "metrics.jsonl").read_text().count("\n")


def resumed_config(run_dir: Path, total_frames: int):
    cfg = OmegaConf.load(run_dir / "config.yaml")
    cfg.total_frames = total_frames
    return cfg


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", list(KINDS))
def test_one_member_resumed_as_a_batched_model_is_its_solo_resume_bit_for_bit(tmp_path, kind):
    """A run trained to 256 frames, then resumed to 512 twice from the same files: as a solo
    run (lifecycle.resume) and as a batched model of one member (build_sweep with its
    checkpoint). The same metric rows, summary and final checkpoint: policy, optimizers,
    target networks, replay buffer, RNG stream."""
    [cfg] = configs([*QUIET, *KINDS[kind], "seed=5"])
    run(build(cfg, tmp_path / "first"))
    for name in ("solo", "member"):
        shutil.copytree(tmp_path / "first", tmp_path / name)
    run(resume(tmp_path / "solo", overrides={"total_frames": 512}))
    member = tmp_path / "member"
    sweep = build_sweep([resumed_config(member, 512)], [member], [NAMES],
                        checkpoints=[load_checkpoint(member / "checkpoint.pt")])
    assert type(sweep.policy).__name__ == ("LockstepPolicy" if kind == "lockstep" else
                                           {"dqn": "MemberQPolicy", "sac": "MemberSACActor"}.get(kind, "MemberPolicy"))
    sweep.run()
    rows = metric_rows(member)
    assert [row["step"] for row in rows] == list(range(64, 513, 64))
    assert rows == metric_rows(tmp_path / "solo")
    assert json.loads((member / "summary.json").read_text())["frames"] == 512
    assert_same_summary_and_checkpoint(member, tmp_path / "solo")


def test_members_at_other_frames_are_refused_in_one_line(tmp_path):
    cfgs = configs([*QUIET, *KINDS["ppo"], "seed=0"], [*QUIET, *KINDS["ppo"], "seed=1"])
    run(build(cfgs[0], tmp_path / "a"))
    run(build(configs([*QUIET, *KINDS["ppo"], "seed=1", "total_frames=128"])[0], tmp_path / "b"))
    with pytest.raises(ConfigError, match="resume from checkpoints at one frame; these are at 256, 128"):
        build_sweep([resumed_config(tmp_path / "a", 512), resumed_config(tmp_path / "b", 512)],
                    [tmp_path / "a", tmp_path / "b"], [NAMES] * 2,
                    checkpoints=[load_checkpoint(tmp_path / folder / "checkpoint.pt") for folder in "ab"])


def without_param_groups(state):
    """A learner state without its optimizers' param groups (their lr is the one of the last
    update, which a resumed learner sets again before its next)."""
    if isinstance(state, dict):
        return {key: without_param_groups(value) for key, value in state.items() if key != "param_groups"}
    return state


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind, differing", [("ppo", None), ("ppo", "algo.lr"), ("dqn", None), ("sac", "algo.tau"),
                                             ("lockstep", None)])
def test_three_members_resume_as_one_model_from_their_checkpoints(tmp_path, kind, differing):
    """Three members trained as one model to 256 frames, then built again from their
    checkpoints: each member's state, as its checkpoint saves it, is its checkpoint's
    (policy, optimizers, target networks, replay buffer, RNG stream; torch's fused Adam
    where the members share their lr, MemberAdam where they differ), and the model trains
    on to 512 frames, each member's rows following its first part's."""
    settings = {"algo.lr": ["0.001", "0.0005", "0.002"], "algo.tau": ["0.005", "0.01", "0.02"]}
    cfgs = configs(*[[*QUIET, *KINDS[kind], f"seed={seed}",
                      *([f"{differing}={settings[differing][seed]}"] if differing else [])] for seed in range(3)])
    folders = [tmp_path / f"m{seed}" for seed in range(3)]
    build_sweep(cfgs, folders, [NAMES] * 3).run()
    first = [metric_rows(folder) for folder in folders]
    checkpoints = [load_checkpoint(folder / "checkpoint.pt") for folder in folders]
    sweep = build_sweep([resumed_config(folder, 512) for folder in folders], folders, [NAMES] * 3,
                        checkpoints=checkpoints)
    for pipeline, checkpoint in zip(sweep.pipelines, checkpoints):
        state = pipeline.state_dict(0.0)
        assert_equal_states(state["policy"], checkpoint["policy"], "policy")
        assert_equal_states(without_param_groups(state["learner"]), without_param_groups(checkpoint["learner"]),
                            "learner")
        assert_equal_states(state["rng"]["torch"], checkpoint["rng"]["torch"], "rng")
        assert state["frames"] == 256 and state["collector"]["frames"] == 256
    assert sweep.collector.frames == 3 * 256
    sweep.run()
    for folder, rows in zip(folders, first):
        resumed = metric_rows(folder)
        assert [row["step"] for row in resumed] == list(range(64, 513, 64))
        assert resumed[:len(rows)] == rows
        assert json.loads((folder / "summary.json").read_text())["frames"] == 512


# ---------------------------------------------------------------------------- from the command line
SWEEP = ["hydra/launcher=batched", "total_frames=512", "collector.frames_per_batch=128",
         "algo.minibatch_size=64", "env.num_envs=4", "eval.every_frames=256", "eval.episodes=2", "algo.epochs=2",
         "progress=false", "logger=none", "env.solved_return=null", "hydra.sweep.dir=sw"]


@pytest.mark.timeout(300)
def test_a_sweep_resumes_its_members_as_one_batched_model_from_the_command_line(tmp_path):
    """``resume=<sweep folder>``: the members that can go on resume as one batched model (one
    line says so, the sweep's two processes), each folder's rows and W&B run following its
    first part's;
    a member without a checkpoint is said in one line, its files unchanged, exit 1; a sweep
    whose members have all ended, a key a resume cannot change, and members another process
    trains now are one line each, exit 2, nothing changed."""
    with_wandb = [override for override in SWEEP if override != "logger=none"]  # offline W&B runs, read back below
    first = cli(tmp_path, "train", "--multirun", "seed=0,1,2", "hydra.launcher.processes=2", *with_wandb)
    assert first.returncode == 0, first.stderr
    members = job_dirs(tmp_path / "sw")
    rows = [metric_rows(member) for member in members]
    for checkpoint in members[2].glob("checkpoint.pt*"):  # stopped before its first checkpoint
        checkpoint.unlink()
    untouched = hashes(members[2])
    refused = cli(tmp_path, "train", "resume=sw", "algo.lr=0.1")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "rlcollect train: invalid configuration: resume=sw: algo.lr=0.1: a resumed sweep takes only total_frames, "
        "checkpoint_every_frames, checkpoint_every_seconds, progress, torch_threads and hydra.launcher.processes")
    mistyped = cli(tmp_path, "train", "resume=sw", "total_frames=abc")
    assert mistyped.returncode == 2
    assert mistyped.stderr.strip().splitlines()[-1] == (
        "rlcollect train: invalid configuration: total_frames=abc: Value 'abc' of type 'str' could not be converted to "
        "Integer")
    ended = cli(tmp_path, "train", "resume=sw")
    assert ended.returncode == 2
    assert ended.stderr.strip().splitlines()[-1] == (
        "rlcollect train: resume=sw: every member of the sweep has ended (3 finished or solved); to train them on, "
        "resume it with total_frames > 512")
    before = hashes(tmp_path / "sw")
    for member in members[:2]:  # as a process that trains them holds them
        hold_run_folder(member, "the test")
    try:
        busy = cli(tmp_path, "train", "resume=sw", "total_frames=768")
    finally:
        for member in members[:2]:
            release_run_folder(member)
    assert busy.returncode == 2 and hashes(tmp_path / "sw") == before
    hold_run_folder(tmp_path / "sw", "the test")  # as the sweep's command, or another resume of it, holds it
    try:
        twice = cli(tmp_path, "train", "resume=sw", "total_frames=768")
    finally:
        release_run_folder(tmp_path / "sw")
    assert (twice.returncode, twice.stderr.splitlines()) == (2, [
        "rlcollect train: invalid configuration: resume=sw: another process is training or resuming the sweep in sw "
        "now; wait for it to end (or stop it) first"])
    assert hashes(tmp_path / "sw") == before
    assert (f"rlcollect train: invalid configuration: resume=sw: another process is training or resuming the run in "
            f"sw/{members[0].name} now; wait for it to end (or stop it) first") in busy.stderr.splitlines()
    resumed = cli(tmp_path, "train", "--multirun", "resume=sw", "total_frames=768")  # --multirun or not: the same
    assert resumed.returncode == 1, resumed.stderr
    assert ("jobs #0, #1 at frame 512 resume as 2 batched models (1 + 1 members), each in a process of its own"
            in resumed.stdout)
    assert resumed.stderr.strip().splitlines()[-1] == (
        f"rlcollect train: invalid configuration: resume=sw/{members[2].name}: no checkpoint.pt to continue from: the "
        "run stopped before its first checkpoint (its metrics.jsonl has 4 rows, to frame 512); train it again in a "
        "new folder")
    for member, first_rows in zip(members[:2], rows):
        assert [row["step"] for row in metric_rows(member)] == list(range(128, 769, 128))
        assert metric_rows(member)[:4] == first_rows
        summary = json.loads((member / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["frames"] == 768 and summary["checkpoint_frames"] == 768
        assert load_checkpoint(member / "checkpoint.pt")["frames"] == 768
        parts = sorted((member / "wandb").glob("offline-run-*"))
        assert len(parts) == 2 and len({read_offline_run(part).run_id for part in parts}) == 1  # one W&B run, resumed
        assert [row["_step"] for row in read_offline_run(parts[1]).history] == list(range(640, 769, 128))
    assert hashes(members[2]) == untouched
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sw"]  # no other record (no multirun/<date>/)


@pytest.mark.timeout(300)
def test_members_at_two_frames_resume_as_two_models_at_once(tmp_path):
    """A sweep stopped while its two processes were at other batches: the members of each
    frame resume as a model of their own, both models at once, one process each; each
    member's rows are cut back to its checkpoint and continued. (Members 2 and 3 fall back
    to their previous checkpoints, of their first batch, as after a crash while writing one.)
    The jobs that never trained then start, with the resume's total_frames, as one batched
    model again: one the sweep never started (no folder) and one stopped before its run
    started (Hydra's records and the summary.json a stop while loading leaves)."""
    first = cli(tmp_path, "train", "--multirun", "seed=0,1,2,3,4,5", "hydra.launcher.processes=2", *SWEEP)
    assert first.returncode == 0, first.stderr
    members = job_dirs(tmp_path / "sw")
    for member in members[2:4]:
        (member / "checkpoint.pt").unlink()
    shutil.rmtree(members[4])  # never started: a stop came before its group
    for path in members[5].iterdir():  # stopped while it loaded: what leave_unstarted leaves of it
        if path.name not in (".hydra", "train.log"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (members[5] / "summary.json").write_text('{"status": "interrupted", "frames": 0}')
    resumed = cli(tmp_path, "train", "resume=sw", "total_frames=768")
    assert resumed.returncode == 0, resumed.stderr
    assert ("jobs #0, #1 at frame 512; jobs #2, #3 at frame 128 resume as 2 batched models (2 + 2 members), each in "
            "a process of its own") in resumed.stdout
    fallbacks = sorted(line.split("falling back to the previous checkpoint ")[1] for line in resumed.stdout.splitlines()
                       if "falling back" in line)
    assert fallbacks == [str(Path("sw") / member.name / "checkpoint.pt.prev") for member in members[2:4]]  # once each
    started = [line.split(" - ", 1)[1] for line in resumed.stdout.splitlines() if line.endswith(": starting it")]
    assert [line.split(" (")[0] + " " + line.rsplit(") ", 1)[1] for line in started] == [
        "job #4 never started: starting it", "job #5 stopped before its run started: starting it"]
    assert all("total_frames=768" in line and "total_frames=512" not in line for line in started)  # as they run
    assert "jobs #4, #5 train as 2 batched models (1 + 1 members), each in a process of its own" in resumed.stdout
    now = job_dirs(tmp_path / "sw")
    assert [folder.name for folder in now[4:]] == [member.name.replace("total_frames=512", "total_frames=768")
                                                   for member in members[4:]]
    for member in now:
        assert [row["step"] for row in metric_rows(member)] == list(range(128, 769, 128))
        assert json.loads((member / "summary.json").read_text())["frames"] == 768
    for number in (4, 5):
        assert OmegaConf.load(now[number] / ".hydra" / "hydra.yaml").hydra.job.num == number
        assert OmegaConf.load(now[number] / "config.yaml").seed == number
    assert "starting it" not in (now[3] / "train.log").read_text()  # each line in its own job's log
    reached = cli(tmp_path, "train", "resume=sw", "total_frames=640")  # every member is past it: one line for all
    assert reached.returncode == 2
    assert reached.stderr.splitlines() == [
        "rlcollect train: invalid configuration: resume=sw: total_frames=640: every member that can go on has that "
        "many frames already (up to 768); resume it with total_frames > 768"]


@pytest.mark.timeout(300)
def test_a_sweep_stopped_in_its_first_job_trains_the_rest_on_resume(tmp_path):
    """Ctrl-C to a sweep of Hydra's basic launcher while its first job trains: that job
    checkpoints and the sweep ends there, its other two jobs never started (no folder). The
    resume trains the first on and then starts the other two, each numbered, named and
    seeded as the sweep would have, to the resume's total_frames."""
    overrides = [o for o in SWEEP if o not in ("hydra/launcher=batched", "total_frames=512")]
    command = start_rlcollect(tmp_path, "train", "--multirun", "seed=0,1,2", "total_frames=100000000", *overrides)

    def rows_of_the_first() -> int:
        return sum(complete_rows(path.parent) for path in (tmp_path / "sw").glob("0_*/metrics.jsonl"))

    try:
        wait_for(lambda: command.poll() is not None or rows_of_the_first() >= 2, 120)
        assert command.poll() is None, command.communicate()
        meanwhile = cli(tmp_path, "train", "resume=sw")  # the sweep holds its folder while it runs
        assert (meanwhile.returncode, meanwhile.stderr.splitlines()) == (2, [
            "rlcollect train: invalid configuration: resume=sw: another process is training or resuming the sweep in "
            "sw now; wait for it to end (or stop it) first"])
        command.send_signal(signal.SIGINT)
        _, stderr = command.communicate(timeout=120)
    finally:
        command.kill()
        command.wait()
    assert command.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == (
        "rlcollect train: or continue every member of the sweep as it trained: `rlcollect train resume=sw`")
    [first] = job_dirs(tmp_path / "sw")
    frames = json.loads((first / "summary.json").read_text())["checkpoint_frames"]
    total = frames + 256
    resumed = cli(tmp_path, "train", "resume=sw", f"total_frames={total}")
    assert resumed.returncode == 0, resumed.stderr
    jobs = job_dirs(tmp_path / "sw")
    renamed = first.name.replace("total_frames=100000000", f"total_frames={total}")
    assert [folder.name for folder in jobs] == [
        first.name, *(renamed.replace("seed=0", f"seed={n}").replace("0_", f"{n}_", 1) for n in (1, 2))]
    for number, job in enumerate(jobs):
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["frames"] == total, summary
        assert [row["step"] for row in metric_rows(job)] == list(range(128, total + 1, 128))
        assert OmegaConf.load(job / "config.yaml").seed == number
    assert OmegaConf.load(jobs[2] / ".hydra" / "hydra.yaml").hydra.job.num == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sw"]


@pytest.mark.timeout(300)
def test_a_shuffled_globbed_sweep_of_another_job_name_starts_each_job_it_never_trained_once(tmp_path):
    """seed=shuffle(...) (each listing draws another order), logger=glob(...) (listed through
    the sweep's config search path) and a job name of its own (its job log exp.log): of
    three jobs, one never started (no folder) and one stopped while it loaded (exp.log,
    .hydra/ and {interrupted, 0}). The resume starts the second with its own overrides, in
    its folder, and the first with the seed no folder holds: every seed trains once."""
    overrides = [o for o in SWEEP if o not in ("hydra/launcher=batched", "logger=none")]
    first = cli(tmp_path, "train", "--multirun", "seed=shuffle(0,1,2)", "logger=glob(none)", "hydra.job.name=exp",
                *overrides)
    assert first.returncode == 0, first.stderr
    jobs = job_dirs(tmp_path / "sw")
    seeds = [OmegaConf.load(job / "config.yaml").seed for job in jobs]
    shutil.rmtree(jobs[1])
    for path in jobs[2].iterdir():
        if path.name not in (".hydra", "exp.log"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (jobs[2] / "summary.json").write_text('{"status": "interrupted", "frames": 0}')
    untouched = hashes(jobs[0])
    resumed = cli(tmp_path, "train", "resume=sw")
    assert resumed.returncode == 0, resumed.stderr
    now = job_dirs(tmp_path / "sw")
    assert [OmegaConf.load(job / "config.yaml").seed for job in now] == seeds  # seed 1's folder: the seed left
    assert [job.name for job in now] == [job.name for job in jobs] and hashes(now[0]) == untouched
    for job in now[1:]:
        summary = json.loads((job / "summary.json").read_text())
        assert (summary["status"], summary["frames"]) == ("finished", 512) and (job / "exp.log").is_file()


@pytest.mark.timeout(300)
def test_ctrl_c_to_a_joblib_sweep_lets_every_job_checkpoint_and_the_resume_ends_it(tmp_path):
    """Ctrl-C (SIGINT to the process group) to a sweep of three jobs in joblib's two
    workers while jobs 0 and 1 train: the command waits for both to end their batch and
    checkpoint at their last frame (it aborted the workers, one mid-checkpoint, and left
    its summary.json unwritten), job 2 does not start, and the command exits 130 naming the
    sweep's resume. The resume trains 0 and 1 on and starts job 2."""
    overrides = [o for o in SWEEP if o not in ("hydra/launcher=batched", "total_frames=512")]
    command = start_rlcollect(tmp_path, "train", "--multirun", "seed=0,1,2", "hydra/launcher=joblib",
                              "hydra.launcher.n_jobs=2", "total_frames=100000000", *overrides, start_new_session=True)

    def rows_of_the_first_two() -> list[int]:
        return [complete_rows(path.parent) for path in (tmp_path / "sw").glob("[01]_*/metrics.jsonl")]

    stderr = ctrl_c_group_when(command, lambda: len(rows_of_the_first_two()) == 2 and min(rows_of_the_first_two()) >= 2)
    assert command.returncode == 130, stderr
    assert stderr.count("rlcollect train: SIGINT: the jobs under way stop after their batch and no other starts "
                        "(again to stop now)") == 1  # the command's; each job says its own stop
    assert stderr.strip().splitlines()[-1] == (
        "rlcollect train: continue every member of the sweep as it trained: `rlcollect train resume=sw`")
    jobs = job_dirs(tmp_path / "sw")
    stopped = []
    for job in jobs[:2]:
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["checkpoint_frames"] == summary["frames"], summary
        assert metric_rows(job)[-1]["step"] == summary["frames"] == load_checkpoint(job / "checkpoint.pt")["frames"]
        stopped.append(summary["frames"])
    assert len(jobs) == 3  # joblib had handed job 2 to a worker already: there it did not start
    assert json.loads((jobs[2] / "summary.json").read_text()) == {"status": "interrupted", "frames": 0}
    assert not (jobs[2] / "config.yaml").exists()
    total = max(stopped) + 256
    resumed = cli(tmp_path, "train", "resume=sw", f"total_frames={total}")
    assert resumed.returncode == 0, resumed.stderr
    jobs = job_dirs(tmp_path / "sw")
    assert len(jobs) == 3
    for number, job in enumerate(jobs):
        summary = json.loads((job / "summary.json").read_text())
        assert (summary["status"], summary["frames"]) == ("finished", total)
        assert OmegaConf.load(job / "config.yaml").seed == number


@pytest.mark.timeout(300)
def test_a_member_resumed_alone_ends_with_the_command_even_killed(tmp_path):
    """A sweep of another launcher resumes its members one by one, each in a process of its
    own: SIGKILL to the command, while that process trains, leaves no process behind."""
    first = cli(tmp_path, "train", "--multirun", "seed=0", *[o for o in SWEEP if o != "hydra/launcher=batched"])
    assert first.returncode == 0, first.stderr
    [member] = job_dirs(tmp_path / "sw")
    rows = len(metric_rows(member))
    split = cli(tmp_path, "train", "resume=sw", "hydra.launcher.processes=2")  # no batched model to split
    assert (split.returncode, split.stderr.splitlines()) == (2, [
        "rlcollect train: invalid configuration: resume=sw: hydra.launcher.processes=2: the sweep ran with "
        "BasicLauncher, not the batched launcher: its members resume one by one, leave it out"])
    # no pipes: a process left behind would hold them open
    command = start_rlcollect(tmp_path, "train", "resume=sw", "total_frames=100000000", stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    below: set[int] = set()
    try:
        wait_for(lambda: command.poll() is not None or complete_rows(member) > rows, 120)  # the member trains
        assert command.poll() is None, command.returncode
        below = descendants(command.pid)
        assert below  # the member's process (and its own)
        os.kill(command.pid, signal.SIGKILL)
        command.wait()
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in below), 60)
    finally:
        command.kill()
        command.wait()
        for pid in below:  # any left behind (the failure this test finds): not left to the next test
            try:
                if b"rlcollect" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


@pytest.mark.timeout(300)
def test_a_sweep_whose_jobs_were_refused_says_so_on_resume(tmp_path):
    """A job refused before its run started (a value out of range) is said as refused, with
    why, not as a job that stopped, and the one that finished as ended; nothing to resume
    (exit 2), every file as it was."""
    first = cli(tmp_path, "train", "--multirun", "algo.gamma=2,0.99", *SWEEP)
    assert first.returncode == 1
    before = hashes(tmp_path / "sw")
    resumed = cli(tmp_path, "train", "resume=sw")
    assert resumed.returncode == 2 and hashes(tmp_path / "sw") == before
    refused, _ = job_dirs(tmp_path / "sw")
    assert resumed.stderr.splitlines() == [
        f"rlcollect train: invalid configuration: resume=sw/{refused.name}: the job was refused (invalid "
        "configuration: algo.gamma=2.0: must be in (0, 1]): nothing to resume; train it, mended, in another folder",
        "rlcollect train: resume=sw: the sweep's other members have ended (1 finished or solved); to train them on, "
        "resume it with total_frames > 512"]
    # the finished job gone (never started, as far as the sweep knows), and the sweep's config no longer composing
    shutil.rmtree(job_dirs(tmp_path / "sw")[1])
    record = tmp_path / "sw" / "multirun.yaml"
    kept = record.read_text()
    record.write_text(kept.replace("    - hydra.mode=MULTIRUN\n", "    - hydra.mode=MULTIRUN\n    - hydra.nokey=1\n"))
    uncomposable = cli(tmp_path, "train", "resume=sw")
    assert uncomposable.returncode == 1
    assert uncomposable.stderr.splitlines()[-1].startswith(
        "rlcollect train: resume=sw: job #1 cannot start: the sweep's config does not compose any more (invalid "
        "override hydra.nokey: ")
    # the jobs it lists no longer those of its folders (a key added to every job): none starts, and that is said
    record.write_text(kept.replace("    - progress=false\n", "    - progress=false\n    - nokey=1\n"))
    unmatched = cli(tmp_path, "train", "resume=sw")
    assert unmatched.returncode == 2
    assert unmatched.stderr.splitlines()[-1] == (
        "rlcollect train: invalid configuration: resume=sw: its job folders no longer match the jobs its "
        "multirun.yaml makes: a job it never started, if any, is not started; train such a job in another folder")


@pytest.mark.timeout(300)
def test_a_population_goes_on_where_its_checkpoints_stopped(tmp_path):
    """A PBT sweep of four learning rates to 512 frames (a step at 256), resumed to 1,024:
    its events before 512 stay, the step due at 512 is taken as the population resumes,
    then one at 768, none at the last batch; each member's rows carry the lr it trains
    with, from the one it had at its checkpoint, and its summary lists every parent."""
    lrs = [0.0003, 0.001, 0.003, 0.01]
    first = cli(tmp_path, "train", "--multirun", f"algo.lr={','.join(map(str, lrs))}",
                "hydra.launcher.pbt.every_frames=256", "eval.max_time_share=null", *SWEEP)
    assert first.returncode == 0, first.stderr
    events = [json.loads(line) for line in (tmp_path / "sw" / "pbt.jsonl").read_text().splitlines()]
    assert [event["frames"] for event in events] == [256]
    before = hashes(tmp_path / "sw")
    split = cli(tmp_path, "train", "resume=sw", "total_frames=1024", "hydra.launcher.processes=2")
    assert (split.returncode, split.stderr.splitlines()) == (2, [
        "rlcollect train: invalid configuration: hydra.launcher.pbt.every_frames with hydra.launcher.processes=2: "
        "population-based training copies weights between members, and members in other processes cannot exchange "
        "them (use hydra.launcher.processes=1)"])
    assert hashes(tmp_path / "sw") == before
    resumed = cli(tmp_path, "train", "resume=sw", "total_frames=1024")
    assert resumed.returncode == 0, resumed.stderr
    assert "jobs #0-#3 resume at frame 512 as one batched model of 4 members" in resumed.stdout
    after = [json.loads(line) for line in (tmp_path / "sw" / "pbt.jsonl").read_text().splitlines()]
    assert after[:1] == events and [event["frames"] for event in after] == [256, 512, 768]
    members = job_dirs(tmp_path / "sw")
    lr_of = dict(enumerate(lrs))
    history = {number: [(0, lrs[number])] for number in range(4)}
    parents: dict[int, list] = {number: [] for number in range(4)}
    for event in after:
        [(key, lr)] = event["settings"].items()
        assert key == "algo.lr"
        assert lr in (pytest.approx(lr_of[event["parent"]] * 0.8), pytest.approx(lr_of[event["parent"]] * 1.2))
        lr_of[event["member"]] = lr
        history[event["member"]].append((event["frames"], lr))
        parents[event["member"]].append({"frames": event["frames"], "parent": event["parent"]})
    for number, member in enumerate(members):
        member_rows = [json.loads(line) for line in (member / "metrics.jsonl").read_text().splitlines()]
        assert [row["step"] for row in member_rows] == list(range(128, 1025, 128))
        for row in member_rows:
            assert row["pbt/algo.lr"] == [lr for start, lr in history[number] if start < row["step"]][-1]
        summary = json.loads((member / "summary.json").read_text())
        assert summary["frames"] == 1024 and summary["pbt_parents"] == parents[number]
        assert summary["pbt_settings"] == {"algo.lr": lr_of[number]}


@pytest.mark.timeout(300)
def test_two_populations_resumed_one_after_the_other_keep_each_others_events(tmp_path):
    """A PBT sweep of two populations (max_members=2: jobs #0, #1 and #2, #3), each with a
    step at 256, resumed to 1,024: each population resumes as a model of its own, one after
    the other, and cuts pbt.jsonl back to its own events before its checkpoint; the events
    the first one took at 512 and 768 stay when the second resumes."""
    first = cli(tmp_path, "train", "--multirun", "algo.lr=0.0003,0.001,0.003,0.01", "hydra.launcher.max_members=2",
                "hydra.launcher.pbt.every_frames=256", "eval.max_time_share=null", *SWEEP)
    assert first.returncode == 0, first.stderr
    resumed = cli(tmp_path, "train", "resume=sw", "total_frames=1024")
    assert resumed.returncode == 0, resumed.stderr
    assert [line.split(" - ")[1] for line in resumed.stdout.splitlines() if " resume at frame " in line] == [
        "jobs #0, #1 resume at frame 512 as one batched model of 2 members",
        "jobs #2, #3 resume at frame 512 as one batched model of 2 members"]
    events = [json.loads(line) for line in (tmp_path / "sw" / "pbt.jsonl").read_text().splitlines()]
    for population in ({0, 1}, {2, 3}):
        own = [event for event in events if event["member"] in population]
        assert [event["frames"] for event in own] == [256, 512, 768]
        assert all(event["parent"] in population for event in own)
    for member in job_dirs(tmp_path / "sw"):
        summary = json.loads((member / "summary.json").read_text())
        number = int(member.name.split("_")[0])
        assert summary["frames"] == 1024
        assert summary["pbt_parents"] == [{"frames": event["frames"], "parent": event["parent"]} for event in events
                                          if event["member"] == number]


def test_a_sweeps_run_folders_are_found_by_job_number_nested_ones_included(tmp_path):
    """Hydra nests a job's folder where an override names a config group (``buffer/storage``):
    a sweep's run folders (any run file, Hydra's .hydra/ included) are found by job number
    there too; a run's own .hydra/ and wandb/ hold no other run, and a folder without a job
    number is none. The sweep cannot be swept into again."""
    from rlcollect.run_files import sweep_runs

    jobs = [tmp_path / "10_seed=1", tmp_path / "2_algo=dqn,buffer" / "storage=memmap,seed=0", tmp_path / "3_seed=2"]
    for job in jobs:
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "config.yaml").write_text("seed: 0\n")
        (job / "wandb" / "run").mkdir(parents=True)
        (job / "wandb" / "run" / "config.yaml").write_text("")
    for job in jobs[:2]:
        (job / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "config.yaml").write_text("")
    assert sweep_runs(tmp_path) == [jobs[1], jobs[2], jobs[0]]
    (tmp_path / "multirun.yaml").write_text("hydra: {}\n")
    again = cli(tmp_path, "train", "--multirun", "seed=0,1", f"hydra.sweep.dir={tmp_path}", "logger=none")
    assert again.returncode == 2
    assert f"holds the runs of an earlier sweep (3 run folders): continue it with `rlcollect train resume={tmp_path}`" \
        in again.stderr
