"""The policy every benchmark in scripts/ runs, in a module of its own so that worker
processes can import it: spawn (and forkserver) children unpickle the policy by its
qualified name (``bench_policy.MLPSamplingPolicy``), and they inherit the parent's
``sys.path``, whose first entry is scripts/ when a bench script is run by path.

Importable from both venvs (.venv and the torchrl .venv-bench): it needs torch and
tensordict only, and loads rlcollect's sampler from its source file.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

REPO_ROOT = Path(__file__).resolve().parent.parent
HIDDEN = 64
SEED = 0


def _load_categorical_sample() -> Callable[[torch.Tensor], torch.Tensor]:
    """rlcollect's Gumbel-max sampler, loaded from its source file rather than through
    the ``rlcollect`` package, so that the torchrl venv (which cannot install rlcollect)
    runs the very same function."""
    path = REPO_ROOT / "rlcollect" / "modules" / "distributions.py"
    spec = importlib.util.spec_from_file_location("_bench_distributions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.categorical_sample


categorical_sample = _load_categorical_sample()


def sample_action(logits: torch.Tensor) -> torch.Tensor:
    """The one action-sampling function of every row: Gumbel-max on the logits."""
    return categorical_sample(logits)


def build_mlp(obs_dim: int = 4, hidden: int = HIDDEN, num_actions: int = 2) -> nn.Sequential:
    """obs_dim -> hidden -> hidden -> num_actions logits, tanh; the same weights in every
    process (seeded)."""
    torch.manual_seed(SEED)
    return nn.Sequential(
        nn.Linear(obs_dim, hidden), nn.Tanh(),
        nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, num_actions),
    )


class MLPSamplingPolicy(TensorDictModuleBase):
    """"observation" -> MLP -> sample_action -> "action"; the policy of every collector row
    (rlcollect's and torchrl's), so both frameworks call exactly the same module.

    Not a ``TensorDictModule(nn_module, in_keys, out_keys)``: its key handling costs per
    call about 15 us more under tensordict 0.15 and about 120 us more under 0.14 (the
    torchrl venv's), which would measure the wrapper rather than the collectors."""

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set("action", sample_action(self.mlp(tensordict.get("observation"))))
        return tensordict


class ProbedSamplingPolicy(MLPSamplingPolicy):
    """MLPSamplingPolicy plus a registered buffer, ``probe``, that it also writes to
    "weights_probe" at every step: a batch then shows which value of the buffer (so which
    weight update) the worker's copy held. Used by bench_weight_sync.py."""

    out_keys = ["action", "weights_probe"]

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__(mlp)
        self.register_buffer("probe", torch.zeros(()))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        super().forward(tensordict)
        tensordict.set("weights_probe", self.probe.expand(tensordict.batch_size).clone())
        return tensordict


def configure_torch() -> None:
    torch.set_num_threads(1)
