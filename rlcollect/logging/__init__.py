"""Run records: metrics.jsonl, Weights & Biases, reading offline W&B runs back, comparing runs.

Names load on first access, so `rlcollect compare` does not import torch.
"""
from importlib import import_module

_EXPORTS = {
    "EpisodeTracker": "rlcollect.logging.episodes",
    "RunLogger": "rlcollect.logging.run_logger",
    "WandbLogger": "rlcollect.logging.run_logger",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlcollect.logging' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
