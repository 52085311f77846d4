"""``hydra/launcher=batched``. Hydra takes launchers from the hydra_plugins namespace only:
the class lives here, its work in rlcollect.commands.batched_launch (docs/sweeps.md).

Its config is stored in Hydra's ConfigStore when Hydra scans its plugins, as Hydra's own
launcher plugins store theirs, so ``hydra/launcher=batched`` composes in any Hydra app
(Hydra's launcher test suite runs it against its own apps), not only in ``rlcollect
train``. The node is a plain dict, not a dataclass: its options are checked by the
launcher (one line, exit 2), not by OmegaConf's type check (a traceback)."""
from __future__ import annotations

from typing import Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher

ConfigStore.instance().store(group="hydra/launcher", name="batched", provider="rlcollect", node={
    "_target_": "hydra_plugins.rlcollect_batched.batched_launcher.BatchedLauncher",
    "max_members": None,  # at most this many members per batched model (None: every job of a group)
    "processes": 1,  # a model's members split into this many shares, each trained in a process of its own at once
    "pbt": {  # population-based training among the members of each batched model (docs/sweeps.md)
        "every_frames": None,  # a member's frames between two exploit/explore steps (None: off)
        "quantile": 0.25,  # the bottom share replaced at each step, by members drawn from the top share
        "perturb": [0.8, 1.2],  # the factors a copied setting is multiplied by (one drawn per setting)
    },
})


class BatchedLauncher(Launcher):
    """Trains the jobs of a sweep that differ only in ``seed`` and PPO's per-member
    settings (rlcollect.sweeps.members.MEMBER_OPTIONS) as the members of one batched model
    in this process; ``max_members`` caps the members of one model (a
    larger group is cut in groups of at most that many; None: no cap); ``processes``
    splits a model's members into that many shares trained at once, each a batched model
    in a process of its own (1: all in this one); ``pbt`` (every_frames, quantile,
    perturb): population-based training among the members of each model, off while
    ``every_frames`` is None (rlcollect.sweeps.pbt)."""

    def __init__(self, max_members: int | None = None, processes: int = 1, pbt=None) -> None:
        super().__init__()
        from rlcollect.sweeps.pbt_options import check_processes, pbt_options
        from rlcollect.validation import check_positive_int

        self.max_members = check_positive_int("hydra.launcher.max_members", max_members, optional=True)
        self.processes = check_positive_int("hydra.launcher.processes", processes)
        self.pbt = pbt_options(pbt)
        check_processes(self.pbt, self.processes)
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        from rlcollect.commands.batched_launch import ComposeOnce

        # the sweeper composes every job to check the sweep, then this launcher composes it: once will do
        hydra_context.config_loader = ComposeOnce(hydra_context.config_loader)
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlcollect.commands.batched_launch import launch

        return launch(self, job_overrides, initial_job_idx)
