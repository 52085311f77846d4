"""rlcollect.algos.optim.Adam: torch.optim.Adam's results to the bit, without importing
torch's compiler until someone else does."""
import copy
import subprocess
import sys

import pytest
import torch

from rlcollect.algos import optim
from rlcollect.algos.optim import Adam


def model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def train(module: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int) -> list[torch.Tensor]:
    """``steps`` steps on data drawn from ``seed``, as PPO takes them (zero_grad, backward, clipped
    gradients, an lr set by hand between steps, one step through a closure); the parameters after each."""
    generator = torch.Generator().manual_seed(seed)
    after = []
    for step in range(steps):
        inputs, targets = torch.randn(8, 5, generator=generator), torch.randn(8, 3, generator=generator)
        for group in optimizer.param_groups:
            group["lr"] = 1e-2 * (1 - step / (2 * steps))

        def loss(step=step, inputs=inputs, targets=targets):
            optimizer.zero_grad(set_to_none=step % 2 == 0)
            value = torch.nn.functional.mse_loss(module(inputs), targets)
            value.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 0.5)
            return value

        if step == 1:
            optimizer.step(loss)
        else:
            loss()
            optimizer.step()
        after.extend(parameter.detach().clone() for parameter in module.parameters())
    return after


def equal_states(one: dict, other: dict) -> bool:
    """Two optimizer state_dicts hold the same groups and exactly the same tensors."""
    if one["param_groups"] != other["param_groups"] or one["state"].keys() != other["state"].keys():
        return False
    return all(one["state"][index].keys() == other["state"][index].keys()
               and all(torch.equal(one["state"][index][key], other["state"][index][key])
                       for key in one["state"][index]) for index in one["state"])


@pytest.mark.parametrize("compiler_loaded", [False, True], ids=["compiler-not-loaded", "compiler-loaded"])
@pytest.mark.parametrize("options", [
    dict(lr=1e-2, eps=1e-5),  # PPO's
    dict(lr=1e-2, eps=1e-5, fused=True),  # a batched sweep's
    dict(lr=1e-2, foreach=True, amsgrad=True, weight_decay=0.01),
    dict(lr=1e-2, betas=(0.8, 0.9), maximize=True),
], ids=["default", "fused", "foreach-amsgrad-weight-decay", "betas-maximize"])
def test_adam_steps_and_state_dicts_equal_torch_adam_exactly(monkeypatch, compiler_loaded, options):
    """The same parameters, the same gradients: every parameter after every step, and the
    state_dicts, are torch.equal to torch.optim.Adam's; a state_dict of either loads into
    the other and both go on exactly alike. Both of Adam's paths: its own methods, and
    torch's decorated ones once torch._dynamo is loaded."""
    monkeypatch.setattr(optim, "compiler_loaded", lambda: compiler_loaded)
    ours_module, torch_module = model(), model()
    ours, theirs = Adam(ours_module.parameters(), **options), torch.optim.Adam(torch_module.parameters(), **options)
    assert all(torch.equal(a, b) for a, b in zip(train(ours_module, ours, 5, seed=1),
                                                 train(torch_module, theirs, 5, seed=1)))
    assert equal_states(ours.state_dict(), theirs.state_dict())

    # the state_dicts cross over: each optimizer continues from the other's state, on copies of the modules
    ours_module2, torch_module2 = copy.deepcopy(torch_module), copy.deepcopy(ours_module)
    ours2, theirs2 = Adam(ours_module2.parameters(), **options), torch.optim.Adam(torch_module2.parameters(), **options)
    ours2.load_state_dict(copy.deepcopy(theirs.state_dict()))  # a copy, as a checkpoint is: state_dict() holds
    theirs2.load_state_dict(copy.deepcopy(ours.state_dict()))  # the optimizer's own tensors
    assert equal_states(ours2.state_dict(), theirs.state_dict())
    continued = [train(ours_module2, ours2, 3, seed=2), train(torch_module2, theirs2, 3, seed=2),
                 train(ours_module, ours, 3, seed=2), train(torch_module, theirs, 3, seed=2)]
    assert all(all(torch.equal(a, b) for a, b in zip(continued[0], other)) for other in continued[1:])
    assert equal_states(ours2.state_dict(), theirs2.state_dict()) and equal_states(ours.state_dict(),
                                                                                    theirs2.state_dict())


@pytest.mark.parametrize("compiler_loaded", [False, True], ids=["compiler-not-loaded", "compiler-loaded"])
def test_adam_keeps_grad_mode_and_calls_its_hooks_once_per_step(monkeypatch, compiler_loaded):
    """The step runs with grad mode off (differentiable=False) and restores it; step pre- and
    post-hooks run once per step, as torch.optim.Adam's do."""
    monkeypatch.setattr(optim, "compiler_loaded", lambda: compiler_loaded)
    module = model()
    optimizer = Adam(module.parameters())
    seen = []
    optimizer.register_step_pre_hook(lambda *_: seen.append(("pre", torch.is_grad_enabled())))
    optimizer.register_step_post_hook(lambda *_: seen.append(("post", torch.is_grad_enabled())))

    def closure():
        seen.append(("closure", torch.is_grad_enabled()))  # Adam runs the closure with grad on
        optimizer.zero_grad()
        value = module(torch.ones(2, 5)).sum()
        value.backward()
        return value

    optimizer.step(closure)
    assert torch.is_grad_enabled()
    with torch.no_grad():
        optimizer.step()
        assert not torch.is_grad_enabled()
    assert seen == [("pre", True), ("closure", True), ("post", True), ("pre", False), ("post", False)]


def test_adam_does_not_import_torch_s_compiler():
    """Built (fused too), stepped, zeroed, saved and loaded in a fresh process: torch._dynamo
    stays unimported (torch.optim.Adam's constructor imports it)."""
    code = ("import sys, torch\n"
            "from rlcollect.algos.optim import Adam\n"
            "for options in ({}, {'fused': True}):\n"
            "    module = torch.nn.Linear(3, 2)\n"
            "    optimizer = Adam(module.parameters(), **options)\n"
            "    for _ in range(2):\n"
            "        optimizer.zero_grad()\n"
            "        module(torch.ones(4, 3)).sum().backward()\n"
            "        optimizer.step()\n"
            "    optimizer.load_state_dict(optimizer.state_dict())\n"
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
