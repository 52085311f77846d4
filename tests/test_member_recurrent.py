"""Recurrent PPO's members stacked into one model (rlcollect.sweeps.stacked_rnn, the GRU's and
LSTM's weights with a member dim): one member is its solo run bit for bit, each of several
members updates as its solo run with its own settings, and each member's sequences are cut
at its own episode starts."""

import pytest
import torch
from run_states import assert_member_is_its_solo_run, assert_members_near_solo_runs
from train_configs import train_configs

from rlcollect.checkpoint import load_checkpoint
from rlcollect.modules.recurrent import segment_layout
from rlcollect.sweeps.grouping import member_options
from rlcollect.sweeps.run import build_sweep

TINY = ["experiment=cartpole_novel_gru", "progress=false", "logger=none", "eval.max_time_share=null",
        "eval.episodes=2", "env.num_envs=2", "total_frames=512", "collector.frames_per_batch=64",
        "eval.every_frames=256", "algo.minibatch_size=32", "algo.epochs=2", "algo.sequence_length=8",
        "model.hidden_size=16"]
NAMES = dict(name=None, group=None, job_type=None)
STEPS = list(range(64, 513, 64))


def configs(*overrides_per_member):
    return train_configs(*overrides_per_member, base=TINY)


def test_each_member_s_steps_are_cut_into_its_own_segments_padded_to_one_count():
    """Two members of 5 steps: member 0 starts segments at steps 0 and 3, member 1 at 0, 1
    and 4; member 0's count is padded with a segment of its last step; every step finds
    itself again through (segment, step)."""
    is_init = torch.tensor([[False, False, False, True, False], [True, True, False, False, True]])
    first, segment, step, index = segment_layout(is_init, 2)
    assert first.tolist() == [0, 3, 4, 5, 6, 9]
    assert segment.tolist() == [0, 0, 0, 1, 1, 3, 4, 4, 4, 5]
    assert step.tolist() == [0, 1, 2, 0, 1, 0, 0, 1, 2, 0]
    # past a segment's end its index runs on into its member's next steps, clamped at the member's last
    assert index.tolist() == [[0, 1, 2], [3, 4, 4], [4, 4, 4], [5, 6, 7], [6, 7, 8], [9, 9, 9]]
    assert index[segment, step].tolist() == list(range(10))
    alone = segment_layout(is_init[:1], 1)  # one model: no padding
    assert [value.tolist() for value in alone] == [[0, 3], [0, 0, 0, 1, 1], [0, 1, 2, 0, 1], [[0, 1, 2], [3, 4, 4]]]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rnn, length", [("gru", 8), ("lstm", 8), ("gru", 12)], ids=["gru", "lstm", "gru_uneven"])
def test_one_member_is_its_solo_run_bit_for_bit(tmp_path, rnn, length):
    """A stacked recurrent model of one member: the same metrics, evaluations, summary and
    checkpoint (GRU / LSTM weights, heads, Adam state, reward scaler, RNG stream) as the
    solo run; so with sequences that do not divide the rollout (12, 12 and 8 of each env's
    32 steps: minibatches of unequal sizes)."""
    [cfg] = configs([f"model.rnn={rnn}", "seed=3", f"algo.sequence_length={length}"])
    sweep = build_sweep([cfg], [tmp_path / "member"], [NAMES])
    assert type(sweep.policy).__name__ == "MemberPolicy"
    assert type(sweep.policy.stacked.rnn.layers[0]).__name__ == "StackedRNN"
    sweep.run()
    assert_member_is_its_solo_run(cfg, tmp_path / "member", tmp_path / "solo", STEPS, "train/loss_policy")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("length", [8, 12], ids=["even", "uneven"])
def test_each_gru_member_updates_as_its_solo_run_with_its_own_settings(tmp_path, length):
    """Three GRU members differing in seed, lr, clip range, GAE lambda, epochs and
    minibatch size (8 steps a sequence: 3 sequences against 4, its minibatches of 3, 3 and
    2 sequences padded to 4; 12 steps a sequence, the last of each env's 32 steps 8: 2 a
    minibatch, of 16 to 24 steps, each member's padded to the step's longest): each member's
    metrics are its solo run's (its own envs, sequences, minibatch order and update), to
    float32 rounding of a batched matrix product. (The clip range is not
    annealed here: annealed to 0 at the last update, ``clip_fraction`` would count the
    ratios that differ from 1 by rounding alone.)"""
    cfgs = configs(*[["algo.anneal_clip=false", f"algo.sequence_length={length}", *member] for member in (
        ["seed=3"], ["seed=4", "algo.lr=0.003", "algo.clip_epsilon=0.1", "algo.minibatch_size=24"],
        ["seed=5", "algo.gae_lambda=0.9", "algo.epochs=1"])])
    assert member_options(cfgs) == {"lr": [0.001, 0.003, 0.001], "clip_epsilon": [0.2, 0.1, 0.2],
                                    "gae_lambda": [0.8, 0.8, 0.9], "epochs": [2, 2, 1], "minibatch_size": [32, 24, 32]}
    sweep = build_sweep(cfgs, [tmp_path / f"m{seed}" for seed in (3, 4, 5)], [NAMES] * 3)
    assert type(sweep.learner.ppo.optimizer).__name__ == "MemberAdam"
    sweep.run()
    assert_members_near_solo_runs(tmp_path, cfgs, (3, 4, 5), STEPS)
    checkpoint = load_checkpoint(tmp_path / "m5" / "checkpoint.pt")  # in its solo run's shapes and order
    solo = load_checkpoint(tmp_path / "solo5" / "checkpoint.pt")
    assert checkpoint["policy"]["rnn.layers.0.weight_hh_l0"].shape == (48, 16)
    assert list(checkpoint["policy"]) == list(solo["policy"])
    torch.testing.assert_close(checkpoint["policy"], solo["policy"], rtol=1e-4, atol=1e-5)
    adam, solo_adam = checkpoint["learner"]["ppo"]["optimizer"], solo["learner"]["ppo"]["optimizer"]
    # 8 updates of 1 epoch (sequences of 8 steps: 4 of its 8 a minibatch, 2 minibatches; of 12: 2 of its 6, 3)
    per_epoch = {8: 2, 12: 3}[length]
    assert [state["step"].item() for state in adam["state"].values()] == [8.0 * per_epoch] * len(solo_adam["state"])
    assert adam["param_groups"] == solo_adam["param_groups"]
    adam = load_checkpoint(tmp_path / "m4" / "checkpoint.pt")["learner"]["ppo"]["optimizer"]
    # 8 updates of 2 epochs, each of 3 minibatches (8 steps: 3, 3 and 2 of its 8 sequences; 12: 2, 2 and 2 of 6)
    assert {state["step"].item() for state in adam["state"].values()} == {48.0}


@pytest.mark.parametrize("rnn, layers, image", [("gru", 1, False), ("lstm", 1, False), ("gru", 2, False),
                                                ("lstm", 2, True)], ids=["gru", "lstm", "gru_2_layers", "lstm_cnn"])
def test_a_stacked_recurrent_model_computes_each_member_with_its_own_weights(rnn, layers, image):
    """Three RecurrentActorCritics stacked (one or two layers; an LSTM over a CNN's features):
    on ``[S, N]`` steps with each member's own episode starts, each member's log-probs,
    entropies and values in recurrent mode (its sequences) and its values in step mode are
    its solo model's, to float32 rounding; the stacked layers keep torch's parameter names,
    so a member's rows are its solo state."""
    import gymnasium as gym
    import numpy as np
    from tensordict import TensorDict

    from rlcollect.modules.actor_critic import RecurrentActorCritic
    from rlcollect.sweeps.stacking import member_state_dict, stack_modules

    space = gym.spaces.Box(0, 255, (2, 36, 36), np.uint8) if image else gym.spaces.Box(-1, 1, (3,))
    solos = []
    for seed in range(3):
        torch.manual_seed(seed)
        solos.append(RecurrentActorCritic(space, gym.spaces.Discrete(2), rnn=rnn, hidden_size=8, num_layers=layers,
                                          hidden_sizes=(16,)))
    stacked = stack_modules(solos)
    generator = torch.Generator().manual_seed(7)
    observation = torch.randint(0, 256, (3, 24, *space.shape), generator=generator, dtype=torch.uint8) if image \
        else torch.randn(3, 24, 3, generator=generator)
    steps = TensorDict({"observation": observation, "action": torch.randint(0, 2, (3, 24), generator=generator),
                        "is_init": torch.rand(3, 24, generator=generator) < 0.2}, [3, 24])
    for key in solos[0].rnn.hidden_keys:
        steps.set(key, torch.randn(3, 24, layers, 8, generator=generator))
    assert steps.get("is_init").sum(1).unique().numel() > 1  # the members' segment counts differ
    together = stacked.evaluate(steps.clone())
    values = stacked.state_value(steps.clone())
    for member, solo in enumerate(solos):
        alone = solo.evaluate(steps[member].clone())
        for ours, theirs in zip(together, alone):
            torch.testing.assert_close(ours[member], theirs, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(values[member], solo.state_value(steps[member].clone()), rtol=1e-5, atol=1e-6)
        state = member_state_dict(stacked.state_dict(), solo, member)
        assert list(state) == list(solo.state_dict())
        assert all(torch.equal(state[key], value) for key, value in solo.state_dict().items())
