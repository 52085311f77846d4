import pytest
import torch

from rlcollect.collectors.devices import CollectorDevices, policy_on_device, sync_function


def resolve(**kwargs):
    defaults = dict(device=None, policy_device=None, env_device=None, storing_device=None,
                    policy_param_device=None, env_own_device=torch.device("cpu"))
    return CollectorDevices.resolve(**{**defaults, **kwargs})


def test_device_sets_every_role_and_each_role_can_be_set_alone():
    assert resolve(device="cuda:1") == CollectorDevices(*[torch.device("cuda:1")] * 3)
    mixed = resolve(device="cuda:0", storing_device="cpu")
    cuda, cpu = torch.device("cuda:0"), torch.device("cpu")
    assert (mixed.policy, mixed.env, mixed.storing) == (cuda, cuda, cpu)


def test_defaults_follow_the_policy_weights_and_the_env():
    devices = resolve(policy_param_device=torch.device("cuda:0"))
    cuda, cpu = torch.device("cuda:0"), torch.device("cpu")
    assert (devices.policy, devices.env, devices.storing) == (cuda, cpu, cpu)
    assert resolve() == CollectorDevices(*[torch.device("cpu")] * 3)


def test_sync_only_for_cuda_destinations_unless_disabled():
    assert sync_function(torch.device("cpu"), no_cuda_sync=False)() is None
    assert sync_function(torch.device("cuda:0"), no_cuda_sync=True).__name__ == "_noop"
    assert sync_function(torch.device("cuda:0"), no_cuda_sync=False).__name__ == "<lambda>"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_without_an_index_is_the_device_its_tensors_report():
    """device="cuda" and a policy whose parameters report cuda:0 are one device: no copy."""
    policy = torch.nn.Linear(2, 2).to("cuda")
    devices = resolve(device="cuda", policy_param_device=next(policy.parameters()).device)
    assert devices.policy == devices.env == devices.storing == torch.device("cuda", torch.cuda.current_device())
    assert policy_on_device(policy, devices.policy) == (policy, None)
