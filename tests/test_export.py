"""Exported policies (rlcollect/export.py) act as the library policy does under a deterministic
interaction type, and load without rlcollect: TorchScript with torch alone, ONNX with
onnxruntime and numpy alone, each in a fresh interpreter."""
import pickle
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from commands import rlcollect as cli
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type
from torch import nn

import rlcollect
from rlcollect.envs.spaces import subspaces, torch_dtype
from rlcollect.errors import ConfigError, MissingDependencyError
from rlcollect.export import deployable, export_onnx, export_policy, export_torchscript
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.q_network import QValuePolicy
from rlcollect.modules.sac import SACActor

N = 1000  # observations per policy
ENVS, STEPS = 50, 20  # recurrent policies: N observations as STEPS steps of ENVS envs
HEAD_ATOL = 1e-5  # ONNX vs library, on the head and the recurrent states

CARTPOLE = gym.spaces.Box(-np.array([4.8, np.inf, 0.418, np.inf], np.float32),
                          np.array([4.8, np.inf, 0.418, np.inf], np.float32), dtype=np.float32)
PENDULUM = gym.spaces.Box(np.array([-1, -1, -8], np.float32), np.array([1, 1, 8], np.float32), dtype=np.float32)
IMAGE = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)
IMAGE_HWC = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
DICT = gym.spaces.Dict(position=gym.spaces.Box(-1, 1, (3,), np.float32), flag=gym.spaces.Discrete(2))
TUPLE = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.MultiDiscrete([3, 2]),
                          gym.spaces.MultiBinary(3)))


SAC_ACTIONS = gym.spaces.Box(np.array([-2, 0], np.float32), np.array([2, 1], np.float32), dtype=np.float32)


def normalized_policy():
    policy = ActorCritic(CARTPOLE, gym.spaces.Discrete(3, start=-1), normalize_observation=True)
    policy.obs_norm.update(sample(CARTPOLE, 500, seed=1) * 3 + 1)
    return policy


def normalized_sac_actor():
    """A SACActor whose action bounds are not symmetric (a bias as well as a scale)."""
    policy = SACActor(PENDULUM, SAC_ACTIONS, hidden_sizes=(64, 64), normalize_observation=True)
    policy.obs_norm.update(sample(PENDULUM, 500, seed=1) * 3 + 1)
    return policy


FEEDFORWARD = {
    "discrete": (lambda: ActorCritic(CARTPOLE, gym.spaces.Discrete(2)), CARTPOLE),
    "box": (lambda: ActorCritic(PENDULUM, gym.spaces.Box(-2, 2, (1,), np.float32)), PENDULUM),
    "normalized": (normalized_policy, CARTPOLE),
    "image": (lambda: ActorCritic(IMAGE, gym.spaces.Discrete(4)), IMAGE),
    "image_hwc": (lambda: ActorCritic(IMAGE_HWC, gym.spaces.Discrete(4)), IMAGE_HWC),  # gymnasium's usual layout
    "q_values": (lambda: QValuePolicy(CARTPOLE, gym.spaces.Discrete(2), hidden_sizes=(64, 64)), CARTPOLE),
    "dict": (lambda: ActorCritic(DICT, gym.spaces.Discrete(3)), DICT),
    "tuple_q_values": (lambda: QValuePolicy(TUPLE, gym.spaces.Discrete(4, start=1), hidden_sizes=(64,)), TUPLE),
    # SAC: the action tanh(mean) scaled to the bounds, the head the mean before the squash
    "sac": (normalized_sac_actor, PENDULUM),
    "sac_dict": (lambda: SACActor(DICT, SAC_ACTIONS, hidden_sizes=(64, 64)), DICT),
}
RECURRENT = {
    "gru": (lambda: RecurrentActorCritic(CARTPOLE, gym.spaces.Discrete(3), rnn="gru", hidden_size=16, num_layers=2),
            CARTPOLE),
    "lstm": (lambda: RecurrentActorCritic(PENDULUM, gym.spaces.Box(-2, 2, (1,), np.float32), rnn="lstm",
                                          hidden_size=16, num_layers=2), PENDULUM),
    "gru_image": (lambda: RecurrentActorCritic(IMAGE_HWC, gym.spaces.Discrete(3), rnn="gru", hidden_size=16),
                  IMAGE_HWC),  # the CNN in front of the GRU
}
KINDS = [*FEEDFORWARD, *RECURRENT]

# Each runs a file over the steps pickled in argv[2] (observations, resets, initial states),
# carrying the recurrent states and zeroing them where an episode starts; it pickles the
# outputs of every step to argv[3].
TORCHSCRIPT_RUNNER = """
import sys
import torch
torch.set_num_threads(1)  # as the test process computes (conftest): more threads split reductions otherwise
policy = torch.jit.load(sys.argv[1])
observations, resets, states = torch.load(sys.argv[2])
outputs = []
with torch.no_grad():
    for observation, reset in zip(observations, resets):
        states = [state.masked_fill(reset[:, None, None], 0) for state in states]
        action, head, *states = policy(observation, *states)
        outputs.append([action, head, *states])
torch.save(outputs, sys.argv[3])
assert "rlcollect" not in sys.modules
"""
ONNX_RUNNER = """
import pickle, sys
import numpy as np
import onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
with open(sys.argv[2], "rb") as file:
    observations, resets, states = pickle.load(file)
names = [output.name for output in session.get_outputs()]
outputs = []
for observation, reset in zip(observations, resets):
    states = {name: np.where(reset[:, None, None], 0, state).astype(state.dtype) for name, state in states.items()}
    result = dict(zip(names, session.run(None, {**observation, **states})))
    outputs.append([result[name] for name in names])
    states = {name: result["next_" + name] for name in states}
with open(sys.argv[3], "wb") as file:
    pickle.dump(outputs, file)
assert "rlcollect" not in sys.modules and "torch" not in sys.modules
"""


def sample(space, n, seed):
    """n observations sampled from ``space`` (seeded), as rlcollect stores them: a tensor, or
    a dict of tensors by entry name for a Dict / Tuple."""
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        rows = [list(row.values()) if isinstance(row, dict) else list(row) for row in samples]
        return {name: torch.as_tensor(np.stack([row[i] for row in rows])).to(torch_dtype(child))
                for i, (name, child) in enumerate(subspaces(space).items())}
    return torch.as_tensor(np.stack(samples)).to(torch_dtype(space))


def library_steps(policy, observations, resets):
    """The library policy's (action, head, *next states) at each step, deterministic, in step
    mode with the states carried (zeros where ``resets``)."""
    recurrent = isinstance(policy, RecurrentActorCritic)
    keys = policy.rnn.hidden_keys if recurrent else []
    states = {key: torch.zeros(len(resets[0]), policy.rnn.num_layers, policy.rnn.hidden_size) for key in keys}
    outputs = []
    for observation, reset in zip(observations, resets):
        states = {key: state.masked_fill(reset[:, None, None], 0) for key, state in states.items()}
        td = TensorDict({"observation": observation, "is_init": reset, **states}, [len(reset)])
        with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
            out = policy(td)
            if recurrent:
                head = policy.heads.actor(out["features"])
            elif isinstance(policy, QValuePolicy):
                head = out["action_value"]
            elif isinstance(policy, SACActor):
                head = policy.distribution(td["observation"])[0]  # the Gaussian mean before the squash
            else:
                head = policy.actor(policy.features(td["observation"]))
        states = {key: out["next", key] for key in keys}
        outputs.append([out["action"], head, *states.values()])
    return outputs


def make_case(kind):
    """(policy, observations per step, resets per step)."""
    if kind in FEEDFORWARD:
        build, space = FEEDFORWARD[kind]
        return build(), [sample(space, N, seed=0)], [torch.zeros(N, dtype=torch.bool)]
    build, space = RECURRENT[kind]
    flat = sample(space, N, seed=0).reshape(STEPS, ENVS, *space.shape)
    generator = torch.Generator().manual_seed(0)
    resets = torch.rand(STEPS, ENVS, generator=generator) < 0.1
    resets[0] = True
    return build(), list(flat), list(resets)


def initial_states(policy):
    if not isinstance(policy, RecurrentActorCritic):
        return {}
    module = deployable(policy)
    return {name: torch.zeros(ENVS, module.num_layers, module.hidden_size) for name in module.input_names[1:]}


def run_standalone(runner, path, inputs, tmp_path, save, load):
    """Run ``runner`` on the file ``path`` in a fresh interpreter (no rlcollect)."""
    save(inputs, tmp_path / "inputs")
    subprocess.run([sys.executable, "-c", runner, str(path), str(tmp_path / "inputs"), str(tmp_path / "outputs")],
                   check=True, timeout=120, cwd=tmp_path)
    return load(tmp_path / "outputs")


def pickle_save(value, path):
    path.write_bytes(pickle.dumps(value))


def pickle_load(path):
    return pickle.loads(path.read_bytes())


def onnx_feed(observation):
    if isinstance(observation, dict):
        return {name: value.numpy() for name, value in observation.items()}
    return {"observation": observation.numpy()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_torchscript_actions_equal_the_library_policy(kind, tmp_path):
    policy, observations, resets = make_case(kind)
    path = export_torchscript(policy, tmp_path / "policy.pt", observations[0])
    assert policy.training  # the export works on a copy
    states = list(initial_states(policy).values())
    exported = run_standalone(TORCHSCRIPT_RUNNER, path, (observations, resets, states), tmp_path, torch.save,
                              torch.load)
    expected = library_steps(policy, observations, resets)
    for step, (actual, reference) in enumerate(zip(exported, expected)):
        assert actual[0].dtype == reference[0].dtype
        for name, a, b in zip(["action", "head", "next state", "next cell state"], actual, reference):
            assert torch.equal(a, b), f"{kind}: the {name} differs at step {step}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", KINDS)
def test_onnx_matches_the_library_policy(kind, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    policy, observations, resets = make_case(kind)
    path = export_onnx(policy, tmp_path / "policy.onnx", observations[0])
    states = {name: state.numpy() for name, state in initial_states(policy).items()}
    inputs = ([onnx_feed(observation) for observation in observations], [reset.numpy() for reset in resets], states)
    exported = run_standalone(ONNX_RUNNER, path, inputs, tmp_path, pickle_save, pickle_load)
    for step, (actual, reference) in enumerate(zip(exported, library_steps(policy, observations, resets))):
        action, *rest = [torch.from_numpy(value) for value in actual]
        assert action.dtype == reference[0].dtype
        for value, expected in zip(rest, reference[1:]):  # head, next states
            torch.testing.assert_close(value, expected, atol=HEAD_ATOL, rtol=0)
        if action.is_floating_point():  # a Box action: the mean
            torch.testing.assert_close(action, reference[0], atol=HEAD_ATOL, rtol=0)
            continue
        # where the library's top two are more than twice the head's error apart, ONNX's argmax is the same
        head, error = reference[1], (rest[0] - reference[1]).abs().max()
        top2 = head.topk(2, -1).values
        clear = top2[:, 0] - top2[:, 1] > 2 * error
        assert clear.float().mean() > 0.9, f"{kind}: too many near-ties to compare at step {step}"
        assert torch.equal(action[clear], reference[0][clear]), f"{kind}: actions differ at step {step}"


@pytest.mark.timeout(60)
def test_torchscript_falls_back_to_a_trace_that_takes_any_batch_size(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("cannot script")

    policy, observations, _ = make_case("gru")
    monkeypatch.setattr(torch.jit, "script", refuse)
    path = export_torchscript(policy, tmp_path / "policy.pt", observations[0][:3])
    traced, module = torch.jit.load(str(path)), deployable(policy)
    for batch in (1, 7):
        inputs = (observations[0][:batch], torch.randn(batch, 2, 16))
        with torch.no_grad():
            assert all(torch.equal(a, b) for a, b in zip(traced(*inputs), module(*inputs)))


@pytest.mark.timeout(60)
def test_unsupported_cases_are_refused_in_one_line(tmp_path):
    nested = gym.spaces.Dict(inner=DICT, speed=gym.spaces.Box(-1, 1, (1,), np.float32))
    policy = ActorCritic(CARTPOLE, gym.spaces.Discrete(2))
    cases = [
        (lambda: deployable(nn.Linear(4, 2)), "supports ActorCritic, RecurrentActorCritic, QValuePolicy and SACActor"),
        (lambda: deployable(ActorCritic(nested, gym.spaces.Discrete(2))), "nested"),
        (lambda: deployable(RecurrentActorCritic(DICT, gym.spaces.Discrete(2))), "recurrent policy takes one"),
        (lambda: export_policy(policy, tmp_path / "p", "tflite", torch.zeros(1, 4)), "format must be one of"),
        (lambda: export_torchscript(policy, tmp_path / "p.pt", torch.zeros(4)), "batch dim"),
        (lambda: export_torchscript(policy, tmp_path / "p.pt", {"observation": torch.zeros(1, 4)}), "dict"),
    ]
    for call, reason in cases:
        with pytest.raises(ConfigError, match=reason) as error:
            call()
        assert "\n" not in str(error.value)


@pytest.mark.timeout(60)
def test_onnx_export_without_onnxscript_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import onnxscript now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'rlcollect\[export\]'"):
        export_onnx(ActorCritic(CARTPOLE, gym.spaces.Discrete(2)), tmp_path / "p.onnx", torch.zeros(2, 4))


@pytest.mark.timeout(60)
def test_a_refused_export_leaves_no_folder_it_made(tmp_path, monkeypatch):
    """export --out in folders not there yet makes them for the file, and a refusal found
    while exporting (a policy it cannot export, a missing extra) removes them again."""
    from rlcollect.outputs import folder_made

    (tmp_path / "there").mkdir()
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    out = tmp_path / "there" / "a" / "b" / "p.onnx"
    with pytest.raises(MissingDependencyError):
        with folder_made("--out", out):
            export_onnx(ActorCritic(CARTPOLE, gym.spaces.Discrete(2)), out, torch.zeros(2, 4))
    assert [path.name for path in tmp_path.rglob("*")] == ["there"]
    with folder_made("--out", out):
        out.write_text("exported")
    assert out.read_text() == "exported"


@pytest.mark.timeout(300)
def test_export_of_a_sac_run_writes_a_file_that_acts_as_its_policy(tmp_path):
    """`rlcollect export <SAC run> --format torchscript`: exit 0, the file written, and its
    actions those of the run's policy (load_policy: deterministic)."""
    trained = cli(tmp_path, "train", "algo=sac", "env=pendulum", "total_frames=512", "algo.learning_starts=256",
                  "collector.frames_per_batch=128", "logger=none", "progress=false", "hydra.run.dir=run")
    assert trained.returncode == 0, trained.stderr
    exported = cli(tmp_path, "export", "run", "--format", "torchscript")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.strip() == "run/policy.pt"
    policy = rlcollect.load_policy(tmp_path / "run")
    assert isinstance(policy, SACActor)
    observations = sample(PENDULUM, 200, seed=0)
    with torch.no_grad():
        expected = policy(TensorDict({"observation": observations}, [200]))["action"]
        action, head = torch.jit.load(tmp_path / "run" / "policy.pt")(observations)
    assert action.shape == (200, 1) and torch.equal(action, expected)
    assert torch.equal(head, policy.distribution(observations)[0])
