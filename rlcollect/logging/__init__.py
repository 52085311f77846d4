"""Run records: metrics.jsonl, Weights & Biases, reading offline W&B runs back, comparing runs.

Names load on first access, so `rlcollect compare` does not import torch.
"""
from rlcollect.lazy_exports import lazy_getattr

_EXPORTS = {
    "RunLogger": "rlcollect.logging.run_logger",
    "WandbLogger": "rlcollect.logging.run_logger",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("rlcollect.logging", _EXPORTS, globals())
