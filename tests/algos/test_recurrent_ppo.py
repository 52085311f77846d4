"""Recurrent PPO: sequence minibatches restart from the stored hidden states."""
import copy

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from rlcollect.algos.ppo import PPO
from rlcollect.buffers.rollout import RolloutBuffer, iterate_sequences
from rlcollect.modules.actor_critic import RecurrentActorCritic
from rlcollect.primers import policy_primers

OBSERVATION_SPACE = gym.spaces.Box(-1.0, 1.0, (3,))
ACTION_SPACE = gym.spaces.Discrete(2)
NUM_ENVS, TIME = 3, 10


def test_iterate_sequences_covers_every_step_once_in_contiguous_runs_starting_with_is_init():
    steps = torch.arange(NUM_ENVS * TIME).reshape(NUM_ENVS, TIME)
    reset = torch.zeros(NUM_ENVS, TIME, dtype=torch.bool)
    reset[1, 6] = True  # an env's own reset inside a sequence is kept
    rollout = TensorDict({"step": steps, "is_init": reset}, batch_size=[NUM_ENVS, TIME])
    generator = torch.Generator().manual_seed(0)
    minibatches = list(iterate_sequences(rollout, sequence_length=4, batch_size=8, generator=generator))
    seen = torch.cat([mb["step"] for mb in minibatches])
    assert sorted(seen.tolist()) == list(range(NUM_ENVS * TIME))
    for minibatch in minibatches:
        step, is_init = minibatch["step"], minibatch["is_init"]
        starts = is_init.nonzero().squeeze(1).tolist() + [len(step)]
        assert starts[0] == 0
        for first, end in zip(starts[:-1], starts[1:]):  # every run: consecutive steps of one env
            run = step[first:end]
            assert torch.equal(run, torch.arange(int(run[0]), int(run[0]) + len(run)))
            assert len({int(s) // TIME for s in run}) == 1
        sequence_starts = {s for s in step.tolist() if (s % TIME) % 4 == 0}
        starts = {s for s, i in zip(step.tolist(), is_init.tolist()) if i}
        assert starts == sequence_starts | ({16} & set(step.tolist()))
    assert max(mb.numel() for mb in minibatches) == 8  # two sequences of 4 per minibatch


def collect_like_a_collector(policy, generator):
    """Step the policy over NUM_ENVS x TIME random observations, carrying the hidden state
    and zeroing it where an env restarts, as the Collector does; the [N, T] batch."""
    [primer] = policy_primers(policy)
    carrier = primer.apply(TensorDict({"observation": torch.zeros(NUM_ENVS, 3),
                                       "is_init": torch.ones(NUM_ENVS, dtype=torch.bool)}, [NUM_ENVS]))
    steps = []
    for _ in range(TIME):
        carrier["observation"] = torch.rand(NUM_ENVS, 3, generator=generator) * 2 - 1
        with torch.no_grad():
            out = policy(carrier.clone())
        done = torch.rand(NUM_ENVS, generator=generator) < 0.2
        out["next", "reward"] = torch.rand(NUM_ENVS, generator=generator)
        out["next", "observation"] = torch.rand(NUM_ENVS, 3, generator=generator)
        out["next", "terminated"] = done
        out["next", "truncated"] = torch.zeros(NUM_ENVS, dtype=torch.bool)
        out["next", "done"] = done
        steps.append(out)
        for key in primer.keys:
            carrier[key] = out["next", key].clone()
        primer.zero_(carrier, done)
        carrier["is_init"] = done
    return torch.stack(steps, dim=1)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_sequences_from_stored_states_reproduce_the_collected_log_probs(rnn):
    torch.manual_seed(0)
    policy = RecurrentActorCritic(OBSERVATION_SPACE, ACTION_SPACE, rnn=rnn, hidden_size=8)
    batch = collect_like_a_collector(policy, torch.Generator().manual_seed(1))
    assert batch["is_init"][:, 1:].any()  # resets inside the rollout
    for minibatch in iterate_sequences(batch, sequence_length=4, batch_size=8):
        with torch.no_grad():
            log_prob, entropy, value = policy.evaluate(minibatch)
        torch.testing.assert_close(log_prob, minibatch["action_log_prob"])
        torch.testing.assert_close(value, minibatch["state_value"])
    with torch.no_grad():  # step mode from the stored states gives the same values
        torch.testing.assert_close(policy.state_value(batch), batch["state_value"])


def test_recurrent_ppo_update_trains_the_rnn_through_time():
    torch.manual_seed(0)
    policy = RecurrentActorCritic(OBSERVATION_SPACE, ACTION_SPACE, hidden_size=8)
    shapes = {key: shape for primer in policy_primers(policy) for key, shape in primer.shapes.items()}
    buffer = RolloutBuffer(NUM_ENVS, TIME, (3,), state_shapes=shapes)
    assert buffer.rollout["recurrent_state"].shape == (NUM_ENVS, TIME + 1, 1, 8)
    buffer.add(collect_like_a_collector(policy, torch.Generator().manual_seed(2)))
    before = copy.deepcopy(policy.state_dict())
    ppo = PPO(policy, epochs=2, minibatch_size=10, sequence_length=5, anneal_lr=False)
    metrics = ppo.update(buffer, frames=NUM_ENVS * TIME)
    assert all(torch.isfinite(torch.tensor(value)) for value in metrics.values())
    changed = {key.split(".")[0] for key in before if not torch.equal(before[key], policy.state_dict()[key])}
    assert changed == {"rnn", "heads"}


def test_a_batch_without_hidden_states_is_rejected_by_the_rollout_buffer():
    buffer = RolloutBuffer(NUM_ENVS, TIME, (3,), state_shapes={"recurrent_state": (1, 8)})
    policy = RecurrentActorCritic(OBSERVATION_SPACE, ACTION_SPACE, hidden_size=8)
    batch = collect_like_a_collector(policy, torch.Generator().manual_seed(3)).exclude("recurrent_state")
    with pytest.raises(KeyError, match="recurrent_state"):
        buffer.add(batch)
