"""SAC: the squashed Gaussian, the critic targets, the update schedule, and runs from the CLI."""
import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from commands import rlcollect as cli
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from rlcollect import LazyTensorStorage, ReplayBuffer
from rlcollect.algos.sac import SACLearner
from rlcollect.buffers import PrioritizedSampler
from rlcollect.errors import ConfigError
from rlcollect.modules.sac import SACActor

OBSERVATION = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTION = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def test_the_actor_squashes_into_the_action_bounds_with_the_jacobian_in_its_log_prob():
    actor = SACActor(OBSERVATION, ACTION, hidden_sizes=(8,))
    observation = torch.randn(5000, 3)
    action, log_prob = actor.sample(observation)
    assert action.shape == (5000, 2) and log_prob.shape == (5000,)
    assert (action[:, 0].abs() <= 2).all() and ((action[:, 1] >= 0) & (action[:, 1] <= 1)).all()  # tanh saturates
    mean, log_std = actor.distribution(observation)
    # the same density from torch.distributions: a Normal through tanh, then scaled and shifted
    squashed = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()),
        [torch.distributions.TanhTransform(), torch.distributions.AffineTransform(actor.action_bias,
                                                                                  actor.action_scale)])
    far_from_the_bounds = (action - actor.action_bias).abs().div(actor.action_scale).max(-1).values < 0.99
    assert far_from_the_bounds.sum() > 4000
    with torch.no_grad():
        expected = squashed.log_prob(action).sum(-1)
    torch.testing.assert_close(log_prob[far_from_the_bounds].detach(), expected[far_from_the_bounds],
                               atol=2e-3, rtol=1e-4)
    with set_interaction_type(InteractionType.DETERMINISTIC):
        deterministic = actor(TensorDict({"observation": observation[:4]}, [4]))["action"]
    torch.testing.assert_close(deterministic, torch.tanh(mean[:4]) * actor.action_scale + actor.action_bias)


def test_sac_refuses_discrete_or_unbounded_actions_in_one_line():
    with pytest.raises(ConfigError, match=r"^SAC needs continuous actions \(a flat Box action space\), got "
                                          r"Discrete\(2\)$"):
        SACActor(OBSERVATION, gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match="bounds: they must be finite"):
        SACActor(OBSERVATION, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))


def transitions(count: int, terminated: bool = False) -> TensorDict:
    generator = torch.Generator().manual_seed(1)
    return TensorDict({
        "observation": torch.randn(count, 3, generator=generator),
        "action": torch.rand(count, 2, generator=generator) * torch.tensor([4.0, 1.0]) - torch.tensor([2.0, 0.0]),
        ("next", "observation"): torch.randn(count, 3, generator=generator),
        ("next", "reward"): torch.randn(count, generator=generator),
        ("next", "terminated"): torch.full((count,), terminated),
        ("next", "done"): torch.full((count,), terminated),
        ("next", "truncated"): torch.zeros(count, dtype=torch.bool),
    }, [count])


def learner(sampler=None, **options) -> SACLearner:
    actor = SACActor(OBSERVATION, ACTION, hidden_sizes=(16,))
    buffer = ReplayBuffer(LazyTensorStorage(64), sampler, batch_size=8)
    return SACLearner(actor, buffer, observation_space=OBSERVATION, action_space=ACTION,
                      critic_hidden_sizes=(16,), learning_starts=0, **options)


def test_the_critic_target_is_the_soft_bellman_backup_and_stops_at_termination():
    sac = learner(gamma=0.5, alpha=0.3, autotune=False)
    for terminated in (False, True):
        batch = transitions(6, terminated)
        torch.manual_seed(7)
        loss, _ = sac.critic_loss(batch)
        torch.manual_seed(7)  # the same next actions
        next_action, next_log_prob = sac.actor.sample(batch["next", "observation"])
        next_q = torch.min(*(target(batch["next", "observation"], next_action) for target in sac.targets))
        bootstrap = 0.0 if terminated else 0.5 * (next_q - 0.3 * next_log_prob)
        target = batch["next", "reward"] + bootstrap
        expected = 0.5 * sum((critic(batch["observation"], batch["action"]) - target).pow(2)
                             for critic in sac.critics).mean()
        torch.testing.assert_close(loss, expected.detach())


@pytest.mark.timeout(60)
def test_the_td_error_is_the_mean_over_the_twin_critics_of_their_absolute_td_errors():
    torch.manual_seed(0)
    sac = learner(gamma=0.5, alpha=0.3, autotune=False)
    batch = transitions(6)
    torch.manual_seed(7)
    loss, q_mean = sac.critic_loss(batch)
    torch.manual_seed(7)  # the same next actions: the same loss, and the TD errors of its tensors
    with_td_error = sac.critic_loss(batch, return_td_error=True)
    assert len(with_td_error) == 3 and torch.equal(with_td_error[0], loss) and torch.equal(with_td_error[1], q_mean)
    td_error = with_td_error[2]
    assert td_error.shape == (6,) and not td_error.requires_grad
    torch.manual_seed(7)
    next_action, next_log_prob = sac.actor.sample(batch["next", "observation"])
    next_q = torch.min(*(target(batch["next", "observation"], next_action) for target in sac.targets))
    target = batch["next", "reward"] + 0.5 * (next_q - 0.3 * next_log_prob)
    q1, q2 = (critic(batch["observation"], batch["action"]).detach() for critic in sac.critics)
    torch.testing.assert_close(td_error, ((q1 - target).abs() + (q2 - target).abs()).detach() / 2)
    assert not torch.equal(td_error, (q1 - target).abs().detach())  # both critics, not the first alone


@pytest.mark.timeout(60)
def test_prioritized_replay_gives_the_sampled_transitions_their_td_errors_as_priorities():
    """With a PrioritizedSampler, every gradient step gives the transitions it sampled their
    absolute TD errors (critic_loss's, before the step) as priorities: the sampler stores
    (|TD error| + eps) ** alpha per position, the largest TD error becomes new ones' priority."""
    torch.manual_seed(0)
    sampler = PrioritizedSampler(64, alpha=0.6, beta=0.4, eps=1e-6)
    sac = learner(sampler, gradient_steps_per_batch=3)
    assert sac.prioritized and not learner().prioritized
    sac.replay_buffer.extend(transitions(32))
    steps, update = [], sac.update

    def recorded_update(batch):
        with torch.random.fork_rng():  # the TD errors the update computes, from the same next actions
            _, _, expected = sac.critic_loss(batch, return_td_error=True)
        metrics = update(batch)
        assert torch.equal(metrics["td_error"], expected)
        steps.append((batch.get("index"), metrics["td_error"]))
        return metrics

    sac.update = recorded_update
    metrics = sac.learn(None, frames=32)
    assert len(steps) == 3 and "td_error" not in metrics and math.isfinite(metrics["loss_q"])
    priority = sampler.state_dict()["priority"][:32]  # (p + eps) ** alpha per stored position
    assert len(set(priority.tolist())) > 1  # the TD errors fed back: not all the max priority (1.0) any more
    index, td_error = steps[-1]  # the last sample's positions hold its TD errors
    expected = (td_error.double() + 1e-6).pow(0.6)
    for position in index.unique().tolist():
        assert priority[position].item() in expected[index == position].tolist()  # a position drawn twice: one
    unique = [j for j in range(8) if int((index == index[j]).sum()) == 1]
    assert unique and all(priority[index[j]].item() == expected[j].item() for j in unique)
    assert sampler.max_priority == max([1.0] + [float(error.max()) for _, error in steps])
    never_sampled = sorted(set(range(32)) - {position for index, _ in steps for position in index.tolist()})
    assert never_sampled and all(priority[position].item() == (1.0 + 1e-6) ** 0.6 for position in never_sampled)


def test_actor_rounds_and_target_updates_follow_their_frequencies():
    sac = learner(policy_frequency=2, target_network_frequency=3, tau=0.5, gradient_steps_per_batch=6)
    sac.replay_buffer.extend(transitions(32))
    actor_steps = []
    step = sac.actor_step
    sac.actor_step = lambda observation, *mask: (actor_steps.append(sac.updates), step(observation, *mask))[1]
    targets_before = [p.clone() for p in sac.targets.parameters()]
    metrics = sac.learn(None, frames=32)
    assert sac.updates == 6 and actor_steps == [2, 2, 4, 4, 6, 6]  # two actor updates every second critic step
    assert metrics["alpha"] == pytest.approx(sac.alpha) and math.isfinite(metrics["loss_q"])
    assert not all(torch.equal(a, b) for a, b in zip(targets_before, sac.targets.parameters()))  # moved at 3 and 6
    state = sac.state_dict()
    restored = learner(policy_frequency=2, target_network_frequency=3, tau=0.5)
    restored.actor.load_state_dict(sac.actor.state_dict())
    restored.load_state_dict(state)
    assert restored.updates == 6 and restored.alpha == pytest.approx(sac.alpha)
    assert all(torch.equal(a, b) for a, b in zip(restored.critics.parameters(), sac.critics.parameters()))


TINY = ["algo=sac", "env=pendulum", "env.num_envs=2", "total_frames=512", "collector.frames_per_batch=128",
        "algo.gradient_steps_per_batch=16", "algo.learning_starts=256", "algo.batch_size=32", "eval.every_frames=256",
        "eval.episodes=2", "env.solved_return=null", "eval.max_time_share=null", "progress=false", "logger=none"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("collector", [["collector=sync"],
                                       ["collector=multiasync", "collector.start_method=fork",
                                        "collector.envs_per_worker=1"]], ids=["sync", "multiasync"])
def test_sac_trains_from_the_cli_with_the_collector_writing_into_its_buffer(tmp_path, collector):
    result = cli(tmp_path, "train", *TINY, *collector, "hydra.run.dir=run", timeout=240)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [128, 256, 384, 512]
    sizes = [row["train/buffer_size"] for row in rows]  # the collector wrote them (multiasync: its workers, ahead)
    assert sizes == [128.0, 256.0, 384.0, 512.0] if collector == ["collector=sync"] else \
        sizes == sorted(sizes) and all(size >= row["step"] for size, row in zip(sizes, rows))
    assert "train/loss_q" not in rows[0] and all(math.isfinite(row["train/loss_q"]) for row in rows[1:])
    assert "eval/episode_return" in rows[1]
    evaluated = cli(tmp_path, "eval", "run", "--episodes", "1", "--format", "json", timeout=120)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)[0]["lengths"] == [200]  # Pendulum's time limit
