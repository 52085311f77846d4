"""Run records: writing them (run_logger.py: metrics.jsonl and Weights & Biases) and reading
run folders back (runs.py) and W&B's offline files (wandb_offline.py). Comparing runs is
rlcollect.analysis, which reads these; nothing here imports it.

Names load on first access, so `rlcollect compare` (which imports logging.runs) does not import torch.
"""
from rlcollect.lazy_exports import lazy_getattr

_EXPORTS = {
    "RunLogger": "rlcollect.logging.run_logger",
    "WandbLogger": "rlcollect.logging.run_logger",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("rlcollect.logging", _EXPORTS, globals())
