"""Info entries (GymEnv's info_keys): each keeps the dtype of its first value, on every backend."""
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.errors import ConfigError
from rlcollect.testing import CountingEnv, CountingVectorEnv, InfoEnv


class TypedInfoEnv(CountingEnv):
    """A CountingEnv (episodes of 3 steps) whose info reports, at step count c: ``lives`` =
    3 - c (a Python int), ``speed`` = c / 4 (numpy float32), ``flag`` (numpy bool, True at
    odd c) from step 1 on, and ``distance`` = c (a Python float) already at its reset."""

    def __init__(self):
        super().__init__(episode_length=3)

    def reset(self, *, seed=None, options=None):
        observation, _ = super().reset(seed=seed)
        return observation, {"distance": 0.0}

    def step(self, action):
        observation, reward, terminated, truncated, _ = super().step(action)
        c = self.count
        info = {"lives": 3 - c, "speed": np.float32(c / 4), "flag": np.bool_(c % 2 == 1), "distance": float(c)}
        return observation, reward, terminated, truncated, info


KEYS = ["lives", "speed", "flag", "distance", "is_success", "cost", "never"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["list", "sync", "async"])
def test_info_entries_keep_the_dtype_of_their_first_value(backend):
    """Regression: every info entry was stored as float32 (a bool is_success as 0.0 / 1.0)."""
    class Both(TypedInfoEnv):  # InfoEnv's entries too: cost every step, is_success at an episode's end
        def step(self, action):
            *rest, info = super().step(action)
            info["cost"] = 0.5 * self.count
            if rest[2]:
                info["is_success"] = True
            return (*rest, info)

    env = GymEnv(Both, 2, backend=backend, info_keys=KEYS)
    dtypes = {"lives": np.int64, "speed": np.float32, "flag": bool, "distance": np.float64, "is_success": bool,
              "cost": np.float64, "never": np.float32}
    assert env.info_keys == {key: np.dtype(dtype) for key, dtype in dtypes.items()}
    batch = next(iter(Collector(env, frames_per_batch=10)))
    env.close()
    c = [1, 2, 3, 1, 2]
    assert batch["next", "lives"].dtype == torch.int64 and batch["next", "lives"].tolist() == [[3 - x for x in c]] * 2
    assert batch["next", "speed"].dtype == torch.float32 and batch["next", "speed"].tolist() == [[x / 4 for x in c]] * 2
    assert batch["next", "flag"].dtype == torch.bool and batch["next", "flag"].tolist() == [[x % 2 == 1 for x in c]] * 2
    assert batch["next", "distance"].dtype == torch.float64 and batch["next", "distance"].tolist() == [c] * 2
    assert batch["next", "cost"].dtype == torch.float64 and batch["next", "cost"].tolist() == [[x / 2 for x in c]] * 2
    # reported at an episode's end only: False elsewhere; never reported: float32 zeros
    assert batch["next", "is_success"].dtype == torch.bool
    assert batch["next", "is_success"].tolist() == [[False, False, True, False, False]] * 2
    assert batch["next", "never"].dtype == torch.float32 and not batch["next", "never"].any()


@pytest.mark.timeout(60)
def test_a_vector_env_given_as_is_reports_its_info_dtypes():
    # CountingVectorEnv reports cost = 0.5 * count (float64) at even counts only (its _cost mask)
    env = GymEnv(CountingVectorEnv([3, 4]), info_keys=["cost"])
    batch = next(iter(Collector(env, frames_per_batch=8)))
    assert batch["next", "cost"].dtype == torch.float64
    assert batch["next", "cost"].tolist() == [[0, 1, 0, 0], [0, 1, 0, 2]]


@pytest.mark.timeout(60)
def test_declared_info_dtypes_are_kept_and_need_no_probe():
    vector_env = CountingVectorEnv([3, 4])
    env = GymEnv(vector_env, info_keys={"cost": torch.float32, "flag": "bool"})
    assert env.info_keys == {"cost": np.dtype(np.float32), "flag": np.dtype(bool)} and vector_env.resets == 0
    batch = next(iter(Collector(env, frames_per_batch=8)))
    assert batch["next", "cost"].dtype == torch.float32 and batch["next", "flag"].dtype == torch.bool
    assert batch["next", "cost"].tolist() == [[0, 1, 0, 0], [0, 1, 0, 2]]
    with pytest.raises(ConfigError, match="info_keys: the dtype of 'cost' must be one of bool, int64, float32, "
                                          "float64; got 'int8'"):
        GymEnv(InfoEnv, info_keys={"cost": "int8"})


@pytest.mark.timeout(60)
def test_an_info_entry_that_is_not_one_scalar_is_refused():
    class ArrayInfoEnv(CountingEnv):
        def step(self, action):
            *rest, _ = super().step(action)
            return (*rest, {"position": np.zeros(2)})

    with pytest.raises(ConfigError, match="info_keys: 'position' is reported as ndarray float64 of shape .2,.; an "
                                          "info key stores one bool, integer or float per step"):
        GymEnv(ArrayInfoEnv, info_keys=["position"])


@pytest.mark.timeout(60)
def test_the_probe_leaves_seeded_batches_unchanged():
    """The dtype probe steps sub-env 0 before the first reset; a seeded env's batches are
    those it gives without info keys."""
    def batch(**kwargs):
        torch.manual_seed(0)
        env = GymEnv(functools.partial(gym.make, "CartPole-v1"), 2, seed=5, **kwargs)
        return next(iter(Collector(env, frames_per_batch=60)))

    with_info, without = batch(info_keys=["is_success"]), batch()
    assert (with_info.exclude(("next", "is_success")) == without).all()
    assert with_info["next", "is_success"].dtype == torch.float32  # CartPole never reports it


@pytest.mark.timeout(60)
def test_envpool_info_entries_keep_their_kind():
    pytest.importorskip("envpool")
    env = GymEnv("CartPole-v1", 2, seed=1, backend="envpool", info_keys=["elapsed_step"])  # int32 in EnvPool
    batch = next(iter(Collector(env, frames_per_batch=6)))
    assert env.info_keys == {"elapsed_step": np.dtype(np.int64)}
    assert batch["next", "elapsed_step"].dtype == torch.int64
    assert batch["next", "elapsed_step"].tolist() == [[1, 2, 3]] * 2
