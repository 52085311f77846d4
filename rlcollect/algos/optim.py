"""``Adam``: torch's Adam, without importing torch's compiler in a program that compiles nothing.

torch.optim marks five methods of every optimizer for ``torch.compile``: ``add_param_group``
(called by the constructor), ``zero_grad``, ``state_dict`` and ``load_state_dict`` are
wrapped by ``torch._disable_dynamo``, and ``Adam.step`` by a wrapper that turns grad mode
off around the step and asks the compiler for a graph break before and after it. Each
wrapper imports ``torch._dynamo`` on its first call: about 0.7 s of every training
process's start-up (more on a busy machine), spent on a compiler that an eager program
never runs. The compile hints of tensordict wait for that import (``rlcollect.compile_hints``);
this class is what keeps a training run from making it.
"""
from __future__ import annotations

import inspect
import sys

import torch

__all__ = ["Adam"]

COMPILER = "torch._dynamo"  # torch's compiler, in sys.modules once anyone imported it


def compiler_loaded() -> bool:
    return COMPILER in sys.modules


# the methods' bodies, under torch's decorators (inspect.unwrap follows functools.wraps)
ADD_PARAM_GROUP = inspect.unwrap(torch.optim.Optimizer.add_param_group)
ZERO_GRAD = inspect.unwrap(torch.optim.Optimizer.zero_grad)
STATE_DICT = inspect.unwrap(torch.optim.Optimizer.state_dict)
LOAD_STATE_DICT = inspect.unwrap(torch.optim.Optimizer.load_state_dict)
ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)
# Adam's step as torch decorates it (grad mode, graph breaks), without the profiling and
# hooks wrapper that torch.optim adds to a class's ``step`` when its first instance is made
# (marked ``hooked``): that wrapper is put around this class's own ``step`` as well
ADAM_STEP_DECORATED = inspect.unwrap(torch.optim.Adam.step, stop=lambda method: not getattr(method, "hooked", False))


class Adam(torch.optim.Adam):
    """``torch.optim.Adam``, the same arithmetic, the same state, the same hooks and profiler
    records, whose methods call torch's bodies without torch's compile wrappers until
    ``torch._dynamo`` is imported (module docstring).

    What the wrappers do besides loading the compiler only matters under ``torch.compile``
    (``torch._disable_dynamo``: the compiler does not trace the method; the graph breaks
    around ``step``). ``step`` keeps the one thing its wrapper does in eager mode: grad
    mode set to ``differentiable`` during the step, restored after. Once ``torch._dynamo``
    is in ``sys.modules`` (``torch.compile``, ``torch.export``, or any import of it), every
    method is torch's own, decorated one, so a compiled program sees exactly
    ``torch.optim.Adam``. Takes Adam's arguments (``fused=True`` included); its
    ``state_dict`` loads into ``torch.optim.Adam`` and the other way round.
    """

    def add_param_group(self, param_group: dict) -> None:
        if compiler_loaded():
            return super().add_param_group(param_group)
        return ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if compiler_loaded():
            return super().zero_grad(set_to_none)
        return ZERO_GRAD(self, set_to_none)

    def state_dict(self) -> dict:
        if compiler_loaded():
            return super().state_dict()
        return STATE_DICT(self)

    def load_state_dict(self, state_dict: dict) -> None:
        if compiler_loaded():
            return super().load_state_dict(state_dict)
        return LOAD_STATE_DICT(self, state_dict)

    def step(self, closure=None):
        if compiler_loaded():
            return ADAM_STEP_DECORATED(self, closure)
        grad_enabled = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return ADAM_STEP(self, closure)
        finally:
            torch.set_grad_enabled(grad_enabled)
