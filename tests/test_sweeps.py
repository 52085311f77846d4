"""Batched sweeps (hydra/launcher=batched, rlcollect.sweeps): the seeds of a sweep trained as
one stacked model, each member a normal run."""
import json
import os
import signal
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from commands import rlcollect as cli
from commands import rlcollect_all as cli_all
from commands import start_rlcollect
from hydra import initialize_config_module
from run_states import job_dirs
from train_configs import train_configs as configs

from rlcollect.algos.ppo import PPO
from rlcollect.buffers.rollout import RolloutBuffer
from rlcollect.checkpoint import load_checkpoint
from rlcollect.collectors.evaluation import EvalCollector
from rlcollect.config import register_configs
from rlcollect.envs.gym_env import GymEnv
from rlcollect.errors import ConfigError
from rlcollect.logging.wandb_offline import read_offline_run
from rlcollect.modules.actor_critic import ActorCritic
from rlcollect.seeding import member_env_seeds
from rlcollect.sweeps.grouping import check_sweep, member_options
from rlcollect.sweeps.members import MemberPolicy, MemberPPO, clip_member_grad_norms
from rlcollect.sweeps.run import build_sweep
from rlcollect.sweeps.stacking import StackedLinear, StackedTanh, member_state_dict, stack_modules
from rlcollect.testing import CountingEnv

TINY = ["total_frames=1024", "collector.frames_per_batch=128", "algo.minibatch_size=64", "env.num_envs=4",
        "eval.every_frames=256", "eval.episodes=2", "algo.epochs=2", "progress=false", "logger=none"]
TIMING_KEYS = ("time", "_timestamp", "_runtime")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def metric_rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock entries."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{key: value for key, value in row.items() if not key.startswith(TIMING_KEYS) and "per_second" not in key}
            for row in rows]






# ---------------------------------------------------------------------------- the pieces
def test_an_env_seeded_per_env_starts_each_member_as_its_solo_run():
    """Rows m * P ... m * P + P - 1 start as a P-env GymEnv seeded with member m's seed."""
    seeds = member_env_seeds([3, 7], 2)
    assert seeds == [3, 4, 7, 8]
    for backend in ("list", "sync", "vector"):
        batched = GymEnv("CartPole-v1", 4, seed=seeds, backend=backend)
        solos = [GymEnv("CartPole-v1", 2, seed=seed, backend=backend) for seed in (3, 7)]
        for env in (batched, *solos):
            env.reset()
        assert torch.equal(batched.staged["observation"],
                           torch.cat([solo.staged["observation"] for solo in solos]))
        for env in (batched, *solos):
            env.close()


def test_paused_envs_are_never_stepped_again_and_evaluations_count_only_the_rows_asked_for():
    """A stopped member's envs (GymEnv.pause): their rows keep their values, never done,
    while the others count on; an evaluation over some rows ends with their episodes."""
    from rlcollect.collectors.single import Collector

    env = GymEnv(lambda: CountingEnv(episode_length=3), 4, seed=0)
    collector = Collector(env, None, frames_per_batch=4 * 2, total_frames=-1)
    batches = iter(collector)
    next(batches)
    assert env.pause([1, 2])
    batch = next(batches)
    observation = batch.get("observation").squeeze(-1)
    assert observation[[0, 3]].tolist() == [[2.0, 0.0], [2.0, 0.0]]  # counting on, done at 3, reset
    assert observation[[1, 2]].tolist() == [[2.0, 2.0], [2.0, 2.0]]  # as paused: never stepped again
    assert not batch.get(("next", "done"))[[1, 2]].any()
    collector.shutdown()
    assert not GymEnv("CartPole-v1", 2, seed=0, backend="sync").pause([0])  # other backends step on

    lengths = [3, 50, 3, 50]
    evaluated = GymEnv([lambda length=length: CountingEnv(episode_length=length) for length in lengths], 4, seed=0)
    evaluated.pause([1, 3])
    result = EvalCollector(evaluated, None, exploration_type="random").evaluate(rows=[0, 2])
    assert sorted(result.envs) == [0, 2] and result.lengths == [3, 3] and result.cut == 0


def test_an_evaluation_leaves_an_env_unstepped_once_its_episode_is_counted():
    """How far an eval env runs depends on its own episode alone (how often it is reset
    does too, so a batched sweep's member is evaluated as its solo run): the 3-step env
    steps to the end of the batch its episode ended in, not for as long as the 100-step
    one runs, and steps again at the next evaluation."""
    from rlcollect.collectors.evaluation import STEPS_PER_BATCH

    steps = [0, 0]

    class Counted(CountingEnv):
        def __init__(self, row: int, length: int) -> None:
            super().__init__(episode_length=length)
            self.row = row

        def step(self, action):
            steps[self.row] += 1
            return super().step(action)

    env = GymEnv([lambda: Counted(0, 3), lambda: Counted(1, 100)], 2, seed=0)
    evaluator = EvalCollector(env, None, exploration_type="random")
    for evaluation in (1, 2):
        result = evaluator.evaluate()
        assert sorted(result.lengths) == [3, 100] and result.cut == 0
        assert steps == [evaluation * STEPS_PER_BATCH, evaluation * 2 * STEPS_PER_BATCH]
    evaluator.shutdown()


@pytest.mark.parametrize("overrides", [[], ["env=cartpole_torch"], ["env.backend=vector"],
                                       pytest.param(["device=cuda"], marks=CUDA)],
                         ids=["cpu", "torch_env", "vector", "cuda"])
def test_each_member_draws_from_its_own_stream_as_its_solo_run(tmp_path, overrides):
    """Three members' first batches (sampled actions) and first updates (minibatch
    permutations) come from each member's own generator: each batch is its solo run's, bit
    for bit (its log-probs to rounding: the stacked tanh is numpy's), and each update its
    solo run's (to rounding); with the torch env, whose every
    member's envs reset from a generator of their own; with CartPole's vector backend,
    whose every env does; on CUDA too, where each member's generator is a CUDA generator
    seeded as its solo run seeds the device's."""
    from rlcollect.pipeline import build

    cfgs = configs(*[[*TINY, *overrides, f"seed={seed}"] for seed in (0, 1, 2)])
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in range(3)],
                        [dict(name=None, group=None, job_type=None)] * 3)
    batch = next(iter(sweep.collector))
    sweep.learner.learn(batch, 128)
    for member, cfg in enumerate(cfgs):
        solo = build(cfg, tmp_path / f"solo{member}")
        solo_batch = next(iter(solo.collector))
        mine = sweep.member_batch(batch, member)
        for key in ("observation", "action", ("next", "observation"), ("next", "done")):
            assert torch.equal(mine.get(key), solo_batch.get(key)), key
        torch.testing.assert_close(mine.get("action_log_prob"), solo_batch.get("action_log_prob"))
        solo.learner.learn(solo_batch, 128)
        state = member_state_dict(sweep.policy.stacked.state_dict(), solo.policy, member)
        for key, value in solo.policy.state_dict().items():
            torch.testing.assert_close(state[key], value, atol=1e-6, rtol=1e-5)
        solo.close()
    sweep.shutdown()


def test_non_finite_parameters_are_found_per_member_in_one_check(tmp_path):
    """The divergence check's parameter test: a solo policy with one NaN weight is not
    finite; in a sweep only the member whose rows hold it is, each member's Pipeline policy
    answering from the sweep's one check."""
    from rlcollect.pipeline.loop import parameters_finite

    solo = ActorCritic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,))
    assert parameters_finite(solo)
    with torch.no_grad():
        next(solo.parameters())[0, 0] = float("nan")
    assert not parameters_finite(solo)
    cfgs = configs(*[[*TINY, f"seed={seed}"] for seed in (0, 1, 2)])
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in range(3)],
                        [dict(name=None, group=None, job_type=None)] * 3)
    with torch.no_grad():
        list(sweep.policy.stacked.parameters())[-1][1].fill_(float("inf"))
    assert sweep.parameters_finite() == [True, False, True]
    assert [parameters_finite(pipeline.policy) for pipeline in sweep.pipelines] == [True, False, True]
    sweep.shutdown()


def test_stacked_layers_compute_each_member_with_its_own_weights():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(3, 5) for _ in range(4)]
    stacked = stack_modules([torch.nn.Sequential(layer, torch.nn.Tanh()) for layer in layers])
    assert isinstance(stacked[0], StackedLinear) and stacked[0].weight.shape == (4, 5, 3)
    x = torch.randn(4, 6, 2, 3)  # [S, N, extra, features]
    expected = torch.stack([torch.tanh(layer(row)) for layer, row in zip(layers, x)])
    torch.testing.assert_close(stacked(x), expected)
    one = stack_modules([torch.nn.Sequential(layers[0])])
    assert torch.equal(one(x[:1]), layers[0](x[:1]))  # one member: the very nn.Linear call
    solo = member_state_dict(stacked.state_dict(), torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh()), 2)
    assert torch.equal(solo["0.weight"], layers[2].weight) and torch.equal(solo["0.bias"], layers[2].bias)
    with pytest.raises(ConfigError, match="stacks policies of Linear, Conv2d, GRU and LSTM layers; the model's '1' "
                                          "is a LayerNorm"):
        stack_modules([torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.LayerNorm(5))])


@pytest.mark.parametrize("rows, features, out, bias", [(256, 64, 2, True), (256, 64, 1, True), (256, 4, 64, True),
                                                     (256, 64, 64, False), (10, 3136, 16, True)],
                         ids=["actor_head", "critic_head", "first_layer", "hidden_no_bias", "rows_under_inputs"])
def test_a_learning_stacked_layer_gets_the_gradients_of_its_batched_product(rows, features, out, bias):
    """A stacked layer that learns (StackedLinearFunction, several members) computes each
    member's output and its gradients (input, weight, bias) as autograd computes them for
    the layer's batched product, in whichever orientation its backward takes each product."""
    torch.manual_seed(0)
    members = 3
    weight, offset = torch.randn(members, out, features), torch.randn(members, out) if bias else None
    layer = StackedLinear(weight.clone(), None if offset is None else offset.clone())
    x, grad = torch.randn(members, rows, features, requires_grad=True), torch.randn(members, rows, out)
    y = layer(x)
    assert type(y.grad_fn).__name__ == "StackedLinearFunctionBackward"
    y.backward(grad)
    weight.requires_grad_()
    x_again = x.detach().clone().requires_grad_()
    expected = torch.bmm(x_again, weight.transpose(1, 2))
    if offset is not None:
        offset.requires_grad_()
        expected = expected + offset.unsqueeze(1)
    expected.backward(grad)
    tight = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y.detach(), expected.detach(), **tight)
    torch.testing.assert_close(x.grad, x_again.grad, **tight)
    torch.testing.assert_close(layer.weight.grad, weight.grad, **tight)
    assert layer.weight.grad.shape == (members, out, features) and layer.weight.grad.is_contiguous()
    if offset is not None:
        torch.testing.assert_close(layer.bias.grad, offset.grad, **tight)
    with torch.no_grad():  # acting: the batched product itself, no autograd node
        assert layer(x).grad_fn is None and torch.equal(layer(x), y.detach())


def test_a_model_of_several_members_computes_tanh_within_one_ulp_of_torch_and_its_gradient_from_its_output():
    """StackedTanh (several members, on a CPU): numpy's tanh, each float32 within one ulp of
    torch.tanh's, some of them not equal (else it would be torch's); its gradient is tanh's
    formula on its own output; half floats take torch's tanh as it is. One member keeps
    nn.Tanh (its solo run's call)."""
    two = stack_modules([torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh()) for _ in range(2)])
    one = stack_modules([torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh())])
    assert type(two[1]) is StackedTanh and type(one[1]) is torch.nn.Tanh
    torch.manual_seed(0)
    x = torch.cat([torch.randn(50_000) * scale for scale in (0.01, 1.0, 10.0)]).requires_grad_()
    y = two[1](x)
    ulps = (y.detach().view(torch.int32).long() - torch.tanh(x.detach()).view(torch.int32).long()).abs()
    assert ulps.max().item() == 1 and ulps.sum().item() > 0
    grad = torch.randn_like(x)
    y.backward(grad)
    assert torch.equal(x.grad, torch.ops.aten.tanh_backward(grad, y.detach()))  # torch's tanh gradient kernel
    torch.testing.assert_close(x.grad, grad * (1 - y.detach() ** 2))
    with torch.no_grad():
        assert torch.equal(two[1](x), y.detach())  # no graph: the same values
    half = torch.randn(64, dtype=torch.bfloat16)
    assert torch.equal(two[1](half), torch.tanh(half))


def test_members_clip_their_gradients_alone():
    grads = [torch.tensor([[3.0, 4.0], [0.3, 0.4]]), torch.tensor([[0.0], [0.0]])]
    parameters = [torch.zeros_like(grad, requires_grad=True) for grad in grads]
    for parameter, grad in zip(parameters, grads):
        parameter.grad = grad.clone()
    total = clip_member_grad_norms(parameters, 1.0, 2)
    torch.testing.assert_close(total, torch.tensor([5.0, 0.5]))
    torch.testing.assert_close(parameters[0].grad, torch.tensor([[0.6, 0.8], [0.3, 0.4]]), atol=1e-6, rtol=0)


def rollout_of(env_id: str, policy, num_envs: int, seeds, steps: int = 32) -> RolloutBuffer:
    from rlcollect.collectors.single import Collector

    env = GymEnv(env_id, num_envs, seed=seeds)
    buffer = RolloutBuffer(num_envs, steps, env.observation_space.shape, env.action_space.shape,
                           observation_dtype=torch.float32, action_dtype=torch.int64)
    collector = Collector(env, policy, frames_per_batch=num_envs * steps, total_frames=num_envs * steps)
    buffer.add(next(iter(collector)))
    collector.shutdown()
    return buffer


def cartpole_solos(seeds=(0, 1, 2)) -> list[ActorCritic]:
    """CartPole ActorCritics, each initialised as its solo run seeded ``seed`` initialises it."""
    space, actions = gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2)
    solos = []
    for seed in seeds:
        torch.manual_seed(seed)
        solos.append(ActorCritic(space, actions))
    return solos


def assert_members_update_as_solo_runs(options: dict, own: dict[str, list] | None = None,
                                       own_streams: bool = False) -> None:
    """Three members' MemberPPO update (PPO ``options``, each member's ``own`` settings) on
    a CartPole rollout equals each solo PPO's update with its own settings on its 4 rows:
    advantages, metrics and weights. ``own_streams``: each member draws its minibatch
    permutations from a generator of its own, seeded as its solo run's torch is seeded, so
    that the minibatches are its solo run's, and so is where its stream stands after the
    update (a member that trains fewer epochs draws no permutation for the others')."""
    solos = cartpole_solos()
    generators = [torch.Generator() for _ in solos] if own_streams else None
    members = MemberPolicy(stack_modules(solos), 3, generators)
    buffer = rollout_of("CartPole-v1", members, 12, member_env_seeds([0, 1, 2], 4))
    rows = buffer.rollout.clone()
    for member, generator in enumerate(generators or []):
        generator.manual_seed(100 + member)
    member_metrics = MemberPPO(members, member_options=own, **options).update(buffer, 1_000)
    for member, solo in enumerate(solos):
        solo_buffer = RolloutBuffer(4, 32, (4,), (), observation_dtype=torch.float32, action_dtype=torch.int64)
        solo_buffer.rollout.update(rows[member * 4:(member + 1) * 4].clone())
        solo_buffer.add(solo_buffer.rollout)
        settings = {key: values[member] for key, values in (own or {}).items()}
        if own_streams:
            torch.manual_seed(100 + member)
        metrics = PPO(solo, **{**options, **settings}).update(solo_buffer, 1_000)
        if own_streams:
            assert torch.equal(generators[member].get_state(), torch.get_rng_state())
        advantage = buffer.rollout.get("advantage")[member * 4:(member + 1) * 4]
        torch.testing.assert_close(advantage, solo_buffer.rollout.get("advantage"), atol=1e-6, rtol=1e-5)
        assert set(metrics) == set(member_metrics[member])
        for key, value in metrics.items():
            assert member_metrics[member][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
        state = member_state_dict(members.stacked.state_dict(), solo, member)
        for key, value in solo.state_dict().items():
            torch.testing.assert_close(state[key], value, atol=1e-5, rtol=1e-4)


def test_three_members_update_as_three_solo_runs():
    """One minibatch of the whole rollout (the order no longer matters but for rounding):
    each member's update equals its solo PPO update on its rows."""
    assert_members_update_as_solo_runs(dict(epochs=2, minibatch_size=4 * 32, total_frames=10_000, max_grad_norm=0.1))


def test_members_with_settings_of_their_own_update_as_their_solo_runs():
    """lr, clip range, loss weights and gradient-norm cap per member (MEMBER_OPTIONS): each
    member's update is its solo PPO's with its own values."""
    own = {"lr": [3e-4, 1e-3, 3e-3], "clip_epsilon": [0.1, 0.2, 0.3], "entropy_coef": [0.0, 0.01, 0.1],
           "value_coef": [0.5, 1.0, 0.25], "max_grad_norm": [0.1, 0.5, 10.0]}
    assert_members_update_as_solo_runs(dict(epochs=2, minibatch_size=4 * 32, total_frames=10_000, anneal_clip=True),
                                       own)


@pytest.mark.parametrize("own", [{"gae_lambda": [0.8, 0.92, 0.95]}, {"epochs": [2, 3, 1]},
                                 {"epochs": [2, 3, 1], "gae_lambda": [0.8, 0.92, 0.95], "lr": [3e-4, 1e-3, 3e-3],
                                  "clip_epsilon": [0.1, 0.2, 0.3], "entropy_coef": [0.0, 0.01, 0.1]},
                                 {"minibatch_size": [32, 48, 128]},
                                 {"minibatch_size": [48, 1, 128], "epochs": [2, 1, 3]}],
                         ids=["gae_lambda", "epochs", "all", "minibatch_size", "minibatch_size_epochs"])
def test_members_with_lambdas_and_epochs_of_their_own_update_as_their_solo_runs(own):
    """GAE lambda, epochs and minibatch size per member, each member's permutations from its
    own stream: a member with fewer epochs sits out the later ones (no permutation drawn, no
    Adam step: MemberAdam's step count is its own), a member with fewer minibatches an epoch
    sits out the later steps, its minibatches padded to the widest (48 of 128 steps: 48, 48
    and 32, padded by repetition; 1: no advantage normalisation) and its means over its
    real samples alone; its metrics are the mean over its own steps."""
    assert_members_update_as_solo_runs(dict(epochs=2, minibatch_size=32, total_frames=10_000), own, own_streams=True)


def test_per_row_gae_lambdas_give_each_member_its_solo_advantages_bit_for_bit():
    """generalized_advantage_estimate with one lambda per row (float64, as MemberPPO gives
    them): each member's rows are a solo call with its lambda as a float, to the bit.
    Rounding gamma and lambda to float32 before their product would not be: for 0.8 and
    0.92 with gamma 0.98 that product differs from the double one rounded once."""
    import numpy as np

    from rlcollect.algos.gae import generalized_advantage_estimate

    torch.manual_seed(0)
    rows, steps, gamma, lambdas = 4, 32, 0.98, [0.8, 0.92, 0.95]
    assert np.float32(gamma) * np.float32(0.8) != np.float32(gamma * 0.8)
    reward, value, next_value = (torch.randn(3 * rows, steps) for _ in range(3))
    terminated = torch.rand(3 * rows, steps) < 0.05
    done = terminated | (torch.rand(3 * rows, steps) < 0.05)
    per_row = torch.tensor(lambdas, dtype=torch.float64).repeat_interleave(rows)
    advantage, target = generalized_advantage_estimate(reward, value, next_value, terminated, done, gamma=gamma,
                                                       gae_lambda=per_row)
    for member, lam in enumerate(lambdas):
        mine = slice(member * rows, (member + 1) * rows)
        solo = generalized_advantage_estimate(reward[mine], value[mine], next_value[mine], terminated[mine],
                                              done[mine], gamma=gamma, gae_lambda=lam)
        assert torch.equal(advantage[mine], solo[0]) and torch.equal(target[mine], solo[1])


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """A float32 tensor's bits (equal bits: the same value, a zero's sign included)."""
    return tensor.detach().contiguous().view(torch.int32)


def test_member_adam_moves_only_the_members_that_step_each_as_torch_adam_on_its_slice():
    """MemberAdam over stacked parameters: members masked out keep parameters, moments and
    step count to the bit; a member that steps (alone or with others, at its own lr and
    its own step count) is torch.optim.Adam on its slice, to the bit; its state dict is
    that Adam's."""
    from rlcollect.sweeps.optim import MemberAdam

    torch.manual_seed(0)
    shapes = [(8, 4), (8,), (2, 8), (2,), (1, 1, 3)]
    stacked = [torch.randn(3, *shape, requires_grad=True) for shape in shapes]
    with torch.no_grad():
        stacked[1][2, 0] = -0.0  # a signed zero in a member that sits out: kept as it is
    solos = [[parameter[member].detach().clone().requires_grad_(True) for parameter in stacked] for member in range(3)]
    lrs = [3e-4, 1e-3, 3e-3]
    adam = MemberAdam(stacked, 3, lr=lrs, eps=1e-5)
    adams = [torch.optim.Adam(solo, lr=lr, eps=1e-5) for solo, lr in zip(solos, lrs)]
    for round_, members in enumerate([None, [1], [0, 1], None, [1], [], [0, 2], [2]] * 2):
        grads = [torch.randn(3, *shape) for shape in shapes]
        scale = 0.9 ** round_  # an annealed lr
        adam.set_lrs([lr * scale for lr in lrs])
        for solo_adam, lr in zip(adams, lrs):
            for group in solo_adam.param_groups:
                group["lr"] = lr * scale
        for parameter, grad in zip(stacked, grads):
            parameter.grad = grad.clone()
        before = [bits(value) for value in (*stacked, adam.exp_avg, adam.exp_avg_sq)]
        steps = list(adam.steps)
        adam.step(members)
        stepping = range(3) if members is None else members
        for member in set(range(3)) - set(stepping):  # sat out: not a bit moved
            assert adam.steps[member] == steps[member]
            after = [bits(value) for value in (*stacked, adam.exp_avg, adam.exp_avg_sq)]
            assert all(torch.equal(old[member], new[member]) for old, new in zip(before, after))
        for member in stepping:
            for solo, grad in zip(solos[member], grads):
                solo.grad = grad[member].clone()
            adams[member].step()
    assert adam.steps == [8, 10, 8]
    for member in range(3):
        for parameter, solo in zip(stacked, solos[member]):
            assert torch.equal(bits(parameter[member]), bits(solo))
        mine, theirs = adam.member_state_dict(member, solos[member], adams[member].state_dict()["param_groups"]), \
            adams[member].state_dict()
        assert mine["param_groups"] == theirs["param_groups"] and mine["state"].keys() == theirs["state"].keys()
        for index, entry in theirs["state"].items():
            assert entry.keys() == mine["state"][index].keys()
            assert all(torch.equal(value, mine["state"][index][key]) for key, value in entry.items())


@pytest.mark.timeout(30)
def test_frozen_rows_come_back_and_the_learning_rows_stay_bit_for_bit_whatever_the_frozen_hold():
    """After torch's Adam moved every row, the frozen member's rows are its kept values again;
    the learning members' rows are left exactly as the step made them (a zero's sign, a
    non-finite value), even where the frozen member's kept values are not finite (a
    diverged SAC member's critics): they reach no other member's rows."""
    from rlcollect.sweeps.optim import FrozenRows

    weight = torch.tensor([[[1.0, -0.0], [0.0, 3.0]], [[float("inf"), float("nan")], [-2.0, 5.0]],
                           [[-0.0, -7.0], [float("-inf"), 0.5]]])
    bias = torch.tensor([[0.25, -0.0], [float("nan"), 1.0], [-0.0, 2.0]])
    frozen = FrozenRows(3)
    frozen.freeze([weight, bias], 1)  # member 1 keeps its non-finite values
    kept = [weight[1].clone(), bias[1].clone()]
    stepped = [value.clone() for value in (weight, bias)]
    stepped[0][1] = 9.0  # Adam moved the frozen member's rows
    stepped[1][1] = -9.0
    before = [value.clone() for value in stepped]
    frozen.restore(stepped)
    for after, was, kept_rows in zip(stepped, before, kept):
        assert torch.equal(after[[0, 2]].view(torch.int32), was[[0, 2]].view(torch.int32))  # bits, signs of zero too
        finite = kept_rows.isfinite()
        assert torch.equal(after[1][finite], kept_rows[finite])


@pytest.mark.parametrize("own", [{"clip_epsilon": [0.1, 0.2, 0.3]},
                                 {"lr": [1e-3, 3e-4, 3e-3], "clip_epsilon": [0.1, 0.2, 0.3]},
                                 {"epochs": [2, 3, 1], "gae_lambda": [0.8, 0.9, 0.95]}],
                         ids=["fused_adam", "member_adam", "member_adam_epochs"])
def test_a_frozen_member_costs_no_update_and_the_others_update_as_before(own):
    options = dict(epochs=2, minibatch_size=4 * 32, total_frames=10_000, member_options=own)
    policies = [MemberPolicy(stack_modules(cartpole_solos()), 3) for _ in range(2)]
    buffer = rollout_of("CartPole-v1", policies[0], 12, member_env_seeds([0, 1, 2], 4))
    rows = buffer.rollout.clone()
    before = {key: value.clone() for key, value in policies[1].stacked.state_dict().items()}
    every = MemberPPO(policies[0], **options).update(buffer, 1_000)
    some = MemberPPO(policies[1], **options)
    some.freeze(1)
    buffer.rollout.update(rows)
    buffer.add(buffer.rollout)
    metrics = some.update(buffer, 1_000)
    for key, value in policies[1].stacked.state_dict().items():
        torch.testing.assert_close(value[1], before[key][1], atol=0, rtol=0)  # frozen: as it was
        for member in (0, 2):
            torch.testing.assert_close(value[member], policies[0].stacked.state_dict()[key][member], atol=1e-6,
                                       rtol=1e-5)
    assert metrics[1]["loss_value"] == 0.0
    assert metrics[2]["loss_value"] == pytest.approx(every[2]["loss_value"], rel=1e-5)


@pytest.mark.parametrize("members", [[0, 2], [1]], ids=["two_of_three", "one_of_three"])
def test_some_members_compute_and_learn_as_their_rows_given_to_functional_call(members):
    from tensordict import TensorDict

    from rlcollect.sweeps.stacking import SomeMembers

    class Evaluating(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, minibatch):
            return self.module.evaluate(minibatch)

    stacked = stack_modules(cartpole_solos())
    learning = torch.tensor(members)
    torch.manual_seed(5)
    minibatch = TensorDict({"observation": torch.randn(len(members), 16, 4),
                            "action": torch.randint(0, 2, (len(members), 16))}, [len(members), 16])
    results = []
    for call in ("functional_call", "SomeMembers"):
        stacked.zero_grad(set_to_none=True)
        if call == "functional_call":
            rows = {f"module.{name}": value.index_select(0, learning) for name, value in stacked.named_parameters()}
            outputs = torch.func.functional_call(Evaluating(stacked), rows, (minibatch,))
        else:
            outputs = SomeMembers(stacked)(learning, "evaluate", minibatch)
        sum(output.sum() for output in outputs).backward()
        results.append((outputs, [parameter.grad.clone() for parameter in stacked.parameters()]))
    (expected, expected_grads), (outputs, grads) = results
    assert all(torch.equal(a, b) for a, b in zip(outputs, expected))
    assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads))
    others = [member for member in range(3) if member not in members]
    assert all(torch.count_nonzero(grad[others]) == 0 for grad in grads)  # the others' rows get no gradient


@pytest.mark.parametrize("members", [3, 1])
def test_a_stacked_layer_without_gradients_computes_with_its_parameters_as_they_are_now(members):
    torch.manual_seed(0)
    layer = stack_modules([torch.nn.Sequential(torch.nn.Linear(4, 5)) for _ in range(members)])[0]
    x = torch.randn(members, 6, 4)

    def agree() -> torch.Tensor:
        with torch.no_grad():
            acting = layer(x)
        torch.testing.assert_close(acting, layer(x), atol=0, rtol=0)  # as the learning call computes it
        return acting

    first = agree()
    with torch.no_grad():
        layer.weight.add_(1.0)  # an optimizer's step: in place
    assert not torch.equal(agree(), first)
    layer.double()  # parameters replaced by tensors of another dtype
    x = x.double()
    assert agree().dtype == torch.float64
    layer.load_state_dict({"weight": torch.zeros(members, 5, 4), "bias": torch.ones(members, 5)})
    assert torch.equal(agree(), torch.ones(members, 6, 5, dtype=torch.float64))


def test_an_evaluation_result_names_each_episodes_env():
    """Env row i's episode is the one a one-env evaluation seeded seed + i plays."""
    env = GymEnv("CartPole-v1", 3, seed=5)
    torch.manual_seed(0)
    policy = ActorCritic(env.observation_space, env.action_space, hidden_sizes=(8,))
    result = EvalCollector(env, policy).evaluate()
    assert sorted(result.envs) == [0, 1, 2]
    for row, length in zip(result.envs, result.lengths):
        alone = EvalCollector(GymEnv("CartPole-v1", 1, seed=5 + row), policy).evaluate()
        assert alone.lengths == [length] and alone.envs == [0]


# ---------------------------------------------------------------------------- what batches
def test_only_runs_that_differ_in_seed_batch():
    same = configs(["seed=0"], ["seed=1"])
    check_sweep(same)
    check_sweep(configs(["seed=0"], ["seed=1", "algo.lr=0.000123", "algo.entropy_coef=0.01", "algo.gae_lambda=0.9",
                                     "algo.epochs=3"]))
    check_sweep(configs(["seed=0"], ["seed=1", "algo.minibatch_size=128"]))
    with pytest.raises(ConfigError, match="differ only in seed and algo.lr, algo.entropy_coef"):
        check_sweep(configs(["seed=0"], ["seed=1", "algo.gamma=0.9"]))
    check_sweep(configs(["algo=dqn", "seed=0"]))  # in lockstep (tests/test_lockstep.py)
    with pytest.raises(ConfigError, match="collector=multisync"):
        check_sweep(configs(["collector=multisync", "seed=0"]))
    check_sweep(configs(["env.backend=vector", "seed=0"], ["env.backend=vector", "seed=1"]))  # CartPole's: per env
    with pytest.raises(ConfigError, match="env.backend=vector: a batched sweep seeds each env itself"):
        check_sweep(configs(["env.backend=vector", "env.id=phys2d/CartPole-v1", "seed=0"]))


def test_the_launcher_groups_jobs_by_their_configs_without_seed():
    from rlcollect.commands.batched_launch import group_jobs

    jobs = configs(["seed=0"], ["seed=1"], ["seed=0", "algo.gamma=0.9"],
                   ["seed=2", "algo.lr=0.000123", "algo.epochs=3", "algo.gae_lambda=0.9", "algo.minibatch_size=128"],
                   ["seed=1", "algo.gamma=0.9"])
    # algo.lr, epochs, gae_lambda and minibatch_size may differ inside a model, algo.gamma may not
    assert group_jobs(jobs) == [[0, 1, 3], [2, 4]]
    options = member_options([jobs[0], jobs[3]])  # what the members of one model differ in: the integers as ints
    assert options == {"lr": [0.001, 0.000123], "gae_lambda": [0.8, 0.9], "epochs": [20, 3],
                       "minibatch_size": [256, 128]}
    assert all(isinstance(value, int) for key in ("epochs", "minibatch_size") for value in options[key])
    assert group_jobs(jobs, max_members=2) == [[0, 1], [3], [2, 4]]


def test_a_model_splits_into_shares_of_consecutive_members():
    from rlcollect.commands.batched_launch import shares

    assert shares(8, 2) == [range(0, 4), range(4, 8)]
    assert shares(5, 2) == [range(0, 2), range(2, 5)]
    assert shares(2, 4) == [range(0, 1), range(1, 2)]
    assert shares(3, 1) == [range(0, 3)]


@pytest.mark.parametrize("option, line", [
    ("hydra.launcher.processes=0", "invalid configuration: hydra.launcher.processes must be a positive int, got 0"),
    ("hydra.launcher.max_members=abc",
     "invalid configuration: hydra.launcher.max_members must be None or a positive int, got 'abc'"),
    # found once Hydra wrote the sweep's multirun.yaml: removed, with the folders the command made
    ("sed=3,4", "invalid override sed: Key 'sed' not in 'TrainConfig' (did you mean seed?)"),
    ("hydra.launcher.pbt.every_frames=256",
     "invalid configuration: hydra.launcher.pbt: jobs #0, #1: the members differ in no float setting (algo.lr, "
     "algo.entropy_coef, algo.clip_epsilon, algo.value_coef, algo.max_grad_norm, algo.gae_lambda), and "
     "population-based training explores those they differ in: sweep over one too (e.g. "
     "'algo.lr=0.0003,0.001,0.003')"),
])
def test_a_bad_launcher_option_is_one_line_exit_2_before_any_job(tmp_path, option, line):
    """Refused before any job started: one line, exit 2, and no folder left to read as a
    sweep (nor a multirun.yaml in a folder that was there, its files as they were)."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    results = cli_all(tmp_path, [["train", "--multirun", "seed=0,1", "hydra/launcher=batched", option, "logger=none",
                                  f"hydra.sweep.dir={folder}"] for folder in ("runs/sweep", "notes")])
    for result in results:
        assert result.returncode == 2
        assert result.stderr.splitlines() == [f"rlcollect train: {line}"]
    assert sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*")) == ["notes", "notes/todo.txt"]


def test_hydra_s_joblib_launcher_with_no_jobs_at_a_time_is_one_line_exit_2(tmp_path):
    """joblib takes n_jobs=0 and fails with its own traceback once the sweep starts, after
    Hydra wrote the sweep's multirun.yaml: refused before, nothing left."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    result = cli(tmp_path, "train", "--multirun", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0",
                 "logger=none", "hydra.sweep.dir=runs/sweep")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["rlcollect train: invalid configuration: hydra.launcher.n_jobs=0: the jobs "
                                          "joblib runs at a time: a positive int, or -1 for one per CPU"]
    assert not (tmp_path / "runs").exists()


def tens(members: list[int], share: int) -> list[int]:
    return [member * 10 + share for member in members]


def in_a_child(then):
    """A share's training that does ``then`` in a forked process and trains in the parent."""
    import multiprocessing

    def train(members: list[int], share: int) -> list[int]:
        if multiprocessing.parent_process() is not None:
            then()
        return tens(members, share)
    return train


def stop_130():
    raise SystemExit(130)


def fail():
    raise ValueError("a bug in a share")


@pytest.mark.timeout(60)
def test_a_job_differing_only_in_seed_is_an_earlier_job_reseeded_as_composing_it_would_give(tmp_path, monkeypatch):
    """ComposeOnce composes a sweep over seeds once: jobs 2 and 3 (seed=1, seed=12) are job
    1's config copied, equal to what Hydra composes for them, Hydra's own node included; a
    job that differs in another key, or whose seed is not a plain int, is composed."""
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict

    from rlcollect.commands.batched_launch import ComposeOnce, seed_override

    assert seed_override(["seed=3", "total_frames=64"]) == (0, 3)
    for overrides in (["seed=1,2"], ["+seed=1"], ["seed=a"], ["seed=true"], ["total_frames=64"], ["seed=1", "seed=2"]):
        assert seed_override(overrides) is None, overrides
    monkeypatch.chdir(tmp_path)
    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        assert isinstance(GlobalHydra.instance().hydra, Hydra)
        master = loader.load_configuration("train", overrides=["env.num_envs=2"], run_mode=RunMode.MULTIRUN)
        once = ComposeOnce(loader)
        compositions = []
        compose_job = loader.load_sweep_config
        monkeypatch.setattr(loader, "load_sweep_config",
                            lambda *args: compositions.append(args[1]) or compose_job(*args))
        jobs = [["total_frames=64", "seed=0"], ["total_frames=64", "seed=1"], ["total_frames=64", "seed=12"],
                ["total_frames=128", "seed=1"], ["total_frames=64", "seed='7'"]]
        fast = [once.load_sweep_config(master, job) for job in jobs]
        assert compositions == [jobs[0], jobs[3], jobs[4]]
        for job, config in zip(jobs, fast):
            assert once.take(master, job) is config
            composed = compose_job(master, job)
            assert OmegaConf.to_yaml(config) == OmegaConf.to_yaml(composed), job
            assert config.hydra.job.override_dirname == composed.hydra.job.override_dirname
        assert (fast[2].seed, fast[2].hydra.job.override_dirname) == (12, "seed=12,total_frames=64")
        assert fast[1] is not fast[0] and fast[0].seed == 0
        with open_dict(fast[0]):  # what the launcher and run_job write into a job's config once it runs
            fast[0].hydra.job.num = fast[0].hydra.job.id = 7
            fast[0].hydra.runtime.output_dir = str(tmp_path / "job0")
        later = ["total_frames=64", "seed=5"]  # a later batch (a sweeper that launches batch by batch)
        assert OmegaConf.to_yaml(once.load_sweep_config(master, later)) == OmegaConf.to_yaml(compose_job(master, later))
        assert compositions == [jobs[0], jobs[3], jobs[4]]


def test_shares_train_in_processes_of_their_own_and_report_how_each_ended(capsys, tmp_path, monkeypatch):
    """train_shares forks a process per share past the first: the values come back in
    member order; a share stopped by a signal stops the command with its code once all
    ended; an error in a share is raised as rlcollect's bug; a share whose process died
    is reported in one line naming its jobs, and the sweep's resume in another."""
    from rlcollect.commands.batched_launch import train_shares
    from rlcollect.commands.jobs import Job

    assert train_shares(tens, [0, 1, 2, 3, 4], 3) == [0, 11, 21, 32, 42]  # shares [0], [1, 2], [3, 4]
    with pytest.raises(SystemExit) as stopped:
        train_shares(in_a_child(stop_130), [0, 1, 2, 3], 2)
    assert stopped.value.code == 130
    with pytest.raises(RuntimeError, match="a bug in rlcollect") as failed:
        train_shares(in_a_child(fail), [0, 1], 2)
    assert "ValueError: a bug in a share" in str(failed.value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "multirun.yaml").write_text("hydra: {}\n")
    members = [(None, Job(tmp_path / "sw" / f"{number}_seed={number}", True, [], []), {}, number)
               for number in (4, 5, 6)]

    def died_in_a_child(members: list, share: int) -> list[int]:
        return in_a_child(lambda: os._exit(9))([member[3] for member in members], share)

    with pytest.raises(SystemExit) as died:
        train_shares(died_in_a_child, members, 2)
    assert died.value.code == 1
    assert capsys.readouterr().err.splitlines()[-2:] == [
        "rlcollect train: the process training jobs #5, #6 of a batched model ended with exit code 9; their folders "
        "hold what it wrote, to their last checkpoints",
        "rlcollect train: or continue every member of the sweep as it trained: `rlcollect train resume=sw`"]


# ---------------------------------------------------------------------------- from the command line
@pytest.mark.timeout(300)
@pytest.mark.parametrize("overrides", [[], ["experiment=mujoco_ppo", "env=pendulum", "collector.frames_per_batch=256",
                                            "algo.minibatch_size=64", "eval.every_frames=256"],
                                       ["env.id=rlcollect-test/Spaces-dict-box-v0", "env.solved_return=null"],
                                       pytest.param(["env=cartpole_torch", "device=cuda"], marks=CUDA)],
                         ids=["cartpole", "normalized_continuous", "multi_input", "cuda"])
def test_one_member_is_its_solo_run_bit_for_bit(tmp_path, overrides):
    """A sweep of one member (build_sweep, run): the same metrics, evaluations, summary and
    checkpoint as the solo run (pipeline.build, run), for CartPole, for a Gaussian policy
    with normalize_observation and normalize_reward, and for Dict observations through the
    multi-input encoder (its entries one-hot or flattened: it stacks)."""
    from rlcollect.pipeline import build, run

    [cfg] = configs([*TINY, *overrides, "seed=3"])
    sweep = build_sweep([cfg], [tmp_path / "member"], [dict(name=None, group=None, job_type=None)])
    assert type(sweep.policy).__name__ == "MemberPolicy"  # stacked
    solo = build(cfg, tmp_path / "solo")
    run(solo)
    sweep.run()
    member, alone = tmp_path / "member", tmp_path / "solo"
    assert metric_rows(member) == metric_rows(alone)
    assert len(metric_rows(alone)) >= 4 and "train/loss_value" in metric_rows(alone)[-1]
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (member, alone)]
    for key in ("status", "frames", "final_eval_return", "best_eval_return", "frames_to_solve", "checkpoint_frames"):
        assert summaries[0][key] == summaries[1][key], key
    checkpoints = [load_checkpoint(folder / "checkpoint.pt") for folder in (member, alone)]
    for key, value in checkpoints[1]["policy"].items():
        assert torch.equal(checkpoints[0]["policy"][key], value), key
    adam = [checkpoint["learner"]["ppo"]["optimizer"]["state"] for checkpoint in checkpoints]
    assert all(torch.equal(adam[0][index]["exp_avg_sq"], adam[1][index]["exp_avg_sq"]) for index in adam[1])
    assert torch.equal(checkpoints[0]["rng"]["torch"], checkpoints[1]["rng"]["torch"])  # its own stream, as far


@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_members_are_runs_of_their_own_that_eval_resume_and_compare_read(tmp_path):
    """Three seeds and a DQN job: the seeds train as one model (one line says so), the DQN job
    alone; each member's folder is a solo run's (config with its seed, metrics, summary,
    checkpoints in solo shapes); eval, resume of one member alone and compare read them."""
    with_wandb = [override for override in TINY if override != "logger=none"]  # offline W&B runs, read back below
    result = cli(tmp_path, "train", "--multirun", "seed=0,1,2", "hydra/launcher=batched", *with_wandb,
                 "hydra.launcher.processes=2", "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert "jobs #0, #1, #2 train as 2 batched models (1 + 2 members), each in a process of its own" in \
        result.stdout + result.stderr
    members = job_dirs(tmp_path / "sw")
    assert len(members) == 3
    returns = []
    for seed, member in enumerate(members):
        summary = json.loads((member / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["frames"] == 1024 and summary["checkpoint_frames"] == 1024
        assert "seed: %d" % seed in (member / "config.yaml").read_text()
        rows = metric_rows(member)
        assert [row["step"] for row in rows if "eval/episode_return" in row] == [256, 512, 768, 1024]
        checkpoint = load_checkpoint(member / "checkpoint.pt")
        assert checkpoint["frames"] == 1024 and checkpoint["collector"]["frames"] == 1024
        assert checkpoint["policy"]["actor.0.weight"].shape == (64, 4)
        assert checkpoint["policy"]["log_std" if "log_std" in checkpoint["policy"] else "actor.4.bias"].dim() == 1
        returns.append(summary["final_eval_return"])
        [offline] = (member / "wandb").glob("offline-run-*")
        run = read_offline_run(offline)
        assert run.finished and run.exit_code == 0 and run.group == "sw" and run.job_type == "sync"
        assert run.name == member.name.split("_", 1)[1] and run.config["seed"] == seed
        assert [row["_step"] for row in run.history if "eval/episode_return" in row] == [256, 512, 768, 1024]
    assert len(set(returns)) > 1  # three seeds, three runs
    # members 1 and 2 are one model: they share its clock (the same time/ entries at every step), its
    # update charged to train and its evaluation to eval
    clocks = [[{key: value for key, value in json.loads(line).items() if key.startswith("time/")}
               for line in (member / "metrics.jsonl").read_text().splitlines()] for member in members[1:]]
    assert clocks[0] == clocks[1] and clocks[0][-1]["time/train"] > 0 and clocks[0][-1]["time/eval"] > 0
    member = str(members[1])
    evaluated, exported = cli_all(tmp_path, [["eval", member, "--episodes", "2", "--format", "json"],
                                             ["export", member, "--format", "torchscript", "--out", "member.pt"]])
    assert evaluated.returncode == 0, evaluated.stderr
    assert exported.returncode == 0, exported.stderr
    scripted = torch.jit.load(str(tmp_path / "member.pt"))
    observation = torch.tensor([[0.01, -0.02, 0.03, 0.04]])
    torch.manual_seed(0)
    solo = ActorCritic(gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2))
    solo.load_state_dict(load_checkpoint(members[1] / "checkpoint.pt")["policy"])
    action, head = scripted(observation)
    assert torch.equal(head, solo.actor(observation)) and action.tolist() == head.argmax(-1).tolist()
    resumed = cli(tmp_path, "train", f"resume={members[1]}", "total_frames=1280")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((members[1] / "summary.json").read_text())["frames"] == 1280
    assert json.loads((members[0] / "summary.json").read_text())["frames"] == 1024
    compared = cli(tmp_path, "compare", "sw")
    assert compared.returncode == 0, compared.stderr


@pytest.mark.timeout(300)
def test_jobs_that_cannot_batch_run_one_by_one(tmp_path):
    result = cli(tmp_path, "train", "--multirun", "seed=0,1", "eval.max_trajectories=2", "hydra/launcher=batched",
                 "total_frames=256", "collector.frames_per_batch=64", "env.num_envs=2", "eval.every_frames=256",
                 "eval.episodes=2", "progress=false", "logger=none", "algo.minibatch_size=32", "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert ("jobs #0, #1 run one by one: eval.max_trajectories: a batched sweep evaluates one episode per eval env"
            in result.stdout + result.stderr)
    jobs = job_dirs(tmp_path / "sw")
    assert [json.loads((job / "summary.json").read_text())["status"] for job in jobs] == ["finished", "finished"]
    assert "#1 : seed=1" in result.stdout and "#1 : " not in (jobs[0] / "train.log").read_text()  # not job 0's line


@pytest.mark.timeout(300)
def test_ctrl_c_stops_every_member_after_the_batch_and_each_resumes_alone(tmp_path):
    """SIGINT to the command's process group (Ctrl-C), three members trained as two shares
    in two processes: every member ends its batch, checkpoints and says how to continue;
    exit 130 once both shares have ended. A member resumed alone goes on from its
    checkpoint with no row twice."""
    process = start_rlcollect(tmp_path, "train", "--multirun", "seed=0,1,2", "hydra/launcher=batched",
                              "hydra.launcher.processes=2", "logger=none", "progress=false", "total_frames=10000000",
                              "env.solved_return=100000", "env.num_envs=4", "collector.frames_per_batch=128",
                              "algo.minibatch_size=64", "hydra.sweep.dir=sw", start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "sw").glob("*/metrics.jsonl"))) < 3 or not all(
            path.read_text().count("\n") >= 2 for path in (tmp_path / "sw").glob("*/metrics.jsonl")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: every process of the group
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.count("interrupted at frame") == 3
    assert stderr.count("or continue every member of the sweep as it trained: `rlcollect train resume=sw`") == 1
    members = job_dirs(tmp_path / "sw")
    summaries = [json.loads((member / "summary.json").read_text()) for member in members]
    assert [summary["status"] for summary in summaries] == ["interrupted"] * 3
    assert summaries[1]["frames"] == summaries[2]["frames"]  # one model: members 1 and 2 (the second share)
    for member, summary in zip(members, summaries):
        assert summary["frames"] % 128 == 0
        assert load_checkpoint(member / "checkpoint.pt")["frames"] == summary["frames"]
        assert f"rlcollect train resume={member.relative_to(tmp_path)}" in stderr
    frames = summaries[1]["frames"]
    resumed = cli(tmp_path, "train", f"resume={members[1]}", f"total_frames={frames + 256}")
    assert resumed.returncode == 0, resumed.stderr
    steps = [row["step"] for row in metric_rows(members[1])]
    assert steps == list(range(128, frames + 256 + 1, 128))


def test_a_stop_landing_between_two_members_stops_every_member_of_the_model_after_the_same_batch(tmp_path):
    """A stop (the first Ctrl-C) asked for while the members finish their batch one after
    the other, here as member 1 logs its second batch (member 0 has gone on past it): both
    members end the next batch as interrupted, with the same frames, rows and checkpoint
    frames."""
    cfgs = configs([*TINY, "seed=0", "env.solved_return=null"], [*TINY, "seed=1", "env.solved_return=null"])
    sweep = build_sweep(cfgs, [tmp_path / "m0", tmp_path / "m1"], [dict(name=None, group=None, job_type=None)] * 2)
    stop, logger = threading.Event(), sweep.pipelines[1].logger
    log = logger.log

    def log_then_signal(metrics, step=None, **kwargs):
        log(metrics, step=step, **kwargs)
        if step == 256:  # the signal lands between the two members' checks of it
            stop.set()

    logger.log = log_then_signal
    sweep.run(stop=stop)
    summaries = [json.loads((tmp_path / f"m{seed}" / "summary.json").read_text()) for seed in (0, 1)]
    assert [(summary["status"], summary["frames"]) for summary in summaries] == [("interrupted", 384)] * 2
    assert [row["step"] for row in metric_rows(tmp_path / "m0")] == [row["step"] for row in
                                                                     metric_rows(tmp_path / "m1")] == [128, 256, 384]
    assert [load_checkpoint(tmp_path / f"m{seed}" / "checkpoint.pt")["frames"] for seed in (0, 1)] == [384, 384]


def processes_in_group(group: int) -> list[int]:
    """The live processes (zombies left out) of process group ``group``, read from /proc."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        state, _, process_group = stat.rsplit(")", 1)[1].split()[:3]
        if int(process_group) == group and state != "Z":
            found.append(int(pid))
    return found


@pytest.mark.timeout(300)
def test_no_process_of_a_batched_sweep_outlives_its_launcher_killed_with_sigkill(tmp_path):
    """kill -9 of the command while two shares train (the second in a forked process, each
    with envs in processes of their own: env.backend=async): the forked share ends with it,
    and so do the envs' processes."""
    process = start_rlcollect(tmp_path, "train", "--multirun", "seed=0,1", "hydra/launcher=batched",
                              "hydra.launcher.processes=2", "env.backend=async", "env.num_envs=2", "eval.episodes=2",
                              "logger=none", "progress=false", "total_frames=10000000", "env.solved_return=100000",
                              "collector.frames_per_batch=64", "algo.minibatch_size=64", "hydra.sweep.dir=sw",
                              start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "sw").glob("*/metrics.jsonl"))) < 2 or not all(
            path.read_text().count("\n") >= 1 for path in (tmp_path / "sw").glob("*/metrics.jsonl")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    assert len(processes_in_group(process.pid)) > 2  # the command, the second share, the envs' processes
    process.kill()
    process.wait()
    deadline = time.monotonic() + 60
    while processes_in_group(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = processes_in_group(process.pid)
    for pid in left:  # not to leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, "processes of the sweep outlived it"


# ---------------------------------------------------------------------------- a member's failure
@pytest.mark.timeout(300)
def test_a_diverged_member_fails_alone_and_the_others_train_as_before(tmp_path):
    """Member 1's weights made NaN before training: it fails at its first batch (its summary
    says so), members 0 and 2 collect, train and evaluate exactly as they do when member 1
    is healthy."""
    def run(folder: str, poison: bool):
        cfgs = configs(*([f"seed={seed}", *TINY] for seed in (0, 1, 2)))
        dirs = [tmp_path / folder / str(seed) for seed in (0, 1, 2)]
        torch.manual_seed(0)
        sweep = build_sweep(cfgs, dirs, [dict(name=None, group=None, job_type=None)] * 3)
        if poison:
            with torch.no_grad():
                for parameter in sweep.policy.stacked.parameters():
                    parameter[1].fill_(float("nan"))
        sweep.run()
        return dirs, sweep

    healthy, _ = run("healthy", poison=False)
    poisoned, sweep = run("poisoned", poison=True)
    failed = json.loads((poisoned[1] / "summary.json").read_text())
    assert failed["status"] == "failed" and "training diverged at frame 128" in failed["error"]
    assert list(sweep.errors) == [1]
    assert not (poisoned[1] / "checkpoint.pt").exists()  # a diverged run keeps no poisoned checkpoint
    for member in (0, 2):
        assert json.loads((poisoned[member] / "summary.json").read_text())["status"] == "finished"
        rows = [metric_rows(folder[member]) for folder in (poisoned, healthy)]
        assert rows[0] == rows[1]
        assert [row["step"] for row in rows[0] if "eval/episode_return" in row] == [256, 512, 768, 1024]


def test_a_log_line_names_consecutive_jobs_as_a_range():
    from rlcollect.commands.batched_launch import job_numbers

    assert job_numbers(list(range(1024))) == "#0-#1023"
    assert job_numbers([0, 1, 2, 3, 7, 9, 10]) == "#0-#3, #7, #9, #10"
    assert job_numbers([5]) == "#5" and job_numbers([0, 1, 2]) == "#0, #1, #2"


@pytest.mark.timeout(300)
def test_the_launcher_s_group_lines_count_only_the_jobs_that_train_and_name_why_one_trains_alone(tmp_path):
    """A job refused for its values (algo.lr=-1) is no member of its group's model: the line
    counts the others. A job that max_members cut from its group runs alone, and its line
    says so, not that no other job could share its model."""
    tiny = ["total_frames=256", "collector.frames_per_batch=128", "algo.minibatch_size=64", "env.num_envs=4",
            "eval.episodes=2", "logger=none", "progress=false", "hydra/launcher=batched"]
    refused, cut = cli_all(tmp_path, [
        ["train", "--multirun", "seed=0,1", "algo.lr=0.001,-1", *tiny, "hydra.sweep.dir=refused"],
        ["train", "--multirun", "seed=0,1,2", "hydra.launcher.max_members=2", *tiny, "hydra.sweep.dir=cut"]])
    assert refused.returncode == 1, refused.stderr  # two jobs refused, listed
    lines = [line.split("] ", 1)[-1] for line in refused.stdout.splitlines()]
    assert "jobs #0, #2 train as one batched model of 2 members" in lines
    assert refused.stderr.count("rlcollect train: invalid configuration: algo.lr=-1.0: must be > 0") == 2
    statuses = [json.loads((folder / "summary.json").read_text())["status"]
                for folder in sorted((tmp_path / "refused").glob("*_*"), key=lambda path: int(path.name[0]))]
    assert statuses == ["finished", "refused", "finished", "refused"]
    assert cut.returncode == 0, cut.stderr
    lines = [line.split("] ", 1)[-1] for line in cut.stdout.splitlines()]
    assert "jobs #0, #1 train as one batched model of 2 members" in lines
    assert "job #2 runs as a solo run (hydra.launcher.max_members=2 cut it from its group)" in lines
