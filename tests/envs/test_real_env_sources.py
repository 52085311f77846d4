"""Real env sources: gymnasium's module:EnvId, plugin imports, wrappers, info keys."""
import functools
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcollect import ActionServerCollector, Collector, GymEnv, MultiSyncCollector
from rlcollect.testing import CountingEnv, InfoEnv


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A user's own module registering an env on import, importable by name."""
    (tmp_path / "my_rl_envs.py").write_text(textwrap.dedent('''
        import gymnasium as gym
        from rlcollect.testing import CountingEnv

        class Seven(CountingEnv):
            def __init__(self):
                super().__init__(episode_length=7)

        gym.register("MySeven-v0", entry_point=Seven)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rl_envs"
    sys.modules.pop("my_rl_envs", None)
    gym.registry.pop("MySeven-v0", None)


def test_module_colon_env_id_imports_the_module_then_makes_the_env(user_module):
    env = GymEnv(f"{user_module}:MySeven-v0", 2)
    batch = next(iter(Collector(env, frames_per_batch=16)))
    assert batch["next", "done"][0].nonzero().squeeze(-1).tolist() == [6]  # episodes of 7 steps
    assert GymEnv("MySeven-v0").num_envs is None  # registered now


def test_imports_register_plugins_before_the_id_is_made(user_module):
    assert GymEnv("MySeven-v0", imports=[user_module]).observation_space.shape == (1,)
    with pytest.raises(ImportError, match="env imports: cannot import 'no_such_module'"):
        GymEnv("CartPole-v1", imports=["no_such_module"])
    with pytest.raises(ValueError, match=r"Unknown gymnasium env id 'MySevn-v0'.*MySeven-v0"):
        GymEnv("MySevn-v0")


def test_wrappers_apply_in_order_to_each_sub_env():
    scale = functools.partial(gym.wrappers.TransformObservation, func=lambda obs: obs * 10,
                              observation_space=gym.spaces.Box(0.0, np.inf, (1,), np.float32))
    shift = functools.partial(gym.wrappers.TransformObservation, func=lambda obs: obs + 1,
                              observation_space=gym.spaces.Box(0.0, np.inf, (1,), np.float32))
    env = GymEnv(CountingEnv, 2, wrappers=[scale, shift])  # (count * 10) + 1
    batch = next(iter(Collector(env, frames_per_batch=6)))
    assert batch["observation"][0, :, 0].tolist() == [1.0, 11.0, 21.0]
    with pytest.raises(TypeError, match="returned int, not a gymnasium.Env"):
        GymEnv(CountingEnv, wrappers=[lambda env: 3])


def check_info(batch):
    count = batch["next", "observation"][..., 0]
    assert batch["next", "cost"].dtype == torch.float64  # a Python float, as reported
    assert torch.equal(batch["next", "cost"], 0.5 * count.double())
    assert batch["next", "is_success"].dtype == torch.bool
    assert torch.equal(batch["next", "is_success"], batch["next", "done"])  # False where not reported


def test_info_keys_are_stored_per_step_in_every_collector(no_leftovers):
    source = functools.partial(InfoEnv, 3)
    check_info(next(iter(Collector(GymEnv(source, 2, info_keys=["cost", "is_success"]), frames_per_batch=12))))
    env_kwargs = {"info_keys": ["cost", "is_success"]}
    multi = MultiSyncCollector(source, num_workers=2, envs_per_worker=2, env_kwargs=env_kwargs, frames_per_batch=24,
                               start_method="fork")
    server = ActionServerCollector(source, num_workers=2, envs_per_worker=2, env_kwargs=env_kwargs,
                                   frames_per_batch=24, start_method="fork")
    for collector in (multi, server):
        no_leftovers(collector)
        check_info(next(iter(collector)))
    with pytest.raises(ValueError, match="info_keys must be names"):
        GymEnv(source, info_keys=["reward"])


class NanPolicy(torch.nn.Module):
    """A diverged continuous policy: finite actions for 3 calls (the collector's dry run and
    the 2 steps of the first batch), then NaN."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, td):
        self.calls += 1
        value = float("nan") if self.calls > 3 else 0.5
        td.set("action", torch.full((*td.batch_size, 1), value))
        return td


def test_a_nan_action_stops_collection_naming_the_batch_and_never_reaches_the_env():
    from rlcollect.envs.gym_env import NonFiniteActionError

    env = GymEnv("Pendulum-v1", 2, seed=0)
    collector = Collector(env, NanPolicy(), frames_per_batch=4)  # 2 steps per batch
    batches = iter(collector)
    next(batches)
    message = r"batch 2 \(frames 5\.\.8\), step 0: .*not finite .*env\(s\) \[0, 1\]"
    with pytest.raises(NonFiniteActionError, match=message):
        next(batches)
