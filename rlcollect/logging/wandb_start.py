"""W&B started ahead of torch, for a run that will log to it (``start_wandb``); torch-free.

Two things a W&B run pays as it opens are paid here instead, while torch has not loaded:

- Importing W&B costs more after torch than before it. W&B's models are pydantic models
  that take their field descriptions from their docstrings, which pydantic finds through
  ``inspect.getmodule``, and each call of that scans every loaded module: after torch,
  three times as many (about 1,900 against 600). ``wandb.init`` also imports W&B's launch
  package (a run checks for staged launch inputs), and through it W&B's public API, full
  of such models. Imported before torch, W&B and that package take 0.2 s less CPU here
  (1.90 s against 2.14 s for them and ``rlcollect.pipeline`` together, medians of 7).
- ``wandb.setup()`` starts W&B's service process (wandb-core) and waits for it to listen,
  about 0.2 s, mostly waiting. In a thread of its own, started once W&B is imported, it
  waits while the main thread imports torch and builds the run.

``WandbLogger.open`` waits for that thread (``wait_for_wandb``), then calls ``wandb.init``
as it always did. Nothing else changes: the service is the one ``wandb.init`` would start
(the same settings, read from the same environment and files), and a failure is left for
``wandb.init`` to meet again and raise where it always did: a module that fails to import
is imported again, a service that failed to start is started again.
"""
from __future__ import annotations

import threading
from importlib import import_module

# wandb, and the module wandb.init imports when a run starts (wandb.sdk.wandb_run, _on_ready)
INIT_IMPORTS = ("wandb", "wandb.sdk.launch.inputs.internal")
SETUP_THREAD = "rlcollect-wandb-setup"
_setup: list[threading.Thread] = []  # the thread start_wandb started (at most one per process)


def start_wandb() -> None:
    """Import what a W&B run imports as it starts, then start W&B's service in a thread
    (once per process; not when an import failed)."""
    for name in INIT_IMPORTS:
        try:
            import_module(name)
        except Exception:
            return
    if not _setup:
        _setup.append(threading.Thread(target=setup, name=SETUP_THREAD))
        _setup[0].start()


def setup() -> None:
    """``wandb.setup()``, whatever it raises left for ``wandb.init`` (module docstring)."""
    import wandb

    try:
        wandb.setup()
    except Exception:
        pass


def wait_for_wandb() -> None:
    """Return once the service ``start_wandb`` started is up (or failed to start)."""
    if _setup:
        _setup[0].join()
