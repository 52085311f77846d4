"""PoolCollector: an asynchronous env pool. Which worker is served first depends on
timing, so the assertions are per env, where the values are exact: CountingEnvs of
different horizons (observation = steps since reset). Workers start with fork (fast);
every test checks that no worker, child process or /dev/shm entry outlives the collector."""
import functools
import os
import signal

import numpy as np
import pytest
import torch
from checks import check_keys_and_shapes, check_trajectories
from tensordict import TensorDict

from rlcollect import Collector, GymEnv, PoolCollector, WorkerError
from rlcollect.testing import BusyEnv, CountingEnv, ErrorAfterEnv, counting_envs

pytestmark = pytest.mark.timeout(60)
TRAJ_IDS, ENV_ID, VERSION = ("collector", "traj_ids"), ("collector", "env_id"), ("collector", "policy_version")
# worker w's envs and their episode lengths: worker 1's episodes end truncated (a time limit)
LENGTHS = [(2, 3), (4, 5), (6, 7)]
ENDS = ("terminated", "truncated", "terminated")
SOURCES = [functools.partial(GymEnv, counting_envs(lengths, end=end), 2) for lengths, end in zip(LENGTHS, ENDS)]


def value_policy(td):
    """Action 0 and a "state_value" that names the step (10 x the observation): shows that
    the policy's output lands in its step's row."""
    observation = td.get("observation")
    td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
    td.set("state_value", 10 * observation[..., 0])
    return td


def make(track, create_env_fn=SOURCES, **kwargs):
    kwargs = {"num_workers": 3, "envs_per_worker": 2, "batch_size": 2, "start_method": "fork",
              "policy": value_policy, **kwargs}
    collector = PoolCollector(create_env_fn, **kwargs)
    track(collector)
    return collector


def per_env_steps(batches, num_envs=6):
    """``(env, its steps)`` in order over consecutive flat batches (``[1, n]`` TensorDicts),
    for each env that stepped: a step serves the workers whose envs are ready first, so an
    env may get no step in a short run (a worker slow to start, on a loaded machine)."""
    data = torch.cat(batches, 0)
    steps = [(env, data[data[ENV_ID] == env].unsqueeze(0)) for env in range(num_envs)]
    # the steps' count from the batch size (TensorDict.numel() of an empty batch [1, 0] is 1, not 0)
    stepped = [(env, env_steps) for env, env_steps in steps if env_steps.batch_size.numel()]
    assert stepped, "no env stepped"
    return stepped


def test_an_env_that_never_stepped_is_left_out_of_the_per_env_steps():
    """A worker slow to start may step none of its envs in a short run: per_env_steps leaves
    such an env out (an empty [1, 0] batch kept failed test_spawned_workers_and_a_gymnasium_id
    in a loaded CI run)."""
    batch = TensorDict({ENV_ID: torch.tensor([[0, 0, 2, 2]]), "x": torch.zeros(1, 4)}, [1, 4])
    assert [(env, tuple(steps.batch_size)) for env, steps in per_env_steps([batch], num_envs=3)] == [
        (0, (1, 2)), (2, (1, 2))]


def expected_counts(steps: int, length: int, cut: int | None = None) -> list[float]:
    period = length if cut is None else min(length, cut)
    return [float(t % period) for t in range(steps)]


def test_flat_batches_are_exact_per_env(no_leftovers):
    collector = make(no_leftovers, frames_per_batch=12, total_frames=48)
    batches = list(collector)
    assert collector.frames == 48 and collector.batch_size == torch.Size([12]) and len(batches) == 4
    for batch in batches:
        check_keys_and_shapes(batch, [12], observation_shape=(1,))
        assert batch[ENV_ID].dtype == torch.int64 and batch[VERSION].dtype == torch.int64
        assert torch.equal(batch[ENV_ID], batch[ENV_ID].sort(stable=True).values)  # grouped by env, 0..P-1
        assert ((batch[ENV_ID] >= 0) & (batch[ENV_ID] < 6)).all()
        assert torch.equal(batch["state_value"], 10 * batch["observation"][:, 0])  # the step's own policy output
    ids_seen = []
    for env, steps in per_env_steps(batches):
        length, end = LENGTHS[env // 2][env % 2], ENDS[env // 2]
        count = steps["observation"][0, :, 0]
        assert count.tolist() == expected_counts(steps.shape[1], length)  # the carrier, in time order
        assert torch.equal(steps["next", "observation"][0, :, 0], count + 1)  # the true final observation
        finished = count + 1 == length
        assert torch.equal(steps["next", end][0], finished)
        assert not steps["next", "truncated" if end == "terminated" else "terminated"].any()
        check_trajectories(steps)  # is_init exactly after done, ids change exactly there
        ids_seen.append(set(steps[TRAJ_IDS].unique().tolist()))
    assert sum(map(len, ids_seen)) == len(set().union(*ids_seen)), "a traj id was used by two envs"


def test_a_policy_that_replaces_the_observation_sees_each_step_s_own(no_leftovers):
    # one worker's carrier is built once over its staging rows: an entry the policy replaced
    # (a normalised observation, say) is pointed back at those rows before the next call
    def scaling_policy(td):
        td.set("observation", td.get("observation") * 2)
        return value_policy(td)

    batches = list(make(no_leftovers, policy=scaling_policy, frames_per_batch=12, total_frames=36))
    for env, steps in per_env_steps(batches):
        count = steps["observation"][0, :, 0]  # stored as the env gave it, not scaled
        assert count.tolist() == expected_counts(steps.shape[1], LENGTHS[env // 2][env % 2])
        assert torch.equal(steps["state_value"][0], 20 * count)  # the policy read this step's observation


def test_max_frames_per_traj_cuts_and_reset_at_each_iter_restarts(no_leftovers):
    collector = make(no_leftovers, frames_per_batch=24, total_frames=48, max_frames_per_traj=4, batch_size=4)
    batches = list(collector)
    for env, steps in per_env_steps(batches):
        length, end = LENGTHS[env // 2][env % 2], ENDS[env // 2]
        count = steps["observation"][0, :, 0]
        assert count.tolist() == expected_counts(steps.shape[1], length, cut=4)
        cut = (count + 1 == 4) & (length > 4)  # cut by the collector: truncated, never terminated
        assert torch.equal(steps["next", "truncated"][0], cut | ((count + 1 == length) & (end == "truncated")))
        assert torch.equal(steps["next", "terminated"][0], (count + 1 == length) & (end == "terminated"))
        check_trajectories(steps)
    restarting = make(no_leftovers, frames_per_batch=12, total_frames=36, reset_at_each_iter=True)
    for batch in restarting:
        first = batch[ENV_ID] != torch.cat([torch.tensor([-1]), batch[ENV_ID][:-1]])
        assert (batch["observation"][first, 0] == 0).all() and batch["is_init"][first].all()


def test_per_env_layout_matches_a_collector_on_the_same_envs(no_leftovers):
    collector = make(no_leftovers, frames_per_batch=24, total_frames=72, layout="per_env")
    batches = list(collector)
    assert collector.batch_size == torch.Size([6, 4]) and all(batch.batch_size == (6, 4) for batch in batches)
    data = torch.cat(batches, -1)  # [6 envs, 12 steps]
    check_keys_and_shapes(data, [6, 12], observation_shape=(1,))
    assert torch.equal(data[ENV_ID], torch.arange(6).unsqueeze(1).expand(6, 12))
    check_trajectories(data)
    factories = [factory for lengths, end in zip(LENGTHS, ENDS) for factory in counting_envs(lengths, end=end)]
    reference = torch.cat(list(Collector(GymEnv(factories, 6), value_policy, frames_per_batch=24,
                                         total_frames=72)), -1)
    for key in ("observation", "is_init", "state_value", ("next", "observation"), ("next", "terminated"),
                ("next", "truncated"), ("next", "done")):
        assert torch.equal(data[key], reference[key]), key
    # per_env regroups a flat batch in which every env took the same number of steps
    interleaved = batches[0].transpose(0, 1).reshape(-1)  # rows in time order, envs interleaved
    regrouped = collector.per_env(interleaved)
    assert all(torch.equal(regrouped[key], batches[0][key]) for key in batches[0].keys(True, True))
    with pytest.raises(ValueError, match=r"the envs took \[4, 4, 4, 4, 4, 3\] steps"):
        collector.per_env(interleaved[:-1])


def test_the_other_workers_keep_stepping_while_one_is_slow(no_leftovers):
    slow = functools.partial(GymEnv, functools.partial(BusyEnv, 30_000.0), 2)  # 30 ms a step
    fast = functools.partial(GymEnv, functools.partial(CountingEnv, 1000), 2)
    collector = make(no_leftovers, [slow, fast], num_workers=2, frames_per_batch=40, total_frames=40)
    [batch] = list(collector)
    steps = torch.bincount(batch[ENV_ID], minlength=4).tolist()
    assert sum(steps) == 40 and steps[2] == steps[3] > 4 * steps[0] and steps[0] == steps[1]


def test_policy_versions_and_random_frames(no_leftovers):
    collector = make(no_leftovers, frames_per_batch=12, total_frames=36, layout="per_env", init_random_frames=12)
    batches = iter(collector)
    first = next(batches)
    assert (first[VERSION] == 0).all() and (first["state_value"] == 0).all()  # random actions, no policy output
    assert (first["observation"] > 0).any()
    collector.update_policy_weights_()
    second = next(batches)
    assert (second[VERSION] == 1).all()  # per_env batches start together: no lag
    assert torch.equal(second["state_value"], 10 * second["observation"][..., 0])
    flat = make(no_leftovers, frames_per_batch=12, total_frames=24)
    batches = iter(flat)
    next(batches)
    flat.update_policy_weights_()
    for _, steps in per_env_steps([next(batches)]):  # only a step under way at the update is older
        versions = steps[VERSION][0].tolist()
        assert versions == sorted(versions) and versions.count(0) <= 1 and set(versions) <= {0, 1}


def test_traj_ids_are_never_reused_after_reset_or_reload(no_leftovers):
    collector = make(no_leftovers, frames_per_batch=12, total_frames=-1)
    batches = iter(collector)
    before = next(batches)[TRAJ_IDS]
    collector.reset()
    after = next(batches)
    assert after[TRAJ_IDS].min() > before.max()
    assert (after["observation"][after["is_init"], 0] == 0).all()
    collector.update_policy_weights_()
    state = collector.state_dict()
    reloaded = make(no_leftovers, frames_per_batch=12, total_frames=-1)
    reloaded.load_state_dict(state)
    assert reloaded.frames == state["frames"] == 24
    assert reloaded.policy_version == state["policy_version"] == 1
    assert next(iter(reloaded))[TRAJ_IDS].min() >= state["traj_pool"]["next_id"]


def test_env_error_names_the_worker_with_its_traceback(no_leftovers):
    failing = functools.partial(GymEnv, functools.partial(ErrorAfterEnv, 3), 2)
    collector = make(no_leftovers, [SOURCES[0], failing, SOURCES[2]], frames_per_batch=12)
    with pytest.raises(WorkerError, match=r"(?s)collector worker 1: raised an exception.*Traceback.*"
                                          r"ErrorAfterEnv: step 4 fails by design"):
        for _ in collector:
            pass
    assert collector._shut_down and not any(p.is_alive() for p in collector._processes)


def test_a_killed_worker_is_reported_not_waited_on(no_leftovers):
    collector = make(no_leftovers, frames_per_batch=12)
    batches = iter(collector)
    next(batches)
    process = collector._processes[2]
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    with pytest.raises(WorkerError, match=f"collector worker 2: died from signal SIGKILL \\(pid {process.pid}\\)"):
        for _ in range(20):
            next(batches)
    collector.shutdown()  # idempotent


@pytest.mark.parametrize("kwargs, error, match", [
    ({"batch_size": 3}, ValueError, "batch_size=3: the pool serves whole workers"),
    ({"batch_size": 8}, ValueError, "at most num_workers x envs_per_worker=6"),
    ({"layout": "rows"}, ValueError, "layout must be one of"),
    ({"trajs_per_batch": 2}, ValueError, "use layout='per_env'"),
    ({"reset_when_done": False}, ValueError, "does not support reset_when_done"),
    ({"set_truncated": True}, ValueError, "does not support set_truncated"),
    ({"max_worker_restarts": 1}, ValueError, "does not support max_worker_restarts"),
    ({"env_device": "cpu"}, ValueError, "the envs live in worker processes"),
    ({"no_such_option": 1}, TypeError, "unexpected arguments"),
])
def test_bad_arguments_raise_before_any_worker_starts(no_leftovers, kwargs, error, match):
    with pytest.raises(error, match=match):
        PoolCollector(SOURCES, value_policy, num_workers=3, envs_per_worker=2, frames_per_batch=12,
                      start_method="fork", **kwargs)


def test_spawned_workers_and_a_gymnasium_id(no_leftovers):
    collector = make(no_leftovers, "CartPole-v1", policy=None, num_workers=2, batch_size=None, frames_per_batch=16,
                     total_frames=32, start_method="spawn", seed=0)
    assert collector.envs_per_step == 2  # None: half the workers' envs
    batches = list(collector)
    check_keys_and_shapes(batches[0], [16], observation_shape=(4,))
    assert collector.frames == 32 and sum(batch.numel() for batch in batches) == 32
    # a worker still starting (spawn) may get none of the 32 steps (an env without steps failed this test once in a
    # loaded fresh-clone CI run): each env that stepped holds whole trajectories
    for _, steps in per_env_steps(batches, num_envs=4):
        check_trajectories(steps)
    assert np.isin(torch.cat(batches)[ENV_ID].unique().numpy(), np.arange(4)).all()


class ScaledValue(torch.nn.Module):
    """value_policy with a weight: state_value = scale x the observation (10 until updated)."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(10.0))

    def forward(self, td):
        observation = td.get("observation")
        td.set("action", torch.zeros(td.batch_size, dtype=torch.int64, device=observation.device))
        td.set("state_value", self.scale.detach() * observation[..., 0])
        return td


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("storing_device", ["cpu", "cuda"])
def test_a_policy_on_the_gpu_acts_for_each_group_of_envs(no_leftovers, storing_device):
    # the subset halves copy each group's carrier to the GPU and its outputs back to their rows
    policy = ScaledValue()
    collector = make(no_leftovers, policy=policy, frames_per_batch=24, total_frames=-1, layout="per_env",
                     policy_device="cuda", storing_device=storing_device)
    assert not policy.scale.is_cuda
    batches = [batch for _, batch in zip(range(3), collector)]
    assert all(batch["observation"].device.type == storing_device for batch in batches)
    data = torch.cat(batches, -1).cpu()
    factories = [factory for lengths, end in zip(LENGTHS, ENDS) for factory in counting_envs(lengths, end=end)]
    reference = torch.cat(list(Collector(GymEnv(factories, 6), value_policy, frames_per_batch=24,
                                         total_frames=72)), -1)
    for key in ("observation", "is_init", "state_value", "action", ("next", "observation"), ("next", "done")):
        assert torch.equal(data[key], reference[key]), key
    with torch.no_grad():
        policy.scale.fill_(1000.0)
    collector.update_policy_weights_()  # refreshes the GPU copy
    batch = next(iter(collector)).cpu()
    assert torch.equal(batch["state_value"], 1000 * batch["observation"][..., 0])


def test_batch_timeout_names_the_worker_waited_on_and_the_limit(no_leftovers):
    slow = functools.partial(GymEnv, functools.partial(BusyEnv, 400_000.0), 2)  # 0.4 s a step: no batch in 0.1 s
    collector = make(no_leftovers, [slow, slow], num_workers=2, frames_per_batch=8, batch_timeout=0.1,
                     shutdown_timeout=0.5)
    with pytest.raises(WorkerError, match=r"collector worker [01]: no step within batch_timeout=0.1 s"):
        next(iter(collector))
    assert not any(p.is_alive() for p in collector._processes)
