"""Action-server collectors: envs in worker processes, the policy in the main process.
Workers start with fork here (fast); one test uses spawn, the default. Every test checks
that no worker, child process or /dev/shm entry outlives the collector."""
import functools
import os
import signal

import pytest
import torch
from checks import check_keys_and_shapes, check_trajectories, collect_killing_a_worker

from rlcollect.buffers import LazyTensorStorage, ReplayBuffer
from rlcollect.collectors import Collector
from rlcollect.collectors.action_server import ActionServerCollector, AlternatingCollector
from rlcollect.collectors.multi import WorkerError
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv, EchoEnv, WeightProbe, echo_policy

pytestmark = pytest.mark.timeout(120)
TRAJ_IDS = ("collector", "traj_ids")
ECHO = functools.partial(EchoEnv, (2, 3, 4, 5))  # env i: episodes of 2 + i steps (i < 4)
VARIANTS = {
    "action_server": (ActionServerCollector, {}),
    "alternating": (AlternatingCollector, {}),
    "alternating_no_overlap": (AlternatingCollector, {"overlap": False}),
}


def make(track, variant="action_server", create_env_fn=ECHO, **kwargs):
    cls, variant_kwargs = VARIANTS[variant]
    kwargs = {"num_workers": 2, "envs_per_worker": 2, "start_method": "fork", **variant_kwargs, **kwargs}
    collector = cls(create_env_fn, **kwargs)
    track(collector)
    return collector


@pytest.mark.parametrize("variant, step_kwargs", [
    ("action_server", {"max_frames_per_traj": 3}),
    ("alternating", {"max_frames_per_traj": 3}),
    ("alternating_no_overlap", {"set_truncated": True}),
])
def test_every_env_gets_its_own_actions_and_batches_match_a_collectors(no_leftovers, variant, step_kwargs):
    collector = make(no_leftovers, variant, policy=echo_policy, frames_per_batch=12, total_frames=36, seed=0,
                     **step_kwargs)
    batches = list(collector)
    assert collector.frames == 36 and list(collector.batch_size) == [4, 3]
    for batch in batches:
        check_keys_and_shapes(batch, [4, 3], observation_shape=(3,), action_shape=(1,))
    data = torch.cat(batches, dim=-1)  # [4 envs, 9 steps]
    env_id, count, echoed = data["next", "observation"].unbind(-1)
    assert torch.equal(data["observation"][..., 0], torch.arange(4.0).expand(9, 4).T)  # row i is env i
    assert torch.equal(data["action"][..., 0], 100 * data["observation"][..., 0] + data["observation"][..., 1])
    assert torch.equal(echoed, data["action"][..., 0])  # each env received exactly the action meant for it
    check_trajectories(data)
    # exactly what a single-process Collector gives on the same envs, traj ids included
    reference = Collector(GymEnv(ECHO, num_envs=4, seed=0), echo_policy, frames_per_batch=12, total_frames=36,
                          **step_kwargs)
    expected = torch.cat(list(reference), dim=-1)
    assert set(data.keys(True, True)) == set(expected.keys(True, True))
    assert all(torch.equal(data[key], expected[key]) for key in expected.keys(True, True))
    assert data["next", "truncated"].any()


def test_decorrelation_spreads_episode_phases_reproducibly(no_leftovers):
    counting = functools.partial(CountingEnv, 10)
    collector = make(no_leftovers, create_env_fn=counting, num_workers=2, envs_per_worker=4, frames_per_batch=16,
                     max_decorrelation_steps=30, seed=0)
    first = next(iter(collector))
    phases = first["observation"][:, 0, 0]  # the step count each env starts collection at
    assert first["is_init"][:, 0].all()  # collection starts a trajectory in every env
    assert ((phases >= 0) & (phases < 10)).all() and phases.unique().numel() > 1
    check_trajectories(first)
    in_lock_step = make(no_leftovers, create_env_fn=counting, num_workers=2, envs_per_worker=4, frames_per_batch=16)
    assert (next(iter(in_lock_step))["observation"][:, 0, 0] == 0).all()
    # the same seed gives the same phases, at construction and after set_seed
    again = make(no_leftovers, create_env_fn=counting, num_workers=2, envs_per_worker=4, frames_per_batch=16,
                 max_decorrelation_steps=30, seed=0)
    assert torch.equal(next(iter(again))["observation"], first["observation"])
    collector.set_seed(0)
    assert torch.equal(next(iter(collector))["observation"], first["observation"])


@pytest.mark.parametrize("variant", ["action_server", "alternating"])
def test_env_error_names_the_worker_and_carries_the_traceback(no_leftovers, variant):
    collector = make(no_leftovers, variant, create_env_fn=functools.partial(EchoEnv, error_env=3, error_after=2),
                     frames_per_batch=16, seed=0)
    with pytest.raises(WorkerError, match=r"(?s)collector worker 1: raised an exception.*Traceback.*"
                                          r"EchoEnv 3: step 3 fails by design") as info:
        next(iter(collector))
    assert info.value.worker_id == 1
    assert collector._shut_down and not any(p.is_alive() for p in collector._processes)


@pytest.mark.parametrize("variant", ["action_server", "alternating"])
def test_killed_worker_is_reported_not_waited_on(no_leftovers, variant):
    collector = make(no_leftovers, variant, frames_per_batch=8)
    batches = iter(collector)
    next(batches)
    os.kill(collector._processes[1].pid, signal.SIGKILL)
    with pytest.raises(WorkerError, match="collector worker 1: died from signal SIGKILL"):
        next(batches)
    assert collector._shut_down and not any(p.is_alive() for p in collector._processes)


@pytest.mark.parametrize("variant", ["action_server", "alternating"])
def test_a_killed_worker_is_replaced_and_every_env_restarts(no_leftovers, variant):
    collector = make(no_leftovers, variant, policy=echo_policy, frames_per_batch=12, total_frames=48, seed=0,
                     max_worker_restarts=1)
    batches, killed_pid = collect_killing_a_worker(collector, 1, after=2)
    assert collector.frames == 48 and len(batches) == 4
    [restart] = collector.pop_worker_restarts()
    # what the batch under way had recorded when the death was found: the action server waits for
    # every worker in turn before recording a step (none); the alternating one had recorded group A's
    # first step (2 envs) when it waited for group B's
    assert (restart.worker_id, restart.cause, restart.frames_lost) == (
        1, f"died from signal SIGKILL (pid {killed_pid})", 0 if variant == "action_server" else 2)
    assert collector.worker_restarts == 1 and all(p.is_alive() for p in collector._processes)
    after = torch.cat(batches[2:], dim=-1)  # [4 envs, 6 steps]: every env restarted at the batch's start
    assert after["is_init"][:, 0].all() and (after["observation"][:, 0, 1] == 0).all()
    # worker 1's envs (rows 2, 3) come from its restart seeds (seeding.restart_seed), the others keep theirs
    assert after["observation"][:, 0, 0].tolist() == [0.0, 1.0, 1_000_002.0, 1_000_003.0]
    assert torch.equal(after["next", "observation"][..., 2], after["action"][..., 0])  # actions still reach their envs
    check_trajectories(after)
    earlier = int(torch.cat([b[TRAJ_IDS].reshape(-1) for b in batches[:2]]).max())
    assert int(after[TRAJ_IDS].min()) > earlier  # new trajectories, new ids


def test_env_errors_are_replaced_only_when_asked(no_leftovers):
    failing = functools.partial(EchoEnv, (2, 3, 4, 5), error_env=3, error_after=5)  # env 3 raises at its 6th step
    collector = make(no_leftovers, create_env_fn=failing, policy=echo_policy, frames_per_batch=12, total_frames=36,
                     seed=0, max_worker_restarts=1, restart_on_env_error=True)
    assert sum(batch.numel() for batch in collector) == 36
    [restart] = collector.pop_worker_restarts()
    assert (restart.worker_id, restart.cause) == (1, "RuntimeError: EchoEnv 3: step 6 fails by design")
    strict = make(no_leftovers, create_env_fn=failing, policy=echo_policy, frames_per_batch=12, seed=0,
                  max_worker_restarts=1)
    with pytest.raises(WorkerError, match="EchoEnv 3: step 6 fails by design"):
        list(zip(range(3), strict))
    assert strict.worker_restarts == 0 and strict._shut_down


def test_spawned_workers_take_seed_threads_and_affinity_as_arguments(no_leftovers):
    cpu = sorted(os.sched_getaffinity(0))[:1]
    collector = make(no_leftovers, "alternating", policy=echo_policy, frames_per_batch=8, seed=0,
                     start_method="spawn", worker_torch_threads=1, worker_cpu_affinity=[cpu, cpu])
    batch = next(iter(collector))
    assert torch.equal(batch["next", "observation"][..., 2], batch["action"][..., 0])
    assert torch.equal(batch["observation"][:, 0, 0], torch.arange(4.0))


def test_hooks_postproc_weights_and_replay_buffer_stay_in_the_main_process(no_leftovers):
    events, yielded = [], []

    def postproc(batch):
        events.append("postproc")
        return batch.set("doubled", batch["observation"] * 2)

    def post_hook(batch):
        events.append("post")
        yielded.append(batch)

    policy = WeightProbe()
    counting = functools.partial(CountingEnv, 3)
    collector = make(no_leftovers, "alternating", create_env_fn=counting, policy=policy, frames_per_batch=8,
                     total_frames=16, postproc=postproc, pre_collect_hook=lambda: events.append("pre"),
                     post_collect_hook=post_hook)
    assert collector.policy is policy  # served as is: no copy to keep in sync
    batches = iter(collector)
    first = next(batches)
    collector.update_policy_weights_({"weight": torch.tensor(3.0), "offset": torch.tensor(4.0)})
    second = next(batches)
    assert events == ["pre", "postproc", "post"] * 2  # once per batch, not once per group
    assert yielded[0] is first and torch.equal(first["doubled"], first["observation"] * 2)
    assert (first["weight_seen"] == 0).all() and (second["weight_seen"] == 3).all()

    rb = ReplayBuffer(LazyTensorStorage(100))
    writer = make(no_leftovers, create_env_fn=counting, frames_per_batch=12, total_frames=24, replay_buffer=rb,
                  trajs_per_batch=2)
    assert list(writer) == [None, None] and writer.frames == 24
    stored = rb[:]
    assert stored["next", "done"][-1] and rb.write_count == 24  # complete trajectories of 3 steps only


def test_reset_state_dict_and_shutdown(no_leftovers):
    collector = make(no_leftovers, create_env_fn=functools.partial(CountingEnv, 50), frames_per_batch=8,
                     total_frames=80)
    first = next(iter(collector))
    collector.reset()
    second = next(iter(collector))
    assert (second["observation"][:, 0] == 0).all() and second["is_init"][:, 0].all()
    assert set(second[TRAJ_IDS].unique().tolist()).isdisjoint(first[TRAJ_IDS].unique().tolist())
    state = collector.state_dict()
    reloaded = make(no_leftovers, create_env_fn=functools.partial(CountingEnv, 50), frames_per_batch=8,
                    total_frames=80)
    reloaded.load_state_dict(state)
    assert reloaded.frames == 16 and len(list(reloaded)) == len(reloaded) - 2
    collector.shutdown()
    collector.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        next(iter(collector))


@pytest.mark.parametrize("cls, kwargs, error, match", [
    (AlternatingCollector, {"num_workers": 3}, ValueError, "num_workers must be a multiple of 2"),
    (ActionServerCollector, {"env_device": "cpu"}, ValueError, "env_device: the envs live in worker processes"),
    (ActionServerCollector, {"frames": 3}, TypeError, r"unexpected arguments \['frames'\]"),
    (ActionServerCollector, {"max_decorrelation_steps": -1}, ValueError, "max_decorrelation_steps"),
    (ActionServerCollector, {"worker_cpu_affinity": [[0]]}, ValueError, "one non-empty list of CPU ids per worker"),
    (ActionServerCollector, {"start_method": "thread"}, ValueError, "start_method must be one of"),
])
def test_bad_arguments_raise_before_any_worker_starts(no_leftovers, cls, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(ECHO, **{"num_workers": 2, "frames_per_batch": 4, **kwargs})
    with pytest.raises(TypeError, match="gymnasium id or a zero-argument callable"):
        ActionServerCollector(GymEnv(ECHO), num_workers=2, frames_per_batch=4)


class EchoModule(torch.nn.Module):
    """echo_policy with a parameter, so that policy_device="cuda" makes a copy to refresh."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(100.0))

    def forward(self, td):
        observation = td.get("observation")
        td.set("action", self.scale.detach() * observation[..., :1] + observation[..., 1:2])
        return td


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("storing_device", ["cpu", "cuda"])
def test_policy_on_the_gpu(no_leftovers, variant, storing_device):
    policy = EchoModule()
    collector = make(no_leftovers, variant, policy=policy, frames_per_batch=12, seed=0, policy_device="cuda",
                     storing_device=storing_device)
    assert next(collector.policy.parameters()).is_cuda and not next(policy.parameters()).is_cuda
    batches = [batch for _, batch in zip(range(3), collector)]
    assert all(batch.device.type == storing_device for batch in batches)
    reference = Collector(GymEnv(ECHO, num_envs=4, seed=0), echo_policy, frames_per_batch=12, total_frames=36)
    data, expected = torch.cat(batches, dim=-1).cpu(), torch.cat(list(reference), dim=-1)
    assert all(torch.equal(data[key], expected[key]) for key in expected.keys(True, True))
    with torch.no_grad():
        policy.scale.fill_(1000.0)
    collector.update_policy_weights_()  # refreshes the server's GPU copy, for every group
    batch = next(iter(collector)).cpu()
    assert torch.equal(batch["action"][..., 0], 1000 * batch["observation"][..., 0] + batch["observation"][..., 1])


def test_batch_timeout_names_the_worker_waited_on_and_the_limit(no_leftovers):
    from rlcollect.testing import BusyEnv

    slow = functools.partial(BusyEnv, 400_000.0)  # 0.4 s a step: no batch in 0.1 s
    collector = make(no_leftovers, create_env_fn=slow, frames_per_batch=8, batch_timeout=0.1, shutdown_timeout=0.5)
    with pytest.raises(WorkerError, match=r"collector worker [01]: no step within batch_timeout=0.1 s"):
        next(iter(collector))
    assert not any(p.is_alive() for p in collector._processes)
