"""W&B imported ahead of torch, for a run that will log to it (``import_wandb``); torch-free.

Importing W&B costs more after torch than before it. W&B's models are pydantic models that
take their field descriptions from their docstrings, which pydantic finds through
``inspect.getmodule``, and each call of that scans every loaded module: after torch, three
times as many (about 1,900 against 600). ``wandb.init`` also imports W&B's launch package
(a run checks for staged launch inputs), and through it W&B's public API, full of such
models. Imported before torch,
W&B and that part take 0.2 s less CPU here (1.90 s against 2.14 s for them and
``rlcollect.pipeline`` together, medians of 7), and nothing else about the run changes.
"""
from __future__ import annotations

from importlib import import_module

# wandb, and the module wandb.init imports when a run starts (wandb.sdk.wandb_run, _on_ready)
INIT_IMPORTS = ("wandb", "wandb.sdk.launch.inputs.internal")


def import_wandb() -> None:
    """Import what a W&B run imports as it starts. A module that fails to import is left
    for ``WandbLogger.open`` to import again and fail at, as it would have without this."""
    for name in INIT_IMPORTS:
        try:
            import_module(name)
        except Exception:
            return
