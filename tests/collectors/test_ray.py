"""RayCollector on a real Ray head (loopback only), started once for the module.

The head runs as ``ray start --head --block`` under ``loopback_ray_env()``, in its own
session and temp dir (so teardown stops exactly its processes, never another Ray on the
machine); collectors join it by address, and its workers import this module by name
(PYTHONPATH). One test lets a RayCollector start (and stop) a local Ray itself, in a
subprocess with none of those settings; another SIGKILLs a process that started one and
waits for every process of that Ray to end. Every collector is shut down by the ``make``
fixture, so the head's 2 CPUs are free for the next test. Nothing leaves loopback: the
listener tests check every socket Ray opens for listening.
"""
import functools
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from checks import check_weights_reach_every_worker, is_loopback, listeners, needs_ss  # noqa: E402
from processes import descendants  # noqa: E402

from rlcollect.buffers import LazyTensorStorage, ReplayBuffer  # noqa: E402
from rlcollect.collectors.multi import WorkerError  # noqa: E402
from rlcollect.collectors.ray import TRAJ_ID_SHIFT, RayCollector, loopback_ray_env, watchdog  # noqa: E402
from rlcollect.envs import GymEnv  # noqa: E402
from rlcollect.testing import CountingEnv, ErrorAfterEnv, WeightProbe  # noqa: E402
from rlcollect.testing import worker_id_envs as worker_envs  # noqa: E402
from rlcollect.weight_sync import SharedMemWeightSyncScheme  # noqa: E402

pytestmark = pytest.mark.timeout(300)
TRAJ_IDS, WORKER_ID, VERSION = ("collector", "traj_ids"), ("collector", "worker_id"), ("collector", "policy_version")
HEAD_START_SECONDS = 90


# ---------------------------------------------------------------------------- the cluster
@pytest.fixture(scope="module")
def ray_head():
    """Address of a Ray head bound to 127.0.0.1 (2 CPUs, no dashboard, loopback env)."""
    temp_dir = tempfile.mkdtemp(prefix="rlc-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    log_file = open(Path(temp_dir) / "ray-start.log", "w")
    ray_bin = Path(sys.executable).with_name("ray")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in loopback_ray_env().items():  # this process joins under the same settings
            patch.setenv(name, value)
        patch.delenv("RAY_ADDRESS", raising=False)
        # actors (and the worker processes they spawn) unpickle this module's classes by name (and it imports
        # tests/processes.py)
        python_path = [str(Path(__file__).parent), str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH")]
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, python_path)))
        head = subprocess.Popen(
            [str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--port=0", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}"],
            env=os.environ.copy(), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            address_file = Path(temp_dir) / "ray_current_cluster"
            deadline = time.monotonic() + HEAD_START_SECONDS
            while not (address_file.exists() and address_file.read_text().strip()):
                if head.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ray start failed: {(Path(temp_dir) / 'ray-start.log').read_text()[-2000:]}")
                time.sleep(0.2)
            yield {"address": address_file.read_text().strip(), "pid": head.pid}
        finally:
            if ray.is_initialized():
                ray.shutdown()  # disconnect this driver
            head.send_signal(signal.SIGTERM)  # `ray start --block` stops its processes on SIGTERM
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(head.pid, signal.SIGKILL)  # the head's own session: whatever is left of it
            except ProcessLookupError:
                pass
            head.wait(timeout=10)
            log_file.close()
            shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def make(ray_head):
    """Build a RayCollector joined to the module's head; shut down after the test."""
    collectors = []

    def build(*args, **kwargs):
        kwargs.setdefault("ray_address", ray_head["address"])
        collector = RayCollector(*args, **kwargs)
        collectors.append(collector)
        return collector

    yield build
    for collector in collectors:
        collector.shutdown()


def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def actor_exists(name: str) -> bool:
    try:
        ray.get_actor(name)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------- no Ray needed
def test_importing_rlcollect_does_not_import_ray():
    code = ("import sys, rlcollect, rlcollect.collectors, rlcollect.weight_sync, rlcollect.pipeline\n"
            "from rlcollect.collectors import ray as module\n"
            "from rlcollect.weight_sync import RayWeightSyncScheme\n"
            "RayWeightSyncScheme()\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_without_ray_construction_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'rlcollect\[ray\]'"):
        RayCollector(worker_envs(1)[0], num_workers=1, frames_per_batch=4)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(collector_class="pool"), ValueError, "collector_class must be one of"),
    (dict(remote_config={"cpus": 1}), ValueError, "remote_config keys must be among"),
    (dict(create_env_fn=GymEnv(CountingEnv)), TypeError, "picklable zero-argument callable"),
    (dict(create_env_fn=worker_envs(3)), ValueError, "3 entries for num_workers=2"),
    (dict(collector_class="multisync"), TypeError, "one per worker"),
    (dict(collector_class="multisync", create_env_fn=worker_envs(2), collector_kwargs={"cat_results": -1}),
     ValueError, "cat_results"),
    (dict(collector_kwargs={"traj_pool": None}), ValueError, "may not set"),
    (dict(trajs_per_batch=2), ValueError, "pass replay_buffer"),
    (dict(policy=WeightProbe(), weight_sync_schemes={"policy": SharedMemWeightSyncScheme()}), TypeError,
     "RayWeightSyncScheme or NoWeightSyncScheme"),
    (dict(frames_per_batch=0), ValueError, "frames_per_batch must be a positive int"),
])
def test_bad_arguments_raise_before_any_actor_starts(kwargs, error, match):
    arguments = dict(create_env_fn=worker_envs(1)[0], num_workers=2, frames_per_batch=8, ray_address="127.0.0.1:1")
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        RayCollector(**arguments)


def test_an_address_where_nothing_listens_is_the_users_one_line_not_an_endless_retry():
    """ray.init retries a host:port that nobody listens on for good: RayCollector (and the
    distributed collector's Ray starter) refuse it in one line naming the key, and no Ray
    is started or joined."""
    from rlcollect.collectors.distributed.starters import RayStarter
    from rlcollect.errors import ConfigError

    assert not ray.is_initialized()
    line = ("collector.ray_address=127.0.0.1:1: nothing answers at that address (Connection refused); start a Ray "
            "head there (ray start --head --port=1) or leave collector.ray_address=null for a local one")
    with pytest.raises(ConfigError) as refused:
        RayCollector(create_env_fn=worker_envs(1)[0], num_workers=1, frames_per_batch=8, ray_address="127.0.0.1:1")
    assert str(refused.value) == line
    with pytest.raises(ConfigError) as refused:
        RayStarter("127.0.0.1:1")
    assert str(refused.value) == line
    assert not ray.is_initialized()


def test_num_collectors_is_num_workers_s_old_name_kept_for_a_release():
    """The actors' count was num_collectors; it still counts them, with a DeprecationWarning
    pointed at the caller, and may not disagree with num_workers (checked before any actor
    starts, as the argument errors above)."""
    arguments = dict(create_env_fn=worker_envs(3), frames_per_batch=8, ray_address="127.0.0.1:1")
    with pytest.warns(DeprecationWarning, match=r"^RayCollector\(num_collectors=\.\.\.\) is deprecated: the argument "
                                                r"is num_workers now;") as record:
        with pytest.raises(ValueError, match="3 entries for num_workers=2"):  # it counted the actors
            RayCollector(num_collectors=2, **arguments)
    assert [warning.filename for warning in record] == [__file__]
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="3 entries for num_workers=2"):
        RayCollector(num_collectors=2, num_workers=2, **arguments)  # the same count twice: as one
    with pytest.raises(TypeError, match="got num_collectors=2 and num_workers=3: num_collectors is the old name of "
                                        "num_workers; give num_workers only"):
        RayCollector(num_collectors=2, num_workers=3, **arguments)
    with pytest.raises(TypeError, match="missing 1 required keyword argument: 'num_workers'"):
        RayCollector(**arguments)
    collector = object.__new__(RayCollector)  # the attribute, read as a built collector's (no actor needed)
    collector.num_workers = 3
    with pytest.warns(DeprecationWarning, match=r"^RayCollector\.num_collectors is deprecated: it is num_workers now;"):
        assert collector.num_collectors == 3


def test_ray_weight_sync_is_refused_by_process_collectors():
    from rlcollect.collectors.multi import MultiSyncCollector
    from rlcollect.weight_sync import RayWeightSyncScheme

    with pytest.raises(TypeError, match="synchronises the actors of a RayCollector"):
        MultiSyncCollector(worker_envs(2), WeightProbe(), frames_per_batch=4, start_method="fork",
                           weight_sync_schemes={"policy": RayWeightSyncScheme()})


# ---------------------------------------------------------------------------- collection
def test_sync_stacks_actor_batches_in_order_with_disjoint_traj_ids(make):
    collector = make(worker_envs(2, num_envs=2, episode_length=3), num_workers=2, frames_per_batch=16,
                     total_frames=48)
    assert collector.batch_size == torch.Size([2, 2, 4]) and collector.frames_per_batch == 16
    batches = list(collector)
    assert len(batches) == 3 == len(collector) and collector.frames == 48
    assert all(batch.batch_size == collector.batch_size for batch in batches)
    data = torch.cat(batches, dim=-1)  # [2 actors, 2 envs, 12 steps]
    # actor order: row a was collected by actor a (its env writes a into the observation)
    assert torch.equal(data["observation"][..., 0].long(), data[WORKER_ID])
    assert (data[WORKER_ID][0] == 0).all() and (data[WORKER_ID][1] == 1).all()
    ids, starts = data[TRAJ_IDS], data["is_init"]
    assert torch.equal(ids[..., 1:] != ids[..., :-1], starts[..., 1:])  # a trajectory continues across batches
    assert (ids[0] < 1 << TRAJ_ID_SHIFT).all() and (ids[1] >= 1 << TRAJ_ID_SHIFT).all()
    first_ids = ids[starts]
    assert first_ids.numel() == len(set(first_ids.tolist())) == 2 * 2 * 4
    state = collector.state_dict()
    assert state["frames"] == 48
    assert [actor["traj_pool"]["next_id"] >> TRAJ_ID_SHIFT for actor in state["actors"]] == [0, 1]


def test_parameters_and_buffers_reach_every_actor(make):
    policy = WeightProbe()
    collector = make(worker_envs(2), policy, num_workers=2, frames_per_batch=8)
    batches = check_weights_reach_every_worker(collector, policy)
    collector.update_policy_weights_({"weight": torch.tensor(3.0), "offset": torch.tensor(4.0)})  # a state_dict
    batch = next(batches)
    assert (batch["weight_seen"] == 3).all() and (batch["offset_seen"] == 4).all()
    assert collector.actor_policy_versions() == [3, 3]


def test_async_yields_actor_batches_first_come_first_served(make):
    policy = WeightProbe()
    # endless: read until both actors delivered (and at least 6 batches), not a fixed count, in which one actor
    # could deliver every batch on a busy machine
    collector = make(worker_envs(2, num_envs=2), policy, num_workers=2, frames_per_batch=8, total_frames=-1,
                     sync=False)
    assert collector.batch_size == torch.Size([2, 4]) and collector.frames_per_batch == 8
    batches = []
    for batch in collector:
        batches.append(batch)
        collector.update_policy_weights_()  # one update per consumed batch
        if len(batches) >= 6 and {int(batch[WORKER_ID][0, 0]) for batch in batches} == {0, 1}:
            break
    assert collector.frames == 8 * len(batches) and collector.policy_version == len(batches)
    assert all(batch.batch_size == torch.Size([2, 4]) for batch in batches)
    assert all(batch[WORKER_ID].unique().numel() == 1 for batch in batches)  # one actor per batch
    # Batch k is yielded after k updates. An actor's next batch is requested as its previous
    # one (yielded k1-th) arrives, so it runs with at least the k1 updates made before that.
    last_yielded = {}
    for k, batch in enumerate(batches):
        actor, version = int(batch[WORKER_ID][0, 0]), int(batch[VERSION][0, 0])
        assert version <= k and (batch["weight_seen"] == 0).all()  # the policy's values never changed
        if actor in last_yielded:
            assert version >= last_yielded[actor]
        last_yielded[actor] = k


def test_multisync_actors_stack_their_workers_and_share_an_id_range(make):
    envs = worker_envs(2, episode_length=3)  # every actor runs these 2 worker processes
    policy = WeightProbe()
    collector = make(envs, policy, num_workers=2, frames_per_batch=24, total_frames=48,
                     collector_class="multisync", collector_kwargs={"start_method": "spawn"})
    assert collector.batch_size == torch.Size([2, 2, 6])  # [actors, workers, T]
    batches = iter(collector)
    first = next(batches)
    with torch.no_grad():
        policy.offset.fill_(5.0)
    collector.update_policy_weights_()
    second = next(batches)  # every worker process of every actor has the new buffer value
    assert (first["offset_seen"] == 0).all() and (second["offset_seen"] == 5).all() and (second[VERSION] == 1).all()
    data = torch.cat([first, second], dim=-1)
    assert (data[WORKER_ID][0] == 0).all() and (data[WORKER_ID][1] == 1).all()
    ids = data[TRAJ_IDS]
    assert (ids[0] < 1 << TRAJ_ID_SHIFT).all() and (ids[1] >> TRAJ_ID_SHIFT == 1).all()
    first_ids = ids[data["is_init"]]
    assert first_ids.numel() == len(set(first_ids.tolist())) == 2 * 2 * 4


# ---------------------------------------------------------------------------- failures and shutdown
def test_killed_actor_is_reported_not_waited_on(make):
    collector = make(worker_envs(2), num_workers=2, frames_per_batch=8, sync=False)
    batches = iter(collector)
    next(batches)  # from here on, both actors always have a batch in flight
    ray.kill(ray.get_actor(collector.actor_names[0]))
    with pytest.raises(WorkerError, match="collector worker 0: Ray actor 'rlcollect-.*-0' died") as info:
        for _ in batches:  # actor 1 keeps delivering until actor 0's death is known: then it must raise
            pass
    assert info.value.worker_id == 0 and collector._shut_down
    assert wait_until(lambda: not any(actor_exists(name) for name in collector.actor_names))
    # its state went with its actors: asked for it (a run's final checkpoint), it says so, not an IndexError
    with pytest.raises(RuntimeError, match="RayCollector was shut down: its actors cannot answer state_dict"):
        collector.state_dict()


def test_env_error_names_the_actor_and_carries_the_traceback(make):
    envs = [worker_envs(1)[0], functools.partial(GymEnv, functools.partial(ErrorAfterEnv, 2))]
    collector = make(envs, num_workers=2, frames_per_batch=8)
    with pytest.raises(WorkerError, match=r"(?s)collector worker 1: Ray actor .* raised an exception.*"
                                          r"step 3 fails by design") as info:
        next(iter(collector))
    assert info.value.worker_id == 1
    assert wait_until(lambda: not any(actor_exists(name) for name in collector.actor_names))


def test_a_killed_actor_is_replaced_with_the_current_weights_and_fresh_ids(make):
    policy = WeightProbe()
    collector = make(worker_envs(2, episode_length=3), policy, num_workers=2, frames_per_batch=8,
                     total_frames=24, max_worker_restarts=1)
    batches = iter(collector)
    first = next(batches)
    with torch.no_grad():
        policy.offset.fill_(5.0)
    collector.update_policy_weights_()
    killed = collector.actor_names[0]
    ray.kill(ray.get_actor(killed))
    # ray.kill returns before the actor is dead: a batch asked for sooner could still be served by it
    assert wait_until(lambda: not actor_exists(killed))
    second, third = next(batches), next(batches)  # the replacement completes the sync batch
    assert collector.frames == 24 and next(batches, None) is None
    [restart] = collector.pop_worker_restarts()
    assert restart.worker_id == 0 and restart.frames_lost == 4
    assert restart.cause.startswith(f"Ray actor {killed!r} died")
    assert collector.actor_names[0] == f"{killed}-1" and actor_exists(collector.actor_names[0])
    assert (second["offset_seen"] == 5).all() and (second[VERSION] == 1).all()  # the weights pushed before
    ids = torch.cat([second, third], -1)[TRAJ_IDS]
    assert (ids[0] >> 32 == 1).all() and (ids[1] >> TRAJ_ID_SHIFT == 1).all()  # actor 0's second life: new ids
    assert (first[TRAJ_IDS][0] >> 32 == 0).all()
    assert second["is_init"][0, 0] and second["observation"][0, 0, 0] == 0  # actor 0's env restarted


def test_env_errors_replace_the_actor_within_the_budget_then_fail(make):
    envs = [worker_envs(1)[0], functools.partial(GymEnv, functools.partial(ErrorAfterEnv, 2))]
    collector = make(envs, num_workers=2, frames_per_batch=8, max_worker_restarts=2, restart_on_env_error=True)
    with pytest.raises(WorkerError, match=r"(?s)collector worker 1: Ray actor .* raised.*step 3 fails by design"):
        next(iter(collector))  # actor 1 fails every time it collects: twice replaced, then the batch fails
    restarts = collector.pop_worker_restarts()
    assert [restart.worker_id for restart in restarts] == [1, 1]
    assert all("step 3 fails by design" in restart.cause for restart in restarts)


def test_shutdown_removes_the_actors_and_leaves_the_joined_cluster_running(make):
    collector = make(worker_envs(2), num_workers=2, frames_per_batch=8)
    assert all(actor_exists(name) for name in collector.actor_names)
    collector.shutdown()
    collector.shutdown()
    assert wait_until(lambda: not any(actor_exists(name) for name in collector.actor_names))
    with pytest.raises(RuntimeError, match="shut down"):
        next(iter(collector))
    assert ray.is_initialized() and ray.get(ray.put(7)) == 7  # joined, not started: still up


# ---------------------------------------------------------------------------- replay buffer
def test_actors_write_complete_trajectories_into_a_ray_held_buffer(make):
    envs = [functools.partial(GymEnv, functools.partial(CountingEnv, length), 2) for length in (3, 4)]
    collector = make(envs, num_workers=2, frames_per_batch=16, total_frames=96,
                     replay_buffer=ReplayBuffer(LazyTensorStorage(1000), batch_size=6), trajs_per_batch=2)
    assert list(collector) == [None] * 6 and collector.frames == 96
    buffer = collector.replay_buffer
    stored = buffer[:]
    assert 0 < len(buffer) == stored.numel() == buffer.write_count <= 96
    ids = stored[TRAJ_IDS]
    assert set((ids >> TRAJ_ID_SHIFT).unique().tolist()) == {0, 1}  # both actors wrote
    for traj_id in ids.unique().tolist():  # whole trajectories only
        steps = stored[ids == traj_id]
        length = 3 if traj_id >> TRAJ_ID_SHIFT == 0 else 4
        assert steps["observation"][:, 0].tolist() == list(range(length))
        assert steps["next", "done"].tolist() == [False] * (length - 1) + [True]
    sample = buffer.sample()
    assert sample.batch_size == torch.Size([6]) and set(sample.keys()) >= {"observation", "action"}


def test_background_collection_fills_the_buffer_until_async_shutdown(make):
    envs = functools.partial(GymEnv, functools.partial(CountingEnv, 5), 2)
    collector = make(envs, num_workers=2, frames_per_batch=8, sync=False,
                     replay_buffer=ReplayBuffer(LazyTensorStorage(10_000), batch_size=4))
    buffer = collector.replay_buffer
    collector.start()
    assert wait_until(lambda: buffer.write_count >= 64, timeout=120)
    with collector.pause():  # no actor is writing while the block runs
        written = buffer.write_count
        assert buffer.write_count == written and len(buffer.sample()) == 4
    collector.async_shutdown(timeout=30)
    assert not collector.running and collector.frames >= 64
    with pytest.raises(RuntimeError, match="closed"):  # the collector made the buffer actor, and removed it
        len(buffer)


# ---------------------------------------------------------------------------- loopback only


@needs_ss
def test_every_ray_listener_binds_loopback(make, ray_head):
    collector = make(worker_envs(2), num_workers=2, frames_per_batch=8)
    next(iter(collector))  # actors up and collecting
    assert ray.util.get_node_ip_address() == "127.0.0.1"  # this driver joined as a loopback node too
    ray_pids = descendants(ray_head["pid"]) | {ray_head["pid"], os.getpid()}
    ours = [(host, pid, line) for host, pid, line in listeners() if pid in ray_pids]
    assert any("gcs_server" in line for _, _, line in ours), "the head's listeners were not found"
    # an actor's process name: the first 15 characters of ray::CollectorActor
    assert any("ray::CollectorA" in line for _, _, line in ours), "no actor listener found"
    exposed = [line for host, _, line in ours if not is_loopback(host)]
    assert not exposed, "Ray listeners outside loopback:\n" + "\n".join(exposed)


LOCAL_RAY_SCRIPT = """
import functools, json, os, signal, subprocess, sys
from pathlib import Path
import ray
from rlcollect.collectors.ray import RayCollector
from rlcollect.envs import GymEnv
from rlcollect.testing import CountingEnv

{descendants}

def stop(number, frame):  # a run's own handler (rlcollect/commands/jobs.py)
    pass

signal.signal(signal.SIGTERM, stop)
collector = RayCollector(functools.partial(GymEnv, CountingEnv), num_workers=1, frames_per_batch=4)
batch = next(iter(collector))
assert signal.getsignal(signal.SIGTERM) is stop  # ray.init's own handler does not stay
ss = subprocess.run(["ss", "-H", "-l", "-t", "-u", "-n", "-p"], capture_output=True, text=True).stdout
report = {{"shape": list(batch.batch_size), "ss": ss, "pids": sorted(descendants(os.getpid()) | {{os.getpid()}}),
          "node_ip": ray.util.get_node_ip_address(), "proxy_after_start": os.environ.get("http_proxy")}}
collector.shutdown()
report["initialized_after_shutdown"] = ray.is_initialized()
print("REPORT " + json.dumps(report))
"""


@needs_ss
def test_a_collector_that_starts_ray_binds_loopback_and_stops_it(tmp_path):
    env = {name: value for name, value in os.environ.items()
           if name not in loopback_ray_env() and not name.startswith("RAY_")}  # the collector must set them
    env["TMPDIR"] = tempfile.mkdtemp(prefix="rlc-", dir="/tmp")  # ray.init's session dir, removed below
    script = tmp_path / "local_ray.py"
    script.write_text(LOCAL_RAY_SCRIPT.format(descendants=inspect.getsource(descendants)))
    probe = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        stdout, stderr = probe.communicate(timeout=240)
    finally:
        if probe.poll() is None:
            os.killpg(probe.pid, signal.SIGKILL)
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    assert probe.returncode == 0, stderr[-3000:]
    report = json.loads(stdout.split("REPORT ", 1)[1])
    assert report["shape"] == [1, 4] and report["node_ip"] == "127.0.0.1"
    assert report["proxy_after_start"] is None  # the driver's own environment is left as it was
    assert report["initialized_after_shutdown"] is False
    pids = set(report["pids"])  # the driver and every process it started: Ray's, and the actor
    ours = [line for line in report["ss"].splitlines() if pids & {int(p) for p in re.findall(r"pid=(\d+)", line)}]
    assert any("gcs_server" in line for line in ours) and any("ray::CollectorA" in line for line in ours), report["ss"]
    exposed = [line for line in ours if not is_loopback(line.split()[4].rsplit(":", 1)[0].strip("[]"))]
    assert not exposed, "Ray listeners outside loopback:\n" + "\n".join(exposed)


KILLED_DRIVER_SCRIPT = """
import os, sys, time
from pathlib import Path
import ray
from rlcollect.collectors.ray import start_local_ray

{descendants}

def title(pid):
    try:
        return Path(f"/proc/{{pid}}/cmdline").read_bytes()
    except OSError:
        return b""

@ray.remote
def worker_pid():
    return os.getpid()

start_local_ray(num_cpus=1)
assert ray.get(worker_pid.remote()) != os.getpid()  # a worker process is up
deadline = time.monotonic() + 120
while not all(any(title(pid).startswith(agent) for pid in descendants(os.getpid()))
              for agent in (b"ray::DashboardAgent", b"ray::RuntimeEnvAgent")):  # the raylet starts them on its own
    if time.monotonic() > deadline:
        sys.exit("the raylet's agents never started: " + repr(sorted(map(title, descendants(os.getpid())))))
    time.sleep(0.1)
print("READY " + ray._private.worker._global_node.get_session_dir_path(), flush=True)
sys.stdin.read()  # until it is killed (or the test is gone)
"""


def process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, None when there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def process_title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def still_running(processes: dict[int, tuple[int, str]]) -> list[int]:
    """The pids of ``processes`` ({pid: (start time, title)}) that run yet: neither gone nor a
    zombie, and not taken by a new process."""
    running = []
    for pid, (started, _) in processes.items():
        state = process_state(pid)
        if state is not None and state[0] not in "ZX" and state[1] == started:
            running.append(pid)
    return running


@pytest.mark.timeout(240)
def test_a_killed_driver_takes_its_local_ray_down_with_it(tmp_path):
    """SIGKILL of a process that started Ray (start_local_ray): every process of that Ray
    ends within seconds, the raylet's agents included (they stayed up for 60 s before)."""
    env = {name: value for name, value in os.environ.items()
           if name not in loopback_ray_env() and not name.startswith("RAY_")}  # start_local_ray sets them
    env["TMPDIR"] = tempfile.mkdtemp(prefix="rlc-", dir="/tmp")  # ray.init's session dir, removed below
    script = tmp_path / "killed_driver.py"
    script.write_text(KILLED_DRIVER_SCRIPT.format(descendants=inspect.getsource(descendants)))
    errors = tmp_path / "driver.err"
    session: dict[int, tuple[int, str]] = {}
    with open(errors, "w") as error_file:
        driver = subprocess.Popen([sys.executable, str(script)], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=error_file, text=True, start_new_session=True)
    try:
        while (line := driver.stdout.readline()) and not line.startswith("READY "):
            pass
        assert line, f"the driver ended before Ray was up: {errors.read_text()[-3000:]}"
        session_dir = line.split(" ", 1)[1].strip()
        for pid in descendants(driver.pid):  # what the driver started: Ray's processes (and the watchdog)
            state = process_state(pid)
            if state is not None:
                session[pid] = (state[1], process_title(pid))
        titles = [title for _, title in session.values()]
        for name in ("gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent"):
            assert any(name in title for title in titles), f"no {name} among {titles}"
        # a process titled ray::... may have overwritten the token in its environment with the
        # title (the agents do, or not, by the length of their command line): the watchdog
        # finds those by the session directory alone
        titled = {pid: process for pid, process in session.items() if process[1].startswith("ray::")}
        found = set(watchdog.session_processes("not-this-session", session_dir))
        missed = [pid for pid in still_running(titled) if pid not in found]  # not one that ended meanwhile
        assert not missed, f"not found by the session directory: {[session[pid] for pid in missed]}"
        if shutil.which("ss"):
            ours = [(host, line) for host, pid, line in listeners() if pid in session or pid == driver.pid]
            assert any("gcs_server" in line for _, line in ours), "the instance's listeners were not found"
            exposed = [line for host, line in ours if not is_loopback(host)]
            assert not exposed, "Ray listeners outside loopback:\n" + "\n".join(exposed)
        driver.kill()
        driver.wait(timeout=30)
        deadline = time.monotonic() + 30
        while survivors := still_running(session):
            if time.monotonic() > deadline:
                pytest.fail("alive 30 s after the driver's SIGKILL:\n" +
                            "\n".join(f"{pid} {session[pid][1][:100]}" for pid in survivors))
            time.sleep(0.1)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
        driver.stdout.close()
        driver.stdin.close()
        for pid in still_running(session):  # after a failure: leave nothing behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)


# ---------------------------------------------------------------------------- the CLI
def test_cli_trains_ppo_on_cartpole_with_ray_actors_and_logs_their_episodes(tmp_path, ray_head):
    """`rlcollect train collector=ray env=cartpole`, joined to the module's head: PPO reaches
    the foundation bar (475), and the episode statistics computed in the actors reach W&B."""
    from rlcollect.logging.wandb_offline import find_offline_runs, read_offline_run

    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    result = subprocess.run(
        [sys.executable, "-m", "rlcollect.cli", "train", "collector=ray", "env=cartpole", "progress=false",
         f"collector.ray_address={ray_head['address']}", "hydra.run.dir=run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["frames_to_solve"] is not None and summary["final_eval_return"] >= 475
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(256, summary["frames"] + 1, 256))
    assert sum(row["collect/episodes"] for row in rows) > 0
    run = read_offline_run(find_offline_runs(tmp_path / "run")[0])
    assert run.config["collector"]["_target_"] == "rlcollect.collectors.ray.collector.RayCollector"
    assert run.config["weight_sync"]["_target_"] == "rlcollect.weight_sync.ray.RayWeightSyncScheme"
    assert run.job_type == "ray"
    logged = [row["collect/episode_return"] for row in run.history if "collect/episode_return" in row]
    assert logged == [row["collect/episode_return"] for row in rows if "collect/episode_return" in row]
    assert wait_until(lambda: not collector_actor_processes(ray_head["pid"]))  # the run removed its actors


def collector_actor_processes(head_pid: int) -> list[int]:
    def title(pid):
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return ""
    return [pid for pid in descendants(head_pid) if "_CollectorActor" in title(pid)]


def test_dqn_pipeline_samples_from_the_ray_held_buffer_and_checkpoints_it(tmp_path, ray_head):
    """collector=ray algo=dqn: the replay buffer moves into a Ray actor, the learner samples
    from it, and the checkpoint carries its contents; n-step transitions are made in the
    buffer actor and the TD errors reach its PrioritizedSampler."""
    from hydra import compose, initialize_config_module

    from rlcollect import pipeline
    from rlcollect.checkpoint import CHECKPOINT_FILE, load_checkpoint
    from rlcollect.collectors.ray import RayReplayBuffer
    from rlcollect.config import register_configs

    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        cfg = compose("train", overrides=[
            "collector=ray", f"collector.ray_address={ray_head['address']}", "collector.envs_per_worker=2",
            "collector.frames_per_batch=64", "algo=dqn", "algo.learning_starts=0", "algo.gradient_steps_per_batch=2",
            "algo.batch_size=16", "buffer.trajs_per_batch=1", "algo.n_step=2", "buffer/sampler=prioritized",
            "total_frames=128", "eval.every_frames=128",
            "eval.episodes=1", "eval.max_steps=20", "logger=none", "progress=false", "checkpoint_every_frames=64"])
    built = pipeline.build(cfg, tmp_path)
    buffer = built.learner.replay_buffer
    assert isinstance(buffer, RayReplayBuffer) and buffer is built.collector.replay_buffer
    summary = pipeline.run(built)
    assert summary["frames"] == 128
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [64, 128] and all(row["train/buffer_size"] > 0 for row in rows)
    assert "train/loss_q" in rows[-1]  # gradient steps ran on samples from the actor-held buffer
    stored = load_checkpoint(tmp_path / CHECKPOINT_FILE)["learner"]["replay_buffer"]
    assert 0 < int(stored["storage"]["write_count"]) <= 128
    assert stored["storage"]["data"]["observation"].shape[0] > 0  # the contents, not only the position
    written = int(stored["storage"]["write_count"])
    assert set(stored["storage"]["data"]["next"]["steps_to_next_obs"][:written].tolist()) <= {1, 2}
    priority = stored["sampler"]["priority"][:written]
    assert priority.max() > priority.min()  # updated from the learner's TD errors, through the actor
