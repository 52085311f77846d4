"""GymEnv's backends (envs/backends.py): the same keys and semantics whatever steps the envs.

The collector semantics themselves (carrier, partial resets, max_frames_per_traj, ...) run
over every backend in tests/collectors/test_single.py.
"""
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.envs.backends import PartialResetCartPole
from rlcollect.errors import ConfigError
from rlcollect.modules import ActorCritic
from rlcollect.testing import CountingEnv, CountingVectorEnv, SpacesEnv, counting_envs


def batches(env, count=2, frames_per_batch=120, seed=7, **options):
    torch.manual_seed(0)
    policy = ActorCritic(env.observation_space, env.action_space)
    collector = Collector(env, policy, frames_per_batch=frames_per_batch, **options)
    collector.set_seed(seed)
    iterator = iter(collector)
    out = [next(iterator).clone() for _ in range(count)]
    collector.shutdown()
    return out


def test_list_sync_and_async_give_identical_batches_from_the_same_seed():
    # CartPole with a stochastic policy over 2 x 40 steps: several episodes end, so partial
    # resets, seeds (env i: seed + i) and the continued RNGs of the reset envs all matter
    expected = batches(GymEnv("CartPole-v1", 3))
    assert expected[1]["next", "done"].sum() > 0
    for backend in ("sync", "async"):
        got = batches(GymEnv("CartPole-v1", 3, backend=backend))
        for a, b in zip(expected, got):
            assert (a == b).all(), backend


@pytest.mark.parametrize("backend", ["list", "sync", "async"])
def test_terminated_and_truncated_stay_distinct(backend):
    env = GymEnv(counting_envs((2, 3), end="truncated"), num_envs=2, backend=backend)
    batch = next(iter(Collector(env, frames_per_batch=12)))
    assert batch["next", "truncated"].tolist() == [[False, True] * 3, [False, False, True] * 2]
    assert not batch["next", "terminated"].any()
    assert batch["next", "observation"][..., 0].tolist() == [[1, 2] * 3, [1, 2, 3] * 2]  # true final obs kept


@pytest.mark.parametrize("mode", ["disabled", "same_step"])
def test_a_vector_env_given_as_is_resets_only_the_finished_envs(mode):
    vector_env = CountingVectorEnv([3, 4], mode)
    env = GymEnv(vector_env, info_keys=["cost"])
    assert env.num_envs == 2 and env.batch_size == (2,) and env.backend == "vector"
    batch = next(iter(Collector(env, frames_per_batch=16)))
    assert batch["observation"][..., 0].tolist() == [[0, 1, 2] * 2 + [0, 1], [0, 1, 2, 3] * 2]
    assert batch["next", "observation"][..., 0].tolist() == [[1, 2, 3] * 2 + [1, 2], [1, 2, 3, 4] * 2]
    assert batch["collector", "traj_ids"].tolist() == [[0, 0, 0, 2, 2, 2, 4, 4], [1, 1, 1, 1, 3, 3, 3, 3]]
    assert batch["is_init"].tolist() == [[True, False, False] * 2 + [True, False], [True, False, False, False] * 2]
    # info entries where the env reported them (its "_cost" mask), 0 elsewhere
    assert batch["next", "cost"].tolist() == [[0, 1, 0, 0, 1, 0, 0, 1], [0, 1, 0, 2, 0, 1, 0, 2]]
    # the info probe's reset (cost's dtype: float64, as reported), then: disabled: one full reset and one
    # partial reset per done step; same_step: the env resets itself
    assert batch["next", "cost"].dtype == torch.float64
    assert vector_env.resets == 1 + (1 + 4 if mode == "disabled" else 1)  # done at steps 2, 3, 5, 7


NEXT_STEP_KEYS = ["observation", "is_init", "action", ("next", "observation"), ("next", "reward"),
                  ("next", "terminated"), ("next", "truncated"), ("next", "done"), ("collector", "traj_ids")]


def counting_vector_env(kind, autoreset_mode, end="terminated", **kwargs):
    """gymnasium's Sync/AsyncVectorEnv of two CountingEnvs, finishing after 3 and 4 steps."""
    makers = [functools.partial(CountingEnv, length, end=end) for length in (3, 4)]
    return kind(makers, autoreset_mode=autoreset_mode, **kwargs)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind, kwargs, end", [(gym.vector.SyncVectorEnv, {}, "terminated"),
                                               (gym.vector.SyncVectorEnv, {}, "truncated"),
                                               (gym.vector.AsyncVectorEnv, {}, "terminated"),
                                               (gym.vector.AsyncVectorEnv, {"shared_memory": False}, "truncated")])
def test_a_next_step_vector_env_gives_the_batches_of_the_same_envs_with_autoreset_disabled(kind, kwargs, end):
    """Regression: NEXT_STEP vector envs were refused. The step after a done is a reset, not a
    transition: none is stored, ("next", "observation") keeps the true final observation."""
    given = counting_vector_env(kind, gym.vector.AutoresetMode.NEXT_STEP, end, **kwargs)
    expected = batches(GymEnv(counting_vector_env(kind, gym.vector.AutoresetMode.DISABLED, end, **kwargs)), 2, 16)
    got = batches(GymEnv(given), 2, 16)
    for want, have in zip(expected, got):
        for key in NEXT_STEP_KEYS:
            assert torch.equal(want[key], have[key]), key
    assert got[0]["next", "observation"][..., 0].tolist() == [[1, 2, 3] * 2 + [1, 2], [1, 2, 3, 4] * 2]
    assert got[0]["is_init"].tolist() == [[True, False, False] * 2 + [True, False], [True, False, False, False] * 2]
    assert (got[1]["next", "reward"] == 1).all()  # no reset step (reward 0) is stored
    other = "terminated" if end == "truncated" else "truncated"
    assert got[1]["next", end].sum() == 5 and not got[1]["next", other].any()


@pytest.mark.timeout(60)
def test_a_next_step_sync_vector_env_keeps_its_sub_env_instances():
    given = counting_vector_env(gym.vector.SyncVectorEnv, gym.vector.AutoresetMode.NEXT_STEP)
    env = GymEnv(given)
    assert env._backend.vector_env.envs == given.envs
    assert env._backend.vector_env.autoreset_mode == gym.vector.AutoresetMode.DISABLED


@pytest.mark.timeout(60)
def test_a_next_step_vector_cartpole_becomes_its_partial_reset_twin():
    given = gym.make_vec("CartPole-v1", 3, vectorization_mode="vector_entry_point", max_episode_steps=20)
    assert type(given) is CartPoleVectorEnv
    env = GymEnv(given)
    assert type(env._backend.vector_env) is PartialResetCartPole and env._backend.vector_env.max_episode_steps == 20
    expected = batches(GymEnv("CartPole-v1", 3, backend="vector", max_episode_steps=20), 2, 3 * 30)
    for want, have in zip(expected, batches(env, 2, 3 * 30)):
        assert (want == have).all()
    assert expected[0]["next", "truncated"].any() and (expected[1]["next", "reward"] == 1).all()


@pytest.mark.timeout(60)
def test_a_next_step_vector_env_rlcollect_cannot_rebuild_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="CountingVectorEnv autoresets on the step after a done .NEXT_STEP") as error:
        GymEnv(CountingVectorEnv([3, 4], "next_step"))
    assert "\n" not in str(error.value) and "autoreset_mode=DISABLED or SAME_STEP" in str(error.value)
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(counting_vector_env(gym.vector.SyncVectorEnv,
                                                                         gym.vector.AutoresetMode.NEXT_STEP))
    with pytest.raises(ConfigError, match="RecordEpisodeStatistics autoresets"):
        GymEnv(wrapped)


def test_bad_backend_arguments_name_the_argument():
    with pytest.raises(ValueError, match="backend must be one of list, sync, async, vector, envpool; got .threads."):
        GymEnv("CartPole-v1", 2, backend="threads")
    with pytest.raises(ValueError, match="backend='sync' steps a batch of envs: give num_envs"):
        GymEnv("CartPole-v1", backend="sync")
    with pytest.raises(ValueError, match="'Acrobot-v1' has no vector entry point"):
        GymEnv("Acrobot-v1", 2, backend="vector")
    with pytest.raises(ValueError, match="takes no per-env wrappers"):
        GymEnv("CartPole-v1", 2, backend="vector", wrappers=[gym.wrappers.RecordEpisodeStatistics])
    with pytest.raises(ValueError, match="num_envs=3 but the vector env holds 2 envs"):
        GymEnv(CountingVectorEnv([3, 4]), 3)
    with pytest.raises(ValueError, match="env lists 2 env factories: give num_envs=2"):
        GymEnv(counting_envs((3, 4)), 3)


def test_a_vector_backend_cannot_step_a_finished_env_left_alone():
    collector = Collector(GymEnv(counting_envs((2,)), num_envs=1, backend="sync"), frames_per_batch=4,
                          reset_when_done=False)
    with pytest.raises(RuntimeError, match=r"sub-env\(s\) \[0\] finished and were not reset.*backend='list'"):
        next(iter(collector))


@pytest.mark.parametrize("observation", ["dict", "tuple"])
def test_nested_observations_through_the_sync_backend(observation):
    def make(backend):
        torch.manual_seed(0)  # the same random actions
        factories = [lambda: SpacesEnv(observation, episode_length=3)] * 2
        return next(iter(Collector(GymEnv(factories, num_envs=2, backend=backend), frames_per_batch=8)))

    expected, got = make("list"), make("sync")
    assert (expected == got).all()
    count = got["next", "observation", "count" if observation == "dict" else "0"]
    assert count.tolist() == [[1, 2, 3, 1]] * 2


def test_partial_reset_cartpole_has_gymnasium_s_dynamics():
    # the same state and actions give the same trajectory as gymnasium's CartPole-v1 (float32)
    vector_env = PartialResetCartPole(num_envs=2)
    vector_env.reset(seed=0)
    single = gym.make("CartPole-v1").unwrapped
    single.reset(seed=0)
    single.state = vector_env.state[:, 1].astype(np.float64).copy()
    actions = [1, 0, 0, 1, 1, 1, 0, 1, 0, 0]
    for action in actions:
        batched, _, terminated, _, _ = vector_env.step(np.array([0, action]))
        observation, _, single_terminated, _, _ = single.step(action)
        np.testing.assert_allclose(batched[1], observation, rtol=1e-6, atol=1e-6)
        assert terminated[1] == single_terminated


@pytest.mark.parametrize("integrator, sutton_barto", [("euler", False), ("semi-implicit euler", False),
                                                      ("euler", True)])
def test_partial_reset_cartpole_steps_bit_for_bit_as_gymnasium_s_vector_cartpole(integrator, sutton_barto):
    # its own step (no reset of the envs done at the last step) is the parent's arithmetic
    ours = PartialResetCartPole(num_envs=16, sutton_barto_reward=sutton_barto)
    theirs = CartPoleVectorEnv(num_envs=16, sutton_barto_reward=sutton_barto)
    ours.kinematics_integrator = theirs.kinematics_integrator = integrator
    ours.reset(seed=4)
    theirs.reset(seed=4)
    actions = np.random.default_rng(0).integers(0, 2, (8, 16))
    for action in actions:  # no env finishes within 8 steps of a reset
        for got, expected in zip(ours.step(action)[:4], theirs.step(action)[:4]):
            assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert np.array_equal(ours.state, theirs.state) and ours.steps.tolist() == [8] * 16
    # the vector backend's path: the same step written into staging arrays
    arrays = {"next_observation": np.zeros((16, 4), np.float32), "reward": np.zeros(16, np.float32),
              "terminated": np.ones(16, bool), "truncated": np.ones(16, bool), "done": np.ones(16, bool)}
    for action in np.random.default_rng(1).integers(0, 2, (30, 16)):  # past the first terminations
        theirs.prev_done[:] = False  # gymnasium resets the envs done at its last step; neither does here
        expected = theirs.step(action)
        ours.step_into(action, arrays)
        assert np.array_equal(arrays["next_observation"], expected[0]) and np.array_equal(arrays["reward"], expected[1])
        assert np.array_equal(arrays["terminated"], expected[2]) and np.array_equal(arrays["truncated"], expected[3])
        assert np.array_equal(arrays["done"], expected[2] | expected[3])
    assert arrays["terminated"].any()


def test_partial_reset_cartpole_resets_only_the_masked_envs():
    vector_env = PartialResetCartPole(num_envs=3, max_episode_steps=4)
    vector_env.reset(seed=1)
    for _ in range(4):
        observation, _, _, truncated, _ = vector_env.step(np.array([1, 1, 1]))
    assert truncated.tolist() == [True, True, True]
    before = observation.copy()
    observation, _ = vector_env.reset(options={"reset_mask": np.array([True, False, True])})
    assert np.array_equal(observation[1], before[1])  # env 1 untouched
    assert (np.abs(observation[[0, 2]]) <= 0.05).all() and vector_env.steps.tolist() == [0, 4, 0]
    _, reward, _, _, _ = vector_env.step(np.array([0, 0, 0]))  # no reset step: every env moves, reward 1
    assert reward.tolist() == [1.0, 1.0, 1.0]


def test_the_vector_backend_runs_cartpole_with_exact_episode_ends():
    env = GymEnv("CartPole-v1", 64, backend="vector", seed=3, max_episode_steps=20)
    assert repr(env) == "GymEnv('CartPole-v1', num_envs=64, backend='vector', device='cpu')"
    batch = next(iter(Collector(env, frames_per_batch=64 * 30)))
    done, is_init = batch["next", "done"], batch["is_init"]
    assert batch.batch_size == (64, 30)
    assert torch.equal(is_init[:, 1:], done[:, :-1])  # a step after a done starts a trajectory, nowhere else
    assert (batch["next", "reward"] == 1).all()  # no reset step is ever stored
    # every episode ends by step 20 (the time limit), and is truncated exactly there
    steps = torch.zeros(64, dtype=torch.long)
    for t in range(30):
        steps = torch.where(is_init[:, t], 1, steps + 1)
        assert torch.equal(batch["next", "truncated"][:, t], steps == 20)
    assert batch["next", "truncated"].any() and batch["next", "terminated"].any()


@pytest.mark.parametrize("seed", [3, [5, 9, 11, 2, 7, 1]], ids=["one_seed", "a_seed_per_env"])
def test_a_seeded_vector_cartpole_moves_as_the_list_backend_step_for_step_paused_envs_too(seed):
    """Seeded, backend "vector" gives env i a generator of its own (seed + i, or seed[i]),
    as gymnasium's CartPoleEnv: every reset state, step, episode end and paused env is the
    list backend's, bit for bit, past the 32 reset states a generator draws at once."""
    envs = [GymEnv("CartPole-v1", 6, seed=seed, backend=backend, max_episode_steps=60)
            for backend in ("list", "vector")]
    assert all(env.reset()["observation"].abs().max() <= 0.05 for env in envs)
    actions, finished = np.random.default_rng(0), 0
    for t in range(1000):  # some 50 episodes per env: each env's generator draws 32 reset states at a time
        if t == 100:
            assert all(env.pause([1, 4]) for env in envs)
        if t == 200:
            for env in envs:
                env.unpause([1, 4])
        action = actions.integers(0, 2, 6)
        done = [env.stage_step(action) for env in envs][0]
        finished += 0 if done is None else int(done.sum())
        for key in ("observation", "is_init", ("next", "observation"), ("next", "reward"), ("next", "terminated"),
                    ("next", "truncated"), ("next", "done")):
            assert torch.equal(envs[0].staged[key], envs[1].staged[key]), (t, key)
        if 100 <= t < 200:
            assert envs[1].staged["next", "reward"][[1, 4]].tolist() == [0.0, 0.0]  # paused: unstepped
    assert finished > 6 * 40  # many resets, terminations and time limits
    for env in envs:
        env.close()


def test_a_collector_s_random_frames_are_the_same_on_the_vector_and_list_backends():
    """init_random_frames draws from torch's RNG over the action space of one env, which
    both backends give: 2 batches of random frames (episodes end in them), then the
    policy's, are the list backend's bit for bit (a DQN run is the same on either)."""
    expected = batches(GymEnv("CartPole-v1", 6), count=3, frames_per_batch=240, init_random_frames=480)
    got = batches(GymEnv("CartPole-v1", 6, backend="vector"), count=3, frames_per_batch=240,
                  init_random_frames=480)
    assert [int(batch["next", "done"].sum()) for batch in expected] == [6, 11, 11]
    for a, b in zip(expected, got):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        assert (a == b).all()


@pytest.mark.timeout(60)
def test_an_unseeded_vector_cartpole_resets():
    """Regression: the first reset of an unseeded GymEnv(backend="vector") reset rows of a
    CartPole state that did not exist yet."""
    carrier = GymEnv("CartPole-v1", 3, backend="vector").reset()
    assert carrier["observation"].shape == (3, 4) and (carrier["observation"].abs() <= 0.05).all()


def test_envpool_resets_finished_envs_at_once_and_truncates_at_the_limit():
    pytest.importorskip("envpool")
    env = GymEnv("CartPole-v1", 4, seed=3, backend="envpool", max_episode_steps=20)
    assert repr(env) == "GymEnv('CartPole-v1', num_envs=4, backend='envpool', device='cpu')"
    batch = next(iter(Collector(env, frames_per_batch=4 * 40)))
    done, is_init = batch["next", "done"], batch["is_init"]
    assert torch.equal(is_init[:, 1:], done[:, :-1])
    assert (batch["next", "reward"] == 1).all()  # EnvPool's own reset step is never taken
    continuing = ~done[:, :-1]
    assert torch.equal(batch["observation"][:, 1:][continuing], batch["next", "observation"][:, :-1][continuing])
    steps = torch.zeros(4, dtype=torch.long)
    for t in range(40):
        steps = torch.where(is_init[:, t], 1, steps + 1)
        assert torch.equal(batch["next", "truncated"][:, t], steps == 20)
    # env i is seeded seed + i, as EnvPool does: env 1 of seed 3 starts as env 0 of seed 4
    first = GymEnv("CartPole-v1", 2, seed=3, backend="envpool").reset()["observation"]
    second = GymEnv("CartPole-v1", 1, seed=4, backend="envpool").reset()["observation"]
    assert torch.equal(first[1], second[0])
    with pytest.raises(ValueError, match="EnvPool has no task 'CartPole-v9'"):
        GymEnv("CartPole-v9", 2, backend="envpool")
