"""Deprecated: moved to rlcollect.logging.wandb_offline (docs/compare.md); its names here warn and resolve there
(rlcollect/moved.py, MOVED_MODULES)."""
from rlcollect.moved import moved_getattr

__getattr__ = moved_getattr(__name__)
