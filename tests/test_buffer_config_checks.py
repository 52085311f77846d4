"""A replay buffer's config refused before the run starts, in one line naming its keys, on
the conditions its storage and sampler enforce once the run is under way (the batch size
against what the buffer holds, an ndim > 1 storage against the rows of a write, a slice
sampler's slice_len / num_slices); and ``buffer.storage.scratch_dir``: made absolute,
never another run's folder or files, one folder per job of a sweep, and a resume whose
memory-mapped files are gone or damaged refused with its files unchanged."""
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from commands import rlcollect_all
from run_states import hashes
from tensordict import TensorDict
from train_configs import composed, refusal, train_configs

from rlcollect.buffers import LazyMemmapStorage, LazyTensorStorage, SliceSampler
from rlcollect.errors import ConfigError
from rlcollect.pipeline import build, make_storage, resume, run
from rlcollect.pipeline.checks import check_config

# the drill's flags: DQN, 8 envs, batches of 256 frames ([8, 32] writes)
C = ["algo=dqn", "total_frames=2048", "collector.frames_per_batch=256", "algo.learning_starts=256",
     "algo.gradient_steps_per_batch=8", "logger=none", "progress=false"]
SAC = ["algo=sac", "env=pendulum", "total_frames=2048", "collector.frames_per_batch=256", "algo.learning_starts=256",
       "logger=none", "progress=false"]


# ---------------------------------------------------------------------------- sizes
@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", [C, SAC], ids=["dqn", "sac"])
def test_a_batch_larger_than_the_replay_buffer_is_refused_naming_both_keys(algo):
    assert refusal(*algo, "algo.batch_size=200", "buffer.storage.max_size=100") == (
        "algo.batch_size=200: must be at most buffer.storage.max_size=100, the transitions the replay buffer holds; "
        "lower algo.batch_size or raise buffer.storage.max_size")
    assert refusal(*algo, "algo.batch_size=100000", "buffer.storage.max_size=1000").startswith(
        "algo.batch_size=100000: must be at most buffer.storage.max_size=1000,")
    check_config(composed(*algo, "algo.batch_size=100", "buffer.storage.max_size=100"))  # as many: accepted


@pytest.mark.timeout(60)
def test_an_env_rows_storage_is_compared_with_what_it_holds_of_its_max_size():
    """ndim=2 keeps max_size // rows steps of each of the 8 env rows: 100 hold 96."""
    assert refusal(*C, "buffer.storage.ndim=2", "buffer.storage.max_size=100", "algo.batch_size=100") == (
        "algo.batch_size=100: must be at most buffer.storage.max_size=100, the transitions the replay buffer holds "
        "(96 with buffer.storage.ndim=2: 12 steps of each of the 8 env rows); lower algo.batch_size or raise "
        "buffer.storage.max_size")
    check_config(composed(*C, "buffer.storage.ndim=2", "buffer.storage.max_size=100", "algo.batch_size=96"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", [C, SAC], ids=["dqn", "sac"])
def test_a_storage_smaller_than_the_rows_of_a_write_is_refused_as_the_storage_refuses_it(algo):
    """The storage's own condition (capacity = max_size // rows, at least 1), with the
    config's numbers: an ndim=2 storage of 4 elements cannot take the 8 env rows of a
    write; an ndim=1 storage takes any write (a longer one leaves its last max_size steps),
    so 4 elements with a batch of 4 are accepted."""
    algo = [*algo, "env.num_envs=8"]  # pendulum's are 4
    assert refusal(*algo, "buffer.storage.ndim=2", "buffer.storage.max_size=4", "algo.batch_size=4") == (
        "buffer.storage.max_size=4: smaller than the 8 env rows of each write (buffer.storage.ndim=2 keeps one row "
        "per env: env.num_envs=8, each of max_size // 8 steps); raise buffer.storage.max_size to 8 or more, or use "
        "buffer.storage.ndim=1")
    check_config(composed(*algo, "buffer.storage.ndim=2", "buffer.storage.max_size=8", "algo.batch_size=8"))
    check_config(composed(*algo, "buffer.storage.max_size=4", "algo.batch_size=4"))
    write = TensorDict({"observation": torch.zeros(8, 32, 3)}, [8, 32])
    with pytest.raises(ValueError, match=r"^max_size=4 is smaller than the 8 rows of a \[8, 32\] write \(ndim=2\)$"):
        LazyTensorStorage(4, ndim=2).init_from(write)
    LazyTensorStorage(8, ndim=2).extend(write)
    flat = LazyTensorStorage(4)
    flat.extend(write.reshape(-1))
    assert len(flat) == 4


# ---------------------------------------------------------------------------- slices
SLICE_REFUSALS = [
    (["buffer/sampler=slice", "buffer.sampler.slice_len=null"],
     "buffer.sampler.slice_len=null and buffer.sampler.num_slices=null: buffer/sampler=slice takes exactly one of "
     "them; give one: slice_len, the steps of a slice, or num_slices, the slices of a sample"),
    (["buffer/sampler=slice", "buffer.sampler.num_slices=2"],
     "buffer.sampler.slice_len=32 and buffer.sampler.num_slices=2: buffer/sampler=slice takes exactly one of them; "
     "set the other to null"),
    (["buffer/sampler=slice", "algo.batch_size=48"],
     "algo.batch_size=48: must be a multiple of buffer.sampler.slice_len=32 (buffer/sampler=slice samples "
     "algo.batch_size // slice_len slices of slice_len steps)"),
    (["buffer/sampler=slice_without_replacement", "buffer.sampler.slice_len=512"],
     "algo.batch_size=64: must be a multiple of buffer.sampler.slice_len=512 (buffer/sampler=slice_without_replacement "
     "samples algo.batch_size // slice_len slices of slice_len steps)"),
    (["buffer/sampler=slice", "buffer.sampler.slice_len=null", "buffer.sampler.num_slices=3"],
     "algo.batch_size=64: must be a multiple of buffer.sampler.num_slices=3 (buffer/sampler=slice samples num_slices "
     "slices of algo.batch_size // num_slices steps)"),
    (["buffer/sampler=slice", "buffer.sampler.pad_output=true", "buffer.sampler.strict_length=true"],
     "buffer.sampler.pad_output=true and buffer.sampler.strict_length=true: pad_output pads short slices, "
     "strict_length leaves them out; use pad_output=true only with strict_length=false"),
    (["buffer/sampler=slice", "buffer.sampler.slice_len=512", "algo.batch_size=512", "buffer.storage.ndim=2",
      "buffer.storage.max_size=1024", "buffer.sampler.strict_length=true"],
     "buffer.sampler.slice_len=512: with buffer.sampler.strict_length=true every slice is 512 steps of one "
     "trajectory, and no trajectory the storage holds is longer than 128 steps (buffer.storage.max_size=1024 over 8 "
     "env rows); shorten the slices or use buffer.sampler.strict_length=false"),
    (["buffer/sampler=slice", "buffer.sampler.slice_len=null", "buffer.sampler.num_slices=1", "algo.batch_size=129",
      "buffer.storage.ndim=2", "buffer.storage.max_size=1024", "buffer.sampler.strict_length=true"],
     "buffer.sampler.num_slices=1 (slices of algo.batch_size // num_slices = 129 steps): with "
     "buffer.sampler.strict_length=true every slice is 129 steps of one trajectory, and no trajectory the storage "
     "holds is longer than 128 steps (buffer.storage.max_size=1024 over 8 env rows); shorten the slices or use "
     "buffer.sampler.strict_length=false"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("overrides, message", SLICE_REFUSALS)
def test_what_a_slice_sampler_would_refuse_at_its_first_sample_is_refused_before_the_run(overrides, message):
    assert refusal(*C, *overrides) == message


@pytest.mark.timeout(60)
@pytest.mark.parametrize("overrides", [
    ["buffer/sampler=slice", "buffer.sampler.slice_len=null", "buffer.sampler.num_slices=8"],  # the YAML's comment
    ["buffer/sampler=slice_without_replacement", "buffer.sampler.slice_len=null", "buffer.sampler.num_slices=8"],
    # without strict_length a slice longer than any stored trajectory is cut short: it samples
    ["buffer/sampler=slice", "buffer.sampler.slice_len=512", "algo.batch_size=512", "buffer.storage.ndim=2",
     "buffer.storage.max_size=1024"],
    ["buffer/sampler=slice", "buffer.sampler.slice_len=128", "algo.batch_size=128", "buffer.storage.ndim=2",
     "buffer.storage.max_size=1024", "buffer.sampler.strict_length=true"],
], ids=["num_slices", "without_replacement", "longer_not_strict", "strict_as_long_as_a_row"])
def test_what_a_slice_sampler_samples_is_accepted(overrides):
    check_config(composed(*C, *overrides))


@pytest.mark.timeout(60)
def test_the_strict_length_bound_is_the_sampler_s():
    """8 rows of 1024 // 8 = 128 steps, one trajectory each: strict slices of 128 steps are
    drawn, of 129 refused by the sampler itself, as the check refuses them."""
    storage = LazyTensorStorage(1024, ndim=2)
    ids = torch.arange(8)[:, None].expand(8, 256)
    storage.extend(TensorDict({("collector", "traj_ids"): ids, ("next", "done"): torch.zeros(8, 256, 1, dtype=bool)},
                              [8, 256]))
    assert SliceSampler(slice_len=128, strict_length=True).sample(storage, 128).batch_size == (128,)
    with pytest.raises(RuntimeError, match="no stored trajectory has slice_len=129 steps"):
        SliceSampler(num_slices=1, strict_length=True).sample(storage, 129)


# ---------------------------------------------------------------------------- scratch_dir
MEMMAP = ["algo=dqn", "buffer/storage=memmap", "buffer.storage.max_size=64"]


def memmap_node(*overrides):
    return composed(*MEMMAP, *overrides).buffer.storage


def steps(count: int) -> TensorDict:
    return TensorDict({"observation": torch.arange(count * 4, dtype=torch.float32).reshape(count, 4),
                       ("next", "done"): torch.zeros(count, 1, dtype=torch.bool)}, [count])


@pytest.mark.timeout(60)
def test_a_relative_scratch_dir_is_made_absolute_in_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    node = memmap_node("buffer.storage.scratch_dir=scratch/run")
    storage = make_storage(node, device="cpu", run_dir=tmp_path / "run")
    assert node.scratch_dir == str(tmp_path / "scratch" / "run")  # what config.yaml records
    assert storage.scratch_dir == tmp_path / "scratch" / "run"
    node = memmap_node("buffer.storage.scratch_dir=../elsewhere/./run")
    make_storage(node, device="cpu", run_dir=tmp_path / "run")
    assert node.scratch_dir == str(tmp_path.parent / "elsewhere" / "run")
    node = memmap_node()  # null: the run folder's replay/, found again from the run folder wherever it goes
    assert make_storage(node, device="cpu", run_dir=tmp_path / "run").scratch_dir == tmp_path / "run" / "replay"
    assert node.scratch_dir is None


@pytest.mark.timeout(120)
def test_a_run_with_a_relative_scratch_dir_resumes_from_another_working_directory(tmp_path, monkeypatch):
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    [cfg] = train_configs(["algo=dqn", "buffer/storage=memmap", "buffer.storage.scratch_dir=scratch",
                           "algo.learning_starts=64", "total_frames=128", "collector.frames_per_batch=64",
                           "env.num_envs=2", "logger=none", "progress=false", "eval.episodes=1",
                           "env.solved_return=null"])
    run(build(cfg, tmp_path / "run"))
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert recorded["buffer"]["storage"]["scratch_dir"] == str(tmp_path / "first" / "scratch")
    monkeypatch.chdir(tmp_path / "second")
    resumed = resume(tmp_path / "run", overrides={"total_frames": 192})
    assert len(resumed.learner.replay_buffer) == 128  # its transitions, from first/scratch
    run(resumed)
    assert not (tmp_path / "second" / "scratch").exists()


def a_run_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("seed: 0\n")
    (folder / "summary.json").write_text('{"status": "finished"}')
    return folder


@pytest.mark.timeout(60)
def test_a_scratch_dir_of_another_run_is_refused_and_left_as_it_was(tmp_path):
    other = a_run_folder(tmp_path / "other")
    shared = tmp_path / "shared"
    LazyMemmapStorage(64, scratch_dir=shared).extend(steps(8))  # another run's replay files
    (tmp_path / "file").write_text("")
    before = hashes(tmp_path)
    run_dir = tmp_path / "run"
    cases = {
        shared: f"buffer.storage.scratch_dir={shared} holds a replay buffer's files already (storage.json, "
                "position.memmap, data: another run's, given the same scratch_dir): give each run a scratch_dir of its "
                "own, or leave it null (the run folder's replay/)",
        other: f"buffer.storage.scratch_dir={other} is the folder of another run ({other}: its config.yaml, "
               "summary.json), whose files the replay buffer would write among: give this run a scratch_dir outside "
               "every run's folder, or leave it null (the run folder's replay/)",
        other / "replay": f"buffer.storage.scratch_dir={other / 'replay'} is inside another run ({other}: its "
                          "config.yaml, summary.json), whose files the replay buffer would write among: give this run "
                          "a scratch_dir outside every run's folder, or leave it null (the run folder's replay/)",
        tmp_path / "file": f"buffer.storage.scratch_dir={tmp_path / 'file'} is a file, not a folder: give the replay "
                           "buffer's files a folder of their own",
    }
    for scratch_dir, message in cases.items():
        with pytest.raises(ConfigError) as refused:
            make_storage(memmap_node(f"buffer.storage.scratch_dir={scratch_dir}"), device="cpu", run_dir=run_dir)
        assert str(refused.value) == message
    assert hashes(tmp_path) == before and not run_dir.exists()
    # its own run folder (Hydra's .hydra/ in it already) is its own to write in
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    for scratch_dir in (run_dir, run_dir / "my_replay"):
        storage = make_storage(memmap_node(f"buffer.storage.scratch_dir={scratch_dir}"), device="cpu",
                               run_dir=run_dir)
        storage.extend(steps(8))
        assert len(storage) == 8


@pytest.mark.timeout(60)
def test_the_jobs_of_a_sweep_given_one_scratch_dir_each_keep_their_files_in_a_folder_of_their_own(tmp_path):
    """A batched sweep's members (or a sweep's jobs one after the other) given one
    scratch_dir: each job's files go below it, in its job folder's path in the sweep; the
    config keeps the scratch_dir they share (a batched sweep's members still share every
    setting but theirs, and resume as one model), a resume finds each job's own again."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    jobs = [sweep / "0_seed=0", sweep / "1_algo=dqn,buffer" / "storage=memmap,seed=1"]
    scratch = tmp_path / "scratch"
    storages = []
    for job in jobs:
        node = memmap_node(f"buffer.storage.scratch_dir={scratch}")
        storages.append(make_storage(node, device="cpu", run_dir=job))
        assert node.scratch_dir == str(scratch)
    for index, storage in enumerate(storages):
        storage.extend(steps(8 + index))
    assert [storage.scratch_dir for storage in storages] == [scratch / "0_seed=0",
                                                             scratch / "1_algo=dqn,buffer" / "storage=memmap,seed=1"]
    for index, job in enumerate(jobs):
        reopened = make_storage(memmap_node(f"buffer.storage.scratch_dir={scratch}"), device="cpu", run_dir=job,
                                reopen=True)
        assert len(reopened) == 8 + index


DAMAGES = {
    "empty": (lambda folder: [shutil.rmtree(path) if path.is_dir() else path.unlink() for path in folder.iterdir()],
              "is empty (cleaned away, or never written)"),
    "no_metadata": (lambda folder: (folder / "storage.json").unlink(), "has no storage.json (cleaned away, or never "
                                                                        "written)"),
    "no_position": (lambda folder: (folder / "position.memmap").unlink(),
                    ": position.memmap is missing or cut short (cleaned away in part)"),
    "no_data_file": (lambda folder: (folder / "data" / "next" / "done.memmap").unlink(),
                     ": a file of its data/next/ is missing or cut short (cleaned away in part)"),
    "data_cut_short": (lambda folder: os.truncate(folder / "data" / "observation.memmap", 100),
                       ": a file of its data/ is missing or cut short (cleaned away in part)"),
    "no_data": (lambda folder: shutil.rmtree(folder / "data"),
                ": its folder data/ is missing or cut short (cleaned away in part)"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", DAMAGES)
def test_a_resume_whose_replay_files_are_gone_or_damaged_is_refused_with_its_files_unchanged(tmp_path, damage):
    run_dir = tmp_path / "run"
    LazyMemmapStorage(64, scratch_dir=run_dir / "replay").extend(steps(8))
    damaged, says = DAMAGES[damage]
    damaged(run_dir / "replay")
    before = hashes(tmp_path)
    with pytest.raises(ConfigError) as refused:
        make_storage(memmap_node(), device="cpu", run_dir=run_dir, reopen=True)
    space = "" if says.startswith(":") else " "
    assert str(refused.value) == (
        f"resume={run_dir}: its memory-mapped replay buffer ({run_dir / 'replay'}){space}{says}: the checkpoint's "
        "buffer cannot be restored; put the folder back, or train the run again in a new folder")
    assert hashes(tmp_path) == before  # no file made anew (load would make a missing position file), none changed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ndim", [1, 2])
def test_a_whole_storage_reopens_frames_and_spares_included(tmp_path, ndim):
    """What the files check counts (tensors, bytes, folders per meta.json) holds for a
    storage of observations stored once, its spare frames in spares/: nothing refused."""
    rows = 2 if ndim == 2 else 1
    shape = [rows, 6] if ndim == 2 else [6]
    write = TensorDict({"observation": torch.rand(*shape, 3), ("next", "observation"): torch.rand(*shape, 3),
                        ("next", "done"): torch.zeros(*shape, 1, dtype=torch.bool)}, shape)
    framed = LazyMemmapStorage(20 * rows, scratch_dir=tmp_path / "run" / "replay", ndim=ndim, dedup_observations=True)
    framed.extend(write)
    node = memmap_node("buffer.storage.dedup_observations=true", f"buffer.storage.ndim={ndim}")
    reopened = make_storage(node, device="cpu", run_dir=tmp_path / "run", reopen=True)
    assert len(reopened) == len(framed) and (reopened.read() == framed.read()).all()


# ---------------------------------------------------------------------------- the command
@pytest.mark.timeout(300)
def test_the_command_refuses_them_in_one_line_exit_2_leaving_nothing(tmp_path):
    shared = tmp_path / "shared"
    LazyMemmapStorage(64, scratch_dir=shared).extend(steps(8))
    before = hashes(shared)
    cases = [
        (["algo.batch_size=200", "buffer.storage.max_size=100"],
         "algo.batch_size=200: must be at most buffer.storage.max_size=100, the transitions the replay buffer holds; "
         "lower algo.batch_size or raise buffer.storage.max_size"),
        (["buffer/sampler=slice", "buffer.sampler.slice_len=null"],
         "buffer.sampler.slice_len=null and buffer.sampler.num_slices=null: buffer/sampler=slice takes exactly one "
         "of them; give one: slice_len, the steps of a slice, or num_slices, the slices of a sample"),
        (["buffer/storage=memmap", "buffer.storage.scratch_dir=shared"],
         f"buffer.storage.scratch_dir={shared} holds a replay buffer's files already (storage.json, position.memmap, "
         "data: another run's, given the same scratch_dir): give each run a scratch_dir of its own, or leave it null "
         "(the run folder's replay/)"),
    ]
    results = rlcollect_all(tmp_path, [["train", *C, *overrides, f"hydra.run.dir=run{index}"]
                                       for index, (overrides, _) in enumerate(cases)])
    for index, ((_, message), result) in enumerate(zip(cases, results)):
        assert result.returncode == 2, result.stderr
        assert result.stderr == f"rlcollect train: invalid configuration: {message}\n"
        assert not (tmp_path / f"run{index}").exists()
    assert hashes(shared) == before
