"""Collectors and recurrent policies: the hidden state is primed, stored, carried and reset
without any wiring by the user, and the stored data replays exactly in recurrent mode."""
import functools

import gymnasium as gym
import pytest
import torch
from checks import TRAJ_IDS, check_trajectories

from rlcollect.buffers.rollout import iterate_sequences
from rlcollect.collectors import Collector
from rlcollect.collectors.action_server import ActionServerCollector
from rlcollect.collectors.multi import MultiSyncCollector
from rlcollect.collectors.pool import PoolCollector
from rlcollect.envs import GymEnv
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.testing import CountingEnv, counting_env_factories, counting_envs

STATE = "recurrent_state"
HIDDEN = 6


def recurrent_policy(rnn="gru", num_layers=1):
    torch.manual_seed(0)
    return RecurrentActorCritic(gym.spaces.Box(0.0, 100.0, (1,)), gym.spaces.Discrete(2), rnn=rnn,
                                hidden_size=HIDDEN, num_layers=num_layers)


def state_keys(rnn):
    return [STATE] if rnn == "gru" else [f"{STATE}_h", f"{STATE}_c"]


def check_hidden_states(data, rnn, num_layers=1):
    """Hidden-state bookkeeping of ``[..., T]`` data (consecutive batches concatenated):
    stored once per key, zero at each env reset, and otherwise the state the previous
    step wrote to ("next", key) — across batch boundaries too."""
    keys = set(data.keys(True, True))
    for key in state_keys(rnn):
        assert key in keys and ("next", key) in keys
        assert sum(1 for k in keys if (k if isinstance(k, str) else k[-1]) == key) == 2  # key and ("next", key) only
        state, next_state = data[key], data["next", key]
        assert state.shape == (*data.batch_size, num_layers, HIDDEN)
        starts = data["is_init"]
        assert (state[starts] == 0).all(), "a trajectory must start from a zero state"
        assert (next_state.abs().sum((-1, -2)) > 0).all()
        continuing = ~data["is_init"][..., 1:]
        assert torch.equal(state[..., 1:, :, :][continuing], next_state[..., :-1, :, :][continuing])


def replays_in_recurrent_mode(policy, data):
    """Recurrent mode over the stored flat sequences gives the collected log-probs and values."""
    data = data if data.batch_dims == 2 else data.reshape(-1, data.shape[-1])
    for minibatch in iterate_sequences(data, sequence_length=5, batch_size=10):
        with torch.no_grad():
            log_prob, _, value = policy.evaluate(minibatch)
        torch.testing.assert_close(log_prob, minibatch["action_log_prob"])
        torch.testing.assert_close(value, minibatch["state_value"])


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("num_envs", [None, 3], ids=["single", "batched"])
def test_collector_primes_carries_and_resets_the_hidden_state(rnn, num_envs):
    policy = recurrent_policy(rnn, num_layers=2)
    env = GymEnv(counting_env_factories([4, 6, 9]), num_envs) if num_envs else GymEnv(CountingEnv, None)
    collector = Collector(env, policy, frames_per_batch=12 if num_envs else 4, total_frames=48)
    data = torch.cat(list(collector), dim=-1)  # a trajectory of 9 (and of 5) crosses the batch boundaries
    check_trajectories(data)
    check_hidden_states(data, rnn, num_layers=2)
    replays_in_recurrent_mode(policy, data)


def test_max_frames_per_traj_cuts_reset_the_state_and_set_truncated_does_not():
    policy = recurrent_policy()
    cut = torch.cat(list(Collector(GymEnv(CountingEnv, 2), policy, frames_per_batch=8, total_frames=16,
                                   max_frames_per_traj=3)), -1)
    check_hidden_states(cut, "gru")  # zero after every cut
    boundary = Collector(GymEnv(CountingEnv, 2), policy, frames_per_batch=8, total_frames=16, set_truncated=True)
    first, second = list(boundary)
    # set_truncated marks a new trajectory at the batch boundary but the env did not reset:
    # the policy's memory carries on, and recurrent mode restarts from that stored state
    assert second["is_init"][:, 0].all()
    continued = ~first["next", "terminated"][:, -1]
    assert torch.equal(second[STATE][:, 0][continued], first["next", STATE][:, -1][continued])
    replays_in_recurrent_mode(policy, torch.cat([first, second], -1))


def test_a_feed_forward_policy_gets_no_hidden_state():
    env = GymEnv(CountingEnv, 2)
    policy = ActorCritic(env.observation_space, env.action_space)
    batch = next(iter(Collector(env, policy, frames_per_batch=4)))
    assert not any("recurrent" in str(key) for key in batch.keys(True, True))


@pytest.mark.timeout(120)
def test_multi_process_workers_carry_their_own_hidden_states(no_leftovers):
    policy = recurrent_policy()
    envs = [functools.partial(GymEnv, functools.partial(CountingEnv, length), 2) for length in (4, 7)]
    collector = MultiSyncCollector(envs, policy, frames_per_batch=24, total_frames=72, start_method="fork")
    no_leftovers(collector)
    data = torch.cat(list(collector), dim=-1)  # [2 workers, 2 envs, 18]
    assert data.batch_size == (2, 2, 18)
    check_trajectories(data)
    check_hidden_states(data, "gru")
    replays_in_recurrent_mode(policy, data)
    assert len(torch.unique(data[TRAJ_IDS])) == len(torch.unique_consecutive(data[TRAJ_IDS].reshape(-1)))


@pytest.mark.timeout(120)
def test_the_action_server_carries_hidden_states_for_every_worker(no_leftovers):
    policy = recurrent_policy()
    collector = ActionServerCollector(functools.partial(CountingEnv, 5), policy, num_workers=2, envs_per_worker=2,
                                      frames_per_batch=16, total_frames=48, start_method="fork")
    no_leftovers(collector)
    data = torch.cat(list(collector), dim=-1)
    check_hidden_states(data, "gru")
    replays_in_recurrent_mode(policy, data)


@pytest.mark.timeout(120)
def test_the_pool_carries_hidden_states_for_envs_served_in_groups(no_leftovers):
    """Envs served a worker at a time, in the order the workers finish (uneven horizons, one
    cut by max_frames_per_traj): every env's states, in its row, replay as its sequence."""
    policy = recurrent_policy()
    envs = [functools.partial(GymEnv, counting_envs(lengths), 2) for lengths in ((3, 4), (5, 9))]
    collector = PoolCollector(envs, policy, num_workers=2, envs_per_worker=2, batch_size=2, frames_per_batch=24,
                              total_frames=72, layout="per_env", max_frames_per_traj=7, start_method="fork")
    no_leftovers(collector)
    data = torch.cat(list(collector), dim=-1)  # [4 envs, 18]
    assert data.batch_size == (4, 18)
    check_trajectories(data)
    check_hidden_states(data, "gru")
    replays_in_recurrent_mode(policy, data)
    assert data["observation"][3, :9, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 1.0]  # cut at 7


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("storing_device", ["cpu", "cuda"])
def test_a_recurrent_policy_on_cuda_with_envs_on_cpu(storing_device):
    policy = recurrent_policy().to("cuda")
    collector = Collector(GymEnv(counting_env_factories([4, 6, 9]), 3), policy, frames_per_batch=12,
                          total_frames=48, storing_device=storing_device)
    data = torch.cat(list(collector), dim=-1)
    assert data["next", STATE].device.type == storing_device
    check_hidden_states(data.cpu(), "gru")
    replays_in_recurrent_mode(policy, data.to("cuda"))
