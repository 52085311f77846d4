import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv, counting_env_factories

KEYS = {"observation", "is_init", "action", ("next", "observation"), ("next", "reward"),
        ("next", "terminated"), ("next", "truncated"), ("next", "done")}


@pytest.mark.parametrize("num_envs", [None, 3])
def test_keys_shapes_and_dtypes(num_envs):
    env = GymEnv("CartPole-v1", num_envs, seed=0)
    batch = [] if num_envs is None else [num_envs]
    carrier = env.reset()
    assert carrier.batch_size == torch.Size(batch)
    assert carrier["observation"].shape == (*batch, 4) and carrier["observation"].dtype == torch.float32
    assert carrier["is_init"].all()
    td, next_carrier = env.step_and_maybe_reset(env.rand_action(carrier))
    assert set(td.keys(True, True)) == KEYS
    assert td["action"].dtype == torch.int64 and td["action"].shape == tuple(batch)
    for key in ("reward", "terminated", "truncated", "done"):
        assert td["next", key].shape == tuple(batch)  # no trailing singleton dim
    assert td["next", "reward"].dtype == torch.float32
    assert td["next", "done"].dtype == torch.bool
    assert not next_carrier["is_init"].any()
    assert torch.equal(next_carrier["observation"], td["next", "observation"])
    assert env.observation_space == gym.make("CartPole-v1").observation_space


def test_only_finished_sub_envs_reset_and_final_observation_is_kept():
    env = GymEnv(counting_env_factories([2, 3]), num_envs=2)
    carrier = env.reset()
    seen = []
    for _ in range(3):
        td, carrier = env.step_and_maybe_reset(env.rand_action(carrier))
        seen.append((td["next", "observation"][:, 0].tolist(), td["next", "done"].tolist(),
                     carrier["observation"][:, 0].tolist(), carrier["is_init"].tolist()))
    assert seen == [
        ([1, 1], [False, False], [1, 1], [False, False]),
        ([2, 2], [True, False], [0, 2], [True, False]),   # env 0 ends at 2: true final obs kept
        ([1, 3], [False, True], [1, 0], [False, True]),
    ]


def test_time_limit_is_truncated_not_terminated():
    env = GymEnv(lambda: CountingEnv(episode_length=100), max_episode_steps=3)
    carrier = env.reset()
    flags = []
    for _ in range(3):
        td, carrier = env.step_and_maybe_reset(env.rand_action(carrier))
        flags.append((bool(td["next", "terminated"]), bool(td["next", "truncated"]), bool(td["next", "done"])))
    assert flags == [(False, False, False), (False, False, False), (False, True, True)]
    terminating = GymEnv(lambda: CountingEnv(episode_length=1, end="terminated"))
    td, _ = terminating.step_and_maybe_reset(terminating.rand_action(terminating.reset()))
    assert bool(td["next", "terminated"]) and not bool(td["next", "truncated"]) and bool(td["next", "done"])


def test_unknown_env_id_names_it_and_close_matches():
    with pytest.raises(ValueError, match=r"Unknown gymnasium env id 'CartPol-v1'.*CartPole-v1"):
        GymEnv("CartPol-v1")
    with pytest.raises(ValueError, match="'Zzqxv-v0'\\.$"):
        GymEnv("Zzqxv-v0")


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="num_envs"):
        GymEnv("CartPole-v1", num_envs=0)
    with pytest.raises(TypeError, match="not a gymnasium.Env"):
        GymEnv(lambda: "not an env")
    with pytest.raises(TypeError, match="Text"):
        GymEnv(lambda: _TextObsEnv())


class _TextObsEnv(CountingEnv):
    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict({"ok": gym.spaces.Discrete(2), "text": gym.spaces.Text(5)})


def test_random_actions_respect_the_space():
    env = GymEnv("Pendulum-v1", num_envs=4)
    actions = torch.stack([env.rand_action()["action"] for _ in range(50)])
    assert actions.shape == (50, 4, 1) and actions.dtype == torch.float32
    assert actions.min() >= -2.0 and actions.max() <= 2.0 and actions.std() > 0.5
    discrete = GymEnv("CartPole-v1", num_envs=4).rand_action()["action"]
    assert discrete.dtype == torch.int64 and set(discrete.tolist()) <= {0, 1}


def test_seed_makes_resets_and_steps_reproducible():
    def trajectory(seed):
        env = GymEnv("CartPole-v1", num_envs=2, seed=seed)
        carrier = env.reset()
        observations = [carrier["observation"]]
        for _ in range(5):
            td, carrier = env.step_and_maybe_reset(TensorDict({"action": torch.tensor([0, 1])}, [2]))
            observations.append(td["next", "observation"])
        return torch.stack(observations)

    assert torch.equal(trajectory(3), trajectory(3))
    assert not torch.equal(trajectory(3), trajectory(4))
    first = trajectory(3)
    assert not torch.equal(first[0, 0], first[0, 1])  # sub-envs get distinct seeds


class _RecordingBoxEnv(CountingEnv):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.received = []

    def step(self, action):
        self.received.append(np.array(action))
        return super().step(action)


def test_box_actions_are_clipped_to_the_bounds_but_stored_as_written():
    built = []
    env = GymEnv(lambda: built.append(_RecordingBoxEnv()) or built[-1])
    td, _ = env.step_and_maybe_reset(TensorDict({"action": torch.tensor([5.0, -0.5])}, []))
    assert built[0].received[0].tolist() == [1.0, -0.5]
    assert td["action"].tolist() == [5.0, -0.5]


def test_close_is_idempotent():
    env = GymEnv("CartPole-v1", 2)
    env.close()
    env.close()


@pytest.mark.timeout(60)
def test_an_indexed_cpu_device_steps_as_the_cpu():
    """``cpu:0`` is the CPU: the env's tensors alias its arrays as with ``cpu`` (they were
    copies once, which the env never wrote into: every observation zero)."""
    envs = {device: GymEnv("CartPole-v1", 2, seed=0, device=device) for device in ("cpu", "cpu:0")}
    first = {device: env.reset() for device, env in envs.items()}
    assert first["cpu:0"].device == torch.device("cpu")
    assert torch.equal(first["cpu:0"]["observation"], first["cpu"]["observation"])
    assert first["cpu"]["observation"].abs().sum() > 0
    stepped = {}
    for device, env in envs.items():
        carrier = first[device].clone()
        carrier["action"] = torch.tensor([0, 1])
        stepped[device], _ = env.step_and_maybe_reset(carrier)
    assert torch.equal(stepped["cpu:0"]["next", "observation"], stepped["cpu"]["next", "observation"])
    for env in envs.values():
        env.close()


@pytest.mark.timeout(60)
def test_a_wrapper_whose_package_is_missing_names_it_as_a_missing_dependency():
    """A wrapper that needs a package not installed (AtariPreprocessing's opencv) is a
    MissingDependencyError naming it, as gym.make's own are (it was a build error)."""
    from rlcollect.errors import MissingDependencyError

    def needs_opencv(env):
        raise gym.error.DependencyNotInstalled('opencv-python package not installed, run `pip install "gymnasium[x]"`')

    with pytest.raises(MissingDependencyError, match=r"opencv-python package not installed, run `pip install"):
        GymEnv("CartPole-v1", 2, wrappers=[needs_opencv])


@pytest.mark.timeout(60)
def test_a_make_kwarg_the_env_does_not_take_is_the_caller_s_config_error():
    from rlcollect.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^make kwarg nosuch=1: CartPole-v1 takes no such argument"):
        GymEnv("CartPole-v1", 2, nosuch=1)
