"""rlpyt's sampler interface over rlcollect's collectors: time-major samples, the same
samples from every sampler given the same seed, trajectory infos, evaluation, bootstrap
values, wait-reset collectors, and the errors of the compatibility front."""
import functools

import gymnasium as gym
import pytest
import torch

from rlcollect import ActorCritic, GymEnv, TrajectoryInfo
from rlcollect.collectors.action_server import AlternatingCollector
from rlcollect.collectors.multi import MultiSyncCollector
from rlcollect.rlpyt import (
    AlternatingSampler,
    CpuSampler,
    CpuWaitResetCollector,
    GpuResetCollector,
    GpuSampler,
    GpuWaitResetCollector,
    NoOverlapAlternatingSampler,
    SerialSampler,
)
from rlcollect.testing import EchoEnv, InfoEnv, echo_policy

pytestmark = pytest.mark.timeout(180)
MASK, TRAJ_IDS = ("collector", "mask"), ("collector", "traj_ids")
FORK = {"start_method": "fork"}
SAMPLERS = [SerialSampler, CpuSampler, GpuSampler, AlternatingSampler, NoOverlapAlternatingSampler]


@pytest.fixture
def start(no_leftovers):
    """Initialize a sampler; it is shut down after the test, leaving nothing behind."""
    def initialize(sampler, agent, **kwargs):
        examples = sampler.initialize(agent, **kwargs)
        samplers.append(sampler)
        if hasattr(sampler.collector, "_processes"):  # worker processes: none may outlive the test
            no_leftovers(sampler.collector)
        return examples
    samplers = []
    yield initialize
    for sampler in samplers:
        sampler.shutdown()


def cartpole_agent():
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    return ActorCritic(env.observation_space, env.action_space)


def sampler_kwargs(cls, **collector_kwargs):
    return {"collector_kwargs": {**({} if cls is SerialSampler else FORK), **collector_kwargs}}


def collect(cls, start, batches=2, agent=None, affinity=None, **kwargs):
    sampler = cls(gym.make, {"id": "CartPole-v1"}, 16, 4, max_decorrelation_steps=30, **kwargs)
    start(sampler, agent or cartpole_agent(), seed=3, affinity=affinity)
    return [sampler.obtain_samples(itr)[0].clone() for itr in range(batches)]


# trajectory ids are unique but drawn in the order workers ask: compared through is_init and done
KEYS = ["observation", "action", "is_init", ("next", "observation"), ("next", "reward"), ("next", "terminated"),
        ("next", "truncated")]


def test_every_sampler_gives_the_same_samples_from_the_same_seed(start):
    """A deterministic agent: the envs' seeds and random starts decide everything, in this
    process or in workers, with one batched forward or one per worker."""
    expected = collect(SerialSampler, start, **sampler_kwargs(SerialSampler, exploration_type="deterministic"))
    assert expected[0].batch_size == (16, 4)
    assert (expected[0]["observation"][0] != expected[0]["observation"][0, :1]).any()  # random starts differ
    assert expected[0]["next", "done"].any() and not expected[0]["is_init"][1:].all()
    for cls in SAMPLERS[1:]:
        got = collect(cls, start, **sampler_kwargs(cls, exploration_type="deterministic"))
        for want, have in zip(expected, got):
            for key in KEYS:
                assert torch.equal(want[key], have[key]), (cls.__name__, key)


def test_a_sampling_agent_gives_the_same_samples_where_its_forward_sees_the_same_batches(start):
    """The agent samples from torch's RNG of the process it runs in, seeded from the seed:
    in this process (serial, action server) or in a single worker."""
    expected = collect(SerialSampler, start)
    for cls, affinity in ((GpuSampler, None), (CpuSampler, {"workers_cpus": [[0]]})):
        got = collect(cls, start, affinity=affinity, **sampler_kwargs(cls))
        for want, have in zip(expected, got):
            assert all(torch.equal(want[key], have[key]) for key in KEYS), cls.__name__


@pytest.mark.parametrize("cls", [GpuSampler, AlternatingSampler])
def test_an_env_cls_returning_one_gym_env_is_called_once_per_env(start, cls):
    """EnvCls returning one unbatched GymEnv, as rlpyt's env classes return one env: each of
    the 2 workers calls it for its 2 envs and batches them (refused before). Env i is seeded
    3 + i and starts at its random phase as a gymnasium env from gym.make would: the same
    samples and evaluation episodes as SerialSampler's on gym.make (a deterministic agent)."""
    def run(sampler_cls, env_cls, env_kwargs, affinity=None):
        sampler = sampler_cls(env_cls, env_kwargs, 16, 4, max_decorrelation_steps=30, eval_n_envs=2,
                              eval_max_trajectories=2,
                              **sampler_kwargs(sampler_cls, exploration_type="deterministic"))
        start(sampler, cartpole_agent(), seed=3, affinity=affinity)
        samples = [sampler.obtain_samples(itr)[0].clone() for itr in range(2)]
        return sampler, samples, [(info.episode_return, info.length) for info in sampler.evaluate_agent(0)]

    _, expected, expected_eval = run(SerialSampler, gym.make, {"id": "CartPole-v1"})
    sampler, got, got_eval = run(cls, GymEnv, {"env": "CartPole-v1"}, {"workers_cpus": [[0], [0]],
                                                                       "set_affinity": False})
    assert (sampler.collector.num_workers, sampler.collector.envs_per_worker) == (2, 2)
    assert got[0].batch_size == (16, 4) and got[0]["observation"].shape == (16, 4, 4)
    for want, have in zip(expected, got):
        assert all(torch.equal(want[key], have[key]) for key in KEYS)
    assert got_eval == expected_eval and len(got_eval) == 2


def test_samples_are_a_time_major_view_and_examples_size_one_step(start):
    sampler = SerialSampler(gym.make, {"id": "CartPole-v1"}, 5, 3, max_decorrelation_steps=0)
    examples = start(sampler, cartpole_agent(), seed=0)
    samples, _ = sampler.obtain_samples(0)
    observation = samples["observation"]
    assert samples.batch_size == (5, 3) and observation.shape == (5, 3, 4)
    assert not observation.is_contiguous() and observation.transpose(0, 1).is_contiguous()  # a view of [B, T]
    assert torch.equal(samples["is_init"][0], torch.ones(3, dtype=torch.bool))
    assert examples.batch_size == () and set(examples.keys(True, True)) == set(samples.keys(True, True))
    assert all((value == 0).all() for value in examples.values(True, True))
    assert examples["observation"].dtype == torch.float32 and examples["action"].dtype == torch.int64


@pytest.mark.parametrize("cls", SAMPLERS)
def test_examples_have_every_key_and_dtype_of_the_samples(start, cls):
    sampler = cls(gym.make, {"id": "CartPole-v1"}, 4, 4, **sampler_kwargs(cls))
    examples = start(sampler, cartpole_agent(), seed=0)
    samples, _ = sampler.obtain_samples(0)
    assert {key: value.dtype for key, value in examples.items(True, True)} == \
        {key: value.dtype for key, value in samples.items(True, True)}
    assert all(value.shape == samples[key].shape[2:] for key, value in examples.items(True, True))


def test_traj_infos_match_the_collected_rewards_across_batches(start):
    """EchoEnv seeded 0 + i: env i's episodes last 2 + i steps; every reward is 1."""
    sampler = SerialSampler(functools.partial(EchoEnv, (2, 3, 4, 5)), None, 3, 4, max_decorrelation_steps=0)
    start(sampler, echo_policy, seed=0, traj_info_kwargs={"discount": 0.5})
    seen, infos = [], []
    for itr in range(3):
        samples, batch_infos = sampler.obtain_samples(itr)
        seen.append(samples.clone())
        infos += batch_infos
    # per batch, env by env: batch 0 (steps 0-2), batch 1 (3-5), batch 2 (6-8)
    assert [(info.traj_id, info.length) for info in infos] == [
        (0, 2), (1, 3), (4, 2), (6, 2), (5, 3), (2, 4), (3, 5), (9, 2), (10, 3), (7, 4)]
    steps = torch.cat([samples.reshape(-1) for samples in seen])
    for info in infos:  # the return and the discounted return from the rewards stored
        rewards = steps["next", "reward"][steps[TRAJ_IDS] == info.traj_id]
        assert info.length == rewards.numel() and info.episode_return == rewards.sum().item()
        assert info.discounted_return == sum(0.5 ** k for k in range(info.length))


def test_evaluate_agent_counts_whole_episodes_within_the_budget(start):
    echo = functools.partial(EchoEnv, (2, 3, 4, 5))
    sampler = SerialSampler(echo, None, 4, 2, max_decorrelation_steps=0, eval_n_envs=2)
    start(sampler, echo_policy, seed=0)
    # eval env i is seeded 10_000 + i: episodes of 2 and 3 steps, one per env
    assert [info.length for info in sampler.evaluate_agent(0)] == [2, 3]
    budget = SerialSampler(echo, None, 4, 2, max_decorrelation_steps=0, eval_n_envs=2, eval_max_steps=4)
    start(budget, echo_policy, seed=0)
    assert [info.length for info in budget.evaluate_agent(0)] == [2]  # env 1's episode was cut: not counted
    repeated = SerialSampler(echo, None, 4, 2, max_decorrelation_steps=0, eval_n_envs=2, eval_max_trajectories=3)
    start(repeated, echo_policy, seed=0)
    assert [info.length for info in repeated.evaluate_agent(0)] == [2, 3, 2]
    none = SerialSampler(echo, None, 4, 2)
    start(none, echo_policy, seed=0)
    assert none.evaluate_agent(0) == []


class Trajectory(TrajectoryInfo):
    """A user's TrajInfoCls."""


def test_bootstrap_value_is_the_agents_value_after_the_batch(start):
    agent = cartpole_agent()
    sampler = GpuSampler(gym.make, {"id": "CartPole-v1"}, 8, 4, TrajInfoCls=Trajectory, **sampler_kwargs(GpuSampler))
    start(sampler, agent, seed=1, bootstrap_value=True)
    for itr in range(4):
        samples, infos = sampler.obtain_samples(itr)
        assert all(type(info) is Trajectory for info in infos)
    with torch.no_grad():
        expected = agent.state_value(samples["next"][-1])
    assert samples["bootstrap_value"].shape == (4,)
    assert torch.equal(samples["bootstrap_value"], expected)


@pytest.mark.parametrize("cls", [SerialSampler, CpuSampler, GpuSampler])
def test_bootstrap_value_is_a_plain_tensor_however_it_is_read(start, cls):
    """Regression: samples.get("bootstrap_value") returned a NonTensorData."""
    echo = functools.partial(EchoEnv, (2, 3, 4, 5))
    agent = EchoCritic()
    sampler = cls(echo, None, 3, 4, max_decorrelation_steps=0, **sampler_kwargs(cls))
    start(sampler, agent, seed=0, bootstrap_value=True)
    for itr in range(2):
        samples, _ = sampler.obtain_samples(itr)
    # V of each env's ("next", "observation") after 6 steps: env i (seeded i) has episodes of 2 + i steps, so its
    # step count is 2, 3 (both just finished: the true final observation), 2 and 1; V = 10 * i + count
    expected = torch.tensor([0.0 + 2, 10 + 3, 20 + 2, 30 + 1])
    for value in (samples["bootstrap_value"], samples.get("bootstrap_value"), samples.clone().get("bootstrap_value"),
                  samples[0].get("bootstrap_value")):
        assert type(value) is torch.Tensor and value.shape == (4,) and torch.equal(value, expected)


class EchoCritic(torch.nn.Module):
    """echo_policy with V = 10 * env id + step count (EchoEnv's observation)."""

    def forward(self, td):
        return echo_policy(td)

    def state_value(self, td):
        observation = td.get("observation")
        return 10 * observation[..., 0] + observation[..., 1]


def test_info_keys_reach_the_samples_and_the_examples_with_their_dtype(start):
    sampler = CpuSampler(InfoEnv, {"episode_length": 3}, 4, 2, max_decorrelation_steps=0,
                         info_keys=["is_success", "cost"], **sampler_kwargs(CpuSampler))
    agent = ActorCritic(InfoEnv().observation_space, InfoEnv().action_space)
    examples = start(sampler, agent, seed=0, traj_info_kwargs={"last_keys": [("next", "is_success")]})
    samples, infos = sampler.obtain_samples(0)
    assert examples["next", "is_success"].dtype == samples["next", "is_success"].dtype == torch.bool
    assert samples["next", "is_success"].T.tolist() == [[False, False, True, False]] * 2
    assert samples["next", "cost"].dtype == torch.float64
    assert samples["next", "cost"].T.tolist() == [[0.5, 1, 1.5, 0.5]] * 2
    assert [info.last["next/is_success"] for info in infos] == [True, True]


@pytest.mark.parametrize("cls, collector", [(SerialSampler, CpuWaitResetCollector),
                                            (CpuSampler, CpuWaitResetCollector),
                                            (GpuSampler, GpuWaitResetCollector)])
def test_wait_reset_collectors_pad_and_reset_between_batches(start, cls, collector):
    echo = functools.partial(EchoEnv, (2, 3, 4, 5))
    sampler = cls(echo, None, 3, 4, CollectorCls=collector, max_decorrelation_steps=0, **sampler_kwargs(cls))
    start(sampler, echo_policy, seed=0)
    first, infos = sampler.obtain_samples(0)
    assert first[MASK].tolist() == [[True] * 4, [True] * 4, [False, True, True, True]]  # [T, B]
    assert [info.length for info in infos] == [2, 3]
    second, infos = sampler.obtain_samples(1)
    assert second["is_init"][0].tolist() == [True, True, False, False]  # envs 0 and 1 reset between batches
    assert second["observation"][0, :, 1].tolist() == [0, 0, 3, 3]  # step counts: envs 2, 3 went on
    assert [info.length for info in infos] == [2, 3, 4, 5]  # envs 2 and 3 finish their first episodes


def test_collector_classes_and_worker_counts_follow_the_sampler(start):
    sampler = AlternatingSampler(gym.make, {"id": "CartPole-v1"}, 4, 4, **sampler_kwargs(AlternatingSampler))
    start(sampler, cartpole_agent(), affinity={"workers_cpus": [[0], [0], [1], [1]], "worker_torch_threads": 1})
    assert type(sampler.collector) is AlternatingCollector and sampler.collector.overlap
    assert sampler.collector.num_workers == 4
    cpu = CpuSampler(gym.make, {"id": "CartPole-v1"}, 4, 4, **sampler_kwargs(CpuSampler))
    start(cpu, cartpole_agent())
    assert type(cpu.collector) is MultiSyncCollector and cpu.collector.num_workers == 2  # this machine's 2 CPUs


@pytest.mark.parametrize("build, error, message", [
    (lambda: CpuSampler(gym.make, {"id": "CartPole-v1"}, 4, 2, CollectorCls=GpuResetCollector), TypeError,
     "CpuSampler runs the agent beside its envs: it takes CpuResetCollector or CpuWaitResetCollector"),
    (lambda: SerialSampler(gym.make, {"id": "CartPole-v1"}, 4, 2, CollectorCls=GpuResetCollector), TypeError,
     "SerialSampler runs the agent beside its envs: it takes CpuResetCollector or CpuWaitResetCollector, not "
     "GpuResetCollector"),
    (lambda: GpuSampler(gym.make, {"id": "CartPole-v1"}, 4, 2, CollectorCls=CpuWaitResetCollector), TypeError,
     "takes GpuResetCollector or GpuWaitResetCollector, not CpuWaitResetCollector"),
    (lambda: SerialSampler(gym.make, {"id": "CartPole-v1"}, 4, 2, CollectorCls=MultiSyncCollector), TypeError,
     "CollectorCls must be one of rlcollect.rlpyt's"),
    (lambda: SerialSampler(gym.make, {"id": "CartPole-v1"}, 0, 2), ValueError, "batch_T must be a positive int"),
    (lambda: SerialSampler(gym.make, {}, 4, 2, TrajInfoCls=dict), TypeError, "TrajInfoCls must be"),
    (lambda: AlternatingSampler(gym.make, {"id": "CartPole-v1"}, 4, 3).initialize(None), ValueError,
     "batch_B=3 must be even"),
])
def test_bad_arguments_are_named(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_interface_misuse_is_refused_clearly(start):
    sampler = SerialSampler(gym.make, {"id": "CartPole-v1"}, 4, 2)
    with pytest.raises(RuntimeError, match=r"obtain_samples\(\): call initialize"):
        sampler.obtain_samples(0)
    with pytest.raises(ValueError, match="affinity keys \\['cpus'\\] are not read"):
        sampler.initialize(None, affinity={"cpus": [0]})
    with pytest.raises(ValueError, match="rank=2 must be less than world_size=2"):
        sampler.initialize(None, rank=2, world_size=2)
    with pytest.raises(ValueError, match="traj_info_kwargs keys \\['Gamma'\\] are unknown"):
        sampler.initialize(None, traj_info_kwargs={"Gamma": 0.9})
    start(sampler, None, seed=0)
    with pytest.raises(RuntimeError, match="already called"):
        sampler.initialize(None)
    sampler.shutdown()
    sampler.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="was shut down"):
        sampler.obtain_samples(1)


def test_rank_offsets_the_env_seeds(start):
    """Rank 1 of 2 steps the envs a single trainer of 2 x batch_B envs would have as 2..3."""
    sampler = SerialSampler(functools.partial(EchoEnv, (2, 3, 4, 5)), None, 2, 2, max_decorrelation_steps=0)
    start(sampler, echo_policy, seed=10, rank=1, world_size=2)
    samples, _ = sampler.obtain_samples(0)
    assert samples["observation"][0, :, 0].tolist() == [12.0, 13.0]  # EchoEnv's id is its seed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cls", [SerialSampler, GpuSampler])
def test_cuda_idx_runs_the_agents_forward_on_that_gpu(start, cls):
    agent = cartpole_agent().to("cuda:0")
    seen = []
    agent.register_forward_pre_hook(lambda module, args: seen.append(args[0].get("observation").device.type))
    sampler = cls(gym.make, {"id": "CartPole-v1"}, 8, 4, **sampler_kwargs(cls))
    start(sampler, agent, seed=0, affinity={"cuda_idx": 0}, bootstrap_value=True)
    samples, _ = sampler.obtain_samples(0)
    assert samples["action"].device.type == "cpu" and samples["bootstrap_value"].device.type == "cuda"
    assert seen and set(seen) == {"cuda"}
