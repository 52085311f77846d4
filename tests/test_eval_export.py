"""`rlcollect eval`, `rlcollect export` and `rlcollect.load_policy` on real trained runs."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from commands import rlcollect as cli
from commands import rlcollect_all as cli_all
from commands import start_rlcollect
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

import rlcollect
from rlcollect.checkpoint import load_checkpoint

TINY = ["total_frames=512", "collector.frames_per_batch=128", "env.num_envs=4", "eval.every_frames=256",
        "eval.episodes=2", "progress=false", "logger=none", "env.solved_return=null", "eval.max_time_share=null"]
PPO = ["algo.minibatch_size=64", "algo.epochs=1"]
KINDS = {
    "dqn": ["algo=dqn", "algo.learning_starts=128", "algo.gradient_steps_per_batch=2"],
    "recurrent": ["experiment=cartpole_novel_gru", *PPO],
    "torch_env": ["env=cartpole_torch", *PPO],
}


def train(cwd, folder, *overrides):
    result = cli(cwd, "train", *TINY, *overrides, f"hydra.run.dir={folder}")
    assert result.returncode == 0, result.stderr
    return cwd / folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One tiny PPO run on CartPole (evaluations at 256 and 512 frames), for the tests that
    only read it: ``<folder>/run``."""
    return train(tmp_path_factory.mktemp("trained"), "run", *PPO)


@pytest.mark.timeout(300)
def test_eval_into_a_pipe_whose_reader_closed_exits_141_without_a_traceback(trained):
    """`rlcollect eval ... --format json | head -c 10`, head gone before eval writes: a
    closed stdout is left quietly, with the exit status of a program killed by SIGPIPE."""
    process = start_rlcollect(trained.parent, "eval", "run", "--format", "json")
    process.stdout.close()  # the reader closes its end before the command writes anything
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141
    assert stderr == ""


@pytest.mark.timeout(300)
def test_no_output_file_overwrites_a_run_s_own_records_and_each_is_checked_before_any_work(trained):
    """eval --out, export --out and compare --plot naming a run's own file (its summary,
    checkpoint, config, job log, a file under its .hydra/), a sweep's multirun.yaml or a
    folder: one line, exit 2, every file of the run as it was; --out in a folder not there
    yet makes it."""
    folder = trained.parent
    before = {path: path.read_bytes() for path in trained.rglob("*") if path.is_file()}
    run = folder / "run"
    refused = {
        ("eval", "run", "--out", "run/summary.json"): f"rlcollect eval: --out run/summary.json: would overwrite the "
                                                      f"run in {run} (its summary.json); write to another file",
        ("export", "run", "--format", "onnx", "--out", "run/checkpoint.pt"):
            f"rlcollect export: --out run/checkpoint.pt: would overwrite the run in {run} (its checkpoint.pt); write "
            "to another file",
        ("compare", "run", "--plot", "run/config.yaml"): f"rlcollect compare: --plot run/config.yaml: would overwrite "
                                                         f"the run in {run} (its config.yaml); write to another file",
        ("eval", "run", "--out", "run/.hydra/evals.json"): f"rlcollect eval: --out run/.hydra/evals.json: would "
                                                           f"overwrite the run in {run} (its .hydra); write to another "
                                                           "file",
        ("eval", "run", "--out", "run"): "rlcollect eval: --out run: is a folder; name a file",
        ("eval", "run", "--out", "run/.hydra/config.yaml"): f"rlcollect eval: --out run/.hydra/config.yaml: would "
                                                            f"overwrite the run in {run} (its .hydra); write to "
                                                            "another file",
        ("eval", "run", "--checkpoint", "run"): "rlcollect eval: --checkpoint run: is a folder; name a checkpoint "
                                                "file (or last, best)",
        ("compare", "run", "--plot", "curves.yaml"):  # the kinds matplotlib writes (its version's) follow
            "rlcollect compare: --plot curves.yaml: matplotlib writes no .yaml files; name one of ",
        ("eval", "run", "--out", "run/train.log"): f"rlcollect eval: --out run/train.log: would overwrite the run in "
                                                   f"{run} (its train.log); write to another file",
        ("export", "run", "--format", "torchscript", "--out", "sweep/multirun.yaml"):
            "rlcollect export: --out sweep/multirun.yaml: would overwrite the sweep in sweep (its multirun.yaml); "
            "write to another file",
        # through a folder not there yet and back (the folder would be made, then left): the file it names
        ("eval", "run", "--out", "missing/../run/config.yaml"): f"rlcollect eval: --out missing/../run/config.yaml: "
                                                              f"would overwrite the run in {run} (its config.yaml); "
                                                              "write to another file",
        ("export", "run", "--format", "onnx", "--out", "run/z/../summary.json"):
            f"rlcollect export: --out run/z/../summary.json: would overwrite the run in {run} (its summary.json); "
            "write to another file",
    }
    (folder / "sweep").mkdir(exist_ok=True)  # a sweep's folder: its multirun.yaml, what resume=<sweep> reads
    (folder / "sweep" / "multirun.yaml").write_text("hydra: {}\n")
    results = cli_all(folder, [list(command) for command in refused])
    for result, line in zip(results, refused.values()):
        if line.endswith("name one of "):
            [said] = result.stderr.splitlines()
            assert result.returncode == 2 and said.startswith(line) and ".png, " in said and ".svg, " in said
            continue
        assert (result.returncode, result.stderr.splitlines()) == (2, [line])
    assert {path: path.read_bytes() for path in trained.rglob("*") if path.is_file()} == before
    assert (folder / "sweep" / "multirun.yaml").read_text() == "hydra: {}\n"
    assert not (folder / "missing").exists() and not (run / "z").exists()
    # a path the system will not write (a file in /proc): found only as it is written, said in one line
    special = cli_all(folder, [["eval", "run", "--episodes", "1", "--out", "/proc/evals.json"],
                               ["compare", "run", "--plot", "/proc/curves.png"],
                               ["export", "run", "--format", "torchscript", "--out", "/proc/policy.pt"]])
    assert [(result.returncode, result.stderr.splitlines()) for result in special] == [
        (2, ["rlcollect eval: --out /proc/evals.json: cannot write it (No such file or directory)"]),
        (2, ["rlcollect compare: --plot /proc/curves.png: cannot write it (No such file or directory)"]),
        (2, ["rlcollect export: --out /proc/policy.pt: cannot write it (No such file or directory)"])]
    made = cli(folder, "eval", "run", "--episodes", "1", "--out", "evals/cartpole/last.json")
    assert made.returncode == 0, made.stderr
    [result] = json.loads((folder / "evals" / "cartpole" / "last.json").read_text())
    assert (result["run"], result["episodes"]) == ("run", 1)


@pytest.mark.timeout(300)
def test_a_seeded_stochastic_evaluation_repeats_exactly(trained):
    """--stochastic --seed 7 twice, in two processes: the same episodes (env i seeded 7 + i)
    and the same sampled actions (torch's RNG seeded 7), so the same returns."""
    command = ["eval", "run", "--stochastic", "--seed", "7", "--episodes", "5", "--format", "json"]
    first, second = cli_all(trained.parent, [[*command, "--out", "first.json"], [*command, "--out", "second.json"]])
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    [one], [other] = json.loads(first.stdout), json.loads(second.stdout)
    assert (one["returns"], one["lengths"], one["env_seeds"]) == (other["returns"], other["lengths"],
                                                                 other["env_seeds"])
    assert one["deterministic"] is False and sorted(one["env_seeds"]) == [7, 8, 9, 10, 11]


@pytest.mark.timeout(300)
def test_eval_as_in_training_repeats_the_run_s_own_evaluations(trained):
    """--as-in-training: the run's eval.episodes, env seeds eval_seed(seed) + i, budget and
    deterministic actions; with --checkpoint best it gives summary.json's best_eval_return
    exactly, with --checkpoint last its final_eval_return."""
    from rlcollect.seeding import eval_seed

    best, last, refused = cli_all(trained.parent, [
        ["eval", "run", "--checkpoint", "best", "--as-in-training", "--format", "json", "--out", "best.json"],
        ["eval", "run", "--as-in-training", "--out", "last.json"],
        ["eval", "run", "--as-in-training", "--episodes", "3", "--stochastic"]])
    summary = json.loads((trained / "summary.json").read_text())
    assert best.returncode == 0, best.stderr
    [row] = json.loads(best.stdout)
    assert row["return_mean"] == summary["best_eval_return"]
    assert row["frames"] == int(load_checkpoint(trained / "best.pt")["frames"])
    assert (row["episodes"], sorted(row["env_seeds"]), row["as_in_training"], row["deterministic"]) == (
        2, [eval_seed(0), eval_seed(0) + 1], True, True)
    assert last.returncode == 0, last.stderr
    [line] = last.stdout.splitlines()[1:]
    assert line.split()[4] == f"{summary['final_eval_return']:.2f}"
    assert line.split()[-1] == f"{eval_seed(0)}-{eval_seed(0) + 1}"  # the env seeds it used
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == ("rlcollect eval: error: --as-in-training repeats the run's own "
                                               "evaluation: it takes no --episodes, --stochastic")


def test_a_loaded_policy_acts_deterministically_unless_asked_to_sample(trained):
    """rlcollect.load_policy(run) writes the deterministic action whatever interaction type
    its caller set (none, or RANDOM); deterministic=False gives the module that samples."""
    import copy

    from tensordict.nn import interaction_type

    inputs = observations()
    policy = rlcollect.load_policy(trained)
    expected = library_actions(policy, inputs)
    with torch.no_grad():
        assert torch.equal(policy(TensorDict({"observation": inputs}, [OBSERVATIONS]))["action"], expected)
        with set_interaction_type(InteractionType.RANDOM):
            assert torch.equal(policy(TensorDict({"observation": inputs}, [OBSERVATIONS]))["action"], expected)
            assert interaction_type() == InteractionType.RANDOM  # the caller's setting, restored after the call
        assert torch.equal(copy.deepcopy(policy)(TensorDict({"observation": inputs}, [OBSERVATIONS]))["action"],
                           expected)
        with pytest.raises(AttributeError):
            policy(TensorDict({}, [3]))  # no observation: the call raises ...
        assert interaction_type() is None  # ... and still restores the interaction type
        sampling = rlcollect.load_policy(trained, deterministic=False)
        assert sampling.state_dict().keys() == policy.state_dict().keys()
        sampled = sampling(TensorDict({"observation": inputs}, [OBSERVATIONS]))["action"]
        assert not torch.equal(sampled, expected)  # a sample of 1,000 actions, not the greedy ones
        assert torch.equal(library_actions(sampling, inputs), expected)


@pytest.mark.timeout(300)
def test_eval_rebuilds_a_run_and_gives_what_the_library_gives_for_the_same_policy_and_seed(tmp_path):
    from rlcollect import EvalCollector
    from rlcollect.pipeline import make_env
    from rlcollect.pipeline.saved import load_run_config
    from rlcollect.seeding import eval_seed

    run = train(tmp_path, "run", *PPO)
    (tmp_path / "user").mkdir()  # a config.yaml alone (copied, say) is no run to evaluate
    shutil.copy(run / "config.yaml", tmp_path / "user" / "config.yaml")
    shutil.copytree(run, tmp_path / "gone")  # a run whose env id is no longer registered
    config = tmp_path / "gone" / "config.yaml"
    config.write_text(config.read_text().replace("id: CartPole-v1", "id: NoSuchEnv-v9"))
    result, missing, not_a_run, gone = cli_all(tmp_path, [
        ["eval", "run", "--episodes", "3", "--format", "json"], ["eval", "run", "--checkpoint", "nothing.pt"],
        ["eval", str(tmp_path / "user")],
        ["eval", "run", "gone", "--episodes", "1", "--out", "x.json"]])  # --out: run/eval_last.json is the first's
    # the refused run named, the other evaluated
    assert gone.returncode == 2 and gone.stdout.splitlines()[1].startswith("run ")
    assert gone.stderr.splitlines() == ["rlcollect eval: gone: Unknown gymnasium env id 'NoSuchEnv-v9'."]
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    policy = rlcollect.load_policy(run)  # the documented way, in Python
    env = make_env(load_run_config(run), num_envs=3, seed=eval_seed(0))
    expected = EvalCollector(env, policy, seed=eval_seed(0)).evaluate()  # every evaluate(): env i from seed + i
    assert (row["returns"], row["lengths"], row["episodes"]) == (expected.returns, expected.lengths, 3)
    assert row["env_seeds"] == [eval_seed(0) + env for env in expected.envs]  # env i seeded eval_seed(0) + i
    assert (row["frames"], row["checkpoint"], row["seed"], row["deterministic"]) == (512, "last", eval_seed(0), True)
    assert row["return_mean"] == pytest.approx(float(np.mean(expected.returns)))
    assert row["return_std"] == pytest.approx(float(np.std(expected.returns)))
    assert json.loads((run / "eval_last.json").read_text()) == row  # the result kept in the run folder

    best, table, out_of_range = cli_all(tmp_path, [
        ["eval", "run", "--checkpoint", "best", "--episodes", "2", "--seed", "7", "--format", "json"],
        ["eval", "run", "--episodes", "2", "env.max_episode_steps=20"],
        ["eval", "run", "--episodes", "2", "env.max_episode_steps=0"]])
    assert (out_of_range.returncode, out_of_range.stderr.splitlines()) == (  # as train says it: the user's mistake
        2, ["rlcollect eval: env.max_episode_steps=0: must be >= 1"])
    assert best.returncode == 0, best.stderr
    [best_row] = json.loads(best.stdout)
    assert best_row["frames"] == int(load_checkpoint(run / "best.pt")["frames"]) and best_row["seed"] == 7
    (tmp_path / "other").mkdir()
    shutil.copy(run / "best.pt", tmp_path / "other" / "best.pt")  # another run's best.pt, as a file
    named, other = cli_all(tmp_path, [
        ["eval", "run", "--checkpoint", "run/best.pt", "--episodes", "2", "--seed", "7", "--format", "json"],
        ["eval", "run", "--checkpoint", "other/best.pt", "--episodes", "2", "--seed", "7", "--format", "json"]])
    assert json.loads(named.stdout)[0]["checkpoint"] == "best"  # the run's own best.pt, however named
    [other_row] = json.loads(other.stdout)
    assert other_row["checkpoint"].startswith("best.pt@") and other_row["returns"] == best_row["returns"]
    assert json.loads((run / f"eval_{other_row['checkpoint']}.json").read_text()) == other_row
    assert json.loads((run / "eval_best.json").read_text())["checkpoint_file"] == "run/best.pt"  # not overwritten
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.splitlines()
    assert header.split() == ["run", "checkpoint", "frames", "episodes", "return", "length", "env", "seeds"]
    assert line.split()[:4] == ["run", "last", "512", "2"] and float(line.split()[6]) <= 20  # the override held
    assert line.split()[-1] == f"{eval_seed(0)}-{eval_seed(0) + 1}"

    assert missing.returncode == 2
    assert missing.stderr.splitlines() == ["rlcollect eval: run: no nothing.pt (no such file)"]
    assert (not_a_run.returncode, not_a_run.stderr.splitlines()) == (2, [
        f"rlcollect eval: {tmp_path / 'user'}: no trained run at or under it (a trained run's folder holds config.yaml "
        "and metrics.jsonl)"])


@pytest.mark.timeout(400)
@pytest.mark.parametrize("kind", ["dqn", "recurrent", "torch_env"])
def test_eval_and_export_work_for_every_kind_of_run(tmp_path, kind):
    run = train(tmp_path, "run", *KINDS[kind])
    result, exported, best = cli_all(tmp_path, [["eval", "run", "--episodes", "2", "--format", "json"],
                                                ["export", "run", "--format", "torchscript"],
                                                ["export", "run", "--format", "torchscript", "--checkpoint", "best"]])
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert row["episodes"] + row["cut"] == 2 and row["frames"] == 512
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.strip() == str(Path("run") / "policy.pt")
    assert best.stdout.strip() == str(Path("run") / "policy_best.pt")  # beside the last one's, not over it
    assert torch.jit.load(run / "policy_best.pt") is not None
    module = torch.jit.load(run / "policy.pt")
    if kind == "recurrent":  # state in, state out
        action, head, next_state = module(torch.zeros(3, 2), torch.zeros(3, 1, 64))
        assert next_state.shape == (3, 1, 64)
    else:
        action, head = module(torch.zeros(3, 4))
    assert action.shape == (3,) and action.dtype == torch.int64 and head.shape == (3, 2)


@pytest.mark.timeout(300)
def test_eval_of_a_sweep_gives_a_row_per_run_and_a_video(tmp_path):
    pytest.importorskip("imageio")
    sweep = cli(tmp_path, "train", "--multirun", "seed=0,1", *TINY, *PPO, "total_frames=256", "hydra.sweep.dir=sweep")
    assert sweep.returncode == 0, sweep.stderr
    result = cli(tmp_path, "eval", "sweep", "--episodes", "1", "--video", "--out", "evals.json")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3, result.stdout  # the header and one row per run, nothing else
    rows = json.loads((tmp_path / "evals.json").read_text())
    assert [Path(row["run"]).name.split("_")[0] for row in rows] == ["0", "1"]
    import imageio.v2 as imageio

    for row in rows:  # paths as given, relative to the folder the command ran in
        frames = [frame for frame in imageio.get_reader(tmp_path / row["video"])]  # its length is unknown
        assert Path(row["video"]).name == "eval_last.mp4" and len(frames) == row["lengths"][0] + 1
        assert not (tmp_path / row["run"] / "eval_last.json").exists()  # --out: the results went there


OBSERVATIONS = 1000


def library_actions(policy, observations: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
        return policy(TensorDict({"observation": observations}, batch_size=[len(observations)]))["action"]


def observations(seed: int = 0) -> torch.Tensor:
    """CartPole-like observations spread over the range a policy sees."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(OBSERVATIONS, 4, generator=generator) * torch.tensor([1.0, 1.0, 0.1, 1.0])


@pytest.mark.timeout(300)
def test_exported_files_run_without_rlcollect_and_act_as_the_policy(tmp_path):
    run = train(tmp_path, "run", *PPO, "model.normalize_observation=true")
    policy = rlcollect.load_policy(run)
    inputs = observations()
    expected = library_actions(policy, inputs)
    np.save(tmp_path / "observations.npy", inputs.numpy())
    torchscript, onnx, in_the_way = cli_all(tmp_path, [
        ["export", "run", "--format", "torchscript", "--out", "deploy/cartpole/policy.pt"],  # folders made
        ["export", "run", "--format", "onnx", "--out", "policy.onnx"],
        ["export", "run", "--format", "onnx", "--out", "run/config.yaml/policy.onnx"]])
    assert torchscript.returncode == 0, torchscript.stderr
    assert torchscript.stdout.strip() == str(Path("deploy/cartpole/policy.pt"))
    assert in_the_way.returncode == 2 and in_the_way.stderr.splitlines() == [
        f"rlcollect export: --out run/config.yaml/policy.onnx: would overwrite the run in {tmp_path / 'run'} (its "
        "config.yaml); write to another file"]
    script = ("import sys, numpy, torch\n"
              "torch.set_num_threads(1)\n"  # as this process computes (conftest): the same reductions, the same bits
              "module = torch.jit.load('deploy/cartpole/policy.pt')\n"
              "action, head = module(torch.from_numpy(numpy.load('observations.npy')))\n"
              "numpy.save('torchscript_actions.npy', action.numpy())\n"
              "assert 'rlcollect' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, check=True, timeout=120)
    assert torch.equal(torch.from_numpy(np.load(tmp_path / "torchscript_actions.npy")), expected)

    pytest.importorskip("onnxruntime")
    assert onnx.returncode == 0, onnx.stderr
    script = ("import sys, numpy, onnxruntime\n"
              "session = onnxruntime.InferenceSession('policy.onnx')\n"
              "action, head = session.run(None, {'observation': numpy.load('observations.npy')})\n"
              "numpy.save('onnx_actions.npy', action); numpy.save('onnx_head.npy', head)\n"
              "assert 'rlcollect' not in sys.modules and 'torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, check=True, timeout=120)
    with torch.no_grad():
        logits = policy.actor(policy.features(inputs))
    assert np.abs(np.load(tmp_path / "onnx_head.npy") - logits.numpy()).max() < 1e-5
    assert np.array_equal(np.load(tmp_path / "onnx_actions.npy"), expected.numpy())

    before = (tmp_path / "deploy/cartpole/policy.pt").read_bytes()
    exported_file = cli(tmp_path, "eval", "run", "--checkpoint", "deploy/cartpole/policy.pt")  # not a checkpoint
    assert exported_file.returncode == 2 and exported_file.stderr.splitlines() == [
        "rlcollect eval: deploy/cartpole/policy.pt: a TorchScript file (what `rlcollect export` writes), not a "
        "checkpoint: name its run's checkpoint (last, best, or a checkpoint.pt)"]
    no_run = cli(tmp_path, "export", "nowhere", "--format", "torchscript", "--out", "deploy/cartpole/policy.pt")
    assert no_run.returncode == 2 and no_run.stderr.splitlines() == ["rlcollect export: nowhere: no such folder"]
    (tmp_path / "refused").mkdir()  # what a sweep job refused before its run started keeps (jobs.refused)
    (tmp_path / "refused" / "summary.json").write_text(json.dumps(
        {"status": "refused", "error": "invalid configuration: algo.gamma=2.0: must be in (0, 1]", "overrides": []}))
    refused = cli(tmp_path, "export", "refused", "--format", "torchscript")
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        "rlcollect export: refused: the job was refused (invalid configuration: algo.gamma=2.0: must be in (0, 1]): "
        "it never trained"]
    assert (tmp_path / "deploy/cartpole/policy.pt").read_bytes() == before
