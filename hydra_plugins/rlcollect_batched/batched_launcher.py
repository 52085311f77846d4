"""``hydra/launcher=batched`` (rlcollect/conf/hydra/launcher/batched.yaml). Hydra takes
launchers from the hydra_plugins namespace only: the class lives here, its work in
rlcollect.sweeps.launcher (docs/sweeps.md)."""
from __future__ import annotations

from typing import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher


class BatchedLauncher(Launcher):
    """Trains the jobs of a sweep that differ only in ``seed`` as the members of one
    batched model in this process; ``max_members`` caps the members of one model (a
    larger group is cut in groups of at most that many; None: no cap); ``processes``
    splits a model's members into that many shares trained at once, each a batched model
    in a process of its own (1: all in this one)."""

    def __init__(self, max_members: int | None = None, processes: int = 1) -> None:
        super().__init__()
        from rlcollect.validation import check_positive_int

        self.max_members = check_positive_int("hydra.launcher.max_members", max_members, optional=True)
        self.processes = check_positive_int("hydra.launcher.processes", processes)
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        from rlcollect.sweeps.launcher import ComposeOnce

        # the sweeper composes every job to check the sweep, then this launcher composes it: once will do
        hydra_context.config_loader = ComposeOnce(hydra_context.config_loader)
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rlcollect.sweeps.launcher import launch

        return launch(self, job_overrides, initial_job_idx)
