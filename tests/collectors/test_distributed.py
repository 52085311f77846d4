"""DistributedCollector: workers in a gloo process group with the trainer, on loopback."""
import functools
import importlib.util
import multiprocessing
import os
import time

import pytest
import torch
from checks import check_trajectories, check_weights_reach_every_worker, is_loopback, listeners, needs_ss

from rlcollect import Collector, DistributedCollector, DistributedSyncCollector, GymEnv, WorkerError
from rlcollect.collectors.host_plan import TRAJ_ID_SHIFT
from rlcollect.testing import ErrorAfterEnv, WeightProbe, counting_env_factories

pytestmark = pytest.mark.timeout(120)
TRAJ_IDS = ("collector", "traj_ids")


def counting(lengths):
    return functools.partial(GymEnv, counting_env_factories(lengths), num_envs=len(lengths))


@pytest.fixture
def make():
    """Build DistributedCollectors (fork workers); after the test each is shut down and no
    worker process may remain."""
    made = []

    def build(*args, **kwargs):
        kwargs.setdefault("start_method", "fork")
        collector = DistributedCollector(*args, **kwargs)
        made.append(collector)
        return collector

    yield build
    for collector in made:
        pids = collector.worker_pids
        collector.shutdown()
        assert not any(process.pid in pids for process in multiprocessing.active_children()), "orphan worker"


def test_sync_batches_stack_the_workers_with_their_own_trajectory_ids(make):
    collector = make([counting((3, 4)), counting((2, 5))], num_workers=2, frames_per_batch=32, total_frames=96)
    assert collector.batch_size == (2, 2, 8) and collector.frames_per_batch == 32
    batches = list(collector)
    assert len(batches) == 3 and collector.frames == 96
    data = torch.cat(batches, dim=-1)  # [2 workers, 2 envs, 24 steps]
    assert data["observation"][0, 0, :6, 0].tolist() == [0, 1, 2, 0, 1, 2]  # worker 0's env of length 3
    assert data["observation"][1, 0, :6, 0].tolist() == [0, 1, 0, 1, 0, 1]  # worker 1's env of length 2
    assert (data["collector", "worker_id"][0] == 0).all() and (data["collector", "worker_id"][1] == 1).all()
    for worker in range(2):
        check_trajectories(data[worker])  # continuity across batches, ids never reused
    ids = data[TRAJ_IDS]
    assert (ids[0] < 1 << TRAJ_ID_SHIFT).all() and (ids[1] >= 1 << TRAJ_ID_SHIFT).all()
    assert ids[1].min() == 1 << TRAJ_ID_SHIFT  # worker 1's range starts at 1 << 40


def test_weights_reach_every_worker_before_the_next_sync_batch(make):
    policy = WeightProbe()
    collector = make(counting((4,)), policy, num_workers=2, frames_per_batch=8)
    check_weights_reach_every_worker(collector, policy)


def test_the_seed_rule_spans_the_workers():
    def first_observations(collector):
        return next(iter(collector))["observation"]

    collector = DistributedCollector("CartPole-v1", None, num_workers=2, envs_per_worker=2, seed=3,
                                     frames_per_batch=8, start_method="fork")
    try:
        distributed = first_observations(collector)[..., 0, :]  # [2 workers, 2 envs, 4]: the reset observations
    finally:
        collector.shutdown()
    local = first_observations(Collector(GymEnv("CartPole-v1", 4, seed=3), None, frames_per_batch=4))[:, 0]
    assert torch.equal(distributed.reshape(4, 4), local)  # env i of the run seeded 3 + i, as one process does


def test_async_batches_come_first_come_first_served_with_the_lag_recorded(make):
    policy = WeightProbe()
    # endless: read until both workers delivered (and at least 10 batches), not a fixed count, in which one
    # worker could deliver every batch on a busy machine
    collector = make(counting((3,)), policy, num_workers=2, frames_per_batch=6, total_frames=-1, sync=False)
    assert collector.batch_size == (1, 6)
    seen = []
    for batch in collector:
        seen.append((int(batch["collector", "worker_id"][0, 0]), int(batch["collector", "policy_version"][0, 0]),
                     float(batch["weight_seen"][0, 0])))
        with torch.no_grad():
            policy.weight.add_(1.0)
        collector.update_policy_weights_()
        if len(seen) >= 10 and {worker for worker, _, _ in seen} == {0, 1}:
            break
    assert collector.frames == 6 * len(seen)
    for _, version, weight in seen:
        assert weight == version  # the version stamped is the one the weights came with
    assert seen[-1][1] >= 5  # new weights arrived while streaming
    assert collector.state_dict()["frames"] == 6 * len(seen)  # a call while the workers stream


def test_a_worker_s_env_error_is_named_with_its_traceback(make):
    failing = functools.partial(GymEnv, functools.partial(ErrorAfterEnv, 5), num_envs=1)
    collector = make([counting((3,)), failing], num_workers=2, frames_per_batch=8)
    with pytest.raises(WorkerError, match=r"collector worker 1: raised an exception:(.|\n)*ErrorAfterEnv: step 6"):
        list(zip(range(5), collector))
    collector.shutdown()  # at once: the failing worker is still exiting, and the survivor must get its STOP
    assert [process.exitcode for process in collector._starter.processes] == [0, 1]  # stopped, not killed


def test_a_killed_worker_is_named(make):
    collector = make(counting((3,)), num_workers=2, frames_per_batch=8)
    batches = iter(collector)
    next(batches)
    os.kill(collector.worker_pids[1], 9)
    with pytest.raises(WorkerError, match="collector worker 1: died"):
        for _ in range(5):
            next(batches)


def test_a_killed_streaming_worker_is_named_and_the_others_stop(make):
    collector = make(counting((3,)), num_workers=2, frames_per_batch=8, sync=False, shutdown_timeout=60)
    batches = iter(collector)
    next(batches)
    os.kill(collector.worker_pids[1], 9)
    deadline = time.monotonic() + 30  # the survivor keeps sending: the death shows at a liveness check (0.5 s)
    with pytest.raises(WorkerError, match="collector worker 1: died"):
        while time.monotonic() < deadline:
            next(batches)
    survivor = multiprocessing.active_children()
    collector.shutdown()  # worker 0, streaming, is told to stop and says goodbye: not killed
    assert [process.exitcode for process in survivor if process.pid == collector.worker_pids[0]] == [0]


@needs_ss
def test_every_listener_binds_loopback(make):
    collector = make(counting((3,)), num_workers=2, frames_per_batch=8)
    next(iter(collector))
    assert collector.listen_address[0] == "127.0.0.1"
    pids = {os.getpid(), *collector.worker_pids}
    ours = [(host, line) for host, pid, line in listeners() if pid in pids]
    assert any(pid in collector.worker_pids for _, pid, _ in listeners()), "no worker listener found"
    assert any(f":{collector.listen_address[1]}" in line for _, line in ours), "the store's listener was not found"
    exposed = [line for host, line in ours if not is_loopback(host)]
    assert not exposed, "listeners outside loopback:\n" + "\n".join(exposed)


def test_arguments_are_checked_before_anything_starts():
    with pytest.raises(ValueError, match="collector_class must be one of"):
        DistributedCollector(counting((3,)), num_workers=2, frames_per_batch=8, collector_class="threads")
    with pytest.raises(ValueError, match="start_workers_with must be one of mp, submitit, ray; got 'ssh'"):
        DistributedCollector(counting((3,)), num_workers=1, frames_per_batch=8, start_workers_with="ssh")
    with pytest.raises(ValueError, match="nccl and mpi are not supported"):
        DistributedCollector(counting((3,)), num_workers=1, frames_per_batch=8, backend="nccl")
    with pytest.raises(TypeError, match="always synchronous"):
        DistributedSyncCollector(counting((3,)), num_workers=1, frames_per_batch=8, sync=False)


def test_launcher_is_start_workers_with_s_old_name_kept_for_a_release(make):
    """How the workers start was ``launcher``; it is still taken, with a DeprecationWarning
    pointed at the caller (past DistributedSyncCollector's __init__), and may not disagree
    with start_workers_with."""
    with pytest.warns(DeprecationWarning, match=r"^DistributedCollector\(launcher=\.\.\.\) is deprecated: the "
                                                r"argument is start_workers_with now;") as record:
        collector = make(counting((3,)), num_workers=1, frames_per_batch=8, total_frames=8, launcher="mp")
    assert [warning.filename for warning in record] == [__file__]
    assert [tuple(batch.batch_size) for batch in collector] == [(1, 1, 8)]
    with pytest.warns(DeprecationWarning) as record, \
            pytest.raises(ValueError, match="start_workers_with must be one of mp, submitit, ray; got 'ssh'"):
        DistributedSyncCollector(counting((3,)), num_workers=1, frames_per_batch=8, launcher="ssh")
    assert [warning.filename for warning in record] == [__file__]
    with pytest.raises(TypeError, match="got launcher='ray' and start_workers_with='submitit': launcher is the old "
                                        "name of start_workers_with; give start_workers_with only"):
        DistributedCollector(counting((3,)), num_workers=1, frames_per_batch=8, launcher="ray",
                             start_workers_with="submitit")


@pytest.mark.skipif(importlib.util.find_spec("submitit") is None, reason="needs submitit (the slurm extra)")
def test_submitit_s_local_executor_runs_the_workers_as_jobs(tmp_path):
    collector = DistributedSyncCollector(counting((3,)), num_workers=2, frames_per_batch=8, total_frames=16,
                                         start_workers_with="submitit", cluster="local",
                                         submitit_folder=tmp_path / "jobs", slurm_kwargs={"timeout_min": 5})
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert [tuple(batch.batch_size) for batch in batches] == [(2, 1, 4), (2, 1, 4)]
    assert batches[1]["observation"][0, 0, :, 0].tolist() == [1, 2, 0, 1]
    assert list((tmp_path / "jobs").glob("*_log.out")), "submitit wrote no job logs"


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (the ray extra)")
def test_ray_tasks_run_the_workers_on_a_loopback_ray():
    collector = DistributedCollector(counting((3,)), num_workers=2, frames_per_batch=8, total_frames=16,
                                     start_workers_with="ray")
    try:
        import ray

        assert ray.util.get_node_ip_address() == "127.0.0.1"
        batches = list(collector)
    finally:
        collector.shutdown()
    assert batches[1]["observation"][1, 0, :, 0].tolist() == [1, 2, 0, 1]
    assert not ray.is_initialized()  # the Ray it started is stopped


def test_a_port_in_use_is_the_users_one_line_naming_the_config_keys():
    """The trainer's store on a port another process listens on: a ConfigError naming
    collector.master_addr and collector.master_port (the user's choice), not an OSError
    reported as rlcollect's bug."""
    import socket

    from rlcollect.collectors.distributed.group import Rendezvous
    from rlcollect.errors import ConfigError

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"^collector.master_addr=127.0.0.1 collector.master_port={port}: the "
                                              r"trainer cannot listen there \(Address already in use"):
            Rendezvous("127.0.0.1", port)


@pytest.mark.timeout(30)
def test_what_gloo_writes_as_a_group_forms_is_held_back_only_when_the_trainer_is_gone(capfd):
    """A worker joins the group with gloo's own stderr lines held: when the trainer stopped
    while the group formed (a Ctrl-C as the command starts), they are not shown; any other
    failure shows them."""
    from rlcollect.collectors.distributed.worker import native_errors_held, trainer_gone

    def fail(message):
        with native_errors_held(keep=lambda error: not trainer_gone(error)):
            os.write(2, b"[E] gloo: connectFullMesh failed\n")
            raise RuntimeError(message)

    with pytest.raises(RuntimeError):
        fail("Connection closed by peer [127.0.0.1]:38836")
    assert capfd.readouterr().err == ""
    with pytest.raises(RuntimeError):
        fail("Timed out waiting for the store")
    assert capfd.readouterr().err == "[E] gloo: connectFullMesh failed\n"
    with native_errors_held(keep=lambda error: True):
        os.write(2, b"a warning\n")
    assert capfd.readouterr().err == "a warning\n"
