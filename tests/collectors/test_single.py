import numpy as np
import pytest
import torch
from checks import check_keys_and_shapes, check_trajectories
from tensordict.nn import InteractionType, interaction_type

from rlcollect.collectors import Collector
from rlcollect.envs import GymEnv
from rlcollect.modules import ActorCritic
from rlcollect.testing import CountingEnv, CountingVectorEnv, counting_env_factories, counting_envs

TRAJ_IDS = ("collector", "traj_ids")


# every backend steps the same sub-envs (the vector one: CountingEnvs as one VectorEnv)
BACKENDS = ["list", "sync", "async", "vector"]


def counting(lengths=(3, 4), end="terminated", backend="list", **env_kwargs):
    if lengths is None:
        return GymEnv(lambda: CountingEnv(4, end=end), **env_kwargs)
    if backend == "vector":
        return GymEnv(CountingVectorEnv(lengths, "disabled", end=end), **env_kwargs)
    if backend != "list":
        return GymEnv(counting_envs(lengths, end=end), num_envs=len(lengths), backend=backend, **env_kwargs)
    return GymEnv(counting_env_factories(lengths, end=end), num_envs=len(lengths), **env_kwargs)


def collect(collector, batches):
    iterator = iter(collector)
    return [next(iterator) for _ in range(batches)]


def obs(batch, key="observation"):
    return batch[key][..., 0].long().tolist()


@pytest.mark.parametrize("num_envs, frames_per_batch, shape", [(None, 10, [10]), (4, 10, [4, 3]), (4, 12, [4, 3])])
def test_batch_shape_and_frames_per_batch_rounding(num_envs, frames_per_batch, shape):
    env = GymEnv("CartPole-v1", num_envs)
    collector = Collector(env, frames_per_batch=frames_per_batch, total_frames=-1)
    batch = next(iter(collector))
    check_keys_and_shapes(batch, shape, observation_shape=(4,))
    assert collector.frames_per_batch == batch.numel()


@pytest.mark.parametrize("backend", BACKENDS)
def test_total_frames_and_len(backend):
    collector = Collector(counting(backend=backend), frames_per_batch=6, total_frames=20)
    batches = list(collector)
    assert len(collector) == 4 == len(batches)
    assert collector.frames == 24
    with pytest.raises(TypeError, match="endless"):
        len(Collector(counting(), frames_per_batch=6))


@pytest.mark.parametrize("backend", BACKENDS)
def test_carrier_continuity_traj_ids_and_is_init_across_batches(backend):
    # env 0 ends every 3 steps, env 1 every 4; three batches of [2, 5] cross the boundaries
    batches = collect(Collector(counting((3, 4), backend=backend), frames_per_batch=10), 3)
    data = torch.cat(batches, dim=1)  # [2, 15]
    assert obs(data) == [[0, 1, 2] * 5, [0, 1, 2, 3] * 3 + [0, 1, 2]]
    assert obs(data, ("next", "observation")) == [[1, 2, 3] * 5, [1, 2, 3, 4] * 3 + [1, 2, 3]]
    assert torch.equal(data["is_init"], data["observation"][..., 0] == 0)
    check_trajectories(data)  # continuity; a new id exactly where a trajectory starts, never reused
    assert data["is_init"].sum() == 5 + 4 and data[TRAJ_IDS].min() == 0


def test_single_env_layout_is_time_only():
    batch = next(iter(Collector(counting(None, end="truncated"), frames_per_batch=6)))
    assert batch.batch_size == (6,)
    assert obs(batch) == [0, 1, 2, 3, 0, 1]
    assert batch["next", "truncated"].tolist() == [False, False, False, True, False, False]
    assert not batch["next", "terminated"].any()
    assert batch[TRAJ_IDS].tolist() == [0, 0, 0, 0, 1, 1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_frames_per_traj_truncates_and_resets(backend):
    batch = next(iter(Collector(counting((10, 2), backend=backend), frames_per_batch=12, max_frames_per_traj=3)))
    assert obs(batch) == [[0, 1, 2] * 2, [0, 1] * 3]
    assert batch["next", "truncated"].tolist() == [[False, False, True] * 2, [False] * 6]
    assert batch["next", "terminated"].tolist() == [[False] * 6, [False, True] * 3]
    assert torch.equal(batch["next", "done"], batch["next", "terminated"] | batch["next", "truncated"])
    assert batch[TRAJ_IDS][0].tolist() == [0, 0, 0, 3, 3, 3]  # env 1 finished first and took id 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_at_each_iter_restarts_every_env(backend):
    first, second = collect(Collector(counting((5,), backend=backend), frames_per_batch=2, reset_at_each_iter=True),
                            2)
    assert obs(first) == obs(second) == [[0, 1]]
    assert second["is_init"].tolist() == [[True, False]]
    assert first[TRAJ_IDS].tolist() == [[0, 0]] and second[TRAJ_IDS].tolist() == [[1, 1]]


def test_reset_when_done_false_leaves_finished_envs_alone():
    batch = next(iter(Collector(counting((2,)), frames_per_batch=4, reset_when_done=False)))
    assert obs(batch) == [[0, 1, 2, 3]]
    assert not batch["is_init"][0, 1:].any()


class CallCounter(torch.nn.Module):
    """A policy that writes action 1 and a constant log-prob, counting its calls."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.calls = 0

    def forward(self, td):
        self.calls += 1
        td.set("action", torch.ones(td.batch_size, dtype=torch.int64))
        td.set("action_log_prob", torch.full(td.batch_size, -0.5) + self.weight.detach())
        return td


def test_init_random_frames_do_not_call_the_policy():
    policy = CallCounter()
    collector = Collector(counting((100, 100)), policy, frames_per_batch=4, init_random_frames=6)
    calls_at_construction = policy.calls
    first, second = collect(collector, 2)
    # frames 0-3 (batch 1) and 4-5 (step 0 of batch 2) are random: one policy call, at frame 6
    assert policy.calls - calls_at_construction == 1
    assert torch.equal(first["action_log_prob"], torch.zeros(2, 2))
    assert second["action_log_prob"].tolist() == [[0.0, -0.5], [0.0, -0.5]]
    assert second["action"][:, 1].tolist() == [1, 1]


def test_hooks_and_postproc_order():
    events = []
    yielded = []

    def postproc(batch):
        events.append("postproc")
        batch.set("doubled", batch["observation"] * 2)
        return batch

    def post_hook(batch):
        events.append("post")
        yielded.append(batch)

    collector = Collector(counting(), frames_per_batch=4, total_frames=8, postproc=postproc,
                          pre_collect_hook=lambda: events.append("pre"), post_collect_hook=post_hook)
    batches = list(collector)
    assert events == ["pre", "postproc", "post"] * 2
    assert all(a is b for a, b in zip(yielded, batches))  # exactly the batch that is yielded
    assert torch.equal(batches[0]["doubled"], batches[0]["observation"] * 2)


def test_hook_exceptions_propagate():
    def failing(batch):
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        next(iter(Collector(counting(), frames_per_batch=4, post_collect_hook=failing)))


def test_yielded_batches_are_not_overwritten_by_later_ones():
    first, second = collect(Collector(counting((50,)), frames_per_batch=3), 2)
    assert obs(first) == [[0, 1, 2]] and obs(second) == [[3, 4, 5]]


def test_split_trajs_gives_padded_layout_with_mask():
    batch = next(iter(Collector(counting((3, 4)), frames_per_batch=10, split_trajs=True)))
    # env 0: [0 1 2][0 1], env 1: [0 1 2 3][0]
    assert batch.batch_size == (4, 4)
    mask = batch["collector", "mask"]
    assert mask.sum(1).tolist() == [3, 2, 4, 1]
    assert obs(batch)[0][:3] == [0, 1, 2] and obs(batch)[2] == [0, 1, 2, 3]
    assert (batch["observation"][~mask] == 0).all()
    with pytest.raises(ValueError, match="track_traj_ids"):
        Collector(counting(), frames_per_batch=4, split_trajs=True, track_traj_ids=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_truncated_cuts_at_the_batch_boundary(backend):
    first, second = collect(Collector(counting((10,), backend=backend), frames_per_batch=3, set_truncated=True), 2)
    assert first["next", "truncated"].tolist() == [[False, False, True]]
    assert first["next", "done"].tolist() == [[False, False, True]]
    assert obs(second) == [[3, 4, 5]]  # the env itself continues ...
    assert second["is_init"].tolist() == [[True, False, False]]  # ... as a new trajectory
    assert second[TRAJ_IDS][0, 0] != first[TRAJ_IDS][0, -1]


def test_exploration_type_is_set_around_the_policy():
    seen = []

    def policy(td):
        seen.append(interaction_type())
        td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        return td

    next(iter(Collector(counting(), policy, frames_per_batch=2, exploration_type="deterministic")))
    assert set(seen) == {InteractionType.DETERMINISTIC}
    with pytest.raises(ValueError, match="exploration_type"):
        Collector(counting(), policy, frames_per_batch=2, exploration_type="greedy")


def test_same_seed_same_batches():
    def batches(seed):
        torch.manual_seed(0)  # same initial weights
        env = GymEnv("CartPole-v1", 2)
        policy = ActorCritic(env.observation_space, env.action_space)
        collector = Collector(env, policy, frames_per_batch=40)
        collector.set_seed(seed)
        return collect(collector, 2)

    a, b, c = batches(1), batches(1), batches(2)
    assert all((x == y).all() for x, y in zip(a, b))
    assert not (a[0]["observation"] == c[0]["observation"]).all()


def test_state_dict_keeps_frames_and_traj_ids_unique_after_reload():
    collector = Collector(counting((2, 3)), frames_per_batch=6, total_frames=100)
    first = next(iter(collector))
    state = collector.state_dict()
    assert state["frames"] == 6
    fresh = Collector(counting((2, 3)), frames_per_batch=6, total_frames=100)
    fresh.load_state_dict(state)
    assert fresh.frames == 6 and len(list(fresh)) == len(fresh) - 1
    reloaded = Collector(counting((2, 3)), frames_per_batch=6, total_frames=100)
    reloaded.load_state_dict(state)
    after = next(iter(reloaded))
    assert set(after[TRAJ_IDS].unique().tolist()).isdisjoint(first[TRAJ_IDS].unique().tolist())


def test_update_policy_weights_applies_given_weights():
    policy = CallCounter()
    collector = Collector(counting(), policy, frames_per_batch=2)
    collector.update_policy_weights_({"weight": torch.tensor(0.25)})
    assert collector.policy.weight.item() == 0.25
    batch = next(iter(collector))
    assert torch.allclose(batch["action_log_prob"], torch.full((2, 1), -0.25))


def test_validation_errors_name_the_argument():
    with pytest.raises(ValueError, match="frames_per_batch"):
        Collector(counting(), frames_per_batch=0)
    with pytest.raises(ValueError, match="total_frames"):
        Collector(counting(), frames_per_batch=2, total_frames=0)
    with pytest.raises(ValueError, match="max_frames_per_traj"):
        Collector(counting(), frames_per_batch=2, max_frames_per_traj=0)
    with pytest.raises(TypeError, match="GymEnv"):
        Collector(lambda: "env", frames_per_batch=2)


def test_shutdown_is_idempotent_and_blocks_iteration():
    collector = Collector(counting(), frames_per_batch=2)
    collector.shutdown()
    collector.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        next(iter(collector))


def test_reset_starts_new_trajectories():
    collector = Collector(counting((5,)), frames_per_batch=2)
    first = next(iter(collector))
    collector.reset()
    second = next(iter(collector))
    assert obs(second) == [[0, 1]] and second[TRAJ_IDS][0, 0] == first[TRAJ_IDS][0, 0] + 1


def test_policy_outputs_are_stored_per_step():
    env = GymEnv("CartPole-v1", 3)
    policy = ActorCritic(env.observation_space, env.action_space)
    batch = next(iter(Collector(env, policy, frames_per_batch=30)))
    assert batch["action_log_prob"].shape == (3, 10) and batch["state_value"].shape == (3, 10)
    log_prob, _, value = policy.evaluate_actions(batch["observation"], batch["action"])
    assert torch.allclose(log_prob, batch["action_log_prob"], atol=1e-6)
    assert torch.allclose(value, batch["state_value"], atol=1e-6)


def test_env_errors_propagate_with_their_message():
    from rlcollect.testing import ErrorAfterEnv

    collector = Collector(GymEnv(lambda: ErrorAfterEnv(error_after=3)), frames_per_batch=5)
    with pytest.raises(RuntimeError, match="step 4 fails by design"):
        next(iter(collector))
    collector.shutdown()


def test_a_policy_that_writes_no_action_is_rejected_at_construction():
    with pytest.raises(ValueError, match="must write 'action'"):
        Collector(counting(), lambda td: td, frames_per_batch=2)


def _value_policy(td):
    """Action 1 at odd counts, and a value naming the step (10 x the observation)."""
    observation = td.get("observation")[..., 0]
    td.set("action", (observation.long() % 2))
    td.set("state_value", 10 * observation)
    return td


@pytest.mark.parametrize("max_frames_per_traj", [None, 4])
def test_act_and_record_on_groups_of_envs_equal_the_whole_step(max_frames_per_traj):
    """The env pool's form of the two halves: a step taken as two groups of envs (a slice,
    then env ids out of order) writes what the step of every env at once writes; only the
    numbering of fresh trajectory ids follows the groups' order."""
    lengths = (2, 3, 5, 6)

    def make():
        return Collector(counting(lengths), _value_policy, frames_per_batch=4 * 9,
                         max_frames_per_traj=max_frames_per_traj)

    whole, grouped = make(), make()
    expected = whole.collect().clone()
    groups = [slice(0, 2), np.array([3, 2])]
    grouped.begin_batch()
    with torch.no_grad():
        for t in range(9):
            actions = np.zeros(4, np.int64)
            for envs in groups:
                actions[envs] = grouped.act(t, envs=envs)
            grouped.env.stage_step(actions)
            done = grouped.env.staged.get(("next", "done")).numpy().copy()
            for envs in groups:
                grouped.record(t, done[envs], envs=envs)
    grouped.end_batch()
    got = grouped.batch
    assert set(got.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        if key != TRAJ_IDS:
            assert torch.equal(got[key], expected[key]), key
    # the same trajectories: an id changes exactly where the whole step's changes
    assert torch.equal(got[TRAJ_IDS].diff(dim=1) != 0, expected[TRAJ_IDS].diff(dim=1) != 0)
    assert got[TRAJ_IDS].unique().numel() == expected[TRAJ_IDS].unique().numel()
    assert obs(got)[3] == ([0, 1, 2, 3, 0, 1, 2, 3, 0] if max_frames_per_traj else [0, 1, 2, 3, 4, 5, 0, 1, 2])
    assert got["state_value"][1].tolist() == [0.0, 10.0, 20.0, 0.0, 10.0, 20.0, 0.0, 10.0, 20.0]
    check_trajectories(got)


def test_act_on_groups_of_envs_refuses_waiting_envs():
    collector = Collector(counting((2, 3)), _value_policy, frames_per_batch=4, reset_policy="wait")
    with pytest.raises(ValueError, match=r"act\(envs=...\) steps some envs of a batched CPU env; this collector's "
                                         r"envs wait"):
        collector.act(0, envs=slice(0, 1))
