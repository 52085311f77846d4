"""Collector(cudagraph_policy=True): the policy replayed as a CUDA graph gives the batches
the policy gives when run eagerly, sees weight updates, draws fresh noise every step and
never synchronises; what cannot be replayed is refused at construction."""
import pytest
import torch
from checks import check_trajectories
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase

from rlcollect import Collector, TorchCartPole
from rlcollect.modules.distributions import categorical_sample

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class LinearPolicy(TensorDictModuleBase):
    """observation -> Linear(4, 2) -> argmax, or a Gumbel-max sample with ``sample``."""

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, sample: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 2)
        self.sample = sample

    def forward(self, td):
        logits = self.linear(td.get("observation"))
        td.set("action", categorical_sample(logits) if self.sample else logits.argmax(-1))
        return td


class UndeclaredPolicy(LinearPolicy):
    """Writes "logits" too, which its out_keys do not name."""

    def forward(self, td):
        td.set("logits", self.linear(td.get("observation")))
        return super().forward(td)


def collect(policy, batches: int, device: str, **kwargs) -> list:
    collector = Collector(TorchCartPole(64, device=device, seed=3), policy, frames_per_batch=64 * 20,
                          device=device, max_frames_per_traj=30, **kwargs)
    try:
        return [collector.collect().clone() for _ in range(batches)]
    finally:
        collector.shutdown()


@pytest.mark.parametrize("policy, message", [
    (None, "cudagraph_policy=True captures the policy's forward: this collector has no policy"),
    (lambda td: td.set("action", td.get("observation")[..., 0].gt(0).long()),
     "cudagraph_policy=True needs a TensorDict module with in_keys and out_keys; function has in_keys=None"),
    (UndeclaredPolicy(), "cudagraph_policy=True: the policy writes ['logits'] beyond its out_keys ['action']"),
    (LinearPolicy(), "cudagraph_policy=True replays the policy as a CUDA graph: policy_device must be cuda, not cpu"),
], ids=["no-policy", "no-keys", "undeclared", "cpu"])
def test_what_cannot_be_replayed_is_refused_at_construction(policy, message):
    with pytest.raises(ValueError) as error:
        Collector(TorchCartPole(4, seed=0), policy, frames_per_batch=8, cudagraph_policy=True)
    assert str(error.value).startswith(message)


@CUDA
def test_replayed_batches_equal_the_eager_policy_s_and_see_weight_updates():
    eager, graphed = LinearPolicy().cuda(), LinearPolicy().cuda()
    expected = collect(eager, 3, "cuda")
    collector = Collector(TorchCartPole(64, device="cuda", seed=3), graphed, frames_per_batch=64 * 20,
                          device="cuda", max_frames_per_traj=30, cudagraph_policy=True)
    assert collector.policy is graphed  # device="cuda" is where its parameters are: no copy
    got = [collector.collect().clone() for _ in range(3)]  # warm-up at step 0, capture at step 1
    for a, b in zip(expected, got):
        assert all(torch.equal(a[key], b[key]) for key in a.keys(True, True))
    check_trajectories(torch.cat(got, dim=-1).cpu())
    with torch.no_grad():  # in place, as an optimizer steps
        graphed.linear.weight.zero_()
        graphed.linear.bias.copy_(torch.tensor([0.0, 1.0]))
    assert collector.collect()["action"].eq(1).all()
    weights = TensorDict.from_module(LinearPolicy()).to("cuda")
    weights["linear", "bias"] = torch.tensor([1.0, 0.0], device="cuda")
    weights["linear", "weight"] = torch.zeros(2, 4, device="cuda")
    collector.update_policy_weights_(weights)  # copied into the captured parameters, not swapped in
    assert collector.collect()["action"].eq(0).all()
    collector.shutdown()


@CUDA
def test_a_sampling_policy_draws_new_noise_at_every_replay_and_never_synchronises():
    collector = Collector(TorchCartPole(4096, device="cuda", seed=0), LinearPolicy(sample=True).cuda(),
                          frames_per_batch=4096 * 16, device="cuda", no_cuda_sync=True, cudagraph_policy=True)
    collector.collect()  # warm-up and capture
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        batch = collector.collect()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    actions = batch["action"].float()
    assert batch.batch_size == (4096, 16)
    assert 0.3 < actions.mean().item() < 0.7  # both actions drawn
    assert not torch.equal(actions[:, 1:], actions[:, :-1])  # not the same draw replayed
    collector.shutdown()
