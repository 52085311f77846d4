"""Members with a CNN encoder stacked into one model (stacking.StackedConv2d): PPO, DQN and
SAC over image observations, in either layout. One member is its solo run bit for bit; each
of two members updates as its solo run, to float32 rounding of the batched products."""
import pytest
import torch
from run_states import assert_member_is_its_solo_run, assert_members_near_solo_runs
from train_configs import train_configs

import rlcollect.testing  # noqa: F401  (registers the rlcollect-test/ envs)
from rlcollect.sweeps.run import build_sweep
from rlcollect.sweeps.stacking import StackedConv2d, stack_modules

QUIET = ["progress=false", "logger=none", "eval.max_time_share=null", "eval.episodes=2", "env.num_envs=2",
         "total_frames=512", "collector.frames_per_batch=64", "eval.every_frames=256", "env.solved_return=null"]
TINY_REPLAY = ["algo.learning_starts=128", "algo.gradient_steps_per_batch=4", "algo.batch_size=16",
               "buffer.storage.max_size=1024"]
KINDS = {  # each algorithm with a CNN: its overrides, the setting its two members differ in, its stacked policy
    "ppo_hwc": (["env.id=rlcollect-test/Spaces-image_hwc-discrete-v0", "algo.minibatch_size=32", "algo.epochs=2",
                 "algo.anneal_clip=false"], "algo.lr=0.001", "MemberPolicy"),
    "dqn_chw": (["algo=dqn", "env.id=rlcollect-test/Spaces-image_chw-discrete-v0", *TINY_REPLAY,
                 "model.hidden_sizes=[16]", "algo.n_step=3", "algo.prioritized=true"], "algo.lr=0.0005",
                "MemberQPolicy"),
    "sac_chw": (["algo=sac", "env.id=rlcollect-test/Spaces-image_chw-box-v0", *TINY_REPLAY, "model.hidden_sizes=[16]",
                 "algo.critic_hidden_sizes=[16]", "algo.batch_size=4"], "algo.gamma=0.9", "MemberSACActor"),
}
NAMES = dict(name=None, group=None, job_type=None)
STEPS = list(range(64, 513, 64))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", list(KINDS))
def test_one_member_with_a_cnn_is_its_solo_run_bit_for_bit(tmp_path, kind):
    """A stacked model of one member with a CNN: the same metrics, evaluations, summary and
    checkpoint (convolutions, heads, optimizers, target networks, replay buffer, RNG
    stream) as the solo run."""
    overrides, _, policy = KINDS[kind]
    [cfg] = train_configs([*QUIET, *overrides, "seed=3"])
    sweep = build_sweep([cfg], [tmp_path / "member"], [NAMES])
    assert type(sweep.policy).__name__ == policy
    assert any(isinstance(module, StackedConv2d) for module in sweep.policy.modules())
    sweep.run()
    assert_member_is_its_solo_run(cfg, tmp_path / "member", tmp_path / "solo", STEPS, "train/loss")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_member_with_a_cnn_updates_as_its_solo_run(tmp_path, kind):
    """Two members, two seeds and a setting that differs: each member's metrics are its solo
    run's to float32 rounding, and the two runs differ."""
    overrides, differing, _ = KINDS[kind]
    cfgs = train_configs([*QUIET, *overrides, "seed=3"], [*QUIET, *overrides, "seed=4", differing])
    sweep = build_sweep(cfgs, [tmp_path / "m3", tmp_path / "m4"], [NAMES] * 2)
    sweep.run()
    assert_members_near_solo_runs(tmp_path, cfgs, (3, 4), STEPS)


def test_stacked_convolutions_compute_each_member_with_its_own_weights():
    """Three Conv2d layers stacked: member m's images through member m's weights, each by
    the solo layer's own call (equal, not close); the gradients are each member's own."""
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(2, 4, 3, stride=2, padding=1) for _ in range(3)]
    stacked = stack_modules([torch.nn.Sequential(layer, torch.nn.ReLU()) for layer in layers])
    assert isinstance(stacked[0], StackedConv2d) and stacked[0].weight.shape == (3, 4, 2, 3, 3)
    images = torch.randn(3 * 5, 2, 9, 9)  # member-major: member m's 5 images in rows 5m ... 5m + 4
    out = stacked(images)
    assert out.shape == (15, 4, 5, 5)
    for member, layer in enumerate(layers):
        assert torch.equal(out[member * 5:(member + 1) * 5], torch.relu(layer(images[member * 5:(member + 1) * 5])))
    out[5:10].sum().backward()  # member 1's outputs alone: only its rows get a gradient
    grad = stacked[0].weight.grad
    assert grad[1].abs().sum() > 0 and not grad[0].any() and not grad[2].any()


@pytest.mark.timeout(300)
def test_a_batched_atari_sweep_ends_with_its_envs_let_go(tmp_path):
    """The members' parts reference one another: the launcher lets them go once the members
    ended, their ALE interfaces with them (the interpreter's clean-up reported every one of
    them as leaked, 40 lines after the sweep's own)."""
    pytest.importorskip("ale_py")
    from commands import rlcollect

    result = rlcollect(tmp_path, "train", "--multirun", "seed=0,1", "hydra/launcher=batched", "env=pong",
                       "total_frames=256", "collector.frames_per_batch=128", "env.num_envs=2", "algo.minibatch_size=64",
                       "algo.epochs=1", "eval.episodes=1", "eval.max_steps=100", "logger=none", "progress=false",
                       "hydra.sweep.dir=sw")
    assert result.returncode == 0, result.stderr
    assert "jobs #0, #1 train as one batched model of 2 members" in result.stdout + result.stderr
    assert "leaked" not in result.stderr, result.stderr
