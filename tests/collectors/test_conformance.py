"""Collector semantics users rely on, each pinned by a test that failed before its fix
(TorchRL's collector behaviours, translated to rlcollect's API)."""
import functools
import multiprocessing
import os

import pytest
import torch
from processes import state, wait_for
from tensordict import TensorDict

from rlcollect import (
    Collector,
    GymEnv,
    MultiAsyncCollector,
    MultiProcessWeightSyncScheme,
    MultiSyncCollector,
    SharedMemWeightSyncScheme,
)
from rlcollect.testing import CountingEnv, WeightProbe


def parity(td):
    """In place: action = step count mod 2 (deterministic)."""
    td.set("action", (td["observation"][..., 0] % 2).to(torch.int64))
    return td


def parity_out_of_place(td):
    """The same actions in a NEW TensorDict holding only "action"."""
    return TensorDict({"action": (td["observation"][..., 0] % 2).to(torch.int64)}, batch_size=td.batch_size)


@pytest.mark.parametrize("num_envs", [None, 3])
def test_an_out_of_place_policy_collects_exactly_what_an_in_place_one_does(num_envs):
    batches = {}
    for policy in (parity, parity_out_of_place):
        collector = Collector(GymEnv(functools.partial(CountingEnv, 4), num_envs), policy,
                              frames_per_batch=12, total_frames=24)
        batches[policy] = torch.cat(list(collector), -1)
    in_place, out_of_place = batches[parity], batches[parity_out_of_place]
    assert set(in_place.keys(True, True)) == set(out_of_place.keys(True, True))
    assert (in_place == out_of_place).all()
    assert in_place["action"].sum() > 0  # the actions are not all zero: the check has teeth


def counting_factory(episode_length):
    return functools.partial(GymEnv, functools.partial(CountingEnv, episode_length), 2)


@pytest.mark.parametrize("cls", [Collector, MultiSyncCollector, MultiAsyncCollector])
def test_set_truncated_marks_the_last_step_truncated_even_where_the_env_terminated(no_leftovers, cls):
    # episodes of 3 steps, batches of 3 steps per env: every env terminates on the batch's last step
    if cls is Collector:
        collector = Collector(counting_factory(3)(), frames_per_batch=6, set_truncated=True, total_frames=12)
    else:
        collector = cls([counting_factory(3)] * 2, frames_per_batch=12 if cls is MultiSyncCollector else 6,
                        set_truncated=True, total_frames=24, start_method="fork")
        no_leftovers(collector)
    for batch in collector:
        last = batch[..., -1]
        assert last["next", "terminated"].all()  # the env's own end
        assert last["next", "truncated"].all() and last["next", "done"].all()  # and the batch boundary
        assert not batch[..., :-1]["next", "truncated"].any()


def probe_weights(policy, kind):
    if kind == "module":
        return policy
    if kind == "state_dict":
        return policy.state_dict()
    if kind == "tensordict":
        return TensorDict.from_module(policy)  # parameters that require grad
    return None


@pytest.mark.parametrize("scheme", [SharedMemWeightSyncScheme(), MultiProcessWeightSyncScheme("state_dict"),
                                    MultiProcessWeightSyncScheme("tensordict")], ids=["shared", "state_dict", "td"])
@pytest.mark.parametrize("kind", ["none", "module", "state_dict", "tensordict"])
def test_every_scheme_takes_none_a_module_a_state_dict_or_a_tensordict(no_leftovers, scheme, kind):
    policy = WeightProbe()
    collector = MultiSyncCollector([counting_factory(5)] * 2, policy, frames_per_batch=4, start_method="fork",
                                   weight_sync_schemes={"policy": scheme})
    no_leftovers(collector)
    batches = iter(collector)
    next(batches)
    with torch.no_grad():
        policy.weight.fill_(3.0)
        policy.offset.fill_(30.0)
    collector.update_policy_weights_(probe_weights(policy, kind))
    batch = next(batches)
    assert (batch["weight_seen"] == 3.0).all() and (batch["offset_seen"] == 30.0).all()


class Signalling(CountingEnv):
    """A CountingEnv that, in its worker, records the worker's pid, waits for ``gate`` (if
    given) before its first step, and sets ``stepped`` during its ``signal_at``-th step."""

    def __init__(self, pid, gate, stepped, signal_at: int) -> None:
        super().__init__(episode_length=1000)
        self.pid, self.gate, self.stepped, self.signal_at, self.steps = pid, gate, stepped, signal_at, 0

    def step(self, action):
        self.pid.value = os.getpid()
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the gate"
        self.steps += 1
        if self.steps == self.signal_at:
            self.stepped.set()
        return super().step(action)


def sent_its_batch(pid, stepped) -> bool:
    """The worker did its signalling step and then went to sleep: it can only be waiting for
    the next command, its batch sent (the batch's last step is the signalling one)."""
    return stepped.is_set() and state(pid.value) == "S"


def test_multiasync_yields_the_batch_that_finished_first_not_the_lowest_worker(no_leftovers):
    # worker 0 is held at its first step until worker 1 has finished and sent its second batch; then worker 0
    # finishes its first: both batches are there when the trainer asks, and worker 1's finished first
    context = multiprocessing.get_context("fork")
    pids = [context.Value("l", 0) for _ in range(2)]
    gate, stepped = context.Event(), [context.Event() for _ in range(2)]
    envs = [functools.partial(GymEnv, functools.partial(Signalling, pids[0], gate, stepped[0], 4), None),
            functools.partial(GymEnv, functools.partial(Signalling, pids[1], None, stepped[1], 8), None)]
    collector = MultiAsyncCollector(envs, frames_per_batch=4, start_method="fork")
    no_leftovers(collector)
    batches = iter(collector)
    first = next(batches)  # worker 0 is held: worker 1's first batch, worker 1 then asked for its second
    wait_for(lambda: sent_its_batch(pids[1], stepped[1]))  # worker 1's second batch (steps 5-8) is sent
    gate.set()
    wait_for(lambda: sent_its_batch(pids[0], stepped[0]))  # worker 0's first batch (steps 1-4) is sent, later
    second, third = next(batches), next(batches)
    order = [int(batch["collector", "worker_id"][0]) for batch in (first, second, third)]
    assert order == [1, 1, 0]
    assert [batch["observation"][:, 0].tolist() for batch in (first, second, third)] == \
        [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [0.0, 1.0, 2.0, 3.0]]


def record_numel(path, batch):
    with open(path, "a") as file:
        file.write(f"{batch.numel()}\n")


def append_line(path, line):
    with open(path, "a") as file:
        file.write(line + "\n")


def add_marker(batch):
    batch.set("marker", torch.ones(batch.batch_size))
    return batch


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_hooks_and_postproc_set_after_construction_reach_the_workers(no_leftovers, tmp_path, cls):
    path = tmp_path / "hook.txt"
    collector = cls([counting_factory(5)] * 2, frames_per_batch=8 if cls is MultiSyncCollector else 4,
                    start_method="fork", total_frames=16)
    no_leftovers(collector)
    collector.post_collect_hook = functools.partial(record_numel, path)
    collector.pre_collect_hook = functools.partial(append_line, path.with_name("pre.txt"), "called")
    collector.postproc = add_marker
    batches = list(collector)
    assert all((batch["marker"] == 1).all() for batch in batches)
    assert sum(int(line) for line in path.read_text().splitlines()) >= 16  # every worker batch went through the hook
    assert set(path.with_name("pre.txt").read_text().splitlines()) == {"called"}
    with pytest.raises(ValueError, match="can only be set at construction"):
        collector.set_delivery(split_trajs=True)


def test_torchrl_names_and_the_seeds_multicollector(no_leftovers):
    from rlcollect import ReplayBuffer
    from rlcollect.compat import (
        MultiaSyncDataCollector,
        MultiCollector,
        MultiSyncDataCollector,
        SyncDataCollector,
        TensorDictReplayBuffer,
        aSyncDataCollector,
    )

    assert SyncDataCollector is Collector and TensorDictReplayBuffer is ReplayBuffer
    assert MultiSyncDataCollector is MultiSyncCollector and MultiaSyncDataCollector is MultiAsyncCollector
    sync = MultiCollector([counting_factory(5)] * 2, frames_per_batch=8, start_method="fork")
    asynchronous = MultiCollector([counting_factory(5)] * 2, frames_per_batch=4, sync=False, start_method="fork")
    background = aSyncDataCollector(counting_factory(5), frames_per_batch=4, start_method="fork", total_frames=8)
    for collector in (sync, asynchronous, background):
        no_leftovers(collector)
    assert type(sync) is MultiSyncCollector and type(asynchronous) is MultiAsyncCollector
    assert next(iter(sync)).batch_size == (2, 2, 2)
    assert [batch.batch_size for batch in background] == [(2, 2), (2, 2)]  # one worker of 2 envs
    assert background.num_workers == 1


def test_frames_per_batch_per_worker_and_cat_results_none(no_leftovers):
    per_worker = MultiSyncCollector([counting_factory(5)] * 2, frames_per_batch=[4, 8], cat_results=-1,
                                    start_method="fork", total_frames=24)
    no_leftovers(per_worker)
    batches = list(per_worker)
    assert [batch.batch_size for batch in batches] == [(2, 6), (2, 6)]  # [2 envs, 2 + 4 steps]
    assert per_worker.frames_per_batch == 12 and per_worker.frames == 24
    asynchronous = MultiAsyncCollector([counting_factory(5)] * 2, frames_per_batch=[4, 8], start_method="fork")
    no_leftovers(asynchronous)
    sizes = {}
    for batch in asynchronous:  # until both workers delivered (worker 0's batches are half as long: often first)
        sizes.setdefault(int(batch["collector", "worker_id"][0, 0]), batch.batch_size)
        if len(sizes) == 2:
            break
    assert sizes == {0: (2, 2), 1: (2, 4)}
    with pytest.raises(ValueError, match="frames_per_batch lists 3 values for 2 workers"):
        MultiSyncCollector([counting_factory(5)] * 2, frames_per_batch=[4, 4, 4], start_method="fork")
    with pytest.raises(ValueError, match=r"^frames_per_batch=\[4, 8\]: cat_results='stack' stacks the workers' "
                                         r"batches, which needs them of one length"):
        MultiSyncCollector([counting_factory(5)] * 2, frames_per_batch=[4, 8], start_method="fork")
    stacked = MultiSyncCollector([counting_factory(5)] * 2, frames_per_batch=8, cat_results=None, start_method="fork")
    no_leftovers(stacked)
    assert stacked.cat_results == "stack" and next(iter(stacked)).batch_size == (2, 2, 2)


def test_policy_version_is_tracked_and_in_every_state_dict(no_leftovers):
    from rlcollect import NoWeightSyncScheme
    from rlcollect.weight_sync import scheme_from_backend

    policy = WeightProbe()
    single = Collector(counting_factory(5)(), policy, frames_per_batch=4, track_policy_version=True)
    batches = iter(single)
    assert (next(batches)["collector", "policy_version"] == 0).all()
    single.update_policy_weights_()
    assert (next(batches)["collector", "policy_version"] == 1).all()
    assert single.state_dict()["policy_version"] == 1
    untracked = Collector(counting_factory(5)(), policy, frames_per_batch=4)
    assert ("collector", "policy_version") not in next(iter(untracked)).keys(True, True)

    multi = MultiSyncCollector([counting_factory(5)] * 2, policy, frames_per_batch=8, start_method="fork",
                               weight_sync_schemes={"policy": scheme_from_backend("process")})
    no_leftovers(multi)
    next(iter(multi))
    with torch.no_grad():
        policy.weight.fill_(2.0)
    multi.update_policy_weights_()
    state = multi.state_dict()
    assert state["policy_version"] == 1 and state["frames"] == 8
    assert [state[f"worker{i}"]["policy_version"] for i in range(2)] == [1, 1]
    assert [float(state[f"worker{i}"]["policy"]["weight"]) for i in range(2)] == [2.0, 2.0]
    assert isinstance(scheme_from_backend("none"), NoWeightSyncScheme)
    with pytest.raises(ValueError, match="weight-sync backend must be one of"):
        scheme_from_backend("nccl")


def heterogeneous_env():
    """Envs whose episodes last 2, 3 and 5 steps: trajectories complete out of env order."""
    from rlcollect.testing import counting_env_factories

    return GymEnv(counting_env_factories([2, 3, 5]), 3)


def test_trajs_per_batch_without_a_buffer_yields_exactly_n_trajectories_first_completed_first():
    collector = Collector(heterogeneous_env(), frames_per_batch=6, trajs_per_batch=4, total_frames=20)
    batches = list(collector)
    # completion order over time: t=1 env0 (len 2), t=2 env1 (3), t=3 env0, t=4 env2 (5), t=5 env0, env1 ...
    first = batches[0]
    assert first.batch_dims == 1 and int(first["next", "done"].sum()) == 4
    ends = first["next", "done"].nonzero().squeeze(-1).tolist()
    starts = [0] + [end + 1 for end in ends[:-1]]
    assert [end - start + 1 for start, end in zip(starts, ends)] == [2, 3, 2, 5]  # completion order
    assert ends[-1] == first.shape[0] - 1  # ends with a done: no partial trajectory
    for start, end in zip(starts, ends):  # each trajectory contiguous, counting from 0
        assert first["observation"][start:end + 1, 0].tolist() == list(range(end - start + 1))
    assert sum(batch.numel() for batch in batches) >= 20 > sum(batch.numel() for batch in batches[:-1])


def test_trajs_per_batch_padded_and_reset_drops_partial_trajectories(no_leftovers):
    collector = Collector(heterogeneous_env(), frames_per_batch=6, trajs_per_batch=3, traj_format="padded")
    padded = next(iter(collector))
    mask = padded["collector", "mask"]
    assert padded.batch_size == (3, 3) and mask.sum(-1).tolist() == [2, 3, 2]
    last_real = mask.sum(-1) - 1
    assert padded["next", "done"][torch.arange(3), last_real].all()  # each row ends with its done
    assert not padded["next", "done"][~mask].any()
    collector.reset()  # the running trajectories restart: what they had collected never completes
    again = next(iter(collector))
    assert (again["observation"][again["collector", "mask"]] >= 0).all()
    assert again["observation"][:, 0, 0].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="traj_format must be one of"):
        Collector(heterogeneous_env(), frames_per_batch=6, trajs_per_batch=3, traj_format="ragged")

    multi = MultiSyncCollector([lambda: GymEnv(CountingEnv, 2)] * 2, frames_per_batch=8, trajs_per_batch=5,
                               start_method="fork", total_frames=20)
    no_leftovers(multi)
    batches = list(multi)
    assert all(int(batch["next", "done"].sum()) == 5 for batch in batches)
    assert sum(batch.numel() for batch in batches) == 25  # episodes of 5 steps: total_frames counts yielded frames


class Releasing(MultiSyncCollector):
    """A MultiSyncCollector that opens ``gate`` once it has preempted a round."""

    def __init__(self, *args, gate, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = gate

    def preempt(self) -> None:
        super().preempt()
        self.gate.set()


@pytest.mark.parametrize("cat_results", ["stack", -1])
def test_preemptive_threshold_ends_the_slow_workers_batch_early(no_leftovers, cat_results):
    # worker 1's first step waits until the round is preempted, which worker 0's finished batch does (a threshold
    # of 0.5): worker 1 then ends its batch before its second step, with exactly one step collected
    context = multiprocessing.get_context("fork")
    gate = context.Event()
    fast = functools.partial(GymEnv, functools.partial(CountingEnv, 1000), None)
    slow = functools.partial(GymEnv, functools.partial(Signalling, context.Value("l", 0), gate, context.Event(),
                                                       0), None)
    collector = Releasing([fast, slow], frames_per_batch=40, preemptive_threshold=0.5, cat_results=cat_results,
                          start_method="fork", gate=gate)
    no_leftovers(collector)
    batch = next(iter(collector))
    assert gate.is_set()
    if cat_results == "stack":
        mask = batch["collector", "mask"]
        assert batch.batch_size == (2, 20) and mask[0].all()
        assert mask[1].tolist() == [True] + [False] * 19  # the one step it did collect
    else:  # single envs, concatenated: the fast worker's 20, then the slow one's 1
        assert batch["collector", "worker_id"].tolist() == [0] * 20 + [1]
        assert batch["observation"][:, 0].tolist() == [*range(20), 0]
    assert collector.frames == 21  # only the steps collected count
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match="preemptive_threshold must be None or a fraction"):
            MultiSyncCollector([fast, fast], frames_per_batch=4, preemptive_threshold=bad, start_method="fork")
    everyone = MultiSyncCollector([fast, fast], frames_per_batch=4, preemptive_threshold=1.0, start_method="fork")
    no_leftovers(everyone)
    assert ("collector", "mask") not in next(iter(everyone)).keys(True, True)
    with pytest.raises(RuntimeError, match=r"preempt\(\) needs MultiSyncCollector\(preemptive_threshold=...\)"):
        everyone.preempt()  # 1.0: no worker is ever preempted
